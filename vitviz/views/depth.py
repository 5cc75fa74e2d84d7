"""The Depth view: the depth map over the photo and the decoder's stages."""

from __future__ import annotations

import numpy as np

from .. import render
from ..depth import DepthResult


def depth_view(r: DepthResult, cmap: str = "magma", alpha: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(image, depth overlay with a colorbar), both at display size; bright = near."""
    base = render.fit(r.encoder.image)
    lo, hi = float(r.depth.min()), float(r.depth.max())
    img = render.overlay(base, render.fit(r.depth, max(base.shape[:2])), cmap, alpha, lo, hi, nearest=False)
    return base, render.with_colorbar(img, cmap, lo, hi)


def decoder_stage_views(r: DepthResult, side: int = 240) -> tuple[list[tuple[np.ndarray, str]], str]:
    """(each reassemble and fusion map's PCA picture, nearest-upsampled so its cells show, with a
    short caption; a Markdown table saying what each map is made from, its size and scale)."""
    pictures = []
    rows = ["| map | made from | cells (rows × columns) | channels | 1 cell = |", "|---|---|---|---|---|"]
    for s in r.stages:
        c, h, w = s.shape
        scale = side / max(h, w)
        picture = render.upsample_rgb(s.picture, (max(1, round(h * scale)), max(1, round(w * scale))))
        pictures.append((picture, f"{s.name} · {h}×{w}"))
        rows.append(f"| **{s.name}** | {s.detail} | {h}×{w} | {c} | {s.scale:.3g} px |")
    return pictures, "\n".join(rows)
