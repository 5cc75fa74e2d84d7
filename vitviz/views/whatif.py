"""The What if view: an ablation beside its unablated baseline, view by view."""

from __future__ import annotations

from ..maps import DEFAULT_SCALE
from .attention import attention_view
from .output import output_view
from .rollout import rollout_view


def whatif_views(w, cmap: str = "inferno", alpha: float = 0.6, scale: str = DEFAULT_SCALE) -> dict[str, tuple]:
    """An ablation (`ablation.Ablated`) beside its unablated baseline, each view as (unablated, ablated): "output"
    (`output_view`'s top-5 and dense map), "attention" (the last layer's, the mean of its heads, of the readout
    query: downstream of every layer but its own, where a head switched off still looks where it looked) and
    "rollout" (mean fusion, toward the output compared, as resolved on the unablated photo)."""
    pair, last = (w.baseline, w), w.model.num_layers - 1
    return {
        "output": tuple(output_view(a, cmap, alpha, scale)[:2] for a in pair),
        "attention": tuple(attention_view(a, last, None, "readout", cmap, alpha, scale=scale)[0] for a in pair),
        "rollout": tuple(rollout_view(a, "mean", 0.0, cmap, alpha, scale, w.output_read)[0] for a in pair),
    }
