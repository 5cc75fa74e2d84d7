"""Micro-batching: new images that arrive together, for one model at one input size, go through it as one batch.

A GPU runs a batch of k images in much less than k times one image's forward; a CPU does not (measured by
`python -m benchmarks.batching`, in docs/benchmarks.md), so the app batches on a GPU only. Since an analysis
keeps hidden states and recomputes attention from them, a batch's capture is its images' slices of one forward.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .analysis import Analysis
from .capture import ForwardFusions, capture_all, forward_for, model_input
from .models import VitModel
from .preprocess import ImageInput, load_image


@dataclass(eq=False)
class _Batch:
    """Images waiting to go through one forward: (RGB, input [1,3,h,w]) each, then their analyses."""

    roll: bool
    dense: bool
    inputs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    full: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    results: list[Analysis] = field(default_factory=list)
    error: BaseException | None = None


class Batcher:
    """`analyze` for many threads at once. The first image of a (model, input size) opens a batch and waits
    `window_s` (less if `max_batch` images join), then for the model to be free: images that arrive meanwhile
    join, so that under load each forward takes everyone waiting. Each gets the analysis that `analyze` would
    give it alone, to float noise (the same arithmetic on a larger batch)."""

    def __init__(self, window_s: float, max_batch: int) -> None:
        if window_s < 0 or max_batch < 1:
            raise ValueError(f"a batch needs a window >= 0 s and a size >= 1, got {window_s} s and {max_batch}")
        self.window_s, self.max_batch = window_s, max_batch
        self.sizes: deque[int] = deque(maxlen=1000)  # each forward's batch size, as it ran
        self._open: dict[tuple, _Batch] = {}
        self._lock = threading.Lock()

    def analyze(
        self, model: VitModel, image: ImageInput, longest: int | None = None, roll: bool = False, dense: bool = False
    ) -> Analysis:
        """What `vitviz.analyze(model, image, longest, roll, dense, later=True)` returns, from a forward that it
        may share (and where `dense` asks, a dense-head forward that it shares too)."""
        rgb = load_image(image)
        x = model_input(model, rgb, longest)  # a bad image or size fails here, alone, before joining
        key = (id(model), x.shape, roll, dense)
        most = self.most(model, x) if roll else self.max_batch
        with self._lock:
            batch = self._open.get(key)
            leader = batch is None
            if leader:
                batch = self._open[key] = _Batch(roll, dense)
            slot = len(batch.inputs)
            batch.inputs.append((rgb, x))
            if len(batch.inputs) >= most:  # full; a batch that rolls, as many as can hold their fused heads
                self._close(key, batch)
        if leader:
            batch.full.wait(self.window_s)
            self._run(model, key, batch)
        batch.done.wait()
        if batch.error is not None:
            raise RuntimeError(f"the batch of {len(batch.inputs)} failed: {batch.error}") from batch.error
        return batch.results[slot]

    def most(self, model: VitModel, x: np.ndarray) -> int:
        """The most images of input x's size that a batch that rolls takes: as many as can hold their fused heads."""
        return min(self.max_batch, max(1, ForwardFusions.most(model, x)))

    def warm(self, model: VitModel, longest: int | None = None) -> None:
        """A full batch of one random square photo at `longest` (None: the model's default), as an upload's:
        rolled, with its dense maps; then another fusion's rollout (from the forward's held fused heads, or
        recomputed where they did not fit), every layer's statistics (each layer recomputed, as the heads view asks)
        and a layer's queries, as the first moves ask.
        Untimed and uncounted: on a GPU the first batch of a shape sets up its kernels and memory, which the
        first class's uploads would wait for (docs/benchmarks.md)."""
        rgb = np.random.default_rng(0).integers(0, 256, (448, 448, 3), dtype=np.uint8)
        x = model_input(model, rgb, longest)
        inputs = [(rgb, x)] * self.most(model, x)
        with model.lock:
            out, fusions = forward_for(model, np.concatenate([x for _, x in inputs]), True)
        first = capture_all(model, inputs, out, fusions, True)[0]
        first.rollout("max", 0.5)  # the forward's roll first, then another fusion's from its held rows
        for layer in range(first.num_layers):
            first.layer_statistics(layer)
        first.attention_map(first.num_layers - 1)

    def _close(self, key: tuple, batch: _Batch) -> None:
        if self._open.get(key) is batch:
            del self._open[key]
        batch.full.set()

    def _run(self, model: VitModel, key: tuple, batch: _Batch) -> None:
        """The batch's forward, under the model's lock; its analyses are captured and rolled after it (and their
        dense maps made by one forward of them all, which takes the lock again), so that the next batch's forward
        need not wait for them."""
        try:
            with model.lock:  # a forward under way ends first; who arrives meanwhile still joins
                with self._lock:
                    self._close(key, batch)
                out, fusions = forward_for(model, np.concatenate([x for _, x in batch.inputs]), batch.roll)
            batch.results = capture_all(model, batch.inputs, out, fusions, batch.dense)
            self.sizes.append(len(batch.inputs))
        except BaseException as exc:  # every image of the batch gets the error
            batch.error = exc
        finally:
            batch.done.set()
