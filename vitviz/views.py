"""What each view of the app shows, as images and figures, from an `Analysis`.

The UI module only wires these to widgets; the CLI and notebooks can call them too.
"""

from __future__ import annotations

import weakref

import numpy as np

from . import plots, render
from .analysis import Analysis
from .attribute import Attribution
from .depth import DepthResult
from .maps import high_norm_tokens
from .models import VitModel

ALL_HEADS = "all"


_DISPLAY: weakref.WeakKeyDictionary[Analysis, np.ndarray] = weakref.WeakKeyDictionary()


def display(a: Analysis) -> np.ndarray:
    """The user's image at display size, made once per analysis (and freed with it)."""
    if a not in _DISPLAY:
        _DISPLAY[a] = render.fit(a.image)
    return _DISPLAY[a]


def tokens_view(a: Analysis) -> tuple[np.ndarray, str]:
    """The image cut into patches with the scan order, and a sentence on the token sequence."""
    m = a.model
    gh, gw = a.grid
    h, w = a.pixel_values.shape[2:]
    prefix = ", ".join(m.prefix_tokens)
    text = (
        f"**{gh} × {gw} = {gh * gw} patch tokens** of {m.patch_size}×{m.patch_size} pixels "
        f"(the model sees the image at {w}×{h}), **plus {m.n_prefix} prefix token"
        f"{'s' if m.n_prefix > 1 else ''}: {prefix}** → {a.attentions.shape[-1]} tokens in all. "
        "Patches are numbered in scan order, left to right, top to bottom. "
        "The CLS token is the *readout token*: a learned vector put in front of the patches, "
        "whose output summarises the image. Each patch token also gets a learned "
        "*position embedding*, so the model knows where the patch came from."
    )
    return render.draw_grid(display(a), a.grid), text


def attention_view(
    a: Analysis,
    layer: int,
    head: int | str | None,
    query: str | int,
    cmap: str = "inferno",
    alpha: float = 0.6,
    shared_scale: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(overlay, query picker). head: an index, None for the mean of heads, or ALL_HEADS.

    The overlay is the map upsampled nearest-neighbour (one flat square per patch), with a
    colorbar. ALL_HEADS tiles every head plus their mean; shared_scale puts them on one scale.
    """
    base = display(a)
    picker = base if query == "cls" else render.mark_patch(base, a.grid, int(query))
    if head != ALL_HEADS:
        values = a.attention_map(layer, head, query)
        lo, hi = float(values.min()), float(values.max())
        img = render.overlay(base, values, cmap, alpha, lo, hi, nearest=True)
        if query != "cls":
            img = render.mark_patch(img, a.grid, int(query))
        return render.with_colorbar(img, cmap, lo, hi), picker
    maps = np.concatenate([a.head_maps(layer, query), a.attention_map(layer, None, query)[None]])
    labels = [f"head {h}" for h in range(len(maps) - 1)] + ["mean of heads"]
    small = render.fit(base, 300)
    lo, hi = float(maps.min()), float(maps.max())
    tiles = []
    for m in maps:
        t_lo, t_hi = (lo, hi) if shared_scale else (float(m.min()), float(m.max()))
        t = render.overlay(small, m, cmap, alpha, t_lo, t_hi, nearest=True)
        if query != "cls":
            t = render.mark_patch(t, a.grid, int(query))
        tiles.append(t if shared_scale else render.with_colorbar(t, cmap, t_lo, t_hi))
    sheet = render.tile(tiles, labels, cols=4 if len(tiles) > 9 else 3 + (len(tiles) > 6))
    return (render.with_colorbar(sheet, cmap, lo, hi) if shared_scale else sheet), picker


def rollout_view(
    a: Analysis, fusion: str, discard: float, cmap: str = "inferno", alpha: float = 0.6
) -> tuple[np.ndarray, str]:
    """(the rollout over the image, bilinear, with a colorbar; what its brightest patch is)."""
    values = a.rollout(fusion, discard)
    lo, hi = float(values.min()), float(values.max())
    img = render.overlay(display(a), values, cmap, alpha, lo, hi, nearest=False)
    return render.with_colorbar(img, cmap, lo, hi), rollout_note(a, values)


def patch_at_display(a: Analysis, x: float, y: float) -> int | None:
    """The patch under pixel (x, y) of the displayed image (as drawn by these views)."""
    return render.patch_at(a.grid, display(a).shape[:2], x, y)


POS_MAP_SIDE = 480


def position_at(model: VitModel, x: float, y: float) -> tuple[int, int]:
    """(row, col) of the position under pixel (x, y) of `pos_embed_map`'s image (clamped)."""
    g = model.native_grid
    return min(int(y * g[0] / POS_MAP_SIDE), g[0] - 1), min(int(x * g[1] / POS_MAP_SIDE), g[1] - 1)


def pos_embed_map(model: VitModel, sim: np.ndarray, row: int, col: int, cmap: str = "viridis") -> np.ndarray:
    """Position (row, col)'s similarity with every position, large, that position marked."""
    g = model.native_grid
    size = (POS_MAP_SIDE, POS_MAP_SIDE)
    img = render.colorize(sim[row, col], cmap, -1.0, 1.0)
    img = render.mark_patch(np.ascontiguousarray(render.upsample_rgb(img / 255.0, size)), g, row * g[1] + col)
    return render.with_colorbar(img, cmap, -1.0, 1.0)


def heads_views(a: Analysis, cmap: str = "inferno"):
    """(attention distance figure, entropy figure, token-norm image, PCA image, a sentence on the norms)."""
    base = display(a)
    norms = a.token_norms()
    flagged = high_norm_tokens(norms)
    outliers = render.mark_boxes(render.overlay(base, norms, cmap, 0.65, nearest=True), a.grid, flagged)
    pca = render.upsample_rgb(a.pca_rgb(), base.shape[:2])
    largest = float(norms.max() / np.median(norms))
    if flagged.any():
        note = (f"**{int(flagged.sum())} token(s) stand apart** (at least 2× the median norm, boxed green): "
                "this model's high-norm 'artifact' tokens (Darcet et al. 2023), used as scratch space.")  # fmt: skip
    else:
        note = "**No token stands apart**: this model shows no high-norm 'artifact' tokens on this image."
    return (
        plots.attention_distance(a.mean_attention_distance, a.model.patch_size),
        plots.layer_head_heatmap(a.attention_entropy, "Attention entropy (low = focused, high = spread out)", "nats"),
        render.with_colorbar(outliers, cmap, float(norms.min()), float(norms.max())),
        np.concatenate([base, np.full((base.shape[0], 8, 3), 255, np.uint8), pca], axis=1),
        f"The largest output-token norm is {largest:.2f}× the median. {note}",
    )


def rollout_note(a: Analysis, values: np.ndarray) -> str:
    """What the rollout's brightest patch is, in numbers: its share, how far it stands out, its norm."""
    gh, gw = a.grid
    best = int(values.argmax())
    row, col = divmod(best, gw)
    share = float(values.flat[best] / values.sum())
    tail = float(values.flat[best] / max(np.percentile(values, 99), 1e-12))
    norms = a.token_norms()
    norm = float(norms.flat[best] / np.median(norms))
    kind = "an artifact token" if high_norm_tokens(norms).flat[best] else "no artifact token (its norm is ordinary)"
    text = (f"The brightest patch, row {row} column {col} (patch {best}), holds {share:.1%} of the readout's patch "
            f"mass, {tail:.1f}× the 99th percentile. Its output norm is {norm:.2f}× the median: {kind}.")  # fmt: skip
    sal = a.saliency()
    if sal is not None:
        h, w = sal.shape
        score = float(sal[row * h // gh : (row + 1) * h // gh, col * w // gw : (col + 1) * w // gw].mean())
        text += f" The dense head scores that patch {score:.2f} ({'object' if score >= 0.5 else 'background'})."
    return text


def output_view(a: Analysis, cmap: str = "inferno", alpha: float = 0.6) -> tuple[dict[str, float], np.ndarray | None]:
    """(top-5 {label: probability}, dense-head overlay or None)."""
    top = dict(a.top_classes(5))
    sal = a.saliency()
    if sal is None:
        return top, None
    img = render.overlay(display(a), sal, cmap, alpha, 0.0, 1.0, nearest=False)
    return top, render.with_colorbar(img, cmap, 0.0, 1.0)


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
    rows = ["| map | made from | cells | channels | 1 cell = |", "|---|---|---|---|---|"]
    for s in r.stages:
        c, h, w = s.shape
        scale = side / max(h, w)
        picture = render.upsample_rgb(s.picture, (max(1, round(h * scale)), max(1, round(w * scale))))
        pictures.append((picture, f"{s.name} · {h}×{w}"))
        rows.append(f"| **{s.name}** | {s.detail} | {h}×{w} | {c} | {s.scale:.3g} px |")
    return pictures, "\n".join(rows)


def attribution_views(
    a: Analysis, r: Attribution, rel: Attribution | None, cmap: str = "inferno", alpha: float = 0.6
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(the attribution, attention rollout, relevancy) over the image, side by side with colorbars.

    Pixel-level maps (IG, saliency, input x gradient) are shown as magnitudes clipped at their
    99.5th percentile, as Captum's own visualisation does, since a few pixels dominate otherwise.
    """
    base = display(a)

    def draw(values: np.ndarray, pixel_level: bool) -> np.ndarray:
        if max(values.shape) > max(base.shape[:2]):
            values = render.fit(values, max(base.shape[:2]))  # area-averaged, not aliased
        if pixel_level:
            values = np.abs(values)
            lo, hi = 0.0, float(np.percentile(values, 99.5)) or float(values.max())
        else:
            lo, hi = float(values.min()), float(values.max())
        return render.with_colorbar(render.overlay(base, values, cmap, alpha, lo, hi, nearest=False), cmap, lo, hi)

    return (
        draw(r.map, r.raw.ndim == 4),
        draw(a.rollout("mean", 0.0), False),
        None if rel is None else draw(rel.map, False),
    )
