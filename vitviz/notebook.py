"""Notebook helpers: one view of a result as a picture that Jupyter shows inline (`vitviz.show`). The results
(an Analysis, a DepthResult) do not know how they are drawn: this module does."""

from __future__ import annotations

import cv2
import numpy as np

from . import plots, render
from .analysis import Analysis
from .depth import DepthResult
from .views.attention import ALL_HEADS, attention_view
from .views.common import display
from .views.depth import decoder_stage_views, depth_view
from .views.inside import inside_views
from .views.output import output_view
from .views.rollout import rollout_view
from .views.tokens import tokens_view

SHOWN = ("tokens", "attention", "rollout", "inside", "pca", "dense", "distance", "entropy")


def show(a: Analysis | DepthResult, view: str | None = None, **options):
    """One view of `a` for a notebook: a PIL image (or a Plotly figure for "distance" and "entropy"),
    which Jupyter shows inline. The same drawings as the app's.

    A DepthResult: "depth" (the default: with its colorbar, bright = near; cmap="magma") or "stages" (the
    reassemble and fusion maps); its encoder's attention views are `show(depth.encoder, ...)`.

    An Analysis (view "attention" by default):
    "tokens"; "attention" (layer=last, head=None for the mean or "all", query="readout", cmap, alpha, scale);
    "rollout" (fusion="mean", discard=0.0, cmap, alpha, scale); "inside" (layer, head=0, query="readout"):
    scores, weights and weight × value side by side; "pca"; "dense" (the embedded dense head);
    "distance" and "entropy": per layer and head.
    """
    from PIL import Image

    if isinstance(a, DepthResult):
        return _show_depth(a, view or "depth", **options)
    view = view or "attention"
    if view not in SHOWN:
        raise ValueError(f"unknown view {view!r}: use one of {SHOWN}")
    last = a.model.num_layers - 1
    look = {k: options.pop(k) for k in ("cmap", "alpha", "scale") if k in options}
    if view == "tokens":
        picture = tokens_view(a)[0]
    elif view == "attention":
        head = options.pop("head", None)
        head = ALL_HEADS if head == "all" else head
        picture = attention_view(a, options.pop("layer", last), head, options.pop("query", "readout"), **look)[0]
    elif view == "rollout":
        picture = rollout_view(a, options.pop("fusion", "mean"), options.pop("discard", 0.0), **look)[0]
    elif view == "inside":
        layer, head, query = options.pop("layer", last), options.pop("head", 0), options.pop("query", "readout")
        picture = np.concatenate(inside_views(a, layer, head, query, **look)[:3], axis=1)
    elif view == "pca":
        picture = render.upsample_rgb(a.pca_rgb(), display(a).shape[:2])
    elif view == "dense":
        picture = output_view(a, **look)[1]
        if picture is None:
            raise ValueError(f"{a.model.name} has no dense head: only the embedded model has one")
    if options:
        raise ValueError(f"{view!r} does not take {sorted(options)}")
    if view == "distance":
        return plots.attention_distance(a.mean_attention_distance, a.model.patch_size)
    if view == "entropy":
        return plots.layer_head_heatmap(a.attention_entropy, "Attention entropy per head", "nats")
    return Image.fromarray(picture)


def _show_depth(r: DepthResult, view: str, cmap: str = "magma"):
    from PIL import Image

    if view == "depth":
        return Image.fromarray(depth_view(r, cmap)[1])
    if view == "stages":
        pictures, _ = decoder_stage_views(r)
        h, w = pictures[0][0].shape[:2]  # stages of one image differ by a rounding pixel at most
        tiles = [cv2.resize(p, (w, h), interpolation=cv2.INTER_NEAREST) for p, _ in pictures]
        return Image.fromarray(render.tile(tiles, [c for _, c in pictures], cols=4))
    raise ValueError(f"unknown view {view!r}: use 'depth' or 'stages'")
