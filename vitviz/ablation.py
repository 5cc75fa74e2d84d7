"""What if: the model's forward with parts of it switched off (ablations), beside the same forward unablated.

An `Ablation` names what is off: heads (each one's slice of its layer's output-projection input zeroed, or replaced
by its mean over the photo's tokens), every head of a layer, a layer's MLP, whole layers, or patches (hidden as keys
that no query may attend to, or their pixels blurred). `ablate` runs it on a photo through hooks on the model's own
modules (the family record's `LayerParts`, see families.py) and returns an `Ablated`: an `Analysis` of the ablated
forward that carries its unablated `baseline` and the output's reading in both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn

from .analysis import Analysis
from .capture import capture, model_input
from .derived import Derived
from .methods import absent_input
from .models import VitModel
from .outputs import Output, default_output
from .preprocess import ImageInput, load_image

HEAD_MODES = {"zero": "zeroed", "mean": "replaced by its mean over the photo's tokens"}
PATCH_MODES = {"keys": "hidden as keys", "blur": "blurred"}
# A change of the output within this share of its value (or of 1, for a value near 0) is float32 rounding, not the
# ablation's: the float32 forward's reading differs from a float64 forward's by less (tests/test_ablation.py).
NOISE = 1e-4


@dataclass(frozen=True)
class Ablation:
    """What one ablated forward switches off. Layers and heads count from 0; patches are indices into the photo's
    grid, row-major (patch i is token n_prefix + i).

    heads: (layer, head) pairs, head None for every head of the layer; each head's slice of its layer's
    output-projection input is zeroed (mode "zero") or replaced by its mean over the photo's tokens ("mean"), so
    that with every head of a layer zeroed the attention sub-layer adds only the projection's bias. mlp: layers
    whose MLP adds nothing. layers: layers skipped whole (neither sub-layer adds anything: the tokens pass through
    unchanged). patches: hidden as keys (patch_mode "keys": no query of any layer, nor an attention-pool's probe,
    may attend to them; their own tokens still flow) or their pixels replaced by a heavy blur of the photo
    ("blur", the attributions' "blurred" baseline).
    """

    heads: tuple[tuple[int, int | None], ...] = ()
    mode: str = "zero"
    mlp: tuple[int, ...] = ()
    layers: tuple[int, ...] = ()
    patches: tuple[int, ...] = ()
    patch_mode: str = "keys"

    def __post_init__(self) -> None:
        if self.mode not in HEAD_MODES:
            raise ValueError(f"unknown head mode {self.mode!r}: use one of {', '.join(HEAD_MODES)}")
        if self.patch_mode not in PATCH_MODES:
            raise ValueError(f"unknown patch mode {self.patch_mode!r}: use one of {', '.join(PATCH_MODES)}")
        for name in ("heads", "mlp", "layers", "patches"):  # sorted, each once
            object.__setattr__(self, name, tuple(dict.fromkeys(_normalised(name, getattr(self, name)))))
        if not (self.heads or self.mlp or self.layers or self.patches):
            raise ValueError("nothing to ablate: name heads, mlp, layers or patches")

    def check(self, model: VitModel, grid: tuple[int, int]) -> None:
        """Raise a ValueError naming the first index out of `model`'s range or a photo's `grid` (gh, gw)."""
        layers, heads, patches = model.num_layers, model.num_heads, grid[0] * grid[1]
        for what, chosen in (("layer", [h[0] for h in self.heads]), ("MLP layer", self.mlp), ("layer", self.layers)):
            bad = [i for i in chosen if not 0 <= i < layers]
            if bad:
                raise ValueError(f"{what} {bad[0]} out of range: {model.name} has {layers} layers (0 to {layers - 1})")
        bad = [h for _, h in self.heads if h is not None and not 0 <= h < heads]
        if bad:
            raise ValueError(f"head {bad[0]} out of range: {model.name} has {heads} heads a layer (0 to {heads - 1})")
        bad = [p for p in self.patches if not 0 <= p < patches]
        if bad:
            raise ValueError(f"patch {bad[0]} out of range: this photo has {patches} patches (0 to {patches - 1})")
        if self.patch_mode == "keys" and len(self.patches) == patches and not model.n_prefix:
            raise ValueError(f"{model.name} has no prefix token: hiding every patch as a key leaves nothing to attend")

    def head_mask(self, model: VitModel) -> dict[int, list[int]]:
        """{layer: its heads switched off}, every head for a pair whose head is None."""
        off: dict[int, set[int]] = {}
        for layer, head in self.heads:
            off.setdefault(layer, set()).update(range(model.num_heads) if head is None else (head,))
        return {layer: sorted(heads) for layer, heads in sorted(off.items())}

    def names(self, model: VitModel) -> list[str]:
        """Each thing switched off, named for the screen: "layer 9, head 3, zeroed", "every head of layer 9,
        zeroed", "layer 4's MLP off", "layer 2 skipped", "12 patches hidden as keys"."""
        said = HEAD_MODES[self.mode]
        names = []
        for layer, heads in self.head_mask(model).items():
            if len(heads) == model.num_heads:
                names.append(f"every head of layer {layer}, {'each ' * (self.mode == 'mean')}{said}")
            else:
                names += [f"layer {layer}, head {h}, {said}" for h in heads]
        names += [f"layer {i}'s MLP off" for i in self.mlp]
        names += [f"layer {i} skipped" for i in self.layers]
        if self.patches:
            count = len(self.patches)
            names.append(f"{count} patch{'es' * (count != 1)} {PATCH_MODES[self.patch_mode]}")
        return names

    def phrase(self, model: VitModel) -> str:
        """What was done, as a sentence's subject: "switching off layer 9's head 3", "hiding 12 patches as keys"."""
        parts = []
        for layer, heads in self.head_mask(model).items():
            every = len(heads) == model.num_heads
            which = f"every head of layer {layer}" if every else _heads_words(layer, heads)
            parts.append(f"switching off {which}" if self.mode == "zero" else f"replacing {which} by {_means(heads)}")
        if self.mlp:
            parts.append("switching off " + _and([f"layer {i}'s MLP" for i in self.mlp]))
        if self.layers:
            parts.append("skipping " + _and([f"layer {i}" for i in self.layers]))
        if self.patches:
            count = f"{len(self.patches)} patch{'es' * (len(self.patches) != 1)}"
            parts.append(f"hiding {count} as keys" if self.patch_mode == "keys" else f"blurring {count}")
        return _and(parts)


def _normalised(name: str, values) -> list:
    """A field's values, sorted: (layer, head or None) pairs for heads (None first in its layer), ints otherwise."""
    if name != "heads":
        return sorted(_index(v, name) for v in values)
    pairs = []
    for pair in values:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"heads must be (layer, head) pairs, head None for every head of the layer; got {pair!r}")
        layer, head = pair
        pairs.append((_index(layer, "heads' layer"), None if head is None else _index(head, "heads' head")))
    return sorted(pairs, key=lambda p: (p[0], -1 if p[1] is None else p[1]))


def _index(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{what} must be whole numbers, got {value!r}")
    return int(value)


def _heads_words(layer: int, heads: list[int]) -> str:
    if len(heads) == 1:
        return f"layer {layer}'s head {heads[0]}"
    return f"layer {layer}'s heads {_and([str(h) for h in heads])}"


def _means(heads: list[int]) -> str:
    return "its mean over the photo's tokens" if len(heads) == 1 else "their means over the photo's tokens"


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


class HeadSwitch:
    """A forward pre-hook on a layer's output projection (`LayerParts.o`): the heads that `rows(batch)` marks,
    [B,H] bool, have their slice of the projection's input [B,N,H*dh] zeroed ("zero") or set to its mean over the
    tokens of its own image ("mean"), before the projection's weight and bias apply."""

    def __init__(self, heads: int, mode: str, rows: Callable[[int], torch.Tensor]) -> None:
        self.heads, self.mode, self.rows = heads, mode, rows

    def __call__(self, _module: nn.Module, args: tuple) -> tuple:
        x = args[0]
        b, n, width = x.shape
        per_head = x.view(b, n, self.heads, width // self.heads)
        off = self.rows(b).to(x.device)[:, None, :, None]
        replacement = per_head.mean(1, keepdim=True) if self.mode == "mean" else torch.zeros((), dtype=x.dtype)
        return (torch.where(off, replacement, per_head).reshape(b, n, width), *args[1:])


def _zero_output(_module: nn.Module, _args, out):
    """A forward hook that makes a sub-layer add nothing: its output (an attention's first element) zeroed."""
    if isinstance(out, tuple):
        return (torch.zeros_like(out[0]), *out[1:])
    return torch.zeros_like(out)


def _hide_keys(hidden: torch.Tensor):
    """A forward pre-hook on a layer's attention: `hidden` [N] bool keys get the dtype's lowest score added in
    every query's softmax (transformers' own additive mask, which an attention takes as its second argument or as
    `attention_mask`), so that their weights are exactly 0 and each row's others sum to 1."""

    def hook(_module: nn.Module, args: tuple, kwargs: dict):
        x = args[0] if args else kwargs["hidden_states"]
        mask = torch.zeros(hidden.shape, dtype=x.dtype, device=x.device)
        mask = mask.masked_fill(hidden.to(x.device), torch.finfo(x.dtype).min)[None, None, None]
        given = args[1] if len(args) > 1 else kwargs.get("attention_mask")
        mask = mask if given is None else given + mask
        if len(args) > 1:
            return (args[0], mask, *args[2:]), kwargs
        return args, {**kwargs, "attention_mask": mask}

    return hook


def _hide_pool_keys(hidden: torch.Tensor):
    """A forward pre-hook on an attention-pool's nn.MultiheadAttention: the probe may not attend to `hidden`."""

    def hook(_module: nn.Module, args: tuple, kwargs: dict):
        query = args[0] if args else kwargs["query"]
        padding = hidden.to(query.device)[None].expand(len(query), -1)
        return args, {**kwargs, "key_padding_mask": padding}

    return hook


@contextmanager
def applied(model: VitModel, ablation: Ablation, patches: int) -> Iterator[None]:
    """The ablation's hooks on `model`'s own modules for the forwards inside, of inputs of `patches` patches (under
    the model's lock, which its forward takes again): every image of a batch is ablated alike. Patches blurred are
    in the input, not here."""
    hooks = []
    with model.lock:
        try:
            for layer, heads in ablation.head_mask(model).items():
                off = torch.zeros(model.num_heads, dtype=torch.bool)
                off[heads] = True
                switch = HeadSwitch(model.num_heads, ablation.mode, lambda b, off=off: off.expand(b, -1))
                hooks.append(model.layer_parts(layer).o.register_forward_pre_hook(switch))
            for layer in sorted({*ablation.mlp, *ablation.layers}):
                parts = model.layer_parts(layer)
                sub_layers = (parts.mlp, parts.attention) if layer in ablation.layers else (parts.mlp,)
                hooks += [m.register_forward_hook(_zero_output) for m in sub_layers]
            if ablation.patches and ablation.patch_mode == "keys":
                hidden = torch.zeros(model.n_prefix + patches, dtype=torch.bool)
                hidden[[model.n_prefix + p for p in ablation.patches]] = True
                for layer in range(model.num_layers):
                    attention = model.layer_parts(layer).attention
                    hooks.append(attention.register_forward_pre_hook(_hide_keys(hidden), with_kwargs=True))
                if model.pool is not None:
                    pool = model.pool.attention
                    hooks.append(pool.register_forward_pre_hook(_hide_pool_keys(hidden), with_kwargs=True))
            yield
        finally:
            for h in hooks:
                h.remove()


@dataclass(eq=False, frozen=True)
class Ablated(Analysis):
    """The analysis of an ablated forward (its final tokens, attention, update norms, logits and dense map, as
    `analyze`'s), beside its unablated `baseline`, the same input's forward with nothing switched off.

    ablation: what was off (`Ablation.names` says it for the screen). output: the output compared, resolved on the
    unablated photo (its top class, its salient region), read as `before` (baseline) and `after` (ablated), in the
    output's own units. Patches hidden as keys: the attention was kept as the forward made it
    (`kept_attentions`), since weights recomputed from the tokens would not know the mask (`projections` and
    `inside_head`, which recompute one layer's queries and keys, do not know it either). Blurred: `pixel_values`
    are the input the model saw, `image` the photo as given. Both dense maps are the dense head on their forward's
    own tokens at the input size (as the attributions read it), so that they differ by the ablation alone.
    """

    ablation: Ablation = field(kw_only=True)
    baseline: Analysis = field(kw_only=True, repr=False)
    output_read: Output = field(kw_only=True)
    before: float = field(kw_only=True)
    after: float = field(kw_only=True)

    @property
    def change(self) -> float:
        """after − before, in the output's units."""
        return self.after - self.before

    @property
    def relative(self) -> float | None:
        """change / |before|, or None where before is too near 0 for a share to mean anything."""
        return None if abs(self.before) < 1e-6 else self.change / abs(self.before)

    @property
    def noise(self) -> float:
        """The largest change that float32 rounding alone could make (`NOISE` of |before|, or of 1 near 0)."""
        return NOISE * max(abs(self.before), 1.0)

    @property
    def within_noise(self) -> bool:
        return abs(self.change) <= self.noise


def ablate(
    model: VitModel,
    image: ImageInput,
    heads: Sequence[tuple[int, int | None]] = (),
    mode: str = "zero",
    patches: Sequence[int] = (),
    patch_mode: str = "keys",
    layers: Sequence[int] = (),
    mlp: Sequence[int] = (),
    longest: int | None = None,
    output: Output | None = None,
    baseline: Analysis | Derived | None = None,
) -> Ablated:
    """The forward of `image` with the named parts of `model` switched off (see `Ablation`), beside the unablated
    one: an `Ablated`. longest: the input's longest side, as `analyze`'s. output: what to compare (default: the
    model's own, `outputs.default_output`). baseline: the unablated analysis of this image at this size where the
    caller has it (`analyze`'s, as the app keeps it), so that only the ablated forward runs."""
    ablation = Ablation(tuple(heads), mode, tuple(mlp), tuple(layers), tuple(patches), patch_mode)
    rgb = load_image(image)
    pixel_values = model_input(model, rgb, longest)
    grid = (pixel_values.shape[2] // model.patch_size, pixel_values.shape[3] // model.patch_size)
    ablation.check(model, grid)
    try:
        model.layer_parts(0)
    except ValueError as exc:
        raise ValueError(f"{model.name}: nothing in it can be switched off: {exc}") from None
    baseline = baseline.analysis if isinstance(baseline, Derived) else baseline
    if baseline is None:
        out = model.forward(torch.from_numpy(pixel_values), attentions="none")
        baseline = capture(model, rgb, pixel_values, out)
    elif baseline.model is not model or not np.array_equal(baseline.pixel_values, pixel_values):
        raise ValueError("the baseline is another model's or another input's analysis: analyze this image at this size")
    else:
        out = _Replayed.of(baseline)
    baseline = _with_dense(model, baseline, out)  # the dense head on each forward once: its map, then its reading
    with torch.inference_mode():
        size, image_size = tuple(pixel_values.shape[2:]), rgb.shape[:2]
        reading = (output or default_output(model)).reading(model, out, size, image_size, baseline.dense_map())
    seen = blurred(model, rgb, pixel_values, grid, ablation.patches) if ablation.patch_mode == "blur" else pixel_values
    masked = bool(ablation.patches) and ablation.patch_mode == "keys"
    weights: dict[int, torch.Tensor] = {}  # the masked forward's own, float16 [1,H,N,N] (see `Ablated`)
    keep = (lambda layer, w: weights.__setitem__(layer, w[:1].half())) if masked else None
    with applied(model, ablation, grid[0] * grid[1]):
        ablated = model.forward(torch.from_numpy(seen), attentions="none", each_layer=keep)
    if masked:
        ablated["attentions"] = tuple(weights[i] for i in range(model.num_layers))
    a = _with_dense(model, capture(model, rgb, seen, ablated), ablated)
    with torch.inference_mode():
        before, after = (float(reading.of_output(o, x.dense_map())[0]) for o, x in ((out, baseline), (ablated, a)))
    fields = {f: getattr(a, f) for f in Analysis.__dataclass_fields__}
    return Ablated(
        **fields, ablation=ablation, baseline=baseline, output_read=reading.output, before=before, after=after
    )


@dataclass(frozen=True)
class _Replayed:
    """What an output reads of a forward (`outputs.Reading`), from an analysis that kept it: the hidden states
    [1,N,D] each, the logits [1,C] and an attention-pool's output [1,D] (None where the model has none)."""

    hidden_states: tuple[torch.Tensor, ...]
    logits: torch.Tensor | None
    pooler_output: torch.Tensor | None

    @classmethod
    def of(cls, a: Analysis) -> _Replayed:
        m = a.model
        hidden = tuple(torch.from_numpy(h)[None].to(m.device) for h in a.hidden_states)
        logits = None if a.logits is None else torch.from_numpy(a.logits)[None].to(m.device)
        with m.lock, torch.inference_mode():
            pooled = m.pool(m.final_norm(hidden[-1])) if m.readout.pool else None
        return cls(hidden, logits, pooled)


def _with_dense(model: VitModel, a: Analysis, out) -> Analysis:
    """`a` with the dense head's map on its own forward's tokens (None without a dense head): the one it holds, as
    `analyze(..., dense=True)` made it, else made here from `out`, its forward."""
    if a.captured_dense:
        return a
    if model.dense_head is None:
        return replace(a, captured_dense=(None,))
    with model.lock, torch.inference_mode():
        dense = model.dense_map(out.hidden_states[-1], a.grid, tuple(a.pixel_values.shape[2:]))
    return replace(a, captured_dense=(dense[0, 0].float().cpu().numpy(),))


def blurred(
    model: VitModel, rgb: np.ndarray, pixel_values: np.ndarray, grid: tuple[int, int], patches: Sequence[int]
) -> np.ndarray:
    """[1,3,h,w] `pixel_values` with the pixels of `patches` (grid indices) replaced by a heavy blur of the photo
    `rgb`, the attributions' "blurred" baseline (`methods.absent_input`); every other pixel as it was."""
    p = model.patch_size
    x = torch.from_numpy(pixel_values)
    blur = absent_input("blurred", rgb, x, model).numpy()
    hidden = np.zeros(grid[0] * grid[1], bool)
    hidden[list(patches)] = True
    pixels = np.repeat(np.repeat(hidden.reshape(grid), p, 0), p, 1)
    return np.where(pixels[None, None], blur, pixel_values).astype(np.float32)
