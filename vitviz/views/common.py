"""The drawing every view shares: the user's photo at display size, a map over it on a colour scale, and the
patch under a click on it."""

from __future__ import annotations

import numpy as np

from .. import render
from ..analysis import Analysis
from ..maps import colour_scale


def display(a: Analysis) -> np.ndarray:
    """The user's image at display size: kept (and counted, and freed) with the app's analysis, made anew for a
    record (see `Analysis.drawing`)."""
    return a.drawing("display", lambda: render.fit(a.image))


CLIPPED = (0, 255, 255)  # outline of the patches above a patch map's 99th-percentile clip


def scaled_overlay(
    base: np.ndarray,
    values: np.ndarray,
    cmap: str,
    alpha: float,
    scale: str,
    nearest: bool,
    grid: tuple[int, int] | None = None,
    limits: tuple[float, float] | None = None,
    colorbar: str | None = "right",
    flagged: np.ndarray | None = None,
    query: int | None = None,
    quantity: str = "",
) -> np.ndarray:
    """`values` over `base` on a colour scale, with a colorbar that names it; on a patch map (`grid`),
    the patches above the clip are outlined (and `flagged` ones in green). limits: (low, high) shared
    with other pictures. colorbar: "right", "below" (pictures shown small, side by side) or None.
    query: a patch to outline on top of everything, the query of an attention map. quantity: what the values are,
    in words and units, written under the colour scale."""
    if colorbar not in ("right", "below", None):
        raise ValueError(f"colorbar must be 'right', 'below' or None, got {colorbar!r}")
    shown, lo, hi, clipped = colour_scale(values, scale)
    if limits is not None:
        lo, hi = limits
        clipped = shown > hi
    img = render.overlay(base, shown, cmap, alpha, lo, hi, nearest=nearest)
    if grid is not None and clipped.any():
        img = render.mark_boxes(img, grid, clipped, CLIPPED)
    if grid is not None and flagged is not None:
        img = render.mark_boxes(img, grid, flagged)
    if grid is not None and query is not None:
        img = render.mark_patch(img, grid, query)
    if colorbar is None:
        return img
    bar = render.with_colorbar if colorbar == "right" else render.with_colorbar_below
    return bar(img, cmap, lo, hi, scale, quantity)


def patch_at_display(a: Analysis, x: float, y: float) -> int | None:
    """The patch under pixel (x, y) of the displayed image (as drawn by these views)."""
    return render.patch_at(a.grid, display(a).shape[:2], x, y)
