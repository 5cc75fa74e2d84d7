"""The static site (vitviz/site): its ONNX graph against the Python API, its folder and server, and the browser's
numbers against Python's on every bundled photo (the forward in ONNX Runtime Web, the views in the page's JS)."""

from __future__ import annotations

import base64
import functools
import json
import re
import shutil
import threading
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path

import cv2
import numpy as np
import pytest

import vitviz
import vitviz.cli
from tests.conftest import reference_fused, reference_rollout
from tests.support.harness import CHROMIUM, CHROMIUM_ARGS, browser_or_skip
from vitviz import explorer, lesson, maps, render, sentences, whatif_words
from vitviz.outputs import patch_weights
from vitviz.preprocess import load_image
from vitviz.site import build as site_build
from vitviz.site import graph
from vitviz.site.serve import HEADERS, SiteHandler, server

SIZES = (224, 448)  # the longest side: every bundled photo but the square astronaut gives a non-square input


WORKFLOW = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "site.yml"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The folder as the publishing workflow builds it: its own command, `vitviz site _site`."""
    out = tmp_path_factory.mktemp("site") / "_site"
    lines = WORKFLOW.read_text().splitlines()
    command = next(line.split("run:", 1)[1].split() for line in lines if "run: vitviz site" in line)
    assert command[:2] == ["vitviz", "site"]
    assert vitviz.cli.main([*command[1:-1], str(out)]) == 0
    return out


def test_the_package_depends_on_what_the_sites_export_needs():
    """torch.onnx's exporter imports onnx, which torch does not bring: without it a plain install builds no site."""
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert any(d.split(">")[0].split("=")[0].strip() == "onnx" for d in project["dependencies"])


def test_the_publishing_workflow_installs_the_pinned_package_and_builds_with_the_cli():
    text = WORKFLOW.read_text()
    assert "pip install -c requirements.txt ." in text and "torch==2.13.0" in text
    assert "run: vitviz site _site" in text and "path: _site" in text and "actions/deploy-pages" in text


@pytest.fixture(scope="module")
def served(site):
    httpd = server(site, port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def rollout_start(a: vitviz.Analysis, dense: np.ndarray, toward: str) -> np.ndarray:
    row = np.zeros(a.num_tokens, np.float64)
    if toward == "readout":
        row[0] = 1.0
        return row
    row[a.n_prefix :] = patch_weights(dense, a.grid).ravel()
    return row / row.sum()


# ---- the graph, in Python's onnxruntime


@pytest.mark.slow
def test_the_graph_gives_the_python_apis_numbers_from_one_forward(site, embedded):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(site / "model.onnx"), providers=["CPUExecutionProvider"])
    a = vitviz.analyze(embedded, vitviz.example("coffee"), longest=336)  # 336 x 224: a non-square input
    out = dict(zip(graph.OUTPUTS, session.run(list(graph.OUTPUTS), {"pixel_values": a.pixel_values}), strict=True))
    layers = ort.InferenceSession(str(site / "layer.onnx"), providers=["CPUExecutionProvider"])
    distances = maps.patch_distances(a.grid, embedded.patch_size).numpy()
    each = [layers.run(None, {"q": q, "k": k, "distances": distances}) for q, k in zip(out["q"], out["k"], strict=True)]
    out.update({name: np.stack([e[i] for e in each]) for i, name in enumerate(graph.LAYER_OUTPUTS)})
    dense = ort.InferenceSession(str(site / "dense.onnx"), providers=["CPUExecutionProvider"])
    patches = out["tokens"][a.n_prefix :].T.reshape(1, -1, *a.grid)
    out["dense"] = dense.run(None, {"patches": np.ascontiguousarray(patches)})[0]
    np.testing.assert_allclose(out["tokens"], a.tokens, atol=1e-4)
    np.testing.assert_allclose(out["last"], a.hidden_states[-1], atol=1e-4)
    for layer in (0, 7, 11):
        p = a.projections(layer)
        np.testing.assert_allclose(out["q"][layer], p.u @ p.wq.T + p.bq, atol=1e-4)
        np.testing.assert_allclose(out["k"][layer], p.k, atol=1e-4)
        np.testing.assert_allclose(out["value_norms"][layer], p.value_norms, rtol=1e-4, atol=1e-5)
    for fusion in maps.HEAD_FUSIONS:  # the float16-rounded weights' fusion: one rounding step off at most
        np.testing.assert_allclose(out[fusion], a.fused(fusion).numpy(), atol=5e-4)
        assert np.abs(out[fusion] - a.fused(fusion).numpy()).mean() < 1e-6
    np.testing.assert_allclose(out["distance"], a.mean_attention_distance, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(out["entropy"], a.attention_entropy, atol=1e-4)
    np.testing.assert_allclose(out["dense"][0, 0], a.dense_map(), atol=1e-4)  # the app's output: the same forward's


@pytest.mark.slow
def test_the_folder_holds_the_whole_site_with_the_runtimes_licence(site):
    names = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    for name in (
        "layer.onnx",
        "dense.onnx",
        "index.html",
        "vitviz.js",
        "vitviz.css",
        "sw.js",
        "model.onnx",
        "positions.bin",
        "runtime/LICENSE",
        "runtime/ort.wasm.min.mjs",
        "runtime/ort-wasm-simd-threaded.mjs",
        "runtime/ort-wasm-simd-threaded.wasm",
    ):
        assert name in names, name
    assert {f"examples/{n}.jpg" for n in vitviz.EXAMPLES} <= names
    size = sum((site / name).stat().st_size for name in ("model.onnx", "layer.onnx", "dense.onnx"))
    assert 45e6 < size < 55e6  # float16 storage: half the float32 file (98.6 MB), one copy of each weight
    assert "Microsoft" in (site / "runtime" / "LICENSE").read_text()
    page = (site / "index.html").read_text()
    assert "{" + "config}" not in page and "never leaves this device" in page


def test_the_config_takes_every_fact_from_the_model(embedded):
    cfg = site_build.config(embedded, {"model": (123, "abc"), "layer": (4, "def"), "dense": (5, "0a1")})
    assert cfg["model"] == {"name": embedded.name, "patch": 14, "mean": list(embedded.mean), "std": list(embedded.std)}
    assert cfg["meta"]["layers"] == embedded.num_layers and cfg["meta"]["heads"] == embedded.num_heads
    assert cfg["meta"]["scale"] == pytest.approx(1 / 8) and cfg["meta"]["prefix"] == ["CLS"]
    assert cfg["positions"]["grid"] == [37, 37] and cfg["outputs"] == list(graph.OUTPUTS)
    assert cfg["modelBytes"] == 123 and cfg["layerUrl"] == "layer.onnx?v=def" and cfg["denseBytes"] == 5
    assert cfg["defaultSize"] in cfg["sizes"] and cfg["phoneSize"] in cfg["sizes"]


def test_positions_are_drawn_on_the_diverging_scale_the_app_draws_them_on(embedded):
    cfg = site_build.config(embedded, {})
    rgb = np.frombuffer(base64.b64decode(cfg["diverging"]), np.uint8).reshape(256, 3)
    assert cfg["diverging"] == vitviz.explorer.lut("diverging")
    assert rgb[0].tolist() == list(render.DIVERGING[0]) and rgb[255].tolist() == list(render.DIVERGING[2])


def test_the_server_isolates_the_page_and_serves_only_a_site(tmp_path):
    (tmp_path / "index.html").write_text("<!doctype html><title>x</title>")
    (tmp_path / "m.wasm").write_bytes(b"\0asm")
    httpd = server(tmp_path, port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{httpd.server_address[1]}/"
        with urllib.request.urlopen(base) as answer:
            for name, value in HEADERS.items():
                assert answer.headers[name] == value
        with urllib.request.urlopen(base + "m.wasm") as answer:
            assert answer.headers["Content-Type"] == "application/wasm"
        request = urllib.request.Request(base, data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(request)
    finally:
        httpd.shutdown()
        httpd.server_close()
    with pytest.raises(ValueError, match="holds no site"):
        server(tmp_path / "nothing", port=0)


# ---- the browser: the site's numbers against Python's


@pytest.fixture(scope="module")
def browser():
    sync = browser_or_skip()
    with sync.sync_playwright() as pw:
        fake_camera = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *fake_camera])
        yield chromium
        chromium.close()


def open_site(browser, url: str, width: int = 1400, height: int = 1000):
    """A fresh visitor (nothing cached) on the site, once its model is ready: (context, page)."""
    context = browser.new_context(viewport={"width": width, "height": height}, bypass_csp=True)
    page = context.new_page()
    page.goto(url)
    page.wait_for_function("() => window.vitviz && window.vitviz.site", timeout=60_000)
    page.evaluate("() => window.vitviz.site.ready.then(() => true)")
    return context, page


@pytest.mark.browser
def test_the_sites_rollout_sentence_is_pythons_at_and_around_each_threshold(browser):
    """One source of truth: the site fills Python's templates with Python's rule, and says what
    `sentences.rollout_truth` says for the same numbers, either side of each threshold and at a near-zero value."""
    page = browser.new_page()
    words = (explorer.STATIC / "text.js", site_build.PAGE / "rollout.js")
    page.set_content("<script>" + "\n".join(p.read_text() for p in words) + "</script>")
    both = (0.9994, sentences.ALIKE, sentences.ALIKE - 1e-4, sentences.PARTLY, sentences.PARTLY - 1e-4, -0.31)
    cases = [(b, out, cls) for b in both for out, cls in ((0.38, 0.12), (-0.004, 0.951))]
    said = page.evaluate(
        "([cases, rule]) => cases.map(([b, o, c]) => vitvizRolloutTruth(rule, 12, 'the CLS token', b, o, c))",
        [cases, sentences.rollout_rule()],
    )
    page.close()
    for (b, out, cls), got in zip(cases, said, strict=True):
        python = sentences.rollout_truth(12, "the CLS token", b, out, cls)
        assert got.replace("<b>", "**").replace("</b>", "**") == python
    assert sum("where information pools" in x for x in said) == 4 and sum("still changes" in x for x in said) == 8
    assert sum("rank the patches partly alike" in x for x in said) == 4 and "-0.00" not in "".join(said)


RISING = np.linspace(0.001, 0.01, 24) / np.linspace(0.001, 0.01, 24).sum() * 0.99  # 24 patches' weights, rising
LOOK_CASES = (  # (weights [N], prefix, grid, layer, head, query, guessed): the guess step's every branch
    ([0.4, *[0.6 / 6] * 6], ["CLS"], (2, 3), 6, 0, 4, None),  # before a guess
    ([0.05, 0.125, 0.0625, 0.5, 0.01, 0.3, 1e-7], ["CLS"], (2, 3), 6, 0, 4, 1),  # halves: 6.25 %, then 12.5 %
    ([0.05, 0.125, 0.0625, 0.5, 0.01, 0.3, 1e-7], ["CLS"], (2, 3), 6, 0, 4, 5),  # an underflowing weight
    ([0.05, 0.125, 0.0625, 0.5, 0.01, 0.3, 1e-7], ["CLS"], (2, 3), 11, 5, 4, 0),  # the same column
    ([0.6, 0.2, 0.01, 0.19], ["CLS", "register 0"], (1, 2), 0, 3, 1, 1),  # two prefix tokens above the top patch
    ([0.2, 0.1, 0.4, 0.2, 0.1], ["CLS"], (2, 2), 2, 1, 0, 1),  # the top patch found; CLS ties the guess below it
    *(([0.01, *RISING], ["CLS"], (4, 6), 3, 2, 7, guessed) for guessed in (11, 13)),  # the 13th, the 11th
    *(([0.01, *RISING[::-1]], ["CLS"], (4, 6), 3, 2, 7, guessed) for guessed in (11, 20)),  # the 12th, the 21st
    ([0.0, 1.0, 0.0, 0.0], [], (2, 2), 1, 1, 0, 3),  # no prefix; the guess gets nothing
)


@pytest.mark.browser
def test_the_sites_guess_sentence_is_pythons_in_every_branch(browser):
    """One source of truth for the site's exercise "guess where a head looks": guess.js' sentence is
    `whatif_words.look_words`' string for string, on the same weights, in each of its branches (no guess yet, the top
    patch found, a guess rows and columns away, prefix tokens above every patch, a weight rounding at a half, an
    underflowing one, the 11th to 13th and 21st ranks)."""
    page = browser.new_page()
    words = (explorer.STATIC / "text.js", site_build.PAGE / "bar.js", site_build.PAGE / "guess.js")
    page.set_content("<script>" + "\n".join(p.read_text() for p in words) + "</script>")
    cases = [
        (np.array(w, np.float32).tolist(), prefix, grid, layer, head, query, guessed)
        for w, prefix, grid, layer, head, query, guessed in LOOK_CASES
    ]
    said = page.evaluate("(cases) => cases.map((c) => vitvizLookWords(new Float32Array(c[0]), ...c.slice(1)))", cases)
    page.close()
    for case, got in zip(cases, said, strict=True):
        assert got == whatif_words.look_words(np.array(case[0], np.float32), *case[1:]), case
    joined = " ".join(said)
    branches = ["Click it on the photo", "you found the head's top patch", "**13 %**", "**6.3 %**", "under 0.01 %"]
    branches += ["More goes to CLS (60 %) and register 0 (20 %), tokens", "1 row and 4 columns", "2 columns from"]
    branches += [f"{rank} of the 25 keys" for rank in ("11th", "12th", "13th", "21st")]
    assert [b for b in branches if b not in joined] == []


@pytest.mark.browser
@pytest.mark.slow
def test_the_sites_guess_of_where_a_head_looks_reveals_pythons_numbers(page, embedded):
    """The site's exercise: a guess of the patch that a head attends to most from the centre patch, made through
    the test handle and by a click on the step's photo, reveals that head's attention row, the guess's weight and
    rank among the keys, and the head's top patch and its weight: Python's (`vitviz.analyze` on the same input)
    within 1e-4, in `whatif_words.look_words`' words."""
    run = page.evaluate("() => window.vitviz.site.analyse('examples/coffee.jpg', 'coffee', 336)")
    a = vitviz.analyze(embedded, vitviz.example("coffee"), longest=336)
    assert run["size"] == list(a.pixel_values.shape[2:])
    (gh, gw), n_prefix, prefix = a.grid, a.n_prefix, list(embedded.prefix_tokens)
    query = (gh // 2) * gw + gw // 2
    asked = page.evaluate("() => window.vitviz.site.look(4, 2)")
    assert asked["step"] == len(lesson.STEPS) + 1 and asked["title"] == "Guess where a head looks"
    assert asked["query"] == query and "weight" not in asked
    assert asked["text"] == whatif_words.look_words(np.array(asked["row"]), prefix, a.grid, 4, 2, query)
    assert page.evaluate(BAR, "lesson")["hidden"]  # the photo alone: nothing gives the answer away
    for layer, head, guessed in ((4, 2, 0), (9, 1, query + 1), (11, 5, gh * gw - 1)):
        got = page.evaluate(f"() => window.vitviz.site.look({layer}, {head}, {guessed})")
        row = a.query_rows(layer, query)[head].astype(np.float64)
        np.testing.assert_allclose(got["row"], row, atol=1e-4)
        assert got["weight"] == pytest.approx(row[n_prefix + guessed], abs=1e-4)
        assert got["topWeight"] == pytest.approx(row[n_prefix:].max(), abs=1e-4)
        assert row[n_prefix + got["top"]] >= row[n_prefix:].max() - 1e-4  # Python's top patch, or one tied with it
        mine = row[n_prefix + guessed]
        assert 1 + (row > mine + 1e-4).sum() <= got["rank"] <= 1 + (row > mine - 1e-4).sum()
        assert got["keys"] == a.num_tokens
        assert got["text"] == whatif_words.look_words(np.array(got["row"]), prefix, a.grid, layer, head, query, guessed)
        assert not page.evaluate(BAR, "lesson")["hidden"]  # the head's real map, with its colour bar
    top = got["top"]  # a click on the top patch's centre, as the student clicks
    canvas = page.locator(".site-panel[data-tab=lesson] canvas")
    box = canvas.bounding_box()
    canvas.click(position={"x": (top % gw + 0.5) * box["width"] / gw, "y": (top // gw + 0.5) * box["height"] / gh})
    clicked = page.evaluate(f"() => window.vitviz.site.lesson({len(lesson.STEPS) + 1})")
    assert clicked["text"] == whatif_words.look_words(np.array(got["row"]), prefix, a.grid, 11, 5, query, top)
    assert "you found the head's top patch" in clicked["text"]
    page.select_option(".site-look-head", "0")  # another head: a new guess to make
    assert "Click it on the photo" in page.evaluate(f"() => window.vitviz.site.lesson({len(lesson.STEPS) + 1})")["text"]


@pytest.fixture(scope="module")
def page(browser, served):
    context, page = open_site(browser, served + "?size=448")
    yield page
    context.close()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("name", vitviz.EXAMPLES)
def test_the_sites_numbers_equal_the_python_apis(page, embedded, name):
    for size in SIZES:
        run = page.evaluate(f"() => window.vitviz.site.analyse('examples/{name}.jpg', '{name}', {size})")
        a = vitviz.analyze(embedded, vitviz.example(name), longest=size)
        h, w = a.pixel_values.shape[2:]
        assert run["size"] == [h, w] and run["exact"]
        got = page.evaluate("() => window.vitviz.site.arrays()")  # every layer summarised first
        # the input: the browser's decode and OpenCV's resize, ported, equal Python's to the pixel
        rgb = load_image(vitviz.example(name))
        resized = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
        assert np.array_equal(np.array(got["pixels"], np.uint8).reshape(h, w, 3), resized)
        n, d = a.tokens.shape
        np.testing.assert_allclose(np.array(got["tokens"]).reshape(n, d), a.tokens, atol=1e-4)
        np.testing.assert_allclose(
            np.array(got["distance"]).reshape(12, 6), a.mean_attention_distance, rtol=1e-5, atol=1e-3
        )
        np.testing.assert_allclose(np.array(got["entropy"]).reshape(12, 6), a.attention_entropy, atol=1e-3)
        dense = a.dense_map()  # the app's output, from the same forward as the site's
        np.testing.assert_allclose(np.array(got["dense"]).reshape(h, w), dense, atol=1e-3)
        np.testing.assert_allclose(np.array(got["norms"]).reshape(a.grid), a.token_norms(), rtol=1e-4)
        np.testing.assert_allclose(np.array(got["pca"]).reshape(*a.grid, 3), a.pca_rgb(), atol=1e-3)
        for layer in (0, 6, 11):  # each layer's attention, through the same handle as the app's and the file's
            for head, query in ((0, -1), (3, 17), (5, a.grid[1] * a.grid[0] - 1)):
                weights = page.evaluate(
                    f"async () => Array.from((await window.vitviz.explorer.hover({layer}, {head}, {query})).weights)"
                )
                row = a.query_rows(layer, "readout" if query == -1 else query)[head]
                np.testing.assert_allclose(weights, row, atol=1e-4)
        for fusion in maps.HEAD_FUSIONS:
            fused = reference_fused(a.attentions, fusion)
            for discard in (0.0, 0.9):
                for toward in ("output", "readout"):
                    settings = {"fusion": fusion, "discard": discard, "toward": toward}
                    shown = page.evaluate("(s) => window.vitviz.site.rollout(s).then((r) => r.shares)", settings)
                    keep = (0,) if toward == "readout" else ()
                    ref = reference_rollout(fused, discard, rollout_start(a, dense, toward), keep)[a.n_prefix :]
                    ref = 100 * ref / ref.sum()
                    # ONNX Runtime's tokens differ from torch's by ~3e-5, so a float16-rounded weight can round the
                    # other way (the min fusion's tiny weights most), and at a discard fall on the other side of the
                    # threshold: 1.3e-4 of the largest share at worst over these photos, against the 1e-4
                    bound = 2e-4
                    assert np.abs(np.array(shown) - ref).max() <= bound * ref.max(), (fusion, discard, toward)
        for step in range(1, len(lesson.STEPS) + 1):  # the lesson's sentences, string for string
            got = page.evaluate(f"() => window.vitviz.site.lesson({step})")
            title, _, text = lesson.lesson_step(a, step)
            assert (got["title"], got["text"]) == (title, text), (name, size, step)
    for row, col in ((0, 0), (18, 30)):
        sim = page.evaluate(f"() => window.vitviz.site.positions({row}, {col})")
        np.testing.assert_allclose(np.array(sim).reshape(37, 37), embedded.pos_embed_similarity()[row, col], atol=1e-3)


BAR = """(tab) => Array.from(document.querySelectorAll(`.site-panel[data-tab=${tab}] .site-colourbar`), (el) => ({
  hidden: el.hidden, lo: el.querySelector('.site-bar-lo')?.textContent,
  hi: el.querySelector('.site-bar-hi')?.textContent, note: el.querySelector('.site-bar-note')?.textContent,
  ramp: el.querySelector('.vx-ramp')?.style.background}))[0]"""  # a tab's first colour bar, as the page shows it


def bar_number(label: str) -> float:
    return float(label.split()[0].replace("−", "-"))


def ramp_ends(ramp: str) -> list[list[int]]:
    colours = re.findall(r"rgb\((\d+), ?(\d+), ?(\d+)\)", ramp)
    return [list(map(int, colours[0])), list(map(int, colours[-1]))]


@pytest.mark.browser
@pytest.mark.slow
def test_each_maps_colour_bar_labels_the_ends_of_what_it_draws(page, embedded):
    """Each map's bar: its ends in the map's units, as Python's colour scale sets them on the numbers the page drew
    (rollout's shares on the page's log scale, the token norms lowest to highest), the dense map's 0 to 1, the
    positions' −1 to +1, in the colormap the map is drawn in, and the sentences about it true of it."""
    page.evaluate("() => window.vitviz.site.analyse('examples/coffee.jpg', 'coffee.jpg', 224)")
    inferno = np.frombuffer(base64.b64decode(explorer.lut("inferno")), np.uint8).reshape(256, 3)
    low, high = (f"{p}{'st' if p % 10 == 1 else 'th'}" for p in maps.CLIP_PERCENTILES)
    for settings in ({"fusion": "mean", "discard": 0, "toward": "output"}, {"fusion": "max", "discard": 0.5}):
        shares = page.evaluate("(s) => window.vitviz.site.rollout(s).then((r) => r.shares)", settings)
        _, lo, hi, clipped = maps.colour_scale(np.array(shares, np.float32), maps.DEFAULT_SCALE)
        bar = page.evaluate(BAR, "rollout")
        assert clipped.any() and bar["lo"].endswith(" %") and bar["hi"].endswith(" %")
        assert bar_number(bar["lo"]) == pytest.approx(10**lo, rel=6e-3)
        assert bar_number(bar["hi"]) == pytest.approx(10**hi, rel=6e-3)
        assert f"log scale, {low} to {high} percentile of the patches' shares of the flow" in bar["note"]
        assert ramp_ends(bar["ramp"]) == [inferno[0].tolist(), inferno[255].tolist()]
    step = page.evaluate("() => window.vitviz.site.lesson(6)")  # the lesson's rollout: mean, nothing discarded
    assert step["title"] == "The output and rollout"
    shares = page.evaluate(
        "(s) => window.vitviz.site.rollout(s).then((r) => r.shares)",
        {"fusion": "mean", "discard": 0, "toward": "output"},
    )
    page.evaluate("() => window.vitviz.site.lesson(6)")
    _, lo, hi, _ = maps.colour_scale(np.array(shares, np.float32), maps.DEFAULT_SCALE)
    bar = page.evaluate(BAR, "lesson")
    assert bar_number(bar["lo"]) == pytest.approx(10**lo, rel=6e-3) and not bar["hidden"]
    page.evaluate("() => window.vitviz.site.lesson(1)")  # the patches: no map, no bar
    assert page.evaluate(BAR, "lesson")["hidden"]

    page.evaluate("() => window.vitviz.site.tab('output')")
    dense = np.array(page.evaluate("() => window.vitviz.site.arrays()")["dense"])
    bar = page.evaluate(BAR, "output")
    assert (bar["lo"], bar["hi"]) == ("0", "1") and 0 <= dense.min() and dense.max() <= 1  # nothing drawn clipped
    assert "linear, from 0" in bar["note"] and ramp_ends(bar["ramp"]) == [inferno[0].tolist(), inferno[255].tolist()]
    said = page.inner_text(".site-output-text")
    assert "colour bar under the map runs from 0 to 1, linearly" in said and "percentile" not in said

    page.evaluate("() => window.vitviz.site.tab('heads')")
    norms = np.array(page.evaluate("() => window.vitviz.site.arrays()")["norms"])
    bar = page.evaluate(BAR, "heads")
    assert bar_number(bar["lo"]) == pytest.approx(norms.min(), rel=6e-3)
    assert bar_number(bar["hi"]) == pytest.approx(norms.max(), rel=6e-3)
    assert "linear, lowest to highest of the tokens' lengths" in bar["note"]
    viridis = np.frombuffer(base64.b64decode(explorer.lut("viridis")), np.uint8).reshape(256, 3)
    assert ramp_ends(bar["ramp"]) == [viridis[0].tolist(), viridis[255].tolist()]

    sim = np.array(page.evaluate("() => window.vitviz.site.positions(0, 0)"))
    bar = page.evaluate(BAR, "positions")
    assert (bar_number(bar["lo"]), bar_number(bar["hi"])) == (-1, 1) and -1 <= sim.min() and sim.max() <= 1
    assert ramp_ends(bar["ramp"]) == [list(render.DIVERGING[0]), list(render.DIVERGING[2])]


def site_config(site: Path) -> dict:
    page = (site / "index.html").read_text()
    start = page.index('id="vitviz-site">') + len('id="vitviz-site">')
    return json.loads(page[start : page.index("</script>", start)])


def test_the_precomputed_example_is_the_graphs_forward_on_the_pages_input(site, embedded):
    cfg = site_config(site)["preview"]
    assert cfg["name"] == f"{site_build.PREVIEW}.jpg" and cfg["size"] == site_build.PHONE_SIZE
    a = vitviz.analyze(embedded, vitviz.example(site_build.PREVIEW), longest=site_build.PHONE_SIZE)
    half = np.fromfile(site / cfg["url"].split("?")[0], "<f2").astype(np.float32)
    at, arrays = 0, {}
    for name in graph.OUTPUTS:
        count = int(np.prod(cfg["dims"][name]))
        arrays[name] = half[at : at + count].reshape(cfg["dims"][name])
        at += count
    assert at == half.size and cfg["bytes"] == 2 * half.size
    # float16 storage: within its rounding (2^-11 relative) of the Python API's own numbers on the same input
    np.testing.assert_allclose(arrays["tokens"], a.tokens, rtol=1e-3, atol=1e-3)
    for layer in (0, 11):
        np.testing.assert_allclose(arrays["k"][layer], a.projections(layer).k, rtol=1e-3, atol=1e-3)


@pytest.mark.browser
@pytest.mark.slow
def test_while_the_model_loads_every_view_draws_the_precomputed_example(browser, served, embedded):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, bypass_csp=True)
    page = context.new_page()
    held = threading.Event()
    page.route("**/model.onnx*", lambda route: (held.wait(60), route.continue_()))
    page.goto(served)
    shown = "() => window.vitviz && window.vitviz.site && window.vitviz.site.state().run"
    page.wait_for_function(shown, timeout=60_000)
    state = page.evaluate("() => window.vitviz.site.state()")
    assert state["ready"] is False and state["run"]["preview"] and state["run"]["name"] == "chelsea.jpg"
    assert "numbers computed when this site was built" in page.inner_text(".site-status")
    a = vitviz.analyze(embedded, vitviz.example(site_build.PREVIEW), longest=site_build.PHONE_SIZE)
    weights = page.evaluate("async () => Array.from((await window.vitviz.explorer.hover(11, 2, 40)).weights)")
    np.testing.assert_allclose(weights, a.query_rows(11, 40)[2], atol=2e-3)  # from float16 q and k
    arrays = page.evaluate("() => window.vitviz.site.arrays()")  # the small graphs run before the forward's is in
    np.testing.assert_allclose(np.array(arrays["distance"]).reshape(12, 6), a.mean_attention_distance, rtol=1e-2)
    held.set()
    page.evaluate("() => window.vitviz.site.ready.then(() => true)")
    assert "precomputed numbers" in page.inner_text(".site-status")
    context.close()


@pytest.mark.browser
@pytest.mark.slow
def test_a_second_visit_works_offline_and_no_request_carries_the_photo(browser, served, tmp_path):
    photo = tmp_path / "mine.png"
    cv2.imwrite(str(photo), cv2.resize(cv2.imread(str(vitviz.example("rocket"))), (300, 200)))
    sent = []
    context = browser.new_context(viewport={"width": 390, "height": 844}, bypass_csp=True)
    context.on("request", lambda r: sent.append((r.method, r.url, r.post_data_buffer)))
    page = context.new_page()
    page.goto(served + "?size=224")
    page.wait_for_function("() => window.vitviz && window.vitviz.site", timeout=60_000)
    page.evaluate("() => window.vitviz.site.ready.then(() => true)")
    assert page.evaluate("() => window.vitviz.site.state().cached") is False
    page.wait_for_function("() => navigator.serviceWorker.controller !== null", timeout=30_000)
    context.set_offline(True)
    page.reload()
    page.wait_for_function("() => window.vitviz && window.vitviz.site", timeout=60_000)
    page.evaluate("() => window.vitviz.site.ready.then(() => true)")
    state = page.evaluate("() => window.vitviz.site.state()")
    assert state["cached"] is True and state["ready"]
    page.set_input_files(".site-file", str(photo))
    page.wait_for_function("() => (window.vitviz.site.state().run || {}).name === 'mine.png'", timeout=60_000)
    assert page.evaluate("() => window.vitviz.site.state().run.size") == [154, 224]
    weights = page.evaluate("async () => Array.from((await window.vitviz.explorer.hover(11, 2, 40)).weights)")
    assert len(weights) == 1 + 11 * 16 and abs(sum(weights) - 1) < 1e-5
    context.close()
    assert sent and all(method == "GET" and body is None for method, _, body in sent), sent
    assert not any("mine.png" in url for _, url, _ in sent)


def counted_server(folder: Path) -> tuple[ThreadingHTTPServer, list[str]]:
    """A server of `folder` as `vitviz site --serve` is, serving, that lists the path of every GET it answers."""
    asked: list[str] = []

    class Counting(SiteHandler):
        def do_GET(self) -> None:
            asked.append(self.path.split("?")[0])
            super().do_GET()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Counting, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, asked


def visit(context, url: str):
    page = context.new_page()
    page.goto(url)
    page.wait_for_function("() => window.vitviz && window.vitviz.site", timeout=60_000)
    page.evaluate("() => window.vitviz.site.ready.then(() => true)")
    return page


@pytest.mark.browser
@pytest.mark.slow
def test_a_second_visit_asks_the_site_for_nothing_and_a_new_build_reaches_it(browser, site, tmp_path):
    """The first visit fetches the runtime's 14 MB .wasm and the model once each. The service worker answers from
    its cache first: a second visit fetches neither the .wasm nor the model, nor any other file (only sw.js, which
    the browser checks itself). A new build (a changed file, so a new hash in sw.js) reaches the returning visitor
    on the visit after the one that found it, whole, and the older build's cache is let go."""
    folder = shutil.copytree(site, tmp_path / "site")
    httpd, asked = counted_server(folder)
    url = f"http://127.0.0.1:{httpd.server_address[1]}/?size=224"
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, bypass_csp=True)
    try:
        page = visit(context, url)
        page.wait_for_function("() => navigator.serviceWorker.controller !== null", timeout=30_000)
        # the first visit fetches the runtime's 14 MB .wasm and the model once each: the page keeps them itself, and
        # the worker's install leaves them out (a 14 MB answer may not stay in a fresh profile's HTTP cache)
        assert [asked.count(p) for p in ("/runtime/ort-wasm-simd-threaded.wasm", "/model.onnx")] == [1, 1], asked
        page.close()
        asked.clear()
        page = visit(context, url)
        run = page.evaluate("() => window.vitviz.site.analyse('examples/rocket.jpg', 'rocket.jpg')")
        assert run["name"] == "rocket.jpg" and page.evaluate("() => window.vitviz.site.state().cached") is True
        assert set(asked) <= {"/sw.js", "/favicon.ico"}, asked  # the browser's own checks only
        page.close()
        # a new build: its page differs, so sw.js names a new cache
        worker = (folder / "sw.js").read_text()
        files = json.loads(re.search(r"const FILES = (\[.*?\]);", worker).group(1))
        index = folder / "index.html"
        index.write_text(index.read_text().replace("<title>", "<title>rebuilt: "))
        site_build.write_worker(folder, files)
        assert (folder / "sw.js").read_text() != worker
        build = re.search(r'const BUILD = "(\w+)"', (folder / "sw.js").read_text()).group(1)
        page = visit(context, url)  # this visit is the old build's, whole; it finds the new one, which takes over
        assert not page.title().startswith("rebuilt")
        taken = f"() => caches.keys().then((k) => k.includes('vitviz-site-{build}') && k.length === 2)"
        page.wait_for_function(taken, timeout=60_000)
        page.locator(".site-update", has_text="reload").wait_for(timeout=10_000)  # the page says so
        page.close()
        page = visit(context, url)
        assert page.title().startswith("rebuilt")
        names = page.evaluate("() => caches.keys()")
        assert len([n for n in names if n.startswith("vitviz-site-")]) == 1 and "vitviz-model" in names, names
        assert page.evaluate("() => window.vitviz.site.state().cached") is True  # the model was kept
    finally:
        context.close()
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.browser
@pytest.mark.slow
def test_a_student_with_a_keyboard_uses_the_page_under_its_own_content_security_policy(browser, served):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    context = browser.new_context(viewport={"width": 1400, "height": 1000})  # the page's CSP, not bypassed
    page = context.new_page()
    said = []
    page.on("console", lambda m: said.append(m.text))
    page.on("pageerror", lambda e: said.append(f"error: {e}"))
    page.goto(served + "?size=224")
    page.locator(".site-progress-text", has_text="Model ready").wait_for(timeout=120_000)
    for _ in range(20):  # Tab through the page to the file input
        page.keyboard.press("Tab")
        if "site-file" in (page.locator(":focus").get_attribute("class") or ""):
            break
    else:
        raise AssertionError("Tab never reaches the file input")
    for press in range(3):  # Space, a file input's own key; headless Chromium drops the first press's chooser in
        try:  # about 1 of 8 fresh contexts here, the focus on the input (a student presses again)
            with page.expect_file_chooser(timeout=5_000) as chooser:
                page.keyboard.press("Space")
            break
        except PlaywrightTimeout:
            if press == 2:
                raise
    chooser.value.set_files(str(vitviz.example("rocket")))
    page.locator(".site-status", has_text="The forward took").wait_for(timeout=120_000)
    assert page.evaluate("() => window.vitviz.site.state().run.name") == "rocket.jpg"
    page.locator(".site-tab[data-tab=tokens]").focus()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("() => window.vitviz.site.state().tab") == "attention"
    page.keyboard.press("End")
    assert page.evaluate("() => window.vitviz.site.state().tab") == "app"
    page.locator(".site-tab[data-tab=positions]").click()
    page.locator(".site-panel[data-tab=positions] canvas").focus()
    before = page.evaluate("() => window.vitviz.site.state().position")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowUp")
    assert page.evaluate("() => window.vitviz.site.state().position") == [before[0] - 1, before[1] + 1]
    context.close()
    refused = [text for text in said if "Content Security Policy" in text or "Refused" in text or "error:" in text]
    assert not refused, refused


@pytest.mark.app
@pytest.mark.slow
def test_the_app_serves_the_site_at_its_path_with_its_headers(tmp_path):
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from vitviz.app.site import HostedSite

    site = HostedSite(tmp_path / "site")
    client = TestClient(Starlette(routes=site.routes()))
    assert client.get("/site/").status_code == 503  # not written yet: said so, not a 404
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<!doctype html><title>the site</title>")
    site.start()
    answer = client.get("/site/")
    assert answer.status_code == 200 and "the site" in answer.text
    for name, value in HEADERS.items():
        assert answer.headers[name] == value
    assert client.get("/site/../pyproject.toml").status_code == 404


@pytest.mark.browser
@pytest.mark.slow
def test_the_camera_gives_a_frame_at_the_phones_size(browser, served):
    context, page = open_site(browser, served + "?size=448")
    page.click(".site-camera")  # opens the preview (Chromium's fake camera)
    page.wait_for_function("() => document.querySelector('.site-video').readyState >= 2", timeout=30_000)
    page.click(".site-camera")  # takes this frame
    framed = '() => (window.vitviz.site.state().run || {}).name === "the camera\'s frame"'
    page.wait_for_function(framed, timeout=60_000)
    assert max(page.evaluate("() => window.vitviz.site.state().run.size")) == 224
    context.close()
