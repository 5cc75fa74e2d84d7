"""Running the forward that an analysis is captured from: the model's input for an image, one eager forward
(alone, or a micro-batch's), each image's capture, and the rollouts made with the forward (`ForwardFusions`),
which fill the analysis' `Derived`."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

import numpy as np
import torch

from . import maps
from .analysis import Analysis
from .derived import Derived
from .models import VitModel
from .preprocess import ImageInput, input_size, load_image, prepare_input

log = logging.getLogger(__name__)


def analyze(
    model: VitModel,
    image: ImageInput,
    longest: int | None = None,
    roll: bool = False,
    dense: bool = False,
    later: bool = False,
) -> Analysis | Derived:
    """Run one eager forward of `model` on `image` and capture everything: an `Analysis`.

    longest: the input's longest side in pixels (default: the model's, 448 for DINOv2).
    Fixed-size classifiers get their native square input unless `longest` is given, in
    which case their position embeddings are interpolated. roll: make the rollout slider's rollouts of the mean
    fusion from the forward's own weights (see `ForwardFusions`), as the app does for each new image, and return
    the analysis in a `Derived` that keeps them. dense: capture the dense head's map on this forward's tokens now
    (`Analysis.dense_map`), as the app does, rather than make it when asked: the head runs on the forward's own
    final tokens, never a forward of its own. later: leave the rollouts that `roll` asks for to when they
    are first needed (`Derived.settle`), as the app does, which answers an upload with the analysis first.
    """
    rgb = load_image(image)
    pixel_values = model_input(model, rgb, longest)
    a = capture_all(model, [(rgb, pixel_values)], *forward_for(model, pixel_values, roll), dense)[0]
    if roll and not later:
        a.settle()
    return a


def forward_for(model: VitModel, pixel_values: np.ndarray, roll: bool) -> tuple:
    """(out, fusions): the forward of `pixel_values` [B,3,h,w] that an analysis is captured from, with
    `ForwardFusions` where `roll` asks (None where not), which fuse the weights where the batch's fused heads fit."""
    fusions = ForwardFusions(hold=ForwardFusions.holds(model, pixel_values)) if roll else None
    each_layer = fusions if roll and ForwardFusions.fits(model, pixel_values) else None
    return model.forward(torch.as_tensor(pixel_values), attentions="none", each_layer=each_layer), fusions


def capture_all(
    model: VitModel, inputs: list[tuple[np.ndarray, np.ndarray]], out, fusions, dense: bool = False
) -> list[Analysis] | list[Derived]:
    """Each image's analysis from `forward_for`'s (out, fusions), for its (RGB, input) `inputs` in batch order
    (all of one input size); where `dense` asks, with the dense head's maps on each one's own final tokens (no more
    forwards); where it ran with `fusions`, in a `Derived` that makes the rollouts of its forward toward each one's
    output when first needed (`PendingRoll`).
    A dense head that fails is logged: the analyses are whole without its maps and the rollouts toward them, and
    the view that asks for one makes it again or says why it cannot."""
    analyses = [capture(model, rgb, x, out, i) for i, (rgb, x) in enumerate(inputs)]
    rolls = fusions is not None
    if dense:  # first: a dense model's rollouts start from its map
        try:
            analyses = [replace(a, captured_dense=(a.dense_map(),)) for a in analyses]
        except Exception:
            log.exception("the dense head's maps")
            rolls = rolls and model.dense_head is None  # its rollouts start from the map
    if fusions is None:
        return analyses
    derived = [Derived(a) for a in analyses]
    if rolls:
        pending = PendingRoll(fusions, derived)
        for d in derived:
            d.pending = pending
    return derived


class ForwardFusions:
    """`VitModel.forward`'s `each_layer`: fuses each layer's heads by the mean (`FUSIONS`, see `maps.fuse_heads`) as
    the forward makes its weights, for every image of the batch; `roll` then counts their discard thresholds and
    makes the slider's rollouts of that fusion toward each image's own output for the whole batch, so that the
    rollout tab's views and its slider recompute no attention. The app rolls after the upload's answer
    (`PendingRoll`): the thresholds and rollouts took a third of an upload's forward on a CPU. The weights are
    rounded to float16 first, as `Analysis.layer_attention` rounds them: the rollouts are those that the analysis
    would make, to float rounding. Held until `roll`: [L,N,N] per image, 50 MB an image at 448 px; a forward
    whose images would hold more than `held_bytes` together does not roll (`fits`), and the micro-batcher makes
    no such batch (`most`). Where they fit too (`holds`), max and min are fused as well (`HELD`, float16, 50 MB
    more an image at 448 px) and handed to each analysis at `roll`, not rolled."""

    # The most fused heads one forward holds (see `held_bytes`). A GPU: 1 GiB, 20 images at 448 px (50 MB each),
    # two at 672 px, not one at 1120 px. A CPU: 128 MiB, one image up to ~570 px, because there a roll's time
    # grows faster than its memory (docs/benchmarks.md).
    HELD_BYTES, HELD_BYTES_CPU = 2**30, 2**27

    # The fusion that the rollout tab shows first: the others' counting and rolling would lengthen every upload for
    # a choice few make, so the background warm or their first request makes them (`Derived.warm_step`).
    FUSIONS = ("mean",)
    # The fusions that are only fused here, where they fit (`holds`): a maximum of the weights is one of them, so
    # they are the float32 weights' maximum (minimum) rounded to float16, what the rounded weights' would be, for
    # a few milliseconds a layer (docs/benchmarks.md). Each analysis keeps them as the warm's sweep would
    # (`Derived.hold`): a first rollout of max or min then recomputes no layer, which was nearly half of such a
    # move's time on a CPU.
    HELD = ("max", "min")

    def __init__(self, hold: bool = False) -> None:
        self.fused: dict[str, dict[int, torch.Tensor]] = {f: {} for f in self.FUSIONS}  # {layer: [B,N,N]}
        self.held: dict[str, dict[int, torch.Tensor]] = {f: {} for f in self.HELD} if hold else {}

    @classmethod
    def most(cls, model: VitModel, pixel_values: torch.Tensor | np.ndarray) -> int:
        """How many images of `pixel_values`' size [B,3,h,w] one forward can roll: their fused heads (float32 for
        the mean, float16 for max and min, every layer) within `held_bytes`."""
        (_, _, h, w), p = pixel_values.shape, model.patch_size
        n = model.n_prefix + (h // p) * (w // p)
        per_element = sum(4 if f == "mean" else 2 for f in cls.FUSIONS)
        return cls.held_bytes(model) // (model.num_layers * n * n * per_element)

    @classmethod
    def held_bytes(cls, model: VitModel) -> int:
        """The most fused heads that a forward of `model` holds, on its device."""
        return cls.HELD_BYTES_CPU if torch.device(model.device).type == "cpu" else cls.HELD_BYTES

    @classmethod
    def fits(cls, model: VitModel, pixel_values: torch.Tensor | np.ndarray) -> bool:
        """Whether a forward of `pixel_values` [B,3,h,w] can roll all its images (see `most`)."""
        return len(pixel_values) <= cls.most(model, pixel_values)

    @classmethod
    def holds(cls, model: VitModel, pixel_values: torch.Tensor | np.ndarray) -> bool:
        """Whether a forward of `pixel_values` [B,3,h,w] can also fuse `HELD` for all its images, within
        `held_bytes` with the rolled ones (at 448 px: 100 MB an image, of 128 MiB on a CPU)."""
        (b, _, h, w), p = pixel_values.shape, model.patch_size
        n = model.n_prefix + (h // p) * (w // p)
        per_element = 4 * len(cls.FUSIONS) + 2 * len(cls.HELD)
        return b * model.num_layers * n * n * per_element <= cls.held_bytes(model)

    def __call__(self, layer: int, weights: torch.Tensor) -> None:
        weights = weights.detach()
        rounded = weights.half()
        for fusion in self.FUSIONS:
            self.fused[fusion][layer] = maps.fuse_heads(rounded, fusion)
        for fusion in self.held:  # float32's maximum rounded is the rounded weights' maximum, and on a CPU float32's
            self.held[fusion][layer] = maps.fuse_heads(weights, fusion).half()  # is 3-10x faster than float16's

    @property
    def nbytes(self) -> int:
        """The fused heads held until `roll`."""
        held = [t for f in (self.fused, self.held) for rows in list(f.values()) for t in list(rows.values())]
        return sum(t.numel() * t.element_size() for t in held)  # a roll pops them meanwhile

    def roll(self, analyses: list[Derived]) -> None:
        """Fill each `Derived` (image i of the batch, in order) with its thresholds and the slider's rollouts of
        `FUSIONS`, made for the whole batch at once (on a GPU, a handful of kernels per layer), then let the fused
        heads go. A model whose layers cannot be opened had no weights here, nor a batch too large (`fits`), and a
        roll that fails (out of memory) is logged: their rollouts are made when asked."""
        try:
            self._roll(analyses)
            self._hand_over(analyses)
        except Exception:
            log.exception("the rollouts of a forward")
        finally:
            self.fused, self.held = {f: {} for f in self.FUSIONS}, {}

    def _hand_over(self, analyses: list[Derived]) -> None:
        """Give each analysis its fused heads of `HELD` (see `Derived.hold`): its own copy where the batch has
        several images, so that one shed lets its share go."""
        layers = range(analyses[0].num_layers)
        for fusion in list(self.held):
            rows = self.held.pop(fusion, None)  # counted once: by the analyses from now (a shed may take them first)
            if rows is None or any(i not in rows for i in layers):
                continue
            for b, a in enumerate(analyses):
                a.hold(fusion, {i: rows[i][b] if len(analyses) == 1 else rows[i][b].clone() for i in layers})

    def _roll(self, analyses: list[Derived]) -> None:
        layers = range(analyses[0].num_layers)
        if any(i not in self.fused[f] for f in self.FUSIONS for i in layers):
            return
        percents = list(Derived.ROLLOUT_PERCENTS)
        for fusion in self.FUSIONS:
            counted = [maps.discard_thresholds(self.fused[fusion][i], Analysis.PERCENTS) for i in layers]
            thresholds = torch.stack(counted)  # [L,B,100]
            starts, keeps = zip(*(a.rollout_start(fusion) for a in analyses), strict=True)  # toward each one's output
            starts, keep = np.stack(starts), keeps[0]
            fused = [self.fused[fusion].pop(i) for i in layers]
            chosen = thresholds.index_select(-1, maps.indices(tuple(percents), thresholds.device))
            rolled = maps.rollouts(fused, [p / 100 for p in percents], chosen, starts, keep)
            for a, thresholds_of, rows in zip(analyses, thresholds.unbind(1), rolled, strict=True):
                a.fill(fusion, percents, rows, thresholds=thresholds_of)
            if not analyses[0].output.reads_readout:  # the lesson's and the tab's other start, at each discard
                starts = np.stack([a.rollout_start(fusion, "readout")[0] for a in analyses])
                rolled = maps.rollouts(
                    fused, [p / 100 for p in percents], chosen, starts, analyses[0].model.readout.tokens
                )
                for a, rows in zip(analyses, rolled, strict=True):
                    a.fill(fusion, percents, rows, start="readout")
            del fused


class PendingRoll:
    """A forward's `ForwardFusions`, rolled for its batch's analyses (`Derived`, each holding this as `pending`) when
    one of them first needs the rollouts or thresholds, or the background warm's first step comes: whichever is
    first rolls them all, once. Until then it holds the fused heads (`nbytes`), and a cache that sheds one of them
    lets them go (`drop`): their rollouts are then made when asked."""

    def __init__(self, fusions: ForwardFusions, analyses: list[Derived]) -> None:
        self._fusions: ForwardFusions | None = fusions
        self._analyses = analyses
        self._lock = threading.Lock()  # one roll at a time

    @property
    def nbytes(self) -> int:
        """The fused heads held for each analysis of the batch."""
        fusions, analyses = self._fusions, self._analyses  # read once: another thread may roll or drop them
        return 0 if fusions is None or not analyses else fusions.nbytes // len(analyses)

    def run(self) -> None:
        with self._lock:
            fusions, analyses = self._fusions, self._analyses  # a shed may drop them meanwhile
            if fusions is not None and analyses:
                fusions.roll(analyses)
            self.drop()

    def drop(self) -> None:
        """Let the fused heads go (a roll under way ends with its own references, but hands none of `HELD` over):
        no lock, since a cache that sheds holds its own lock meanwhile and must not wait for a roll."""
        self.shed_held()
        analyses, self._fusions, self._analyses = self._analyses, None, []
        for a in analyses:
            a.pending = None

    def shed_held(self) -> int:
        """Let the forward's max and min fused heads go (`ForwardFusions.HELD`), not the mean's that it will roll:
        a cache that sheds but keeps the mean frees them. Returns each analysis' share of their bytes."""
        fusions, analyses = self._fusions, self._analyses
        if fusions is None or not analyses:
            return 0
        held, fusions.held = fusions.held, {}
        return sum(t.numel() * t.element_size() for rows in held.values() for t in rows.values()) // len(analyses)


def model_input(model: VitModel, rgb: np.ndarray, longest: int | None = None) -> np.ndarray:
    """[1,3,h,w] float32: the input `analyze` gives RGB uint8 `rgb` (see `analyze` for `longest`)."""
    if longest is None and model.fixed_size:
        size = (model.native_grid[0] * model.patch_size, model.native_grid[1] * model.patch_size)
    else:
        longest = longest or model.default_longest
        if not model.patch_size <= longest <= 2048:
            raise ValueError(f"input size must be between {model.patch_size} and 2048 pixels, got {longest}")
        size = input_size(*rgb.shape[:2], model.patch_size, longest)
    return prepare_input(rgb, size, model.patch_size, model.mean, model.std)


LIVE_SIDE = 224  # a camera frame's input side: the embedded dense head's training size, 16x16 patches of 14


def analyze_frame(model: VitModel, frame: ImageInput) -> Analysis:
    """A camera frame, for the live view: one forward at a square input, the model's native one for
    classifiers and LIVE_SIDE for the others, with the dense head's map on its tokens."""
    rgb = load_image(frame)
    p = model.patch_size
    side = model.native_grid[0] * p if model.fixed_size else LIVE_SIDE // p * p
    pixel_values = prepare_input(rgb, (side, side), p, model.mean, model.std)
    out = model.forward(torch.from_numpy(pixel_values), attentions="none")
    return capture_all(model, [(rgb, pixel_values)], out, None, dense=True)[0]


def capture(model: VitModel, rgb: np.ndarray, pixel_values: np.ndarray, out, index: int = 0) -> Analysis:
    """Keep what one forward `out` (with hidden states, and attentions where `model`'s layers cannot be opened to
    recompute them) says about image `index` of its batch, whose RGB is `rgb` and input `pixel_values` [1,3,h,w]."""
    with torch.inference_mode():
        tokens = model.final_norm(out.hidden_states[-1][index])
    logits, norms, pool = getattr(out, "logits", None), out.get("update_norms"), out.get("pool_attention")
    attentions = out.get("attentions")  # per layer [B,H,N,N], from transformers
    return Analysis(
        model=model,
        image=rgb,
        pixel_values=pixel_values,
        kept_attentions=None if attentions is None else _stack(_one(attentions, index), torch.float16),
        hidden_states=_stack(_one(out.hidden_states, index), torch.float32),
        tokens=tokens.float().cpu().numpy(),
        logits=None if logits is None else logits[index].float().cpu().numpy().copy(),  # not views of the batch's
        update_norms=None if norms is None else norms[index].copy(),
        pool_attention=None if pool is None else pool[index].copy(),
    )


def _one(layers: tuple[torch.Tensor, ...], index: int) -> tuple[torch.Tensor, ...]:
    """Per-layer [B,...] tensors -> image `index`'s [1,...] of each."""
    return tuple(t[index : index + 1] for t in layers)


def _stack(tensors: tuple[torch.Tensor, ...] | torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    """Per-layer [1,...] tensors -> one `dtype` array [L,...]; a tensor [L,...] (`VitModel.forward`'s
    attentions) is already stacked, on its device. From a GPU the array is page-locked (pinned) memory, which a copy
    fills many times faster than pageable memory (docs/benchmarks.md), and PyTorch's host allocator reuses the
    pinned blocks that evicted analyses give back."""
    stacked = isinstance(tensors, torch.Tensor)
    if not stacked and tensors[0].is_cuda:  # one conversion and one copy, not one of each per layer
        tensors, stacked = torch.stack([t[0] for t in tensors]).to(dtype), True
    first = tensors if stacked else tensors[0]
    shape = tuple(tensors.shape) if stacked else (len(tensors), *first.shape[1:])
    out = torch.empty(shape, dtype=dtype, pin_memory=first.is_cuda)
    if stacked:
        out.copy_(tensors)
    else:
        for i, t in enumerate(tensors):
            out[i].copy_(t[0])
    return out.numpy()
