"""The Output view: the top classes and the dense head's map, with which forward they come from."""

from __future__ import annotations

import numpy as np

from ..analysis import Analysis
from ..maps import DEFAULT_SCALE
from ..sentences import dense_note, pixel_words
from .common import display, scaled_overlay

DENSE_WORDS = "dense map: 0 background, 1 salient"


def output_view(
    a: Analysis,
    cmap: str = "inferno",
    alpha: float = 0.6,
    scale: str = DEFAULT_SCALE,
    limits: tuple[float, float] | None = None,
) -> tuple[dict[str, float], np.ndarray | None, str]:
    """(top-5 {label: probability}, dense-head overlay or None, which forward the output comes from and how sure
    its reading is). limits: the colour scale's (low, high), where the map is shown beside another on one scale."""
    top = dict(a.top_classes(5))
    sal = a.dense_map()
    if sal is None:
        h, w = a.pixel_values.shape[2:]
        return top, None, f"The classes come from this analysis' own forward, on its {pixel_words(h, w)} input."
    return (
        top,
        scaled_overlay(display(a), sal, cmap, alpha, scale, False, limits=limits, quantity=DENSE_WORDS),
        dense_note(a, sal),
    )
