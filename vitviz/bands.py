"""The random orders a server keeps: one band of random deletion curves per (model, photo, output and how patches
are hidden), drawn once and reused by every later check that ranks a map against it. A band never depends on the
map, so changing only the method, the fusion or a slider reuses it; only its images went through the model."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from . import deletion
from .models import VitModel
from .preprocess import ImageInput, load_image


class RandomBands:
    """A bounded LRU of `deletion.RandomBand`s, kept by the server: `get` draws a band only when none was drawn on
    this photo for this model, output and drawing options. `drawn` and `reused` count the calls that drew and that
    reused one (a test asks them, and `VitModel.forwards`, whether random orders went through the model again).

    Each entry holds its model, so a key's `id(model)` cannot name another model while it is kept. Over `max_bytes`
    the least recently used bands go first; the newest is always kept."""

    def __init__(self, max_bytes: int = 64 * 2**20) -> None:
        self.max_bytes = max_bytes
        self.drawn = 0
        self.reused = 0
        self._items: OrderedDict[tuple, tuple[VitModel, deletion.RandomBand]] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self,
        model: VitModel,
        image: ImageInput,
        progress: Callable[[float], None] | None = None,
        **options,
    ) -> deletion.RandomBand:
        """The band of `deletion.random_band(model, image, **options)`: the kept one when this model, photo (its
        pixels) and options (the output, steps, replacement, random_orders, seed, longest, ...) drew one before,
        else drawn now and kept. `progress` hears the drawing's fractions, or 1.0 at once for a kept band."""
        rgb = load_image(image)
        key = _key(model, rgb, options)
        with self._lock:
            kept = self._items.get(key)
            if kept is not None and kept[0] is model:
                self._items.move_to_end(key)
                self.reused += 1
        if kept is not None and kept[0] is model:
            if progress is not None:
                progress(1.0)
            return kept[1]
        band = deletion.random_band(model, rgb, progress=progress, **options)
        with self._lock:
            self.drawn += 1
            self._items[key] = (model, band)
            self._items.move_to_end(key)
            while len(self._items) > 1 and self.nbytes > self.max_bytes:
                self._items.popitem(last=False)
        return band

    def holds(self, model: VitModel | None, image: ImageInput, **options) -> bool:
        """Whether `get` with these arguments would reuse a kept band, drawing nothing: what a button's expected
        time reads, without counting as a reuse. None (a model not loaded yet) holds none."""
        if model is None:
            return False
        with self._lock:
            kept = self._items.get(_key(model, load_image(image), options))
        return kept is not None and kept[0] is model

    @property
    def nbytes(self) -> int:
        """The kept bands' arrays' bytes (their orders, curves and fractions)."""
        return sum(_nbytes(band) for _, band in list(self._items.values()))


def _key(model: VitModel, rgb: np.ndarray, options: dict) -> tuple:
    """A band's key: the model, the photo's pixels and the drawing's options."""
    pixels = hashlib.blake2b(np.asarray(rgb.shape).tobytes(), digest_size=16)
    pixels.update(rgb.tobytes())
    return (id(model), pixels.hexdigest(), *sorted(options.items(), key=lambda item: item[0]))


def _nbytes(band: deletion.RandomBand) -> int:
    return sum(np.asarray(a).nbytes for a in (band.orders, band.curves, band.fractions))
