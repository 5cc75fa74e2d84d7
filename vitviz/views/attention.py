"""The Attention view: one layer's attention of a query, per head, averaged, or every head as a sheet."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from .. import render
from ..analysis import Analysis
from ..maps import DEFAULT_SCALE, colour_scale
from .common import display, scaled_overlay

ALL_HEADS = "all"


SHEET_TILE = 300  # the longest side of one tile of the all-heads sheet, in pixels


WEIGHT, WEIGHT_VALUE = "weight", "weight × value norm"  # what an attention map shows: α_j or ||α_j W_O,h v_j||


def attention_view(
    a: Analysis,
    layer: int,
    head: int | str | None,
    query: str | int,
    cmap: str = "inferno",
    alpha: float = 0.6,
    shared_scale: bool = True,
    scale: str = DEFAULT_SCALE,
    measure: str = WEIGHT,
    columns: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """(overlay, query picker). head: an index, None for the mean of heads, or ALL_HEADS.

    The overlay is the map upsampled nearest-neighbour (one flat square per patch), with a
    colorbar. ALL_HEADS tiles every head plus their mean in `columns` columns (0: 3, or 4 past six tiles);
    shared_scale puts them on one scale. measure: WEIGHT (the attention weights) or WEIGHT_VALUE (what each key
    contributes through the head's values and its slice of the output projection, Kobayashi et al. 2020).
    """
    if measure not in (WEIGHT, WEIGHT_VALUE):
        raise ValueError(f"measure must be {WEIGHT!r} or {WEIGHT_VALUE!r}, got {measure!r}")
    one = a.attention_map if measure == WEIGHT else a.contribution_map
    base = display(a)
    marked = None if isinstance(query, str) else int(query)
    picker = base if marked is None else render.mark_patch(base, a.grid, marked)
    if head != ALL_HEADS:
        values, quantity = in_words(one(layer, head, query), measure)
        return scaled_overlay(base, values, cmap, alpha, scale, True, a.grid, query=marked, quantity=quantity), picker
    heads = list(range(a.model.num_heads))
    return attention_sheet(a, layer, heads, query, cmap, alpha, shared_scale, scale, measure, columns), picker


def in_words(values: np.ndarray, measure: str) -> tuple[np.ndarray, str]:
    """An attention map as its colour scale states it: weights in % of the query's attention, or weight × value
    norms as they are; and the scale's words."""
    return (values * 100, "% of the query's attention") if measure == WEIGHT else (values, "weight x value norm")


def attention_sheet(
    a: Analysis,
    layer: int,
    heads: list[int],
    query: str | int = "readout",
    cmap: str = "inferno",
    alpha: float = 0.6,
    shared_scale: bool = True,
    scale: str = DEFAULT_SCALE,
    measure: str = WEIGHT,
    columns: int = 0,
) -> np.ndarray:
    """`heads` of one layer and the mean of all heads, tiled in `columns` columns (0: 3, or 4 past six tiles),
    with the query marked; shared_scale puts them on one colour scale with one colorbar, else each tile has its
    own."""
    if not 0 <= columns <= 16:
        raise ValueError(f"columns must be 0 (3 or 4, by the number of heads) to 16, got {columns}")
    one = a.attention_map if measure == WEIGHT else a.contribution_map
    marked = None if isinstance(query, str) else int(query)
    maps, quantity = in_words(np.stack([one(layer, h, query) for h in heads] + [one(layer, None, query)]), measure)
    labels = [f"head {h}" for h in heads] + ["mean of heads"]
    small = render.fit(display(a), SHEET_TILE)
    _, lo, hi, _ = colour_scale(maps, scale)
    limits, bars = ((lo, hi), None) if shared_scale else (None, "right")
    tiles = [scaled_overlay(small, m, cmap, alpha, scale, True, a.grid, limits, bars, query=marked) for m in maps]
    # One column is a phone's, shown at about its own size: its captions and numbers are the projector's size.
    with render.large_labels(True) if columns == 1 else nullcontext():
        sheet = render.tile(tiles, labels, cols=columns or (4 if len(tiles) > 6 else 3))
        # one colour scale under the sheet, not beside it: the tiles keep the width (>= 200 px shown at 1400)
        return render.with_colorbar_below(sheet, cmap, lo, hi, scale, quantity) if shared_scale else sheet
