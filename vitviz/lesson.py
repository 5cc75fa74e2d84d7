"""A guided lesson through the ViT on one image, in the order of the chapter (tokens, position embeddings,
attention, layers, readout, dense decoding), and then an exercise: guess the head that matters most, and see it
measured. Each step is one picture computed on this image and a few sentences in the reference texts' terms, whose
numbers are this analysis' own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import render, sentences, tabs, trend, whatif_words
from .analysis import Analysis
from .depth import DepthResult
from .head_importance import Importance, cost
from .maps import DEFAULT_SCALE
from .outputs import Output, patch_weights
from .sanity import rank_correlation
from .views.attention import attention_view
from .views.common import display
from .views.depth import depth_view
from .views.inside import inside_views
from .views.output import output_view
from .views.positions import pos_embed_map
from .views.rollout import rollout_view
from .views.tokens import tokens_view
from .views.whatif import importance_tiles

Step = tuple[str, np.ndarray, str]  # (title, picture, text)


@dataclass(frozen=True, eq=False)  # one guess is itself alone: its grid's arrays have no truth value to compare
class Guess:
    """A student's guess of the head that matters most for the output (layer, head), and `grid`, the head
    importance measured on the same photo (`vitviz.importance`), once it is."""

    layer: int
    head: int
    grid: Importance | None = None


@dataclass(frozen=True)
class Given:
    """What the page brings to a step beyond the analysis: `depth`, a depth model's result on the same image (the
    dense-decoding step shows it), and `guess`, the student's guess (the guessing step reveals it)."""

    depth: DepthResult | None = None
    guess: Guess | None = None


def _centre(a: Analysis) -> int:
    gh, gw = a.grid
    return (gh // 2) * gw + gw // 2


def tokens(a: Analysis, cmap: str, alpha: float, scale: str, given: Given = Given()) -> Step:
    m, (gh, gw) = a.model, a.grid
    h, w = a.pixel_values.shape[2:]
    prefix = sentences.prefix_phrase(a)
    if m.n_prefix > 1:
        front = f" In front of them go the learned prefix tokens, {prefix}."
    elif m.n_prefix:
        front = f" In front of them goes one learned token, {prefix}."
    else:
        front = ""
    text = (
        f"The ViT never sees pixels one by one. It cuts the image, resized to {sentences.pixel_words(h, w)}, "
        f"into **{gh} rows × {gw} columns = {gh * gw} patches** of {m.patch_size}×{m.patch_size} pixels, and a "
        f"linear map turns each patch into a vector: a **patch token**.{front} {sentences.readout_phrase(a)} So "
        f"the transformer reads a sequence of **{a.num_tokens} tokens**, numbered in scan order as in the picture."
    )
    return "Patches become tokens", tokens_view(a)[0], text


def positions(a: Analysis, cmap: str, alpha: float, scale: str, given: Given = Given()) -> Step:
    m = a.model
    g = m.native_grid
    sim = m.pos_embed_similarity()
    r, c = g[0] // 2, g[1] // 2
    near = float(sim[r, c, r, c + 1])
    far = float(sim[r, c, 0, 0])
    text = (
        "A set of tokens has no order: attention would give the same answer if the patches were shuffled. "
        f"So each patch token gets a learned **position embedding** added to it. The picture shows how similar "
        f"the embedding of the centre position (row {r}, column {c} of the {sentences.grid_words(*g)} grid the "
        f"model was trained on) is to every other one, in red where alike, white where unrelated (cosine 0) and blue "
        f"where opposite: cosine {sentences.fixed(near)} with its right-hand neighbour, {sentences.fixed(far)} with "
        "the top-left corner. Nobody told the model about rows and columns; it learned that nearby patches belong "
        "together."
    )
    return "Position embeddings", pos_embed_map(m, sim, r, c), text


def _head_picture(a: Analysis, layer: int, head: int, cmap: str, alpha: float, scale: str) -> np.ndarray:
    return attention_view(a, layer, head, _centre(a), cmap, alpha, True, scale)[0]


def local_head(a: Analysis, cmap: str, alpha: float, scale: str, given: Given = Given()) -> Step:
    d = a.mean_attention_distance
    layer, head = np.unravel_index(int(np.argmin(d)), d.shape)
    first = float(d[0].mean())
    centre = sentences.token_name(a, a.n_prefix + _centre(a))
    text = (
        f"Each layer runs **multi-head self-attention**: every token (the *query*) takes a weighted average of "
        f"all tokens' *values*, with weights from its *query–key* dot products. Heads differ in how far they "
        f"look. On this image the most local head is **layer {layer}, head {head}**: its queries look "
        f"{d[layer, head]:.0f} px away on average (one patch is {a.model.patch_size} px). The picture is its "
        f"attention from the centre patch, {centre}, marked: the bright squares sit around it. "
        f"Layer 0's heads look {first:.0f} px away on average."
    )
    return "A local head", _head_picture(a, int(layer), int(head), cmap, alpha, scale), text


def distance_trend(a: Analysis) -> trend.Trend:
    """The trend with depth of the mean attention distance averaged over each layer's heads [L]."""
    return trend.depth_trend(a.mean_attention_distance.mean(axis=1))


def global_head(a: Analysis, cmap: str, alpha: float, scale: str, given: Given = Given()) -> Step:
    d = a.mean_attention_distance
    deep = d.shape[0] * 2 // 3
    layer, head = np.unravel_index(int(np.argmax(d[deep:])), d[deep:].shape)
    layer, head = deep + int(layer), int(head)
    late, early = float(d[deep:].mean()), float(d[0].mean())
    t = distance_trend(a)
    tested = f"the mean attention distance {sentences.TREND_VERBS[t.direction]} ({sentences.trend_words(t)})"
    if t.direction == "grows":
        title = "A global head"
        said = (
            f"As the ViT paper found, later layers look farther on this image: {tested}. The last third of the "
            f"layers looks {late:.0f} px away on average, layer 0 {early:.0f} px."
        )
    else:
        title = "The farthest-looking late head"
        said = (
            f"The ViT paper found that later layers look farther. On this image {tested}: the last third of the "
            f"layers looks {late:.0f} px away on average, layer 0 {early:.0f} px. Still, single heads late in the "
            "network look far."
        )
    text = (
        f"{said} In the last third of the network the farthest-looking head is **layer {layer}, head {head}**: "
        f"{d[layer, head]:.0f} px on average, against {d.min():.0f} px for the most local head. Same query as "
        "before, the centre patch: bright squares can be anywhere the image has related content. A CNN needs "
        "many layers before one unit sees that far."
    )
    return title, _head_picture(a, layer, head, cmap, alpha, scale), text


def distance_over_depth(a: Analysis, cmap: str, alpha: float, scale: str, given: Given = Given()) -> Step:
    d = a.mean_attention_distance
    means = d.mean(axis=1)
    t = distance_trend(a)
    paper = ", as in the paper" if t.direction == "grows" else ", where the paper found that it grows"
    low, high = int(np.argmin(means)), int(np.argmax(means))
    text = (
        f"The table is the ViT paper's Figure 7 (right) on your image: the **mean attention distance** of every "
        f"head in every layer, in pixels. Averaged over heads, it {sentences.TREND_VERBS[t.direction]}{paper} "
        f"({sentences.trend_words(t)}). {sentences.TREND_RULE} It goes from {means[0]:.0f} px in layer 0 to "
        f"{means[-1]:.0f} px in layer {len(means) - 1}, lowest in layer {low} ({means[low]:.0f} px) and highest in "
        f"layer {high} ({means[high]:.0f} px). The widest spread of heads is in layer "
        f"{int(np.argmax(d.max(1) - d.min(1)))}: some heads stay local while others look far, in the same layer. "
        "Each layer is a *pre-norm* layer: LayerNorm, attention, add; LayerNorm, MLP, add."
    )
    return "Attention distance over depth", render.layer_head_grid(d, "viridis"), text


def readout(a: Analysis, cmap: str, alpha: float, scale: str, given: Given = Given()) -> Step:
    picture, note = rollout_view(a, "mean", 0.0, cmap, alpha, scale)
    last = a.query_rows(a.model.num_layers - 1, "readout")  # [H,N]
    trace = (
        "*Attention rollout* multiplies the attention of all layers (adding the residual path) to estimate "
        "how much of each patch reaches the tokens that the output reads; the picture is the rollout toward "
        "this model's output."
    )
    if a.output.reads_readout and a.model.readout.pool:
        top = float(last.mean(0).max())
        text = (
            f"{sentences.output_phrase(a)} {sentences.readout_phrase(a)} {trace} Here rollout starts from the "
            f"probe's own attention, whose largest share on one patch is {top:.1%} (the mean over its heads). "
            f"{note}"
        )
        return "The readout and rollout", picture, text
    share = float(last[:, : a.n_prefix].sum(-1).mean())
    where = "itself" if a.n_prefix == 1 else f"the prefix tokens ({sentences.prefix_phrase(a)})"
    kept = (
        f"In the last layer the readout keeps {share:.0%} of its attention on {where} and spreads the rest over "
        "the patches."
    )
    if a.output.reads_readout:
        text = (
            f"{sentences.output_phrase(a)} {sentences.readout_phrase(a)} It gathers the image for the output. "
            f"{trace} {kept} {note}"
        )
        return "The readout and rollout", picture, text
    values, to_cls = a.rollout("mean", 0.0), a.rollout("mean", 0.0, Output("readout"))
    rho, own = rank_correlation(values, to_cls), rank_correlation(values, patch_weights(a.dense_map(), a.grid))
    same = "nearly the same map" if rho >= sentences.ALIKE else "a similar map"
    same = same if rho >= sentences.PARTLY else "a different map"
    best, readout = int(values.argmax()), sentences.prefix_phrase(a)
    brightest = sentences.token_name(a, a.n_prefix + best)
    text = (
        f"{sentences.output_phrase(a)} The picture is *attention rollout* toward that output: the attention of all "
        f"layers multiplied (adding the residual path), starting from the patches the head reads, each weighted by "
        f"its map. Its brightest patch, {brightest}, gets **{values.flat[best] / values.sum():.1%}** of what "
        f"the patches pass to the output. A classifier would be different: its head reads only the {readout} "
        f"token's final vector, so its rollout starts from that one token. Here rollout toward the {readout} token "
        f"gives {same} (rank correlation {sentences.fixed(rho, 3)} with the one shown), and the one shown has a rank "
        f"correlation of {sentences.fixed(own)} with the output's own map (each patch's mean). With the skip "
        f"connection in every layer, rollout from any start converges to nearly one map after {a.num_layers} layers "
        f"(on the 20 photos of docs/benchmarks.md, two rows of the full rollout matrix, the rollouts from two "
        f"tokens, have a median rank correlation of {sentences.fixed(sentences.ROLLOUT_ROWS)}): it shows where "
        "information pools, not what one output uses."
    )
    return "The output and rollout", picture, text


def inside(a: Analysis, cmap: str, alpha: float, scale: str, given: Given = Given()) -> Step:
    layer, head = a.model.num_layers - 1, 0
    # the readout where it is one token; else (SigLIP's probe, DeiT's two tokens) the centre patch
    query = "readout" if len(a.model.readout.tokens) == 1 else _centre(a)
    scores, weights, *_ = inside_views(a, layer, head, query, cmap, alpha, scale)
    d = a.inside_head(layer, head, query)
    text = (
        f"How one head makes its weights, for the query {sentences.token_name(a, d.query)} in layer {layer}, "
        f"head {head}: the *scores* "
        f"q·k_j/√d (left, d = {d.head_width}) become *weights* by a softmax (right): positive, summing to 1, "
        f"and exponential in the score. The largest weight is {d.weights.max():.3f}, the top 1 % of keys "
        f"hold {d.top_share:.0%}, and the weights spread over about {d.effective_keys:.0f} of {len(d.weights)} "
        f"keys. The head's output is the weighted sum of the values. Tab {tabs.number('inside')} walks through "
        "every step."
    )
    tall = max(scores.shape[0], weights.shape[0])  # their colour scales' words may take more lines on one
    return "Inside a head", np.concatenate([render.pad_to(p, height=tall) for p in (scores, weights)], axis=1), text


def dense(a: Analysis, cmap: str, alpha: float, scale: str, given: Given = Given()) -> Step:
    common = (
        "Dense prediction needs a value per pixel, not one per image. A *Dense Prediction Transformer* (DPT) "
        "*reassembles* the tokens of several layers into image-like maps at several scales and *fuses* them "
        f"from coarse to fine into, for example, a depth map (the Python app's {tabs.BY_ID['depth'].title} tab)."
    )
    depth = given.depth
    if depth is not None:
        stages = [s for s in depth.stages if s.kind == "reassemble"]
        sizes = ", ".join(f"{s.shape[1]}×{s.shape[2]}" for s in stages)
        text = (
            f"{common} Here {depth.model.name} did it on this image: its reassemble stages made maps of "
            f"{sizes} cells (rows × columns) from its ViT's tokens, and the fusion stages brought them to the depth "
            "map in the picture (bright = near; relative depth, unknown scale)."
        )
        return "Dense decoding", depth_view(depth, "magma")[1], text
    top, picture, note = output_view(a, cmap, alpha, scale)
    if picture is not None:
        sal = a.dense_map()
        text = (
            f"{common} This model carries a small dense head of that kind on its final patch tokens: the "
            "picture is its map of where the photo's regions of interest lie (saliency), "
            f"{float((sal >= 0.5).mean()):.0%} of the pixels above 0.5. {note}"
        )
        return "Dense decoding", picture, text
    best = next(iter(top), "")
    text = (
        f"{common} This model is a classifier (its top class here: {best}), so the picture is the next best "
        "thing: its final patch tokens squeezed to three colours (PCA). Patches of one colour have similar "
        "tokens, which is what a dense decoder builds on."
    )
    return "Dense decoding", render.upsample_rgb(a.pca_rgb(), display(a).shape[:2]), text


def guess_head(a: Analysis, cmap: str, alpha: float, scale: str, given: Given = Given()) -> Step:
    title, guess, m = "Guess the head that matters most", given.guess, a.model
    heads, name = m.num_layers * m.num_heads, a.output.name(m)
    if guess is not None and guess.grid is not None:
        picture, unit = importance_tiles(guess.grid, (guess.layer, guess.head))
        text = (
            f"{whatif_words.guess_words(guess.grid, m, guess.layer, guess.head)} The tiles are each head's change "
            f"{unit}: your guess outlined in magenta, the head that matters most in green. Click another tile to "
            "compare it (measured once per photo)."
        )
        return title, picture, text
    forwards = cost(m, tuple(a.pixel_values.shape[2:]))
    ask = (
        f"Attention weights show where a head looks, not what it does for the output. Which of the {heads} heads "
        f"matters most for {name} on this photo? **Click its tile.**"
    )
    measure = (
        f"Then the page switches off each head alone (its output zeroed) and measures how much the output moves: "
        f"{forwards:.0f} forwards' work."
    )
    if guess is None:
        return title, render.head_tiles(m.num_layers, m.num_heads), f"{ask} {measure}"
    picture = render.head_tiles(m.num_layers, m.num_heads, chosen=(guess.layer, guess.head))
    return title, picture, f"You guessed **layer {guess.layer}, head {guess.head}**. {measure}"


# The chapter, each step drawn from the analysis alone (the static site's lesson mirrors them one by one), then the
# exercises, which ask the student and measure more: the app's lesson is ALL_STEPS.
STEPS: list[Callable[..., Step]] = [
    tokens,
    positions,
    local_head,
    global_head,
    distance_over_depth,
    readout,
    inside,
    dense,
]
EXERCISES: list[Callable[..., Step]] = [guess_head]
ALL_STEPS = [*STEPS, *EXERCISES]
DENSE, GUESS = ALL_STEPS.index(dense) + 1, ALL_STEPS.index(guess_head) + 1  # their step numbers, from 1


def lesson_step(
    a: Analysis,
    step: int,
    cmap: str = "inferno",
    alpha: float = 0.6,
    scale: str = DEFAULT_SCALE,
    depth: DepthResult | None = None,
    guess: Guess | None = None,
) -> Step:
    """Step `step` (1 to len(ALL_STEPS)) of the lesson on this analysis: (title, picture, text). depth: a depth
    model's result on the same image, which the dense-decoding step shows when there is one. guess: the student's
    guess of the head that matters most, which the guessing step marks, and reveals once its grid is measured."""
    if not 1 <= step <= len(ALL_STEPS):
        raise ValueError(f"step must be in [1, {len(ALL_STEPS)}], got {step}")
    if guess is not None and not (0 <= guess.layer < a.model.num_layers and 0 <= guess.head < a.model.num_heads):
        m = a.model
        raise ValueError(
            f"the guess must be a head of {m.name}: layer 0 to {m.num_layers - 1}, head 0 to {m.num_heads - 1}; "
            f"got layer {guess.layer}, head {guess.head}"
        )
    return ALL_STEPS[step - 1](a, cmap, alpha, scale, Given(depth, guess))
