"""The Q·K view: AttentionViz's normalisation, the joint PCA map, what a head sorts by, and the browser's view.

Every number is checked against an independent float64 computation: softmax rows of the raw q and k, an
eigendecomposition of the covariance, least squares by NumPy's own solver.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from app_server import running_app
from conftest import ASSETS, FAMILIES, random_image
from support import qk_page
from support.harness import CHROMIUM, CHROMIUM_ARGS, browser_or_skip
from support.qk_reference import (
    check_map_words,
    check_sentence,
    page_map,
    r_lstsq,
    reference_map,
    rows64,
    top_keys,
    weights64,
)

import vitviz
from vitviz import explorer, qk
from vitviz.app.explorer import TOKEN_HEADER
from vitviz.tabs import label


def test_normalisation_leaves_every_attention_row_unchanged():
    """Keys translated to the queries' centroid, both at one mean norm: every row of softmax(q·k/sqrt(d)) is the
    same to 1e-6, on random heads far from normalised and on every head of a tiny model."""
    rng = np.random.default_rng(0)
    cases = [(rng.normal(3, 2, (50, 16)), rng.normal(-5, 0.1, (70, 16)) * 40) for _ in range(5)]
    a = vitviz.analyze(FAMILIES["vit"](), random_image(40, 56, seed=1), longest=56)
    d = explorer.layer_data(a, 1)
    cases += [tuple(x.astype(np.float64) for x in qk.head_vectors(d.q, d.k, 4, h)) for h in range(4)]
    for q, k in cases:
        scale = q.shape[1] ** -0.5
        n = qk.normalise(q, k)
        np.testing.assert_allclose(rows64(n.q, n.k, scale), rows64(q, k, scale), atol=1e-6, rtol=0)
        np.testing.assert_allclose(n.q.mean(0), n.k.mean(0), atol=1e-9 * np.abs(n.q).max())
        assert np.linalg.norm(n.q, axis=1).mean() == pytest.approx(np.linalg.norm(n.k, axis=1).mean(), rel=1e-9)
    q, k = cases[0]  # scaling both by their own factor (not c and 1/c) would change the rows: the test can tell
    wrong = rows64(q / np.linalg.norm(q, axis=1).mean(), k / np.linalg.norm(k, axis=1).mean(), 0.25)
    assert np.abs(wrong - rows64(q, k, 0.25)).max() > 1e-3
    with pytest.raises(ValueError, match="all equal"):
        qk.normalise(np.ones((4, 3)), np.ones((5, 3)))


def pca64(x: np.ndarray) -> np.ndarray:
    """The reference: the centred points' two leading right singular vectors (an SVD, where vitviz.qk.pca2 takes
    the covariance's eigenvectors), each axis' sign left as it comes."""
    c = x - x.mean(0)
    _, _, vt = np.linalg.svd(c, full_matrices=False)
    return c @ vt[:2].T


def same_up_to_sign(got: np.ndarray, want: np.ndarray, atol: float) -> None:
    for axis in range(2):
        sign = np.sign(got[:, axis] @ want[:, axis])
        np.testing.assert_allclose(got[:, axis] * sign, want[:, axis], atol=atol)


def test_the_joint_map_is_the_float64_pca_of_the_normalised_queries_and_keys(embedded):
    a = vitviz.analyze(embedded, vitviz.example("coffee"), longest=224)
    d = explorer.layer_data(a, 4)
    q, k = (x.astype(np.float64) for x in qk.head_vectors(d.q, d.k, embedded.num_heads, 3))
    q2, k2 = qk.joint_map(q, k)
    n = qk.normalise(q, k)
    want = pca64(np.vstack([n.q, n.k]))
    same_up_to_sign(np.vstack([q2, k2]), want, atol=1e-8 * np.abs(want).max())
    axes = qk.pca2(np.vstack([n.q, n.k]))  # the sign rule: each axis' largest loading positive, as in the browser
    assert np.allclose(axes, np.vstack([q2, k2]))


def test_top_key_recall_counts_the_shared_keys():
    """Against sets built key by key: a map where each query sits on its top key scores 1 at top = 1."""
    rng = np.random.default_rng(2)
    w, q2, k2 = rng.random((30, 40)), rng.normal(size=(30, 2)), rng.normal(size=(40, 2))
    for top in (1, 5, 12):
        want = np.mean(
            [
                len(set(np.argsort(-w[i])[:top]) & set(np.argsort(((k2 - q2[i]) ** 2).sum(1))[:top])) / top
                for i in range(30)
            ]
        )
        assert qk.top_key_recall(w, q2, k2, top) == pytest.approx(want)
    assert qk.top_key_recall(w, k2[w.argmax(1)], k2, 1) == 1.0
    with pytest.raises(ValueError, match="top must be"):
        qk.top_key_recall(w, q2, k2, 0)


def test_what_a_head_sorts_by_is_the_maps_correlation_with_position_and_colour():
    """A map laid out by row and column sorts by position, one laid out by brightness by colour, one of noise by
    neither; each R equals least squares' and the sentence names the larger with its numbers."""
    rng = np.random.default_rng(3)
    gh, gw, prefix = 6, 8, 1
    rgb = rng.random((gh * gw, 3))
    p = np.arange(gh * gw)
    layouts = {
        "position": np.column_stack([p // gw, p % gw]).astype(float),
        "colour": np.column_stack([rgb.mean(1), rgb[:, 2] * 0.1]),
        "neither": rng.normal(size=(gh * gw, 2)),
        "position and colour alike": np.column_stack([p // gw, rgb.mean(1) * gh]),
    }
    for verdict, xy in layouts.items():
        tokens = np.vstack([[[9.0, 9.0]] * prefix, xy + rng.normal(scale=1e-3, size=xy.shape)])
        s = qk.sorts_by(tokens, tokens + 0.01, (gh, gw), rgb, prefix, 2, 1)
        both = np.vstack([tokens[prefix:], tokens[prefix:] + 0.01])
        features = {
            "row": p // gw,
            "column": p % gw,
            "brightness": rgb.mean(1),
            "red": rgb[:, 0],
            "green": rgb[:, 1],
            "blue": rgb[:, 2],
        }
        for name, f in features.items():
            assert s.r[name] == pytest.approx(r_lstsq(both, np.tile(f, 2).astype(float)), abs=1e-9), name
        check_sentence(s, features)
        assert f"sorts by {verdict}" in s.sentence(), (verdict, s.sentence())
    with pytest.raises(ValueError, match="6 rows × 8 columns"):
        qk.sorts_by(np.zeros((10, 2)), np.zeros((10, 2)), (gh, gw), rgb, prefix, 0, 0)


def record(r: dict[str, float], entangled: dict[tuple[str, str], float] | None = None) -> qk.SortsBy:
    """A head's record of R [feature] with every pair of features uncorrelated but those given."""
    between = {(a, b): 0.0 for i, a in enumerate(qk.FEATURES) for b in qk.FEATURES[i + 1 :]}
    return qk.SortsBy(6, 0, r, {**between, **(entangled or {})})


RED = dict(row=0.59, column=0.31, brightness=0.90, red=0.92, green=0.87, blue=0.91)  # issue #59's head


@pytest.mark.parametrize(
    "r, entangled, said",
    [
        (
            RED,
            {("brightness", "red"): 0.88, ("brightness", "blue"): 0.85, ("brightness", "green"): 0.95},
            "sorts by colour: its map follows how red it is, how blue it is, its brightness and how green it is (R "
            "0.87–0.92, each within 0.1 of the best) more than the patch's row (R = 0.59). Over the patches, how red "
            "it is, how blue it is, its brightness and how green it is are entangled (|r| 0.85–0.95 for 3 pairs, at "
            "least 0.8): the map cannot tell them apart.",
        ),
        (
            RED,
            {("brightness", "red"): 0.79},  # under 0.8: not entangled
            "sorts by colour: its map follows how red it is, how blue it is, its brightness and how green it is (R "
            "0.87–0.92, each within 0.1 of the best) more than the patch's row (R = 0.59).",
        ),
        (
            {**RED, "green": 0.2, "blue": 0.2},
            {("brightness", "red"): -0.88, ("row", "red"): 0.99},  # |r|; row unnamed
            "sorts by colour: its map follows how red it is and its brightness (R 0.90–0.92, each within 0.1 of the "
            "best) more than the patch's row (R = 0.59). Over the patches, how red it is and its brightness are "
            "entangled (|r| = 0.88, at least 0.8): the map cannot tell them apart.",
        ),
        (
            {**RED, "brightness": 0.92, "green": 0.2, "blue": 0.2},
            {},  # a tie: both named, FEATURES' order
            "sorts by colour: its map follows its brightness and how red it is (R = 0.92, each within 0.1 of the best) "
            "more than the patch's row (R = 0.59).",
        ),
        (
            {**RED, "brightness": 0.8199, "green": 0.2, "blue": 0.2},
            {},  # 0.1001 below the best: not named
            "sorts by colour: its map follows how red it is (R = 0.92) more than the patch's row (R = 0.59).",
        ),
        (
            {**RED, "row": 0.85, "brightness": 0.3, "green": 0.2, "blue": 0.2},
            {},  # across kinds, within 0.1
            "sorts by position and colour alike: its map follows how red it is and the patch's row (R 0.85–0.92, each "
            "within 0.1 of the best).",
        ),
        (
            dict(row=0.9, column=0.86, brightness=0.5, red=0.3, green=0.91, blue=0.88),
            {("row", "column"): 0.0, ("green", "blue"): 0.9, ("column", "green"): 0.1},  # two kinds, one pair linked
            "sorts by position and colour alike: its map follows how green it is, the patch's row, how blue it is and "
            "the patch's column (R 0.86–0.91, each within 0.1 of the best). Over the patches, how green it is and how "
            "blue it is are entangled (|r| = 0.90, at least 0.8): the map cannot tell them apart.",
        ),
        (
            dict(row=0.9, column=0.86, brightness=0.3, red=0.3, green=0.89, blue=0.88),
            {("row", "green"): 0.85, ("column", "blue"): 0.81},  # two groups, each its own sentence
            "sorts by position and colour alike: its map follows the patch's row, how green it is, how blue it is and "
            "the patch's column (R 0.86–0.90, each within 0.1 of the best). Over the patches, the patch's row and how "
            "green it is are entangled (|r| = 0.85, at least 0.8): the map cannot tell them apart. Over the patches, "
            "how blue it is and the patch's column are entangled (|r| = 0.81, at least 0.8): the map cannot tell them "
            "apart.",
        ),
        (
            dict(row=0.29, column=0.1, brightness=0.28, red=0.27, green=0.1, blue=0.1),
            {("brightness", "red"): 0.99},
            "sorts by neither position nor colour: its map hardly follows the patch's row (R = 0.29) or its brightness "
            "(R = 0.28).",
        ),
    ],
)
def test_a_head_names_every_feature_near_the_best_and_says_which_are_entangled(r, entangled, said):
    """Every feature within 0.1 of the best R is named, best first, with their range; the best of the other kind
    comes after "more than"; named features at |r| >= 0.8 over the patches (either sign) are said to be entangled,
    in the groups their links chain together, and an unnamed feature's links are not said."""
    s = record(r, entangled)
    assert s.sentence() == f"Head 0 of layer 6 {said}"


def laid_out_by_brightness(rgb: np.ndarray, seed: int) -> qk.SortsBy:
    """What a 6 × 8 map of one prefix token and patches laid out by brightness (and noise) sorts by."""
    rng = np.random.default_rng(seed)
    xy = np.column_stack([rgb.mean(1), rng.normal(scale=0.05, size=len(rgb))])
    tokens = np.vstack([[[9.0, 9.0]], xy])
    return qk.sorts_by(tokens, tokens + 0.01, (6, 8), rgb, 1, 3, 2)


def test_a_grey_photo_sorted_by_brightness_names_every_colour_entangled_and_a_colourful_one_brightness_alone():
    """On a grey photo red, green, blue and brightness go together (|r| > 0.99): a map laid out by brightness follows
    all four within 0.1, and the sentence says that it cannot tell them apart. On a photo of independent channels,
    brightness stands alone and nothing is entangled."""
    rng = np.random.default_rng(5)
    grey = rng.random(48)
    rgb = np.clip(grey[:, None] + rng.normal(scale=0.01, size=(48, 3)), 0, 1)
    s = laid_out_by_brightness(rgb, 0)
    assert s.verdict == "colour" and set(s.named) == {"brightness", "red", "green", "blue"}
    assert len(s.entangled()) == 1 and "are entangled (|r| = 1.00 for 6 pairs, at least 0.8)" in s.sentence()
    check_sentence(s, qk.patch_features((6, 8), rgb))
    rgb = rng.random((48, 3))
    s = laid_out_by_brightness(rgb, 1)
    assert s.named == ["brightness"] and "entangled" not in s.sentence(), s.sentence()
    check_sentence(s, qk.patch_features((6, 8), rgb))


@pytest.mark.browser
def test_the_browsers_sentence_is_pythons_on_ties_near_ties_and_entangled_features():
    """vitvizSortsBy, given R and the features themselves, says what SortsBy.sentence says from R and the features'
    correlations: on R rounded to 0.05 (ties and near ties in plenty) over features mixed to correlate, either way
    round, or not."""
    sync_api = browser_or_skip()
    rng = np.random.default_rng(6)
    p, cases = np.arange(48), []
    for i in range(120):
        base, mix, sign = rng.normal(size=(3, 48)), rng.choice([0.0, 0.1, 0.5, 2.0], size=4), rng.choice([-1, 1], 3)
        features = {
            "row": p // 8 + mix[0] * base[0],
            "column": p % 8 + 0.0,
            "brightness": base[0] + mix[1] * base[1],
            "red": sign[0] * (base[0] + mix[2] * base[2]),  # a sign: entangled the other way round
            "green": sign[1] * base[1],
            "blue": sign[2] * (base[1] + mix[3] * base[2]),
        }
        r = {f: float(np.round(rng.uniform(0.2 if i % 5 else 0.0, 1.0) * 20) / 20) for f in qk.FEATURES}
        cases.append((r, {f: v.tolist() for f, v in features.items()}))
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_content("<script>" + "\n".join((explorer.STATIC / n).read_text() for n in WORDS_JS) + "</script>")
        said = page.evaluate(
            "([cases, rule]) => cases.map(([r, f]) => vitvizSortsBy(r, f, rule, 6, 0))", [cases, qk.rule()]
        )
        browser.close()
    for (r, features), got in zip(cases, said, strict=True):
        s = qk.SortsBy(6, 0, r, qk.feature_correlations({f: np.array(v) for f, v in features.items()}))
        assert (got["verdict"], got["sentence"]) == (s.verdict, s.sentence())
    sentences = [got["sentence"] for got in said]
    assert sum("entangled" in x for x in sentences) > 5 and sum(" each within 0.1 " in x for x in sentences) > 10


WORDS_JS = ("text.js", "qksorts.js")  # the formatter and the sentence's rule


def test_the_meta_says_for_every_head_what_it_sorts_by_from_its_numbers(embedded):
    a = vitviz.analyze(embedded, vitviz.example("chelsea"), longest=224)
    m = qk.meta(a)
    assert len(m["sorts"]) == embedded.num_layers and all(len(row) == embedded.num_heads for row in m["sorts"])
    maps = qk.layer_maps(a, 7)
    rgb = qk.patch_colours(a)
    for h, (q2, k2) in enumerate(maps):
        s = qk.sorts_by(q2, k2, a.grid, rgb, a.n_prefix, 7, h)
        assert m["sorts"][7][h]["sentence"] == s.sentence()
        check_sentence(s, qk.patch_features(a.grid, rgb))
    verdicts = {re.search(r"sorts by (\w+)", cell["sentence"])[1] for row in m["sorts"] for cell in row}
    assert len(verdicts) >= 2  # the heads do not all read the same


def test_patch_colours_are_the_photos_own():
    """A photo of two flat colours, left and right: each patch's mean RGB is its half's colour."""
    image = np.zeros((56, 112, 3), np.uint8)
    image[:, :56] = (200, 30, 90)
    image[:, 56:] = (10, 250, 120)
    a = vitviz.analyze(FAMILIES["vit"](), image, longest=64)
    rgb = qk.patch_colours(a).reshape(*a.grid, 3)
    gw = a.grid[1]
    np.testing.assert_allclose(rgb[:, 0], np.broadcast_to(np.array([200, 30, 90]) / 255, rgb[:, 0].shape), atol=2e-3)
    np.testing.assert_allclose(
        rgb[:, gw - 1], np.broadcast_to(np.array([10, 250, 120]) / 255, rgb[:, 0].shape), atol=2e-3
    )


# ---- the browser's view: the real script in a bare page, on tiny models and the embedded model


@pytest.mark.browser
@pytest.mark.parametrize("name", ["vit", "dinov2_registers", "siglip_vision"])
def test_the_browsers_map_is_the_float64_pca_on_tiny_models(name):
    """Every layer and head: the page's coordinates equal normalise + PCA in float64 NumPy, up to each axis' sign
    (the page's sign rule is Python's, so the signs agree too)."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES[name](), random_image(40, 56, seed=5), longest=56)
    meta, layers = qk_page.photo(a, "k")
    with sync_api.sync_playwright() as pw:
        browser, page = qk_page.open_page(pw, layers)
        qk_page.show(page, meta)
        for layer in range(a.model.num_layers):
            for head in range(a.model.num_heads):
                page.evaluate("([l, h]) => window.vitviz.qk.show(l, h)", [layer, head])
                got, _ = page_map(page)
                want = reference_map([a], layer, head)
                np.testing.assert_allclose(got, want, atol=1e-6 * np.abs(want).max(), err_msg=f"{name} {layer} {head}")
        recall = page.wait_for_function("() => window.vitviz.qk.recall()").json_value()  # the last layer and head
        d = explorer.layer_data(a, layer)
        q, k = qk.head_vectors(d.q.astype(np.float64), d.k.astype(np.float64), a.model.num_heads, head)
        n = a.num_tokens
        top = min(qk.RECALL_TOP, n)
        want = qk.top_key_recall(qk.attention(q, k, 1.0), got[:n], got[n:], top)
        assert recall == pytest.approx(want, abs=1.01 / (n * top))  # one hit: a tie broken the other way
        assert page.evaluate("() => window.errors") == []
        browser.close()


@pytest.mark.browser
def test_hovering_a_point_lights_its_patch_and_the_patches_it_attends_to_and_back():
    """The real pointer over a known query point: that patch and its top keys are outlined and sent to the
    Explorer (vitviz-highlight); over a key: the queries that give it the most attention weight (its column of the
    attention matrix, each query's softmax over its own row), with those weights. An Explorer's vitviz-hover (another
    layer and head) moves the view there and marks that query's point; a patch hovered on the view's own photo
    marks its point the same way."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES["dinov2_registers"](), random_image(48, 64, seed=7), longest=64)  # 5 prefix tokens
    meta, layers = qk_page.photo(a, "k")
    gh, gw = a.grid
    with sync_api.sync_playwright() as pw:
        browser, page = qk_page.open_page(pw, layers)
        qk_page.show(page, meta)
        page.evaluate("() => window.vitviz.qk.show(2, 1)")
        for kind, token in [("query", a.n_prefix + 9), ("key", a.n_prefix + 30), ("query", 0)]:
            at = page.evaluate("([k, t]) => window.vitviz.qk.pointAt(0, k, t)", [kind, token])
            page.mouse.move(at["x"] + 40, at["y"] + 40)
            page.mouse.move(at["x"], at["y"])
            page.wait_for_timeout(100)
            hl = page.evaluate("() => window.vitviz.qk.state().highlight")
            want = top_keys(a, 2, 1, token, kind == "query")
            if hl["point"] != at["point"]:  # another point drawn on the very same pixel: it must be as near
                xy, _ = page_map(page)
                pytest.fail(
                    f"hovered point {hl['point']} is not {at['point']} ({xy[hl['point']]} vs {xy[at['point']]})"
                )
            assert hl["token"] == token and hl["isQuery"] == (kind == "query") and hl["tokens"] == want
            assert page.evaluate("() => window.highlights.at(-1)") == [token, *want]
            if kind == "key":  # the weights are the attention's: float64's, and the forward's own to 1e-3
                column = weights64(a, 2, 1)[:, token]
                np.testing.assert_allclose(hl["weights"], column[want], atol=1e-6)
                captured = a.layer_attention(2)[1][:, token].astype(np.float64)
                np.testing.assert_allclose(hl["weights"], captured[want], atol=1e-3)
                d = explorer.layer_data(a, 2)
                q, k = (x.astype(np.float64) for x in qk.head_vectors(d.q, d.k, a.model.num_heads, 1))
                assert [int(j) for j in np.argsort(-(q @ k[token]), kind="stable")[:5]] != want  # raw q·k differs
        page.evaluate("""() => document.dispatchEvent(new CustomEvent("vitviz-hover",
                          {detail: {layer: 1, head: 3, query: 17, mode: "attention"}}))""")
        page.wait_for_function("() => window.vitviz.qk.state().told?.query === 17")
        state = page.evaluate("() => window.vitviz.qk.state()")
        assert (state["layer"], state["head"]) == (1, 3)
        assert state["highlight"]["token"] == 17 and state["highlight"]["isQuery"]
        assert state["highlight"]["tokens"] == top_keys(a, 1, 3, 17)
        box = page.locator(".qk-photo-canvas").bounding_box()
        row, col = gh - 1, 2
        page.mouse.move(box["x"] + (col + 0.5) * box["width"] / gw, box["y"] + (row + 0.5) * box["height"] / gh)
        page.wait_for_timeout(100)
        hl = page.evaluate("() => window.vitviz.qk.state().highlight")
        assert hl["token"] == a.n_prefix + row * gw + col and hl["point"] == hl["token"]
        assert page.evaluate("() => window.errors") == []
        browser.close()


@pytest.mark.browser
def test_brushing_lights_up_the_patches_of_the_points_inside_the_rectangle():
    """A real drag: the patches sent are exactly the tokens whose points (query or key) lie in the rectangle."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES["vit"](), random_image(40, 56, seed=8), longest=56)
    meta, layers = qk_page.photo(a, "k")
    with sync_api.sync_playwright() as pw:
        browser, page = qk_page.open_page(pw, layers)
        qk_page.show(page, meta)
        box = page.locator(".qk-over").bounding_box()  # the map's middle: points lie beyond each side of it
        x0, x1 = box["x"] + 0.3 * box["width"], box["x"] + 0.65 * box["width"]
        y0, y1 = box["y"] + 0.35 * box["height"], box["y"] + 0.7 * box["height"]
        page.mouse.move(x0, y0)
        page.mouse.down()
        page.mouse.move(x1, y1, steps=5)
        page.mouse.up()
        page.wait_for_timeout(100)
        brush = page.evaluate("() => window.vitviz.qk.state().brush")
        points = page.evaluate(
            "(n) => Array.from({length: n}, (_, t) => ['query', 'key'].map((k) => window.vitviz.qk.pointAt(0, k, t)))",
            a.num_tokens,
        )
        flat = [p for pair in points for p in pair]
        inside = sorted({t for t, pair in enumerate(points) for p in pair if x0 <= p["x"] <= x1 and y0 <= p["y"] <= y1})
        assert 1 < len(inside) < a.num_tokens
        beyond = [
            any(side(p) for p in flat)
            for side in (lambda p: p["x"] < x0, lambda p: p["x"] > x1, lambda p: p["y"] < y0, lambda p: p["y"] > y1)
        ]
        assert all(beyond)
        assert brush["tokens"][0] == inside
        assert page.evaluate("() => window.highlights.at(-1)") == inside
        browser.close()


@pytest.mark.browser
def test_the_atlas_shows_every_head_with_what_it_sorts_by_and_a_click_shows_it():
    """One tile per head of the layer, captioned with Python's verdict; clicking a tile shows that head above, whose
    map is the float64 PCA of that head. On a server without umap-learn, the Map says how to get UMAP."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES["vit"](), random_image(40, 56, seed=9), longest=56)
    meta, layers = qk_page.photo(a, "k")
    words = {"position": "position", "colour": "colour", "both": "position and colour", "neither": "neither"}
    with sync_api.sync_playwright() as pw:
        browser, page = qk_page.open_page(pw, layers)
        qk_page.show(page, {**meta, "umap": False})
        option = page.locator(".qk-method option").nth(1)
        assert page.locator(".qk-method-label").is_visible() and option.is_disabled()
        assert option.inner_text() == "UMAP (not installed)" and page.locator(".qk-method-note").is_visible()
        assert page.locator(".qk-method-note").inner_text() == (
            f"UMAP needs umap-learn on the server: {qk.UMAP_INSTALL}, then restart the app."
        )
        page.evaluate("() => window.vitviz.qk.show(2, 0)")
        captioned = "(n) => document.querySelectorAll('.qk-tile figcaption:not(:empty)').length === n"
        page.wait_for_function(captioned, arg=4)
        captions = page.locator(".qk-tile figcaption").all_inner_texts()
        assert captions == [f"head {h}: {words[meta['sorts'][2][h]['verdict']]}" for h in range(4)]
        page.locator(".qk-tile").nth(3).click()
        page.wait_for_function("() => window.vitviz.qk.state().head === 3")
        got, _ = page_map(page)
        want = reference_map([a], 2, 3)
        np.testing.assert_allclose(got, want, atol=1e-6 * np.abs(want).max())
        assert page.locator(".qk-sorts").inner_text().startswith(meta["sorts"][2][3]["sentence"])
        browser.close()


@pytest.mark.browser
def test_the_last_photos_share_one_map_normalised_together():
    """Two photos, then 'your last photos': one map of both photos' queries and keys, equal to the float64
    normalisation and PCA of all of them together, whose sentence and recall are of that map; a tap on a phone picks
    a point of the older photo."""
    sync_api = browser_or_skip()
    model = FAMILIES["vit"]()
    first, second = (vitviz.analyze(model, random_image(40, 56, seed=s), longest=56) for s in (11, 12))
    (m1, l1), (m2, l2) = qk_page.photo(first, "one"), qk_page.photo(second, "two")
    with sync_api.sync_playwright() as pw:
        browser, page = qk_page.open_page(pw, {**l1, **l2}, size=(390, 844), touch=True)
        qk_page.show(page, m1)
        qk_page.show(page, m2)
        page.evaluate("() => window.vitviz.qk.photos('all')")
        page.evaluate("() => window.vitviz.qk.show(1, 2)")
        got, c = page_map(page)
        assert [p["key"] for p in c["photos"]] == ["two", "one"]
        want = reference_map([second, first], 1, 2)
        np.testing.assert_allclose(got, want, atol=1e-6 * np.abs(want).max())
        check_map_words(page, [second, first], got, 1, 2, "PCA of your last 2 photos")
        at = page.evaluate("() => window.vitviz.qk.pointAt(1, 'query', 7)")
        page.touchscreen.tap(at["x"], at["y"])
        page.wait_for_timeout(100)
        hl = page.evaluate("() => window.vitviz.qk.state().highlight")
        assert hl["photo"] == 1 and hl["token"] == 7 and hl["tokens"] == top_keys(first, 1, 2, 7)
        assert page.locator(".qk-strip canvas").count() == 1
        browser.close()


@pytest.mark.browser
def test_the_views_limits_are_pythons_from_the_meta():
    """How many photos a map keeps and how many keys a hover lights up come from Python's constants in the meta
    (`qk.settings`), not from the script: a meta that says otherwise is followed, and says so in the legend."""
    sync_api = browser_or_skip()
    model = FAMILIES["vit"]()
    analyses = [vitviz.analyze(model, random_image(40, 56, seed=s), longest=56) for s in (21, 22, 23)]
    photos = [qk_page.photo(a, f"p{i}") for i, a in enumerate(analyses)]
    assert photos[0][0]["maxPhotos"] == qk.MAX_PHOTOS and photos[0][0]["hoverKeys"] == qk.HOVER_KEYS
    with sync_api.sync_playwright() as pw:
        browser, page = qk_page.open_page(pw, {key: data for _, layers in photos for key, data in layers.items()})
        for meta, _ in photos:
            qk_page.show(page, {**meta, "maxPhotos": 2, "hoverKeys": 3})
        assert page.evaluate("() => window.vitviz.qk.state().photos") == ["p2", "p1"]
        at = page.evaluate("() => window.vitviz.qk.pointAt(0, 'query', 4)")
        hl = page.evaluate(f"() => window.vitviz.qk.hover({at['x']}, {at['y']})")
        state = page.evaluate("() => window.vitviz.qk.state()")
        assert hl["tokens"] == top_keys(analyses[2], state["layer"], state["head"], 4)[:3]
        assert "the 3 keys a query attends to most" in page.locator(".qk-legend").inner_text()
        assert page.evaluate("() => window.errors") == []
        browser.close()


# ---- the real app, on the embedded model (its own page: one sync Playwright at a time)


@pytest.fixture(scope="module")
def app_page():
    sync_api = browser_or_skip()
    with running_app() as url, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.route_tokens = set()  # the page token that its requests to vitviz's routes carry

        def asked(r) -> None:
            if "/vitviz/" in r.url:
                page.route_tokens.add(r.headers.get(TOKEN_HEADER.lower()))

        page.on("request", asked)
        page.goto(url)
        page.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        yield page
        browser.close()


@pytest.mark.browser
@pytest.mark.slow
def test_the_app_maps_the_embedded_models_heads_and_links_them_with_the_explorer(app_page, embedded):
    """The tab's coordinates equal the float64 PCA of the embedded model's normalised queries and keys (chelsea,
    448 px); its sentence is Python's; the Explorer's query moves the view and marks its point, and a point hovered
    here outlines its patches on the Explorer."""
    page = app_page
    page.get_by_role("tab", name=label("qk")).click()
    page.wait_for_function("() => window.vitviz?.qk?.state().points > 0", timeout=90_000)
    a = vitviz.analyze(embedded, ASSETS / "chelsea.jpg")
    for layer, head in [(0, 1), (6, 0), (11, 5)]:
        page.evaluate("([l, h]) => window.vitviz.qk.show(l, h)", [layer, head])
        got, _ = page_map(page)
        want = reference_map([a], layer, head)
        np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max(), err_msg=f"{layer} {head}")
    sorts = qk.sorts_by(*qk.layer_maps(a, 11)[5], a.grid, qk.patch_colours(a), a.n_prefix, 11, 5)
    assert page.locator(".qk-sorts").inner_text().startswith(sorts.sentence())
    page.get_by_role("tab", name=label("attention")).click()
    page.wait_for_function("() => window.vitviz?.explorer?.state().key", timeout=60_000)
    query = a.n_prefix + 5 * a.grid[1] + 7
    page.evaluate("(gw) => window.vitviz.explorer.hover(3, 2, 5 * gw + 7)", a.grid[1])
    page.wait_for_function("(q) => window.vitviz.qk.state().told?.query === q", arg=query, timeout=30_000)
    state = page.evaluate("() => window.vitviz.qk.state()")
    assert (state["layer"], state["head"]) == (3, 2) and state["highlight"]["token"] == query
    assert state["highlight"]["tokens"] == top_keys(a, 3, 2, query)
    page.get_by_role("tab", name=label("qk")).click()
    at = page.evaluate("(t) => window.vitviz.qk.pointAt(0, 'key', t)", query)
    page.mouse.move(at["x"], at["y"])
    page.wait_for_timeout(200)
    hl = page.evaluate("() => window.vitviz.qk.state().highlight")
    assert hl["point"] == at["point"]
    assert page.evaluate("() => window.vitviz.explorer.state().highlight") == [query, *top_keys(a, 3, 2, query, False)]
    # UMAP from the server: the same as umap-learn's with seed 0 on the very bytes the page has of that layer
    umap = pytest.importorskip("umap")
    state = page.evaluate("() => window.vitviz.qk.state()")
    page.evaluate("() => window.vitviz.qk.method('umap')")
    page.evaluate("() => window.vitviz.qk.show(6, 0)")
    got, c = page_map(page)
    assert len(c["photos"]) == 1 and got.shape == (2 * a.num_tokens, 2)
    meta = page.evaluate("() => window.vitviz.qk.state()")  # the photo's session and key, for the Explorer's route
    session, key = page.evaluate("() => window.vitviz.explorer.state().session"), meta["photos"][0]
    (token,) = page.route_tokens
    asked = {"session": session, "key": key, "layer": 6}
    raw = page.request.get(page.url.rstrip("/") + "/vitviz/explorer/layer", params=asked, headers={TOKEN_HEADER: token})
    raw = raw.body()
    n, width = a.num_tokens, embedded.num_heads * 64
    values = np.frombuffer(raw, "<f4")
    q, k = (values[i * n * width : (i + 1) * n * width].reshape(n, width)[:, :64].astype(np.float64) for i in (0, 1))
    norm = qk.normalise(q, k)
    want = umap.UMAP(n_components=2, random_state=0, n_jobs=1).fit_transform(np.vstack([norm.q, norm.k]))
    np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max())
    assert "UMAP" in page.locator(".qk-cap").inner_text() and state["points"] == 2 * n
    page.evaluate("() => window.vitviz.qk.method('pca')")
