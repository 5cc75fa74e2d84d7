"""The guided lesson: every step is drawn on the analysis it is given, and says this analysis' numbers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import ASSETS, FAMILIES, random_image
from support.trend_reference import exact_p_by_formula, rho_by_formula, scipy_trend

import vitviz
from vitviz import lesson
from vitviz.head_importance import Importance, cost, importance
from vitviz.outputs import Output
from vitviz.views.attention import attention_view
from vitviz.views.common import display
from vitviz.views.depth import depth_view
from vitviz.views.inside import inside_views
from vitviz.views.output import output_view
from vitviz.views.positions import pos_embed_map
from vitviz.views.rollout import rollout_view
from vitviz.whatif_words import percent_words


@pytest.fixture(scope="module")
def chelsea(embedded):
    return vitviz.analyze(embedded, ASSETS / "chelsea.jpg")


def test_every_step_has_a_picture_that_differs_from_the_last(chelsea):
    default = lesson.lesson_step(chelsea, 6)[1]  # the app's colours: inferno at opacity 0.6, log scale
    np.testing.assert_array_equal(default, rollout_view(chelsea, "mean", 0.0, "inferno", 0.6, "log")[0])
    previous = None
    for step in range(1, len(lesson.STEPS) + 1):
        title, picture, text = lesson.lesson_step(chelsea, step)
        assert title and picture.dtype == np.uint8 and picture.ndim == 3 and min(picture.shape[:2]) > 100
        assert 3 <= text.count(". ") + 1 <= 8, (step, text)  # a few sentences, not a page
        assert previous is None or previous.shape != picture.shape or np.abs(previous - picture.astype(int)).mean() > 1
        previous = picture.astype(int)


def test_the_steps_numbers_are_this_analysis_own(chelsea):
    d = chelsea.mean_attention_distance
    text = lesson.lesson_step(chelsea, 1)[2]
    assert "21 rows × 32 columns = 672 patches" in text and "673 tokens" in text
    layer, head = np.unravel_index(np.argmin(d), d.shape)
    text = lesson.lesson_step(chelsea, 3)[2]
    assert f"layer {layer}, head {head}" in text
    assert re.search(r"look (\d+) px away", text).group(1) == f"{d[layer, head]:.0f}"
    text = lesson.lesson_step(chelsea, 4)[2]
    found = re.search(r"layer (\d+), head (\d+)\*\*: (\d+) px", text)
    deep = d.shape[0] * 2 // 3
    layer, head = int(found.group(1)), int(found.group(2))
    assert layer >= deep and d[layer, head] == d[deep:].max() and found.group(3) == f"{d[deep:].max():.0f}"
    text = lesson.lesson_step(chelsea, 7)[2]
    cls = chelsea.inside_head(chelsea.model.num_layers - 1, 0, "cls")
    assert f"largest weight is {cls.weights.max():.3f}" in text


DIPPING = [201, 154, 160, 124, 141, 124, 182, 161, 186, 181, 206, 204]  # up from layer 0 to 11, dipping between


@pytest.mark.parametrize(
    "means, verb, title",
    [
        (DIPPING, "shows no clear trend with depth", "The farthest-looking late head"),
        (list(120 + 8 * np.arange(12)), "grows with depth", "A global head"),
        ([2, 1, 4, 7, 5, 0, 3, 8, 11, 9, 6, 10], "grows with depth", "A global head"),  # rho 0.70: moderate
        ([4, 0, 6, 1, 2, 10, 9, 7, 3, 5, 8, 11], "shows no clear trend with depth", "The farthest-looking late head"),
        (list(220 - 8 * np.arange(12)), "falls with depth", "The farthest-looking late head"),
        ([150] * 12, "shows no clear trend with depth", "The farthest-looking late head"),
    ],
)
def test_a_trend_with_depth_is_said_only_where_its_test_finds_one(chelsea, monkeypatch, means, verb, title):
    """Steps 4 and 5 on distances made to grow, fall, dip in the middle layers (the first and last layers alone
    say "grows"), stay flat, or correlate with depth just under the threshold (rho 0.58, p 0.0498): the verb is the
    test's, with its rho, strength and p, and the paper is agreed with only where the distance grows."""
    d = np.asarray(means, np.float32)[:, None] + np.linspace(-3, 3, 6, dtype=np.float32)  # [12,6]: heads spread
    monkeypatch.setattr(vitviz.Analysis, "mean_attention_distance", property(lambda self: d))
    (said_title, _, step4), (_, _, step5) = lesson.lesson_step(chelsea, 4), lesson.lesson_step(chelsea, 5)
    assert said_title == title
    assert f"Averaged over heads, it {verb}" in step5 and f"the mean attention distance {verb} (" in step4
    rho, p = said_trend(step5, d.mean(1).astype(np.float64))
    assert said_trend(step4, d.mean(1).astype(np.float64)) == (rho, p)
    assert ("as in the paper" in step5) == (verb == "grows with depth")
    assert "A trend needs a rank correlation with depth of at least 0.6, or at most −0.6, and p ≤ 0.05" in step5
    low, high = int(np.argmin(d.mean(1))), int(np.argmax(d.mean(1)))
    assert f"lowest in layer {low} ({d.mean(1)[low]:.0f} px) and highest in layer {high}" in step5
    for text in (step4, step5):
        assert_well_formed(text)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_gets_every_step_and_the_inside_step_names_its_query(name):
    """Classifiers and encoders without a dense head, with one readout token, two or an attention-pool: the
    inside step's query is the readout token where there is one, else the centre patch, and its largest
    weight is that query's own."""
    a = vitviz.analyze(FAMILIES[name](), random_image(32, 40), longest=40)
    pictures = [lesson.lesson_step(a, s)[1] for s in range(1, len(lesson.STEPS) + 1)]
    assert all(p.dtype == np.uint8 and p.ndim == 3 for p in pictures)
    assert "PCA" in lesson.lesson_step(a, 8)[2]
    title, tiles, text = lesson.lesson_step(a, 9)
    m = a.model
    np.testing.assert_array_equal(tiles, vitviz.render.head_tiles(m.num_layers, m.num_heads))
    assert f"Which of the {m.num_layers * m.num_heads} heads matters most for {a.output.name(m)}" in text
    grid = importance(m, a.image, longest=40)
    said = lesson.lesson_step(a, 9, guess=lesson.Guess(m.num_layers - 1, 0, grid))[2]
    assert said.startswith(f"You guessed **layer {m.num_layers - 1}, head 0**. Switched off alone, it ")
    assert_well_formed(said)
    text = lesson.lesson_step(a, 7)[2]
    query = "readout" if len(a.model.readout.tokens) == 1 else (a.grid[0] // 2) * a.grid[1] + a.grid[1] // 2
    d = a.inside_head(a.model.num_layers - 1, 0, query)
    assert f"the query {vitviz.sentences.token_name(a, d.query)} in layer" in text
    assert f"largest weight is {d.weights.max():.3f}" in text


@pytest.mark.parametrize("step", [0, 10, -1])
def test_a_step_out_of_range_says_which_are_allowed(chelsea, step):
    with pytest.raises(ValueError, match=r"step must be in \[1, 9\]"):
        lesson.lesson_step(chelsea, step)


def test_the_chapter_keeps_its_eight_steps_and_the_guess_comes_after_them():
    """The static site's lesson mirrors the chapter's steps one by one (vitviz/site): the exercise comes after."""
    assert len(lesson.STEPS) == 8 and lesson.ALL_STEPS == [*lesson.STEPS, lesson.guess_head]
    assert (lesson.DENSE, lesson.GUESS) == (8, 9)


def test_with_a_depth_model_the_last_step_shows_its_depth_map(chelsea, tmp_path):
    from conftest import tiny_dpt

    tiny_dpt().save_pretrained(tmp_path)
    depth = vitviz.estimate_depth(vitviz.load_depth_model(str(tmp_path), device="cpu"), ASSETS / "chelsea.jpg")
    title, picture, text = lesson.lesson_step(chelsea, 8, depth=depth)
    np.testing.assert_array_equal(picture, depth_view(depth, "magma")[1])
    reassembled = [s for s in depth.stages if s.kind == "reassemble"]
    sizes = ", ".join(f"{s.shape[1]}×{s.shape[2]}" for s in reassembled)
    assert len(reassembled) == 4 and f"made maps of {sizes} cells (rows × columns) from its ViT's tokens" in text
    assert title == "Dense decoding"
    assert_well_formed(text)
    assert "bright = near" in text and not np.array_equal(lesson.lesson_step(chelsea, 8)[1], picture)


ACRONYMS = {"CLS", "CNN", "DPT", "PCA", "MLP", "ViT", "LayerNorm", "DINO", "DINOv2", "DeiT", "CLIP", "SigLIP"}
TITLES = [
    "Patches become tokens",
    "Position embeddings",
    "A local head",
    "A global head",
    "Attention distance over depth",
    "The readout and rollout",
    "Inside a head",
    "Dense decoding",
]


def assert_well_formed(text: str) -> None:
    """Prose for a projector: every sentence starts with a capital letter and no word shouts (capitals only in
    acronyms, model names and sentence starts)."""
    assert not re.search(r"\bNone\b", text), text  # a phrase that was never made
    plain = re.sub(r"[*`]", "", text)
    for sentence in re.split(r"(?<=[.!?])\s+(?=\S)", plain):
        assert sentence[0].isupper() or sentence[0].isdigit(), sentence
    for word in re.findall(r"[A-Za-z][\w'’-]*", plain):
        word = re.sub(r"['’]s$", "", word)
        capitals = sum(ch.isupper() for ch in word)
        assert capitals <= 1 or word in ACRONYMS, (word, text)


TREND = r"\(rank correlation (-?[0-9.]+) with the layer's depth, (weak|moderate|strong); p (=|<) ([0-9.]+)\)"


def said_trend(text: str, means: np.ndarray) -> tuple[float, float]:
    """The (rho, p) that a step says of the distance's trend with depth, held against SciPy's (or the formula's
    exact p, up to 7 layers) for these per-layer means [L]."""
    found = re.search(TREND, text)
    assert found, text
    rho, strength, below, p = float(found[1]), found[2], found[3] == "<", float(found[4])
    want_rho, want_p = scipy_trend(means) if len(means) > 7 else (rho_by_formula(list(means)), None)
    want_p = exact_p_by_formula(list(means)) if want_p is None else want_p
    assert rho == pytest.approx(want_rho, abs=0.005), text
    assert want_p < p + 0.0005 if below else p == pytest.approx(want_p, abs=0.015), text
    assert strength == ("strong" if abs(want_rho) >= 0.8 else "moderate" if abs(want_rho) >= 0.6 else "weak")
    return rho, p


def independent_numbers(a: vitviz.Analysis) -> dict:
    """What each step should quote, from transformers' own forward and the model's weights, in float64."""
    from conftest import reference_outputs

    m, (gh, gw) = a.model, a.grid
    ref = reference_outputs(m, a.pixel_values)
    last = ref.attentions[-1][0].double().numpy()  # [H,N,N]
    table = m.family.position_table(m.encoder).detach().double().numpy()
    g = m.native_grid
    patches = table[len(table) - g[0] * g[1] :]
    unit = patches / np.linalg.norm(patches, axis=1, keepdims=True)
    r, c = g[0] // 2, g[1] // 2
    centre = (gh // 2) * gw + gw // 2
    readout = None
    if not m.readout.pool:
        readout = float(np.mean([last[:, t, : a.n_prefix].sum(-1) for t in m.readout.tokens]))
    return {
        "tokens": ref.attentions[0].shape[-1],
        "near": float(unit[r * g[1] + c] @ unit[r * g[1] + c + 1]),
        "far": float(unit[r * g[1] + c] @ unit[0]),
        "r, c": (r, c),
        "centre": (centre, centre // gw, centre % gw),
        "readout share": readout,
        "probe top": None if not m.readout.pool else float(a.pool_attention.astype(np.float64).mean(0).max()),
    }


@pytest.mark.parametrize(
    "name, seed",  # 3 layers (6 orderings, p >= 1/3): no trend on the tiny models; the made-up ones are tested above
    [("vit", 9), ("deit", 9), ("dinov2_registers", 9), ("siglip", 9), ("siglip_vision", 1), ("embedded", 0)],
)
def test_every_steps_sentences_parse_back_to_this_analysis(name, seed, embedded):
    """Every number of every step, read back from its text and compared with transformers' outputs or the
    analysis' own statistics, on a 5 × 7 grid with 1, 2, 5 or no prefix tokens and on the embedded model (12
    layers, 21 × 32 patches); every picture is the view its text names, in the colours asked for; the titles are
    the lesson's contents and the prose is well formed."""
    if name == "embedded":
        a = vitviz.analyze(embedded, ASSETS / "chelsea.jpg")
    else:
        a = vitviz.analyze(FAMILIES[name](), random_image(40, 56, seed=seed), longest=56)
    m, (gh, gw), d = a.model, a.grid, a.mean_attention_distance.astype(np.float64)
    colours = dict(cmap="magma", alpha=0.5, scale="robust")  # not the defaults: each picture must follow them
    want = independent_numbers(a)
    steps = [lesson.lesson_step(a, s, **colours) for s in range(1, len(lesson.STEPS) + 1)]
    deep = d.shape[0] * 2 // 3
    late, early = d[deep:].mean(), d[0].mean()
    rho, p = said_trend(steps[4][2], d.mean(1))
    grows = rho >= 0.6 and p <= 0.05
    titles = list(TITLES)  # the titles that a step's own numbers allow
    titles[3] = "A global head" if grows else "The farthest-looking late head"
    titles[5] = "The readout and rollout" if m.dense_head is None else "The output and rollout"
    assert [title for title, *_ in steps] == titles
    for _, _, text in steps:
        assert_well_formed(text)
    h, w = a.pixel_values.shape[2:]
    text = steps[0][2]
    assert (
        f"resized to {h} px high × {w} px wide" in text
        and f"**{gh} rows × {gw} columns = {gh * gw} patches** of" in text
    )
    assert f"**{want['tokens']} tokens**" in text
    front = {0: None, 1: "In front of them goes one learned token, "}.get(m.n_prefix, "In front of them go the learned")
    assert (front is None and "In front of them" not in text) or (front is not None and front in text)
    if m.n_prefix:
        assert vitviz.sentences.prefix_phrase(a) in text
    text = steps[1][2]
    (r, c), g = want["r, c"], m.native_grid
    assert f"(row {r}, column {c} of the {g[0]} rows × {g[1]} columns grid" in text
    assert f"cosine {want['near']:.2f} with its right-hand neighbour, {want['far']:.2f} with the top-left" in text
    np.testing.assert_array_equal(steps[1][1], pos_embed_map(m, m.pos_embed_similarity(), r, c))
    centre, row, col = want["centre"]
    layer, head = np.unravel_index(int(np.argmin(d)), d.shape)
    text = steps[2][2]
    assert f"**layer {layer}, head {head}**: its queries look {d[layer, head]:.0f} px away" in text
    assert f"the centre patch, patch {centre} (row {row}, column {col})" in text
    assert f"Layer 0's heads look {d[0].mean():.0f} px away" in text
    drawn = attention_view(a, int(layer), int(head), centre, "magma", 0.5, True, "robust")[0]
    np.testing.assert_array_equal(steps[2][1], drawn)
    far_layer, far_head = np.unravel_index(int(np.argmax(d[deep:])), d[deep:].shape)
    far_layer += deep
    text = steps[3][2]
    assert f"the mean attention distance {'grows' if grows else 'shows no clear trend'} with depth" in text
    assert said_trend(text, d.mean(1)) == (rho, p)  # the test of step 5
    assert ("As the ViT paper found, later layers look farther on this image" in text) == grows
    assert f"the last third of the layers looks {late:.0f} px away on average, layer 0 {early:.0f} px" in text
    assert f"**layer {far_layer}, head {far_head}**: {d[far_layer, far_head]:.0f} px on average, against " in text
    assert f"against {d.min():.0f} px for the most local head" in text
    drawn = attention_view(a, int(far_layer), int(far_head), centre, "magma", 0.5, True, "robust")[0]
    np.testing.assert_array_equal(steps[3][1], drawn)
    text, means = steps[4][2], d.mean(1)
    assert f"from {means[0]:.0f} px in layer 0 to {means[-1]:.0f} px in layer {len(means) - 1}" in text
    assert ("it grows with depth, as in the paper" in text) == grows
    assert ("it shows no clear trend with depth, where the paper found that it grows" in text) == (not grows)
    assert f"widest spread of heads is in layer {int(np.argmax(d.max(1) - d.min(1)))}:" in text
    np.testing.assert_array_equal(steps[4][1], vitviz.render.layer_head_grid(a.mean_attention_distance, "viridis"))
    text = steps[5][2]
    if m.dense_head is not None:  # the output reads the patches: rollout toward it, and the readout's compared
        values = a.rollout("mean", 0.0)
        rho = vitviz.sanity.rank_correlation(values, a.rollout("mean", 0.0, vitviz.outputs.Output("readout")))
        assert "feeds nothing that this model outputs" in text
        assert f"(rank correlation {vitviz.sentences.fixed(rho, 3)} with the one shown)" in text
        assert f"gets **{values.max() / values.sum():.1%}** of what the patches pass to the output" in text
        np.testing.assert_array_equal(values, a.rollout("mean", 0.0, a.output))
        (gh, gw), (h, w) = a.grid, a.pixel_values.shape[2:]
        own = vitviz.sanity.rank_correlation(values, a.dense_map().reshape(gh, h // gh, gw, w // gw).mean((1, 3)))
        assert f"a rank correlation of {vitviz.sentences.fixed(own)} with the output's own map" in text
        rows = vitviz.sentences.fixed(vitviz.sentences.ROLLOUT_ROWS)
        assert f"converges to nearly one map after {a.num_layers} layers" in text
        assert f"have a median rank correlation of {rows}): it shows where information pools" in text
    elif m.readout.pool:
        assert f"whose largest share on one patch is {want['probe top']:.1%}" in text
    else:
        where = "itself" if m.n_prefix == 1 else f"the prefix tokens ({vitviz.sentences.prefix_phrase(a)})"
        assert f"the readout keeps {want['readout share']:.0%} of its attention on {where}" in text
    np.testing.assert_array_equal(steps[5][1], rollout_view(a, "mean", 0.0, "magma", 0.5, "robust")[0])


@pytest.mark.parametrize("name", ["vit", "deit", "embedded"])
def test_the_inside_and_dense_steps_parse_back_to_this_analysis(name, embedded):
    """Step 7 quotes the head whose maps it draws, with the captured row's largest weight (transformers' own);
    step 8 the share of the dense head's pixels above 0.5, or the classifier's own top class."""
    from conftest import reference_outputs

    model = embedded if name == "embedded" else FAMILIES[name]()
    a = vitviz.analyze(model, ASSETS / "chelsea.jpg", longest=None if name == "embedded" else 56)
    centre = (a.grid[0] // 2) * a.grid[1] + a.grid[1] // 2  # the middle patch, as the lesson picks it
    last, query = model.num_layers - 1, "readout" if len(model.readout.tokens) == 1 else centre
    ref = reference_outputs(model, a.pixel_values)
    d = a.inside_head(last, 0, query)
    title, picture, text = lesson.lesson_step(a, 7, "magma", 0.5, "robust")
    row = ref.attentions[-1][0, 0, d.query].double().numpy()
    assert f"the query {vitviz.sentences.token_name(a, d.query)} in layer {last}, head 0:" in text
    assert f"(left, d = {model.config.hidden_size // model.num_heads})" in text
    assert f"largest weight is {row.max():.3f}" in text and f"of {len(row)} keys" in text
    assert f"hold {d.top_share:.0%}" in text and f"about {d.effective_keys:.0f} of" in text
    scores, weights, *_ = inside_views(a, last, 0, query, "magma", 0.5, "robust")
    np.testing.assert_array_equal(picture, np.concatenate([scores, weights], axis=1))
    title, picture, text = lesson.lesson_step(a, 8, "magma", 0.5, "robust")
    assert_well_formed(text)
    if model.dense_head is not None:
        share = (a.dense_map() >= 0.5).mean()
        assert f"{share:.0%} of the pixels above 0.5" in text and 0 < share < 1
        np.testing.assert_array_equal(picture, output_view(a, "magma", 0.5, "robust")[1])
    else:
        best = model.labels[int(ref.logits[0].argmax())]
        assert f"(its top class here: {best}" in text
        expected = vitviz.render.upsample_rgb(a.pca_rgb(), display(a).shape[:2])
        np.testing.assert_array_equal(picture, expected)


@pytest.fixture(scope="module")
def small(embedded):
    """The embedded model on chelsea at 112 px (8 × 5 patches), and its head importance measured there."""
    a = vitviz.analyze(embedded, ASSETS / "chelsea.jpg", longest=112)
    return a, importance(embedded, ASSETS / "chelsea.jpg", longest=112)


def reference_rank(sizes: list[float], own: float, noise: float) -> tuple[int, int]:
    """(rank, others tied) by walking the heads one by one: each clearly larger one pushes the guess down a place,
    each within `noise` of it shares its place."""
    larger = tied = 0
    for size in sizes:
        if size - own > noise:
            larger += 1
        elif abs(size - own) <= noise:
            tied += 1
    return larger + 1, tied - 1  # the guess is within noise of itself


GUESSED = re.compile(
    r"You guessed \*\*layer (\d+), head (\d+)\*\*\. Switched off alone, it (raises|lowers) (.+?) by ([\d.]+) %, "
    r"from (\S+) to (\S+); it (?:ranks \*\*(\d+)\w\w of the 72 heads\*\*|shares the \*\*(\d+)\w\w place of the 72 "
    r"heads\*\* with (\d+) others?) by the size of that change, and the head that matters most, \*\*layer (\d+), "
    r"head (\d+)\*\*, moves it by ([+−])([\d.]+) %, so yours does ([\d.]+) % of its change\."
)


def test_the_guess_step_asks_marks_then_reveals_and_every_number_is_the_grids(small, embedded):
    """Before the guess: grey tiles and the question, with the work it costs; a guess alone: its tile outlined; with
    the grid: the tiles coloured by each head's change, and one sentence whose every number is checked against
    the guessed and the top head switched off by `vitviz.ablate` (one forward each, no batching) and whose rank is
    a walk over the grid's heads."""
    a, grid = small
    title, picture, text = lesson.lesson_step(a, 9)
    assert title == "Guess the head that matters most"
    np.testing.assert_array_equal(picture, vitviz.render.head_tiles(12, 6))
    assert "Which of the 72 heads matters most for" in text and "**Click its tile.**" in text
    assert f"{cost(embedded, (a.pixel_values.shape[2], a.pixel_values.shape[3])):.0f} forwards' work" in text
    assert_well_formed(text)
    ranked = grid.ranked()
    layer, head, _ = ranked[len(ranked) // 2]  # a head in the middle: neither the top one nor tied with it
    _, marked, text = lesson.lesson_step(a, 9, guess=lesson.Guess(layer, head))
    np.testing.assert_array_equal(marked, vitviz.render.head_tiles(12, 6, chosen=(layer, head)))
    assert text.startswith(f"You guessed **layer {layer}, head {head}**.") and "forwards' work" in text
    _, revealed, text = lesson.lesson_step(a, 9, guess=lesson.Guess(layer, head, grid))
    top_layer, top_head, _ = ranked[0]
    values = grid.change / abs(grid.before) * 100
    want = vitviz.render.head_tiles(12, 6, values, (layer, head), (top_layer, top_head))
    np.testing.assert_array_equal(revealed, want)
    found = GUESSED.search(text)
    assert found, text
    mine = vitviz.ablate(embedded, ASSETS / "chelsea.jpg", heads=[(layer, head)], longest=112, baseline=a)
    best = vitviz.ablate(embedded, ASSETS / "chelsea.jpg", heads=[(top_layer, top_head)], longest=112, baseline=a)
    assert (int(found[1]), int(found[2])) == (layer, head) and (int(found[11]), int(found[12])) == ranked[0][:2]
    assert found[3] == ("raises" if mine.change > 0 else "lowers") and found[4] == a.output.name(embedded)
    assert f"{found[5]} %" == percent_words(mine.relative)  # the digits its size needs, of one forward's change
    assert (found[6], found[7]) == (f"{mine.before:.3g}", f"{mine.after:.3g}")
    rank, tied = reference_rank(list(np.abs(grid.change).ravel()), abs(grid.change[layer, head]), grid.noise)
    said_rank = int(found[8] or found[9])
    assert said_rank == rank and int(found[10] or 0) == tied and 10 < rank < 60
    assert found[13] == ("+" if best.change > 0 else "−")
    assert f"{found[14]} %" == percent_words(best.relative)
    assert f"{found[15]} %" == percent_words(mine.change / best.change)
    assert "Each head was zeroed alone on this photo, exact to float32 rounding" in text
    assert_well_formed(text)


def test_the_top_head_guessed_ranks_first(small):
    a, grid = small
    layer, head, change = grid.ranked()[0]
    text = lesson.lesson_step(a, 9, guess=lesson.Guess(layer, head, grid))[2]
    assert "it ranks **1st of the 72 heads** by the size of that change" in text
    assert (
        f"and the largest change is {vitviz.whatif_words.importance_change(grid, change)} (layer {layer}, head {head})"
        in text
    )
    assert_well_formed(text)


def made_grid(changes: np.ndarray, before: float = 2.0) -> Importance:
    return Importance(before + np.asarray(changes, np.float64), before, Output("dense"), "zero", 40.0, 1.0)


def test_heads_within_float32_rounding_share_a_rank_that_no_run_can_flip(embedded):
    """Three heads whose changes differ by float32 rounding (1e-6 of the output, `Importance.noise` 2e-4 here),
    measured twice in the two orders: the guessed one's rank and ties are the same both times, and said so."""
    changes = -np.linspace(0.015, 0.725, 72)[::-1].reshape(12, 6)  # the largest change at layer 0, head 0
    changes[5, 1], changes[5, 2], changes[5, 3] = -0.3, -0.3 + 1e-6, -0.3 - 1e-6
    flipped = changes.copy()
    flipped[5, 2], flipped[5, 3] = changes[5, 3], changes[5, 2]
    a, b = made_grid(changes), made_grid(flipped)
    for layer, head in ((5, 1), (5, 2), (5, 3)):
        assert a.rank(layer, head) == b.rank(layer, head)
    larger = int((np.abs(changes) > 0.3 + a.noise).sum())
    assert a.rank(5, 2) == (larger + 1, 2) == reference_rank(list(np.abs(changes).ravel()), abs(changes[5, 2]), a.noise)
    place = f"shares the **{vitviz.whatif_words.ordinal(larger + 1)} place of the 72 heads** with 2 others"
    assert place in sentences_of(a, embedded, 5, 2) and place in sentences_of(b, embedded, 5, 2)


def sentences_of(grid: Importance, model, layer: int, head: int) -> str:
    return vitviz.whatif_words.guess_words(grid, model, layer, head)


def test_a_guess_that_moves_nothing_or_a_photo_where_no_head_matters_is_said_so(embedded):
    changes = np.full((12, 6), -1e-7)
    text = sentences_of(made_grid(changes), embedded, 3, 4)
    assert "no head alone moves" in text and "all 72 heads share the 1st place, your guess too" in text
    changes[11, 5] = -0.5
    text = sentences_of(made_grid(changes), embedded, 3, 4)
    assert "it leaves" in text and "within float32 rounding" in text and "ranks **2nd of the 72 heads**" not in text
    assert "shares the **2nd place of the 72 heads** with 70 others" in text
    assert f"moves it by −{percent_words(0.5 / 2.0)}, so yours does {percent_words(1e-7 / 0.5)} of its change" in text
    assert_well_formed(text)


def test_a_guess_off_the_model_is_refused_with_its_range(small):
    with pytest.raises(ValueError, match="layer 0 to 11, head 0 to 5; got layer 12, head 0"):
        lesson.lesson_step(small[0], 9, guess=lesson.Guess(12, 0))


ORDINALS = {1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 72: "72nd"}


def test_ordinals():
    assert {n: vitviz.whatif_words.ordinal(n) for n in ORDINALS} == ORDINALS
