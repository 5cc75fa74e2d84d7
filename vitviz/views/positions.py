"""The Positions view: one position embedding's similarity with every other, large, and where a click lands."""

from __future__ import annotations

import numpy as np

from .. import render
from ..models import VitModel

POS_MAP_SIDE = 480


def position_at(model: VitModel, x: float, y: float) -> tuple[int, int]:
    """(row, col) of the position under pixel (x, y) of `pos_embed_map`'s image (clamped)."""
    g = model.native_grid
    return min(int(y * g[0] / POS_MAP_SIDE), g[0] - 1), min(int(x * g[1] / POS_MAP_SIDE), g[1] - 1)


def pos_embed_map(model: VitModel, sim: np.ndarray, row: int, col: int) -> np.ndarray:
    """Position (row, col)'s similarity with every position, large, that position marked: a signed cosine, so
    diverging from -1 (blue) through 0 (white) to 1 (red), whatever the app's colormap."""
    g, size = model.native_grid, (POS_MAP_SIDE, POS_MAP_SIDE)
    img = render.colorize(sim[row, col], "diverging", -1.0, 1.0)
    img = render.mark_patch(np.ascontiguousarray(render.upsample_rgb(img / 255.0, size)), g, row * g[1] + col)
    return render.with_colorbar(img, "diverging", -1.0, 1.0, quantity="cosine similarity")
