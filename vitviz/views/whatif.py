"""The What if view: an ablation beside its unablated baseline, view by view; and the head-importance tiles."""

from __future__ import annotations

import numpy as np

from ..maps import DEFAULT_SCALE, colour_scale
from ..render import head_tiles
from .attention import attention_view
from .output import output_view
from .rollout import rollout_view

VIEWS = ("output", "attention", "rollout")


def whatif_views(
    w, cmap: str = "inferno", alpha: float = 0.6, scale: str = DEFAULT_SCALE, views: tuple[str, ...] = VIEWS
) -> dict[str, tuple]:
    """An ablation (`ablation.Ablated`) beside its unablated baseline, each of `views` as (unablated, ablated):
    "output" (`output_view`'s top-5 and dense map), "attention" (the last layer's, the mean of its heads, of the
    readout query: downstream of every layer but its own, where a head switched off still looks where it looked)
    and "rollout" (mean fusion, toward the output compared, as resolved on the unablated photo)."""
    pair, last = (w.baseline, w), w.model.num_layers - 1
    limits = dense_limits(pair, scale) if "output" in views else None  # one scale for both, made once
    drawn = {
        "output": lambda a: output_view(a, cmap, alpha, scale, limits)[:2],
        "attention": lambda a: attention_view(a, last, None, "readout", cmap, alpha, scale=scale)[0],
        "rollout": lambda a: rollout_view(a, "mean", 0.0, cmap, alpha, scale, w.output_read)[0],
    }
    return {view: tuple(drawn[view](a) for a in pair) for view in views}


def dense_limits(pair, scale: str) -> tuple[float, float] | None:
    """One colour scale for the dense maps of analyses shown side by side (the unablated and the ablated), made
    from both, so that a colour means one value in both pictures; None without a dense head."""
    maps = [a.dense_map() for a in pair]
    if any(m is None for m in maps):
        return None
    _, low, high, _ = colour_scale(np.concatenate([m.ravel() for m in maps]), scale)
    return low, high


def importance_tiles(grid, chosen: tuple[int, int] | None = None) -> tuple[np.ndarray, str]:
    """(the head tiles coloured by each head's change of the output on the importance grid
    (`head_importance.Importance`), in % of its unablated value where that is not near 0, with `chosen` outlined in
    magenta and the head that matters most in green; what the tiles' numbers are, in words)."""
    values = grid.change if grid.relative is None else grid.relative * 100
    unit = "in the output's units" if grid.relative is None else "in % of the unablated output"
    layer, head, _ = grid.ranked()[0]
    return head_tiles(*grid.change.shape, values, chosen, (layer, head)), unit
