"""The Heads view: attention distance and entropy per head, the output tokens' norms and their PCA."""

from __future__ import annotations

import numpy as np

from .. import plots, render
from ..analysis import Analysis
from ..maps import DEFAULT_SCALE, high_norm_tokens
from .common import display, scaled_overlay


def heads_views(a: Analysis, cmap: str = "inferno", scale: str = DEFAULT_SCALE):
    """(attention distance figure, entropy figure, token-norm image, PCA image, a sentence on the norms)."""
    base = display(a)
    norms = a.token_norms()
    flagged = high_norm_tokens(norms)
    outliers = scaled_overlay(
        base, norms, cmap, 0.65, scale, True, a.grid, flagged=flagged, quantity="output token norm"
    )
    pca = render.upsample_rgb(a.pca_rgb(), base.shape[:2])
    largest = float(norms.max() / np.median(norms))
    if flagged.any():
        n = int(flagged.sum())
        note = (
            f"**{n} token{' stands' if n == 1 else 's stand'} apart** (at least 2× the median norm, boxed green): "
            "this model's high-norm 'artifact' tokens (Darcet et al. 2023), used as scratch space."
        )
    else:
        note = "**No token stands apart**: this model shows no high-norm 'artifact' tokens on this image."
    return (
        plots.attention_distance(a.mean_attention_distance, a.model.patch_size),
        plots.layer_head_heatmap(a.attention_entropy, "Attention entropy (low = focused, high = spread out)", "nats"),
        outliers,
        np.concatenate([base, np.full((base.shape[0], 8, 3), 255, np.uint8), pca], axis=1),
        f"The largest output-token norm is {largest:.2f}× the median. {note}",
    )
