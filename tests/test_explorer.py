"""The Explorer: attention computed in the browser from the shipped queries and keys.

The weights are read back from the page through `window.vitviz.explorer` and compared with the attention that
the model's own forward captured (float16): on the tiny models of every family in a bare page that runs the
real script, and on the embedded model in the real app at 224 and 448 px.
"""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
import torch
from app_server import running_app
from conftest import ASSETS, FAMILIES, random_image, sharp_heads
from support.harness import CHROMIUM, browser_or_skip
from support.harness import CHROMIUM_ARGS as ARGS

import vitviz
from vitviz import explorer
from vitviz.app.explorer import STATIC, TOKEN_HEADER, script
from vitviz.tabs import label
from vitviz.views.attention import attention_view
from vitviz.views.common import display

BOUND = 1e-3  # the bound on a row; the float16 capture alone rounds by up to 2.4e-4


def captured_rows(a: vitviz.Analysis, cases) -> np.ndarray:
    """The forward's own weights for (layer, head, patch) cases, patch -1 = the readout: its tokens' rows averaged
    (CLS alone, or a distilled DeiT's two), or an attention-pool's probe (SigLIP: its weights per head, from the hook
    on the real pooling module)."""

    def row(layer: int, h: int, p: int) -> np.ndarray:
        if p == -1 and a.model.readout.pool:
            return a.pool_attention[h]
        if p == -1:
            return a.layer_attention(layer)[h, list(a.model.readout.tokens)].astype(np.float32).mean(0)
        return a.layer_attention(layer)[h, a.n_prefix + p]

    return np.stack([row(*case).astype(np.float32) for case in cases])


def wrong_head_miss(a: vitviz.Analysis, cases) -> float:
    """By how much, at least, a view that swapped two heads of a layer would miss the captured rows of `cases`: the
    smallest, over the layers and the pairs of heads, of the largest difference between the two heads' rows at the
    cases' patches. A test of the heads' order needs it far above BOUND."""
    layers, patches = sorted({c[0] for c in cases}), sorted({c[2] for c in cases})
    heads = range(a.model.num_heads)
    rows = {(layer, h): captured_rows(a, [(layer, h, p) for p in patches]) for layer in layers for h in heads}
    return min(
        float(np.abs(rows[(layer, h)] - rows[(layer, o)]).max())
        for layer in layers
        for h in heads
        for o in heads
        if o < h
    )


HOVER_ALL = """async (cases) => {
  const out = [];
  for (const [l, h, p] of cases) out.push(Array.from((await window.vitviz.explorer.hover(l, h, p)).weights));
  return out;
}"""


# ---- the shipped data, in Python


def test_shipped_queries_and_keys_give_the_captured_weights(family):
    """softmax(q k^T * scale) from the layer's bytes, parsed as the browser parses them, is the forward's row."""
    name, model = family
    a = vitviz.analyze(model, random_image(40, 56, seed=3), longest=56)  # 5 x 7 patches: not square
    dh, scale = vitviz.inside.head_geometry(model)
    n, heads = a.num_tokens, model.num_heads
    for layer in range(model.num_layers):
        raw = np.frombuffer(explorer.layer_data(a, layer).tobytes(), dtype="<f4")
        assert raw.size == 2 * n * heads * dh + heads * n
        q, k = (
            raw[: n * heads * dh].reshape(n, heads, dh),
            raw[n * heads * dh : 2 * n * heads * dh].reshape(n, heads, dh),
        )
        scores = np.einsum("qhd,khd->hqk", q.astype(np.float64), k.astype(np.float64)) * scale
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        np.testing.assert_allclose(weights, a.layer_attention(layer).astype(np.float64), atol=BOUND, err_msg=name)
        norms = raw[2 * n * heads * dh :].reshape(heads, n)
        np.testing.assert_allclose(norms, value_norms64(a, layer), rtol=1e-4, atol=1e-6)


def test_the_shipped_probe_gives_the_pooling_heads_captured_weights():
    """SigLIP's readout: softmax(q k^T / sqrt(dh)) from the probe's shipped query and keys is the attention that
    the hook on the real pooling module kept, per head; value norms from the module's weights in float64."""
    import base64

    from conftest import tiny_siglip, tiny_vit

    a = vitviz.analyze(tiny_siglip(), random_image(40, 56, seed=3), longest=56)
    probe, heads, n = explorer.meta(a)["probe"], a.model.num_heads, a.num_tokens
    q, k, norms = (
        np.frombuffer(base64.b64decode(probe[key]), "<f4").astype(np.float64) for key in ("q", "k", "valueNorms")
    )
    dh = q.size // heads
    scores = np.einsum("hd,khd->hk", q.reshape(heads, dh), k.reshape(n, heads, dh)) / np.sqrt(dh)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(weights / weights.sum(-1, keepdims=True), a.pool_attention, atol=1e-5)
    mha = a.model.pool.attention
    tokens = a.model.final_norm(torch.from_numpy(a.hidden_states[-1].astype(np.float32))).detach().double().numpy()
    wv, bv = (
        mha.in_proj_weight.chunk(3)[2].detach().double().numpy(),
        mha.in_proj_bias.chunk(3)[2].detach().double().numpy(),
    )
    v, wo = tokens @ wv.T + bv, mha.out_proj.weight.detach().double().numpy()
    expected = [
        np.linalg.norm(v[:, h * dh : (h + 1) * dh] @ wo[:, h * dh : (h + 1) * dh].T, axis=-1) for h in range(heads)
    ]
    np.testing.assert_allclose(norms.reshape(heads, n), np.stack(expected), rtol=1e-4, atol=1e-6)
    assert explorer.meta(vitviz.analyze(tiny_vit(), random_image(40, 56), longest=56))["probe"] is None


def value_norms64(a: vitviz.Analysis, layer: int) -> np.ndarray:
    """[H,N] ||W_O,h v_hj|| in float64 NumPy from the modules' weights: LayerNorm, V and O by hand."""
    parts, heads = a.model.layer_parts(layer), a.model.num_heads
    w = {k: v.detach().double().numpy() for k, v in (("v", parts.v.weight), ("o", parts.o.weight))}
    w["v bias"] = 0.0 if parts.v.bias is None else parts.v.bias.detach().double().numpy()
    ln = {k: v.detach().double().numpy() for k, v in parts.norm1.state_dict().items()}
    x = a.hidden_states[layer].astype(np.float64)
    u = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + parts.norm1.eps) * ln["weight"] + ln[
        "bias"
    ]
    v = u @ w["v"].T + w["v bias"]
    dh = v.shape[1] // heads
    return np.stack(
        [
            np.linalg.norm(v[:, h * dh : (h + 1) * dh] @ w["o"][:, h * dh : (h + 1) * dh].T, axis=-1)
            for h in range(heads)
        ]
    )


def test_meta_names_the_grid_tokens_and_colours(family):
    name, model = family
    a = vitviz.analyze(model, random_image(40, 56, seed=4), longest=56)
    m = explorer.meta(a)
    assert m["grid"] == list(a.grid) and m["tokens"] == a.num_tokens == m["grid"][0] * m["grid"][1] + len(m["prefix"])
    assert m["prefix"] == list(model.prefix_tokens) and m["layers"] == model.num_layers
    assert m["photo"].startswith("data:image/jpeg;base64,")
    lut = np.frombuffer(base64.b64decode(m["colormaps"]["inferno"]), np.uint8).reshape(256, 3)
    np.testing.assert_array_equal(lut[[0, 255]], vitviz.render.colorize(np.array([[0.0, 1.0]]), "inferno")[0])


# ---- the real script in a bare page, on the tiny models of every family


def bare_page(pw, meta: dict, layers: dict[int, bytes], size=(1000, 800), touch: bool = False):
    """The Explorer's script run as Gradio runs js_on_load, its layers served from `layers`."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport={"width": size[0], "height": size[1]}, has_touch=touch)
    css = (STATIC / "explorer.css").read_text()
    html = f"""<html><head><style>{css}</style></head><body>
    <div id="host" style="max-width:900px"><div class="vx" data-mode="attention"></div></div>
    <script>
      window.gradio_config = {{root: "http://vitviz.test"}};
      const watchers = [], props = {{value: null}};
      window.setMeta = (m) => {{ props.value = m; watchers.forEach((cb) => cb()); }};
      (new Function("element", "trigger", "props", "server", "upload", "watch", {script()!r}))(
        document.getElementById("host"), () => {{}}, props, {{}}, null, (name, cb) => watchers.push(cb));
    </script></body></html>"""
    fetched = []

    def serve(route):
        url = urlparse(route.request.url)
        if url.path == "/vitviz/explorer/layer":
            layer = int(parse_qs(url.query)["layer"][0])
            fetched.append(layer)
            route.fulfill(body=layers[layer], content_type="application/octet-stream")
        else:
            route.fulfill(body=html, content_type="text/html")

    page.route("http://vitviz.test/**", serve)
    page.goto("http://vitviz.test/")
    page.evaluate("(m) => window.setMeta(m)", meta)
    return browser, page, fetched


def family_meta(a: vitviz.Analysis) -> tuple[dict, dict[int, bytes]]:
    meta = {**explorer.meta(a), **explorer.look("inferno", 0.6, "log"), "session": "s", "key": "k"}
    return meta, {layer: explorer.layer_data(a, layer).tobytes() for layer in range(a.model.num_layers)}


@pytest.mark.browser
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_browser_computes_the_captured_weights_on_every_family(name):
    """Every head, every layer, patches in each corner, the middle and the CLS token: prefix and register
    tokens included (they are keys of every row, and CLS a query)."""
    sync_api = browser_or_skip()
    model = FAMILIES[name]()
    a = vitviz.analyze(model, random_image(40, 56, seed=5), longest=56)
    gh, gw = a.grid
    patches = [-1, 0, gw - 1, (gh - 1) * gw, gh * gw - 1, (gh // 2) * gw + gw // 2]
    cases = [(layer, h, p) for layer in range(model.num_layers) for h in range(model.num_heads) for p in patches]
    with sync_api.sync_playwright() as pw:
        browser, page, _ = bare_page(pw, *family_meta(a))
        rows = np.array(page.evaluate(HOVER_ALL, cases))
        browser.close()
    assert rows.shape == (len(cases), a.num_tokens)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-5)
    diff = np.abs(rows - captured_rows(a, cases)).max(axis=1)
    assert diff.max() <= BOUND, (name, cases[int(diff.argmax())], diff.max())


@pytest.mark.browser
def test_temperature_sharpens_and_flattens_and_one_is_the_model():
    """softmax(s/T): T = 1 gives the captured row, a lower T gives the top key more, a higher T
    flattens the row; the entropy grows with T."""
    sync_api = browser_or_skip()
    model = FAMILIES["vit"]()
    a = vitviz.analyze(model, random_image(40, 56, seed=6), longest=56)
    with sync_api.sync_playwright() as pw:
        browser, page, _ = bare_page(pw, *family_meta(a))
        page.evaluate("() => window.vitviz.explorer.hover(2, 1, 7)")
        got = {
            t: np.array(page.evaluate("(t) => Array.from(window.vitviz.explorer.temperature(t).weights)", t))
            for t in (0.05, 0.5, 1.0, 4.0)
        }
        text = page.locator(".vx-temp-out").inner_text()
        browser.close()
    p = vitviz.inside.head_geometry(model)
    proj = a.projections(2)
    scores = (proj.query(a.n_prefix + 7).reshape(model.num_heads, -1)[1] @ proj.head("k", 1).T) * p[1]
    for t, row in got.items():
        expected = np.exp((scores - scores.max()) / t)
        np.testing.assert_allclose(row, expected / expected.sum(), atol=1e-5)
    np.testing.assert_allclose(got[1.0], a.layer_attention(2)[1, a.n_prefix + 7].astype(np.float32), atol=BOUND)
    entropy = {t: -(r[r > 0] * np.log(r[r > 0])).sum() for t, r in got.items()}
    assert entropy[0.05] < entropy[0.5] < entropy[1.0] < entropy[4.0]
    assert got[0.05].max() > got[1.0].max() > got[4.0].max() and "T = 4.00" in text


@pytest.mark.browser
def test_the_last_pointer_position_wins_and_a_click_pins():
    """Moves faster than frames: one paint, on the last position. Five clicks 100 ms apart end on the last."""
    sync_api = browser_or_skip()
    model = FAMILIES["dinov2_registers"]()
    a = vitviz.analyze(model, random_image(48, 64, seed=7), longest=64)  # 6 x 8 patches, 5 prefix tokens
    gh, gw = a.grid
    with sync_api.sync_playwright() as pw:
        browser, page, _ = bare_page(pw, *family_meta(a))
        page.evaluate("() => window.vitviz.explorer.hover(0, 0, 0)")
        box = page.locator(".vx-big-canvas").bounding_box()

        def at(row, col):
            return box["x"] + (col + 0.5) * box["width"] / gw, box["y"] + (row + 0.5) * box["height"] / gh

        for row, col in [(0, 0), (1, 3), (5, 7), (2, 6)]:  # within one frame
            page.mouse.move(*at(row, col), steps=1)
        page.wait_for_timeout(100)
        assert page.evaluate("() => window.vitviz.explorer.state().query") == a.n_prefix + 2 * gw + 6
        clicks = [(0, 0), (gh - 1, 0), (0, gw - 1), (gh - 1, gw - 1), (3, 4)]
        for row, col in clicks:
            page.mouse.click(*at(row, col))
            page.wait_for_timeout(100)
        page.mouse.move(*at(1, 1))  # a pinned query stays under a moving pointer
        page.wait_for_timeout(100)
        state = page.evaluate("() => window.vitviz.explorer.state()")
        caption = page.locator(".vx-big-cap").inner_text()
        browser.close()
    assert state["pinned"] and state["query"] == a.n_prefix + 3 * gw + 4
    assert "patch 28 (row 3, column 4)" in caption and "register 1" in caption


@pytest.mark.browser
def test_a_finger_drags_the_query_on_a_phone_and_leaves_it_pinned():
    """390 x 844 with touch: the query follows a dragging finger across the photo and stays where it lifts."""
    sync_api = browser_or_skip()
    model = FAMILIES["deit"]()  # two prefix tokens
    a = vitviz.analyze(model, random_image(48, 64, seed=13), longest=64)
    gh, gw = a.grid
    with sync_api.sync_playwright() as pw:
        browser, page, _ = bare_page(pw, *family_meta(a), size=(390, 844), touch=True)
        page.evaluate("() => window.vitviz.explorer.hover(0, 0, 0)")
        page.locator(".vx-big-canvas").scroll_into_view_if_needed()
        box = page.locator(".vx-big-canvas").bounding_box()

        def at(row, col):
            return {"x": box["x"] + (col + 0.5) * box["width"] / gw, "y": box["y"] + (row + 0.5) * box["height"] / gh}

        cdp = page.context.new_cdp_session(page)
        cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [at(0, 1)]})
        page.wait_for_timeout(100)
        first = page.evaluate("() => window.vitviz.explorer.state().query")
        for row, col in [(1, 2), (2, 3), (gh - 1, gw - 2)]:
            cdp.send("Input.dispatchTouchEvent", {"type": "touchMove", "touchPoints": [at(row, col)]})
            page.wait_for_timeout(60)
        cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
        page.wait_for_timeout(100)
        state = page.evaluate("() => window.vitviz.explorer.state()")
        browser.close()
    assert first == a.n_prefix + 1
    assert state["pinned"] and state["query"] == a.n_prefix + (gh - 1) * gw + gw - 2


@pytest.mark.browser
def test_a_layer_that_fails_is_said_and_asked_again_and_clearing_leaves_nothing():
    """A 404 (an evicted analysis): the page says so, handle.layer rejects, the same photo picked again asks
    for its layers again; no photo clears the maps, and moving over the empty canvas raises nothing. (The first
    photo's layers, still in the browser, would not be asked for at all.)"""
    sync_api = browser_or_skip()
    model = FAMILIES["vit"]()
    a = vitviz.analyze(model, random_image(40, 56, seed=14), longest=56)
    meta, layers = family_meta(a)
    with sync_api.sync_playwright() as pw:
        browser, page, fetched = bare_page(pw, meta, layers)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.wait_for_function("() => window.vitviz.explorer.state().loaded.length === 3")
        page.unroute("http://vitviz.test/**")
        page.route("http://vitviz.test/vitviz/explorer/layer**", lambda r: r.fulfill(status=404, body="gone"))
        page.evaluate("(m) => window.setMeta(null)", None)  # no photo
        assert page.locator(".vx-tile").count() == 0 and page.locator(".vx-mech").inner_text() == ""
        box = page.locator(".vx-big-canvas").bounding_box()
        page.mouse.move(box["x"] + 5, box["y"] + 5)
        gone = {**meta, "key": "k2"}  # another analysis, which the server no longer holds
        page.evaluate("(m) => window.setMeta(m)", gone)
        rejected = page.evaluate("() => window.vitviz.explorer.layer(1).then(() => 'loaded', (e) => e.message)")
        assert rejected == "gone"
        page.wait_for_function("() => document.querySelector('.vx-status').textContent.includes('could not be loaded')")
        page.unroute("http://vitviz.test/vitviz/explorer/layer**")
        page.route(
            "http://vitviz.test/vitviz/explorer/layer**",
            lambda r: r.fulfill(
                body=layers[int(parse_qs(urlparse(r.request.url).query)["layer"][0])],
                content_type="application/octet-stream",
            ),
        )
        page.evaluate("(m) => window.setMeta(m)", {**gone})  # picked again: the same key asks again
        page.wait_for_function("() => window.vitviz.explorer.state().loaded.length === 3")
        browser.close()
    assert errors == []


# ---- the real app, on the embedded model


@pytest.mark.browser
@pytest.mark.parametrize(("gap", "tie"), [(0.0, True), (0.003, True), (0.0049, True), (0.02, False)])
def test_a_key_within_the_tie_threshold_of_the_top_key_reads_as_a_tie_never_as_minus_zero(gap, tie):
    """Layer 1's keys made so that a second patch scores `gap` below the top key for one query: an exact copy (0), a
    near tie above 0 but under the threshold (0.003, 0.0049), or a clear gap (0.02). Under the threshold the row and
    the sentence name the tie and claim no more than the weight it gets (never "the same weight" for a gap, never
    "−0.00" nor e^0.00 = 100.0 %); above it the gap is printed."""
    sync_api = browser_or_skip()
    model = sharp_heads(FAMILIES["vit"]())  # scores spread apart: no other key comes near the top one by chance
    a = vitviz.analyze(model, random_image(40, 56, seed=6), longest=56)
    meta, layers = family_meta(a)
    data, head, query = explorer.layer_data(a, 1), 1, a.n_prefix + 7
    width = data.k.shape[1] // model.num_heads
    k = data.k.copy()
    part = slice(head * width, (head + 1) * width)
    q = data.q[query, part].astype(np.float64)
    scores = k[:, part] @ q / np.sqrt(width)
    top = int(np.argmax(scores))  # over every key: the readout's may be the top one
    twin = a.n_prefix + (0 if top != a.n_prefix else 1)
    k[twin] = k[top]
    k[twin, part] = k[top, part] - gap * np.sqrt(width) * q / (q @ q)  # its score: the top one less `gap`
    made = (k[top, part].astype(np.float64) - k[twin, part]) @ q / np.sqrt(width)
    assert made == pytest.approx(gap, abs=2e-5) and (made > 0) == (gap > 0)
    layers[1] = explorer.LayerData(data.q, k, data.value_norms).tobytes()
    with sync_api.sync_playwright() as pw:
        browser, page, _ = bare_page(pw, meta, layers)
        page.evaluate(f"() => window.vitviz.explorer.hover(1, {head}, 7)")
        text = page.locator(".vx-mech").inner_text()
        browser.close()
    assert "−0.00" not in text and "-0.00" not in text and "100.0 %" not in text, text
    assert ("tied with the top key" in text) == tie, text
    names = [meta["prefix"][t] if t < a.n_prefix else f"p{t - a.n_prefix} (" for t in (top, twin)]
    pair = [next(line for line in text.splitlines() if line.startswith(n)) for n in names]  # their table rows
    second = [row for row in pair if "(the top key)" not in row]  # the one of the two not shown first
    assert len(second) == 1 and ("tied with the top key" in second[0]) == tie, pair
    if tie:
        assert "so it gets at least 99.5 % of the top key's weight" in text and "the same weight" not in text, text
    else:
        assert "−0.02" in text or "-0.02" in text, text


def test_every_script_prints_fixed_decimals_through_the_one_formatter_of_text_js():
    """No script calls toFixed but vitvizFixed in text.js: every number a view prints with fixed decimals has its
    rule (a value that rounds to zero prints as 0, never "-0.00")."""
    from vitviz.site.build import PAGE

    for path in sorted([*STATIC.glob("*.js"), *PAGE.glob("*.js")]):  # the app's engine and the static site's page
        source = path.read_text()
        if path.name == "text.js":
            start = source.index("function vitvizFixed(")
            source = source[:start] + source[source.index("\n}\n", start) :]
        assert ".toFixed(" not in source, f"{path.name} formats a number without vitvizFixed"


def engine_page(pw):
    """A blank page with the words' modules loaded (attention.js for its token constants, text.js, inside.js)."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page()
    page.set_content("<script>" + "\n".join((STATIC / n).read_text() for n in ENGINE_WORDS) + "</script>")
    return browser, page


ENGINE_WORDS = ("attention.js", "text.js", "inside.js")


@pytest.mark.browser
def test_the_browsers_numbers_are_pythons_and_never_minus_zero():
    """vitvizFixed equals sentences.fixed on values that round to zero from below, exact halves, binary near-halves
    and random ones. Inside a head's range line, a top patch below a prefix token's score by a near tie (1e-4, and
    0.0049: above 0, under the threshold) reads "0.00" and names the tie; by a clear gap (0.02) it reads "-0.02"
    and no tie; a patch that is the top key reads "0.00" and names it."""
    sync_api = browser_or_skip()
    rng = np.random.default_rng(4)
    values = [-0.001, -0.004999, -0.005, 0.125, -0.125, 2.675, -0.0, -0.4, 1234.5, 0.5, -12.3456, -1e-4, 7.0]
    values += [float(x) for x in rng.normal(0, 0.02, 300)] + [float(x) for x in rng.normal(0, 50, 100)]
    cases = [(x, digits) for x in values for digits in (0, 1, 2, 3)]
    with sync_api.sync_playwright() as pw:
        browser, page = engine_page(pw)
        said = page.evaluate("(cases) => cases.map(([x, d]) => vitvizFixed(x, d))", cases)
        lines = page.evaluate(
            """(tops) => tops.map(([cls, patch]) => {
            const ranges = [{}, {}], scores = new Float32Array([cls, patch, 0.5, 0.3, 0.2]);
            const v = {meta: {prefix: ["CLS"], grid: [2, 2], scaleName: "log scale"}, scores,
                       row: new Float32Array([0.4, 0.3, 0.1, 0.1, 0.1]), norms: new Float32Array(5).fill(1)};
            vitvizPaintSteps([null, null], ranges, v, () => {}, () => ({log: false, lo: 0, hi: 1}));
            return ranges[0].textContent;
        })""",
            [[1.0, 1.0 - 1e-4], [1.0, 1.0 - 0.0049], [1.0, 0.98], [0.9, 1.0]],
        )
        browser.close()
    assert said == [vitviz.sentences.fixed(x, digits) for x, digits in cases]
    assert "-0.00" not in said
    tie = "colour: -0.80 (dark) to 0.00 (bright, the top patch tied with the top key); 0 is the top key, CLS, not on"
    assert lines == [
        f"{tie} the photo",
        f"{tie} the photo",
        "colour: -0.80 (dark) to -0.02 (bright); 0 is the top key, CLS, not on the photo",
        "colour: -0.80 (dark) to 0.00 (bright); 0 is the top key, p0 (0, 0)",
    ]


SMOOTH = np.dstack([*np.meshgrid(np.linspace(40, 210, 72), np.linspace(60, 190, 40)), np.full((40, 72), 128.0)])


@pytest.mark.browser
@pytest.mark.parametrize(
    "cmap, alpha, scale", [("inferno", 0.6, "log"), ("viridis", 0.1, "min-max"), ("magma", 0.9, "robust")]
)
def test_the_explorer_paints_with_the_pages_colormap_opacity_and_colour_scale_as_the_server_does(cmap, alpha, scale):
    """The large map of one head, read back from its canvas at each patch's centre, against the server's own overlay
    of the same map (`views.attention.attention_view`: same photo, layer, head, query and settings) at the same
    places. The photo under it is a JPEG in the browser (quality 88): on a smooth photo that costs at most 3 levels of
    255, the colour index's rounding one more step of the colormap. Painted again with the default settings, it
    differs."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES["dinov2_registers"](), SMOOTH.astype(np.uint8), longest=72)
    layer, head, patch = 1, 2, 12
    meta, layers = family_meta(a)
    meta.update(explorer.look(cmap, alpha, scale))
    server = attention_view(a, layer, head, patch, cmap, alpha, scale=scale)[0]
    photo = display(a)
    gh, gw = a.grid
    centres = [((r + 0.5) / gh, (c + 0.5) / gw) for r in range(gh) for c in range(gw) if r * gw + c != patch]
    want = np.array([server[int(y * photo.shape[0]), int(x * photo.shape[1])] for y, x in centres], float)
    read = """(centres) => { const c = document.querySelector(".vx-big-canvas"), g = c.getContext("2d");
      const at = ([y, x]) => g.getImageData(Math.floor(x * c.width), Math.floor(y * c.height), 1, 1).data;
      return centres.map((p) => Array.from(at(p).slice(0, 3))); }"""
    with sync_api.sync_playwright() as pw:
        browser, page, _ = bare_page(pw, meta, layers)
        page.evaluate(f"() => window.vitviz.explorer.hover({layer}, {head}, {patch})")
        got = np.array(page.evaluate(read, centres), float)
        page.evaluate("(m) => window.setMeta(m)", {**meta, **explorer.look("inferno", 0.6, "log")})
        page.evaluate(f"() => window.vitviz.explorer.hover({layer}, {head}, {patch})")
        default = np.array(page.evaluate(read, centres), float)
        note = page.locator(".vx-scale-note").inner_text()
        browser.close()
    lut = np.frombuffer(base64.b64decode(explorer.lut(cmap)), np.uint8).astype(float).reshape(256, 3)
    step = np.abs(np.diff(lut, axis=0)).max()  # one index of the colormap, at its steepest
    assert np.abs(got - want).max() <= 3 + alpha * step, np.abs(got - want).max()
    assert np.abs(got - want).mean() <= 2
    if (cmap, alpha, scale) != ("inferno", 0.6, "log"):
        assert np.abs(default - got).mean() > 5  # the settings changed the canvas
    assert "log scale" in note


@pytest.mark.browser
@pytest.mark.parametrize("name", ["deit", "vit", "siglip"])
def test_the_readout_button_asks_what_python_calls_the_readout(name):
    """Through the button (not the handle): a distilled DeiT's readout is its CLS and distillation rows averaged,
    as `Analysis.attention_map(query="readout")` makes it; a ViT's is its CLS; SigLIP's its pooling probe."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES[name](), random_image(40, 56, seed=7), longest=56)
    layer, head = a.num_layers - 1, 1
    with sync_api.sync_playwright() as pw:
        browser, page, _ = bare_page(pw, *family_meta(a))
        page.evaluate(f"() => window.vitviz.explorer.hover({layer}, {head}, 0)")  # a patch first
        page.click(".vx-readout")
        page.wait_for_function("() => window.vitviz.explorer.state().pinned")
        weights = np.array(
            page.evaluate(f"""async () => {{ await window.vitviz.explorer.layer({layer});
            return Array.from(window.vitviz.explorer.temperature(1).weights); }}""")
        )
        label = page.locator(".vx-readout").inner_text()
        browser.close()
    want = a.query_rows(layer, "readout")[head]  # float32, from the same queries and keys: to float rounding
    np.testing.assert_allclose(weights, want, atol=1e-6)
    np.testing.assert_allclose(weights[a.n_prefix :].reshape(a.grid), a.attention_map(layer, head), atol=1e-6)
    if name == "deit":
        assert label == "Query: readout (CLS + distillation)"
        assert np.abs(weights - a.query_rows(layer, "cls")[head]).max() > 10 * 1e-6  # not CLS's row alone


HIGHLIGHT = """(t) => document.dispatchEvent(new CustomEvent("vitviz-highlight", {detail: {patches: t}}))"""


@pytest.mark.browser
def test_a_highlight_outlines_its_patches_and_a_hover_tells_what_is_shown():
    """Another view's vitviz-highlight outlines exactly its tokens' patches on the large canvas (null clears them);
    each change of the shown query, layer or head dispatches one vitviz-hover with them, a pointer's too."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES["deit"](), random_image(48, 64, seed=8), longest=64)  # 6 x 8 patches, 2 prefix tokens
    gh, gw, n = *a.grid, a.n_prefix
    cyan = """(cells) => { const c = document.querySelector(".vx-big-canvas"), g = c.getContext("2d");
      const thick = Math.max(2, Math.round(Math.min(c.width, 900) / 300)), cw = c.width / GW, ch = c.height / GH;
      return cells.map(([r, col]) => { const d = g.getImageData(Math.floor(col * cw + thick / 2),
        Math.floor((r + 0.5) * ch), 1, 1).data; return d[0] === 0 && d[1] === 229 && d[2] === 255; }); }"""
    cyan = cyan.replace("GW", str(gw)).replace("GH", str(gh))  # the outline's centre line, on each patch's left
    cells = [(r, c) for r in range(gh) for c in range(gw)]
    with sync_api.sync_playwright() as pw:
        browser, page, _ = bare_page(pw, *family_meta(a))
        page.evaluate("""() => { window.told = [];
          document.addEventListener("vitviz-hover", (e) => window.told.push(e.detail)); }""")
        page.evaluate("() => window.vitviz.explorer.hover(1, 2, 0)")
        page.evaluate("() => window.vitviz.explorer.hover(1, 2, 0)")  # the same again: nothing new to tell
        page.evaluate("() => window.vitviz.explorer.hover(1, 2, -1)")
        box = page.locator(".vx-big-canvas").bounding_box()
        page.mouse.move(box["x"] + 3.5 * box["width"] / gw, box["y"] + 2.5 * box["height"] / gh)
        page.wait_for_timeout(100)
        told = page.evaluate("() => window.told")
        page.evaluate(HIGHLIGHT, [n + 9, n + gh * gw - 1, 0])
        page.wait_for_timeout(100)
        lit = page.evaluate(cyan, cells)
        state = page.evaluate("() => window.vitviz.explorer.state()")
        page.evaluate(HIGHLIGHT, None)
        page.wait_for_timeout(100)
        cleared = page.evaluate(cyan, cells)
        browser.close()
    assert len(told) <= 4  # before these, perhaps the first layer's first paint
    assert told[-3:] == [
        {"layer": 1, "head": 2, "query": n, "mode": "attention"},
        {"layer": 1, "head": 2, "query": -2, "mode": "attention"},  # DeiT's readout: CLS + distillation
        {"layer": 1, "head": 2, "query": n + 2 * gw + 3, "mode": "attention"},
    ]
    assert [cells[i] for i, on in enumerate(lit) if on] == [(1, 1), (gh - 1, gw - 1)]  # the CLS token has no patch
    assert state["highlight"] == [n + 9, n + gh * gw - 1, 0] and not any(cleared)


@pytest.fixture(scope="module")
def app_page():
    sync_api = browser_or_skip()
    with running_app() as url, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.layer_requests, page.route_tokens = [], set()

        def asked(r) -> None:
            if "/vitviz/explorer/layer" in r.url:
                page.layer_requests.append(r.url)
                page.route_tokens.add(r.headers.get(TOKEN_HEADER.lower()))

        page.on("request", asked)
        page.goto(url)
        page.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        page.get_by_role("tab", name=label("attention")).click()
        yield page
        browser.close()


def wait_for_layers(page, suffix: str, layers: int) -> None:
    page.wait_for_function(
        """([suffix, n]) => { const e = window.vitviz && window.vitviz.explorer; if (!e) return false;
             const s = e.state(); return s.key && s.key.endsWith(suffix) && s.loaded.length === n; }""",
        arg=[suffix, layers],
        timeout=90_000,
    )


@pytest.mark.browser
@pytest.mark.parametrize("size", ["448", "224"])
def test_the_app_computes_the_captured_weights_of_the_embedded_model(app_page, embedded, size):
    page = app_page
    if size != "448":
        page.get_by_label("Input size (longest side, pixels)").click()
        page.locator(f'li[role=option][aria-label="{size}"]').click()
    suffix = "model default" if size == "448" else size
    wait_for_layers(page, suffix, embedded.num_layers)
    a = vitviz.analyze(embedded, ASSETS / "chelsea.jpg", longest=int(size))
    gh, gw = a.grid
    patches = [-1, 0, gw - 1, (gh - 1) * gw, gh * gw - 1, (gh // 2) * gw + gw // 3]
    cases = [(layer, h, p) for layer in range(embedded.num_layers) for h in range(embedded.num_heads) for p in patches]
    rows = np.array(page.evaluate(HOVER_ALL, cases))
    diff = np.abs(rows - captured_rows(a, cases)).max(axis=1)
    assert diff.max() <= BOUND, (cases[int(diff.argmax())], diff.max())
    state = page.evaluate("() => window.vitviz.explorer.state()")
    assert state["bytes"] == 4 * (2 * a.num_tokens * 384 + 6 * a.num_tokens)


@pytest.mark.browser
def test_the_layer_route_refuses_what_it_cannot_serve(app_page):
    """A bad layer, an unknown analysis, or no page token (the page sends its own in a header, never in the URL): a
    4xx that says why, and the app goes on."""
    page = app_page
    page.wait_for_function("() => window.vitviz?.explorer?.state().loaded.length", timeout=60_000)
    key = page.evaluate("() => window.vitviz.explorer.state().key")
    (token,) = page.route_tokens
    assert token and all(token not in url for url in page.layer_requests)
    got = page.evaluate(
        """async ([key, header, token]) => {
          const one = async (q, t = token) => {
            const r = await fetch('/vitviz/explorer/layer?' + new URLSearchParams(q), {headers: {[header]: t}});
            return [r.status, await r.text()]; };
          const s = window.vitviz.explorer.state();
          return [await one({session: s.session, key: 'gone', layer: '0'}),
                  await one({session: s.session, key, layer: '99'}), await one({key}),
                  await one({session: s.session, key, layer: '-1'}), await one({session: s.session, key, layer: '²'}),
                  await one({session: s.session, key: 'any', layer: '0'}, 'guessed'),
                  await one({session: 'another', key, layer: '0'})];
        }""",
        [key, TOKEN_HEADER, token],
    )
    assert got[0][0] == 404 and "no longer kept" in got[0][1]
    assert got[1][0] == 400 and "layer must be an integer in [0, 12), got '99'" in got[1][1]
    assert got[2][0] == 400 and "session and key" in got[2][1]
    assert got[3][0] == 400 and got[4][0] == 400  # '²' is a digit to str.isdigit, not to int
    assert got[5] == got[6] == [403, "this page's token is missing or wrong: reload the page"]
    page.evaluate("() => window.vitviz.explorer.hover(3, 1, 5)")


@pytest.mark.browser
def test_inside_a_head_in_the_browser_shows_the_heads_scores_shifted_and_its_weights(app_page, embedded):
    """Inside a head's live panel, on the same engine: its weights are the captured row, its layers come from
    the Attention tab's (no second fetch), and its handle is window.vitviz.inside."""
    page = app_page
    page.get_by_role("tab", name=label("inside")).click()
    page.wait_for_function(
        "() => window.vitviz.inside && window.vitviz.inside.state().loaded.length === 12", timeout=60_000
    )
    state = page.evaluate("() => window.vitviz.inside.state()")
    assert state["key"] == page.evaluate("() => window.vitviz.explorer.state().key")
    asked = [parse_qs(urlparse(u).query) for u in page.layer_requests]
    mine = [q for q in asked if q.get("key") == [state["key"]] and q.get("session") == [state["session"]]]
    layers = sorted(int(q["layer"][0]) for q in mine if q["layer"][0] in {str(i) for i in range(12)})
    assert layers == list(range(12))  # each layer fetched once, for both modes
    suffix = state["key"].split("|")[-1]
    a = vitviz.analyze(embedded, ASSETS / "chelsea.jpg", longest=None if suffix == "model default" else int(suffix))
    cases = [(5, 3, 17), (11, 0, -1), (0, 5, a.grid[0] * a.grid[1] - 1)]
    rows = np.array(page.evaluate(HOVER_ALL.replace("explorer", "inside"), cases))
    assert np.abs(rows - captured_rows(a, cases)).max() <= BOUND
    ranges = page.locator("#inside-explorer .vx-range").all_inner_texts()
    assert "(bright); 0 is the top key, " in ranges[0] and ranges[1].startswith("colour: log scale, ")
    page.get_by_role("tab", name=label("attention")).click()


def test_one_page_has_one_layer_computing_at_a_time_and_another_page_is_not_held_up(monkeypatch):
    """A flood from one session: while its layer computes, its next request gets 503 at once (the page asks again)
    and another session's layer is served; when it is done, the session may ask again, for a layer it was not
    just sent."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import nullcontext
    from types import SimpleNamespace

    import anyio
    from conftest import tiny_vit
    from starlette.requests import Request

    from vitviz.app import explorer as route

    a = vitviz.analyze(tiny_vit(), random_image(32, 32, seed=5))
    cache, redraws = SimpleNamespace(get=lambda key: a), SimpleNamespace(interactive=nullcontext)
    server = SimpleNamespace(cache=cache, redraws=redraws, holds_page_token=lambda session, token: True)
    started, release, real = threading.Event(), threading.Event(), route.explorer.layer_data

    def slow(analysis, layer):
        if layer == 0:
            started.set()
            assert release.wait(10)
        return real(analysis, layer)

    monkeypatch.setattr(route.explorer, "layer_data", slow)

    def ask(session: str, layer: int):
        scope = {
            "type": "http",
            "method": "GET",
            "path": route.LAYER_PATH,
            "headers": [],
            "query_string": f"session={session}&key=k&layer={layer}".encode(),
        }
        with ThreadPoolExecutor(1) as thread:  # an event loop of its own: the browser tests' may run in this one
            return thread.submit(anyio.run, route.layer_response, server, Request(scope)).result()

    first: list = []
    worker = threading.Thread(target=lambda: first.append(ask("flood", 0)))
    worker.start()
    assert started.wait(10)
    again = ask("flood", 1)
    assert again.status_code == 503 and b"has a layer on its way already" in again.body
    other = ask("another", 1)
    assert other.status_code == 200 and other.body == real(a, 1).tobytes()
    release.set()
    worker.join(10)
    assert first[0].status_code == 200 and ask("flood", 1).status_code == 200
    again = ask("flood", 1)  # a layer it was just sent: a loop, refused at once
    assert again.status_code == 503 and b"was sent this layer just now" in again.body
    assert ask("third", 1).status_code == 200 and ask("flood", 2).status_code == 200
