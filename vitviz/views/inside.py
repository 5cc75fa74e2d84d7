"""The Inside a head view: one head's attention for one query, step by step (scores, weights, values)."""

from __future__ import annotations

import numpy as np

from .. import plots, render
from ..analysis import Analysis
from ..maps import DEFAULT_SCALE
from ..sentences import inside_note, token_name
from .common import display, scaled_overlay

INSIDE_SIDE = 400  # the longest side of each of the three maps of "inside a head"


def patch_at_inside(a: Analysis, x: float, y: float) -> int | None:
    """The patch under pixel (x, y) of one of inside a head's maps: drawn smaller, a colour scale below."""
    return render.patch_at(a.grid, render.fit(display(a), INSIDE_SIDE).shape[:2], x, y)


def inside_views(
    a: Analysis,
    layer: int,
    head: int,
    query: str | int,
    cmap: str = "inferno",
    alpha: float = 0.6,
    scale: str = DEFAULT_SCALE,
):
    """One head's attention for one query, step by step: (scores, weights, weight × value norm) over
    the patches, a figure of q and a few keys and values, a figure of the heads' shares and the
    layer's updates, and the text that walks through the steps with this image's numbers."""
    d = a.inside_head(layer, head, query)
    u = a.layer_updates(layer)
    # Three maps side by side are shown a third as wide: drawn small, their colorbars' numbers stay legible.
    base = render.fit(display(a), INSIDE_SIDE)
    marked = None if isinstance(query, str) else int(query)
    n = a.n_prefix
    # Softmax ignores a shift shared by every key: s - max s is what decides the weights (0: the top key).
    shifted = d.scores[n:] - d.scores.max()
    low = min(float(shifted.min()), -1e-6)
    scores = render.overlay(base, shifted.reshape(a.grid), cmap, alpha, low, 0.0)
    scores = scores if marked is None else render.mark_patch(scores, a.grid, marked)
    scores = render.with_colorbar_below(scores, cmap, low, 0.0, "", "score minus the top score (0: the top key)")

    def drawn(values: np.ndarray, quantity: str) -> np.ndarray:
        grid = values[n:].reshape(a.grid)
        return scaled_overlay(
            base, grid, cmap, alpha, scale, True, a.grid, colorbar="below", query=marked, quantity=quantity
        )

    weights = drawn(d.weights * 100, "% of the query's attention")
    values = drawn(d.contributions, "weight x value norm")
    top = [int(j) for j in np.argsort(-d.weights)[:3]]
    keys = [0, *(j for j in top if j != 0)][:4]
    short = [token_name(a, j).split(" (")[0] for j in keys]
    query_name = token_name(a, d.query).split(" (")[0]
    strips = plots.vector_strips(
        [
            ("q, k", [d.q, *(d.k[j] for j in keys)], [f"q · {query_name}", *(f"k · {t}" for t in short)]),
            ("v", [d.v[j] for j in keys], [f"v · {t}" for t in short]),
        ],
        f"q, k, v of head {head} (d = {d.head_width})",
    )
    updates = {
        # the residual stream and the layer's two updates (the sentence names them), short: a phone gives each 50 px
        "‖x‖": (float(u.residual[d.query]), float(u.residual.mean())),
        "attention": (float(u.attention[d.query]), float(u.attention.mean())),
        "MLP": (float(u.mlp[d.query]), float(u.mlp.mean())),
    }
    bars = plots.head_and_layer_bars(d.head_shares, head, updates, layer)
    return scores, weights, values, strips, bars, inside_note(a, d, u)
