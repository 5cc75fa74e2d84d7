"""The Live view: a camera frame's attention, rollout and dense map, small, drawn several times a second."""

from __future__ import annotations

import numpy as np

from .. import render
from ..analysis import Analysis
from ..maps import DEFAULT_SCALE
from .common import scaled_overlay

LIVE_LAYERS = ("attention", "rollout", "dense head")  # what the live view can draw on each frame


LIVE_DISPLAY = 360  # a frame's longest side on screen: three pictures per frame, several frames a second


def live_views(
    a: Analysis,
    layer: int,
    head: int | None,
    shown: tuple[str, ...] = LIVE_LAYERS,
    cmap: str = "inferno",
    alpha: float = 0.6,
    scale: str = DEFAULT_SCALE,
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(CLS attention of `layer` and `head` (None: mean of heads), rollout, dense head) over a camera
    frame, each None unless named in `shown`; small, since a new frame comes several times a second, and shown
    three abreast: their colour scales go under them."""
    if unknown := set(shown) - set(LIVE_LAYERS):
        raise ValueError(f"the live view draws {LIVE_LAYERS}, not {sorted(unknown)}")
    base = render.fit(a.image, LIVE_DISPLAY)
    maps = {  # name -> (how to compute it, one flat square per patch); only what is shown is computed
        "attention": (lambda: a.attention_map(layer, head, "readout"), True),
        "rollout": (lambda: a.rollout("mean"), False),
        "dense head": (a.dense_map, False),
    }

    def drawn(values, nearest: bool) -> np.ndarray | None:  # None: no dense head
        v, grid = values(), a.grid if nearest else None
        return None if v is None else scaled_overlay(base, v, cmap, alpha, scale, nearest, grid, None, "below")

    return tuple(drawn(*maps[name]) if name in shown else None for name in LIVE_LAYERS)
