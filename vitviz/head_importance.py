"""Head importance: for every layer × head, how much the model's output on one photo changes when that head alone is
switched off (`ablation.Ablation`'s heads, zeroed or set to their mean), as a layers × heads grid.

The work is batched: one forward carries the unablated image as its first row and, from layer l on, one more row for
each head of layer l that it ablates, branched off the first row as it enters layer l. Layers before a head's own
compute nothing for it, so the 72 ablations of a 12 × 6 model cost about 40 forwards' work, in as few forwards as
memory allows (`rows_per_forward`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .ablation import HEAD_MODES, NOISE, HeadSwitch
from .capture import model_input
from .models import VitModel
from .outputs import Output, default_output
from .preprocess import ImageInput, load_image

# The most bytes that one forward's attention (scores and weights, every row of one layer) may take at once.
ATTENTION_BYTES = 2**28


@dataclass(frozen=True)
class Importance:
    """The output's change for each head alone switched off, on one photo.

    after [L,H] float64: the output with head (layer, head) ablated, in the output's own units; before: the
    unablated output; output: what was read (resolved on the photo: its top class, its salient region); mode:
    "zero" or "mean" (`ablation.HEAD_MODES`); forwards: the work done, in forwards of the photo; seconds: the wall
    time it took.
    """

    after: np.ndarray
    before: float
    output: Output
    mode: str
    forwards: float
    seconds: float

    @property
    def change(self) -> np.ndarray:
        """[L,H] after − before."""
        return self.after - self.before

    @property
    def relative(self) -> np.ndarray | None:
        """[L,H] change / |before|, or None where before is too near 0 for a share to mean anything."""
        return None if abs(self.before) < 1e-6 else self.change / abs(self.before)

    @property
    def noise(self) -> float:
        """The largest change that float32 rounding alone could make (`ablation.NOISE` of |before|, or of 1 near
        0): two heads whose changes differ by less are not told apart."""
        return NOISE * max(abs(self.before), 1.0)

    def rank(self, layer: int, head: int) -> tuple[int, int]:
        """(rank from 1, how many other heads share it) of head (layer, head) by the size of its change: 1 + the
        heads whose |change| exceeds its own by more than `noise`, and the others within `noise` of it, so that
        float32 rounding never reorders two heads between runs."""
        size = np.abs(self.change)
        own = size[layer, head]
        tied = int((np.abs(size - own) <= self.noise).sum()) - 1
        return 1 + int((size > own + self.noise).sum()), tied

    def ranked(self) -> list[tuple[int, int, float]]:
        """(layer, head, change) of every head, the largest change (either way) first."""
        layers, heads = np.unravel_index(np.argsort(-np.abs(self.change), axis=None, kind="stable"), self.change.shape)
        return [(int(i), int(h), float(self.change[i, h])) for i, h in zip(layers, heads, strict=True)]


def rows_per_forward(model: VitModel, size: tuple[int, int]) -> int:
    """How many rows one forward of an input of `size` (h, w) carries: its attention within `ATTENTION_BYTES`."""
    n = model.n_prefix + (size[0] // model.patch_size) * (size[1] // model.patch_size)
    return max(2, ATTENTION_BYTES // (2 * 4 * model.num_heads * n * n))


def plan(model: VitModel, size: tuple[int, int], rows: int | None = None) -> list[list[tuple[int, int]]]:
    """The (layer, head) pairs of each forward, in order, `rows` rows a forward (the unablated one included;
    default `rows_per_forward`)."""
    per = (rows or rows_per_forward(model, size)) - 1
    if per < 1:
        raise ValueError(f"rows must be at least 2 (the unablated image and one ablation), got {rows}")
    pairs = [(layer, head) for layer in range(model.num_layers) for head in range(model.num_heads)]
    return [pairs[i : i + per] for i in range(0, len(pairs), per)]


def cost(model: VitModel, size: tuple[int, int], rows: int | None = None) -> float:
    """The work of `importance` on an input of `size` (h, w), in forwards of the photo: the unablated forward, then
    each batched forward's rows × the layers they pass through, over the model's layers."""
    layers = model.num_layers
    return 1 + sum(layers + sum(layers - layer for layer, _ in chunk) for chunk in plan(model, size, rows)) / layers


def importance(
    model: VitModel,
    image: ImageInput,
    mode: str = "zero",
    longest: int | None = None,
    output: Output | None = None,
    rows: int | None = None,
    progress: Callable[[float], None] | None = None,
) -> Importance:
    """The layers × heads grid of the output's change when each head alone is switched off (see the module), equal
    to `ablate(model, image, heads=[(layer, head)], mode=mode)` for each. longest: the input's longest side, as
    `analyze`'s. output: what to read (default: the model's own, `outputs.default_output`). rows: rows a forward
    (see `plan`). progress(fraction) is called as each layer of each forward is done."""
    if mode not in HEAD_MODES:
        raise ValueError(f"unknown head mode {mode!r}: use one of {', '.join(HEAD_MODES)}")
    start = time.perf_counter()
    rgb = load_image(image)
    x = torch.from_numpy(model_input(model, rgb, longest))
    size = tuple(x.shape[2:])
    chunks = plan(model, size, rows)
    total = sum(model.num_layers + sum(model.num_layers - layer for layer, _ in c) for c in chunks)
    done = [0]

    def step(_layer: int, weights: torch.Tensor) -> None:
        done[0] += len(weights)
        if progress is not None:
            progress(done[0] / total)

    out = model.forward(x, attentions="none")
    with torch.inference_mode():
        reading = (output or default_output(model)).reading(model, out, size, rgb.shape[:2])
        before = float(reading.of_output(out)[0])
    after = np.empty((model.num_layers, model.num_heads))
    for chunk in chunks:
        values = _branched(model, x, chunk, mode, step)
        with torch.inference_mode():
            read = reading.of_output(values)[1:].double().cpu().numpy()
        for (layer, head), value in zip(chunk, read, strict=True):
            after[layer, head] = value
    return Importance(after, before, reading.output, mode, cost(model, size, rows), time.perf_counter() - start)


def _branched(model: VitModel, x: torch.Tensor, pairs: list[tuple[int, int]], mode: str, step: Callable):
    """One forward of `x` [1,3,h,w] whose row 0 is unablated and whose row 1 + i has head pairs[i] switched off: each
    layer's rows are branched off row 0 as it enters that layer (the pairs in layer order)."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in pairs:
        by_layer.setdefault(layer, []).append(head)
    hooks = []
    with model.lock:
        try:
            for layer, heads in by_layer.items():
                hooks.append(model.blocks[layer].register_forward_pre_hook(_branch(len(heads)), with_kwargs=True))
                switch = HeadSwitch(model.num_heads, mode, _rows_of(model.num_heads, heads))
                hooks.append(model.layer_parts(layer).o.register_forward_pre_hook(switch))
            return model.forward(x, attentions=step)
        finally:
            for h in hooks:
                h.remove()


def _rows_of(heads: int, off: list[int]) -> Callable[[int], torch.Tensor]:
    """`HeadSwitch`'s rows for a batch whose last len(off) rows each switch off one head, off[i] for the i-th."""

    def rows(batch: int) -> torch.Tensor:
        mask = torch.zeros(batch, heads, dtype=torch.bool)
        mask[torch.arange(batch - len(off), batch), torch.tensor(off)] = True
        return mask

    return rows


def _branch(count: int):
    """A forward pre-hook on a block: `count` copies of the batch's first row (the unablated image) appended."""

    def hook(_module: nn.Module, args: tuple, kwargs: dict):
        tokens = args[0] if args else kwargs["hidden_states"]
        grown = torch.cat([tokens, tokens[:1].expand(count, -1, -1)])
        if args:
            return (grown, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": grown}

    return hook
