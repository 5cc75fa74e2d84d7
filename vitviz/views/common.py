"""What each view of the app shows, as images and figures, from an `Analysis` (a notebook's, the CLI's) or the
server's `derived.Derived` of one, which answers the same. The UI module only wires these to widgets."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from . import plots, render
from .analysis import Analysis
from .attributions import SIGNED, Attribution
from .depth import DepthResult
from .maps import DEFAULT_SCALE, colour_scale, high_norm_tokens
from .models import VitModel
from .outputs import Output, patch_weights
from .sanity import rank_correlation
from .sentences import (
    dense_note,
    inside_note,
    pixel_words,
    readout_phrase,
    rollout_note,
    rollout_readout_truth,
    rollout_truth,
    token_name,
)

ALL_HEADS = "all"
SHEET_TILE = 300  # the longest side of one tile of the all-heads sheet, in pixels
INSIDE_SIDE = 400  # the longest side of each of the three maps of "inside a head"
ATTRIBUTION_SIDE = 360  # and of the three of the attributions view
WEIGHT, WEIGHT_VALUE = "weight", "weight × value norm"  # what an attention map shows: α_j or ||α_j W_O,h v_j||


def display(a: Analysis) -> np.ndarray:
    """The user's image at display size: kept (and counted, and freed) with the app's analysis, made anew for a
    record (see `Analysis.drawing`)."""
    return a.drawing("display", lambda: render.fit(a.image))


def tokens_view(a: Analysis) -> tuple[np.ndarray, str]:
    """The image cut into patches with the scan order, and a sentence on the token sequence."""
    m = a.model
    gh, gw = a.grid
    h, w = a.pixel_values.shape[2:]
    prefix = ", ".join(m.prefix_tokens)
    plus = (f", **plus {m.n_prefix} prefix token{'s' if m.n_prefix > 1 else ''}: {prefix}**" if m.n_prefix
            else " and no prefix token")  # fmt: skip
    order = (f"In the sequence the prefix tokens come first, so patch p*i* sits at position #*i*+{m.n_prefix} (the "
             "strip under the picture). " if m.n_prefix else "")  # fmt: skip
    text = (
        f"**{gh} rows × {gw} columns = {gh * gw} patch tokens** of {m.patch_size}×{m.patch_size} pixels "
        f"(the model sees the image at {pixel_words(h, w)}){plus} → {a.num_tokens} tokens in all. "
        f"Patches are numbered p0, p1, … in scan order, left to right and top to bottom (left margin: the first "
        f"patch of each row; top: the column). {order}{readout_phrase(a)} Each patch token also gets a "
        "learned *position embedding* added (+ pos), so the model knows where the patch came from."
    )
    grid = render.scan_margins(display(a), a.grid)
    named = list(zip(m.prefix_tokens, m.prefix_with_position, strict=True))
    strip = render.token_strip(display(a), a.grid, named, grid.shape[1])
    return np.concatenate([grid, strip]), text


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


def rollout_view(
    a: Analysis,
    fusion: str,
    discard: float,
    cmap: str = "inferno",
    alpha: float = 0.6,
    scale: str = DEFAULT_SCALE,
    toward: Output | None = None,
) -> tuple[np.ndarray, str]:
    """(the rollout toward `toward` (default: the model's own output) over the image, bilinear, with a colorbar
    in the note's unit, each patch's share of what the patches pass on, in %; the note: what the map follows and
    what its brightest patch is)."""
    toward = a.output if toward is None else toward
    values = a.rollout(fusion, discard, toward)
    shares = values / max(float(values.sum()), 1e-12) * 100
    quantity = f"% of the flow to {'the readout' if toward.reads_readout else 'the output'}"
    picture = scaled_overlay(display(a), shares, cmap, alpha, scale, False, a.grid, quantity=quantity)
    return picture, rollout_note(a, values, toward)


def rollout_truth_note(a: Analysis, fusion: str, discard: float) -> str:
    """What a rollout with this fusion and discard ratio can tell on this photo (`sentences.rollout_truth`): for a
    dense output, the rank correlations of the rollouts toward the output and toward the readout with each other and
    with the output's own map (each patch's mean), as the site computes them."""
    if a.output.reads_readout:
        return rollout_readout_truth(a.num_layers, a.model.readout.name)
    to_output, to_readout = a.rollout(fusion, discard), a.rollout(fusion, discard, Output("readout"))
    own = patch_weights(a.dense_map(), a.grid)
    return rollout_truth(
        a.num_layers,
        a.model.readout.name,
        rank_correlation(to_output, to_readout),
        rank_correlation(to_output, own),
        rank_correlation(to_readout, own),
    )


def patch_at_display(a: Analysis, x: float, y: float) -> int | None:
    """The patch under pixel (x, y) of the displayed image (as drawn by these views)."""
    return render.patch_at(a.grid, display(a).shape[:2], x, y)


def patch_at_inside(a: Analysis, x: float, y: float) -> int | None:
    """The patch under pixel (x, y) of one of inside a head's maps: drawn smaller, a colour scale below."""
    return render.patch_at(a.grid, render.fit(display(a), INSIDE_SIDE).shape[:2], x, y)


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
        note = (f"**{n} token{' stands' if n == 1 else 's stand'} apart** (at least 2× the median norm, boxed green): "
                "this model's high-norm 'artifact' tokens (Darcet et al. 2023), used as scratch space.")  # fmt: skip
    else:
        note = "**No token stands apart**: this model shows no high-norm 'artifact' tokens on this image."
    return (
        plots.attention_distance(a.mean_attention_distance, a.model.patch_size),
        plots.layer_head_heatmap(a.attention_entropy, "Attention entropy (low = focused, high = spread out)", "nats"),
        outliers,
        np.concatenate([base, np.full((base.shape[0], 8, 3), 255, np.uint8), pca], axis=1),
        f"The largest output-token norm is {largest:.2f}× the median. {note}",
    )


DENSE_WORDS = "dense map: 0 background, 1 salient"


def output_view(
    a: Analysis, cmap: str = "inferno", alpha: float = 0.6, scale: str = DEFAULT_SCALE
) -> tuple[dict[str, float], np.ndarray | None, str]:
    """(top-5 {label: probability}, dense-head overlay or None, which forward the output comes from and how sure
    its reading is)."""
    top = dict(a.top_classes(5))
    sal = a.dense_map()
    if sal is None:
        h, w = a.pixel_values.shape[2:]
        return top, None, f"The classes come from this analysis' own forward, on its {pixel_words(h, w)} input."
    return top, scaled_overlay(display(a), sal, cmap, alpha, scale, False, quantity=DENSE_WORDS), dense_note(a, sal)


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


def attribution_inputs(
    a: Analysis, r: Attribution, rel: Attribution | None, rollout: np.ndarray | None = None
) -> tuple[np.ndarray, bool, np.ndarray, np.ndarray, np.ndarray | None]:
    """What the attributions view draws, at the size it is shown (under a megabyte, so that an app can keep
    it and recolour it): (the image, whether the attribution is signed, the attribution, the rollout, the
    relevancy or None). rollout: [gh,gw] computed on the attribution's own input (see
    `attributions.input_analysis`); the analysis' own by default."""
    base = render.fit(display(a), ATTRIBUTION_SIDE)  # shown three abreast: the colour scales go under them
    side = max(base.shape[:2])

    def small(values: np.ndarray) -> np.ndarray:
        return render.fit(values, side) if max(values.shape) > side else values  # area-averaged, not aliased

    roll = a.rollout("mean", 0.0) if rollout is None else rollout
    return base, r.method in SIGNED, small(r.map), roll, None if rel is None else small(rel.map)


def attribution_pictures(
    inputs: tuple, cmap: str = "inferno", alpha: float = 0.6, scale: str = DEFAULT_SCALE
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(the attribution, attention rollout, relevancy) of `attribution_inputs` over the image, each with
    its colour scale under it. Signed maps (IG, input x gradient, occlusion) use a diverging colormap
    centred at 0: red pushes the target up, blue down. Their scale is clipped at the 99.5th percentile of
    the magnitudes, as Captum's own visualisation does, since a few pixels dominate otherwise. Unsigned
    maps use the colour `scale`."""
    base, signed, attribution, roll, relevancy = inputs

    def draw(values: np.ndarray, signed: bool, quantity: str) -> np.ndarray:
        if signed:
            limit = float(np.percentile(np.abs(values), 99.5)) or float(np.abs(values).max()) or 1.0
            img = render.overlay(base, values, "diverging", alpha, -limit, limit, nearest=False)
            return render.with_colorbar_below(img, "diverging", -limit, limit, "signed", quantity)
        return scaled_overlay(base, values, cmap, alpha, scale, False, colorbar="below", quantity=quantity)

    said = "red pushes the output up, blue down" if signed else "how much it drives the output"
    shares = roll / max(float(roll.sum()), 1e-12) * 100
    drawn = [draw(attribution, signed, said), draw(shares, False, "% of the flow to the output")]
    drawn += [] if relevancy is None else [draw(relevancy, False, "relevance to the output")]
    tall = max(p.shape[0] for p in drawn)  # shown abreast: one height, whatever lines their scales' words take
    drawn = [render.pad_to(p, height=tall) for p in drawn]
    return drawn[0], drawn[1], drawn[2] if relevancy is not None else None


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
        return scaled_overlay(base, grid, cmap, alpha, scale, True, a.grid, colorbar="below", query=marked,
                              quantity=quantity)  # fmt: skip

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


LIVE_LAYERS = ("attention", "rollout", "dense head")  # what the live view can draw on each frame
LIVE_DISPLAY = 360  # a frame's longest side on screen: three pictures per frame, several frames a second


def live_views(
    a: Analysis,
    layer: int,
    head: int | None,
    shown: tuple[str, ...] = LIVE_LAYERS,
    cmap: str = "inferno",
    alpha: float = 0.6,
    scale: str = DEFAULT_SCALE,
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(CLS attention of `layer` and `head` (None: mean of heads), rollout, dense head) over a camera
    frame, each None unless named in `shown`; small, since a new frame comes several times a second, and shown
    three abreast: their colour scales go under them."""
    if unknown := set(shown) - set(LIVE_LAYERS):
        raise ValueError(f"the live view draws {LIVE_LAYERS}, not {sorted(unknown)}")
    base = render.fit(a.image, LIVE_DISPLAY)
    maps = {  # name -> (how to compute it, one flat square per patch); only what is shown is computed
        "attention": (lambda: a.attention_map(layer, head, "readout"), True),
        "rollout": (lambda: a.rollout("mean"), False),
        "dense head": (a.dense_map, False),
    }

    def drawn(values, nearest: bool) -> np.ndarray | None:  # None: no dense head
        v, grid = values(), a.grid if nearest else None
        return None if v is None else scaled_overlay(base, v, cmap, alpha, scale, nearest, grid, None, "below")

    return tuple(drawn(*maps[name]) if name in shown else None for name in LIVE_LAYERS)


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
