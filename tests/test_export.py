"""The Explorer as one offline HTML file (`vitviz.export_html`, `vitviz explore --html`): what it embeds, read back
in Python, and the file itself opened from file:// in Chromium with every request but file:// refused, its
weights compared with the attention that the model's own forward captured."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import ASSETS, FAMILIES, random_image, sharp_heads
from support.harness import CHROMIUM
from support.harness import CHROMIUM_ARGS as ARGS
from support.qk_reference import reference_map, top_keys
from test_cli import HEAVY, ROOT, usage
from test_explorer import BOUND, HOVER_ALL, browser_or_skip, captured_rows, wrong_head_miss

import vitviz
from vitviz import explorer
from vitviz.export import explorer_html, export_html


def embedded_json(page: str, element: str):
    return json.loads(re.search(rf'<script type="application/json" id="{element}">(.*?)</script>', page, re.S)[1])


def test_the_file_holds_the_chosen_layers_bytes_and_the_pages_settings():
    a = vitviz.analyze(FAMILIES["deit"](), random_image(40, 56, seed=2), longest=56)
    page = explorer_html(a, layers=[2, 0], cmap="viridis", opacity=0.3, scale="robust")
    meta, layers = embedded_json(page, "vitviz-meta"), embedded_json(page, "vitviz-layers")
    assert sorted(layers) == ["0", "2"] and meta["only"] == [0, 2] and meta["start"] == 2
    for layer, text in layers.items():
        assert base64.b64decode(text) == explorer.layer_data(a, int(layer)).tobytes()
    assert (meta["cmap"], meta["alpha"], meta["colourScale"]) == ("viridis", 0.3, "robust")
    assert meta["readout"]["tokens"] == [0, 1] and meta["grid"] == list(a.grid)
    assert "http://" not in page and "https://" not in page  # nothing to fetch: the photo is a data: URL
    other = explorer_html(vitviz.analyze(a.model, random_image(40, 56, seed=3), longest=56), layers=[0])
    assert embedded_json(other, "vitviz-meta")["key"] != meta["key"]  # two files' photos never share layers


def test_an_analysis_the_app_keeps_is_taken_as_it_is_not_as_an_image():
    """`analyze(roll=True)` hands out the cache around the record (`Derived`): the Explorer takes it as it is."""
    model = FAMILIES["deit"]()
    kept = vitviz.analyze(model, random_image(40, 56, seed=2), longest=56, roll=True)
    assert explorer.analysis_of(kept) is kept and explorer.analysis_of(kept.analysis) is kept.analysis
    assert embedded_json(explorer_html(kept, layers=[0]), "vitviz-meta")["grid"] == list(kept.grid)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"layers": [0, 9]}, "layer must be in"),
        ({"layers": []}, "layers is empty"),
        ({"layers": [0, 1], "layer": 2}, "layer 2 is not among the embedded layers [0, 1]"),
        ({"scale": "loud"}, "unknown colour scale 'loud'"),
        ({"opacity": 1.5}, "opacity must be between 0 and 1"),
    ],
)
def test_bad_options_name_the_problem(options, message):
    a = vitviz.analyze(FAMILIES["vit"](), random_image(40, 56), longest=56)
    with pytest.raises(ValueError, match=re.escape(message)):
        explorer_html(a, **options)


def open_offline(pw, path):
    """The file in Chromium from file://, every request that is not file:// refused and kept."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    refused, errors = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route(
        "**/*",
        lambda r: r.continue_() if r.request.url.startswith("file://") else (refused.append(r.request.url), r.abort()),
    )
    page.goto(path.as_uri())
    page.wait_for_function("() => window.vitviz && window.vitviz.explorer.state().loaded.length > 0")
    return browser, page, refused, errors


@pytest.mark.browser
def test_the_file_opens_offline_and_shows_the_captured_weights_by_pointer_slider_and_head(tmp_path):
    """A distilled DeiT (two readout tokens) whose heads attend sharply and each its own way, every layer and head:
    the handle's rows are the captured ones; a real
    pointer moves the query, the slider the layer and the select the head; a layer left out is said to be."""
    sync_api = browser_or_skip()
    model = sharp_heads(FAMILIES["deit"]())
    a = vitviz.analyze(model, random_image(48, 64, seed=9), longest=64)
    gh, gw = a.grid
    path = export_html(a, tmp_path / "deit.html", layers=[0, 1])
    patches = [-1, 0, gw - 1, gh * gw - 1, (gh // 2) * gw + gw // 2]
    cases = [(layer, h, p) for layer in (0, 1) for h in range(model.num_heads) for p in patches]
    assert wrong_head_miss(a, cases) >= 10 * BOUND  # two heads swapped would miss the bound tenfold
    with sync_api.sync_playwright() as pw:
        browser, page, refused, errors = open_offline(pw, path)
        rows = np.array(page.evaluate(HOVER_ALL, cases))
        page.select_option(".vx-head", "2")
        page.locator(".vx-layer").fill("0")  # the slider, as a user drags it
        box = page.locator(".vx-big-canvas").bounding_box()
        page.mouse.move(box["x"] + 3.5 * box["width"] / gw, box["y"] + 4.5 * box["height"] / gh)
        page.wait_for_timeout(150)
        state = page.evaluate("() => window.vitviz.explorer.state()")
        weights = page.evaluate("() => Array.from(window.vitviz.explorer.temperature(1).weights)")
        missing = page.evaluate("() => window.vitviz.explorer.layer(2).then(() => 'loaded', (e) => e.message)")
        browser.close()
    assert refused == [] and errors == []
    assert np.abs(rows - captured_rows(a, cases)).max() <= BOUND
    assert (state["layer"], state["head"], state["query"]) == (0, 2, a.n_prefix + 4 * gw + 3)
    assert np.abs(np.array(weights) - captured_rows(a, [(0, 2, 4 * gw + 3)])[0]).max() <= BOUND
    assert missing == "layer 2 is not in this file: export it with --layers"


@pytest.mark.browser
def test_the_cli_writes_the_embedded_models_file_whose_every_layer_gives_the_captured_weights(embedded, tmp_path):
    """`vitviz explore` at 224 px, all 12 layers: the size said on stderr is the file's, and from file:// with the
    network refused every layer's rows are within 1e-3 of the forward's; on a phone the page fits its width."""
    sync_api = browser_or_skip()
    out = tmp_path / "chelsea.html"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "vitviz", "explore", str(ASSETS / "chelsea.jpg"), "--html", str(out), "--size", "224"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    said = re.search(r"wrote .* \(([0-9.]+) MB: 12 layers at 224 × 154 px", run.stderr)
    assert said and abs(float(said[1]) - out.stat().st_size / 1e6) < 0.05, run.stderr
    a = vitviz.analyze(embedded, ASSETS / "chelsea.jpg", longest=224)
    gh, gw = a.grid
    cases = [(layer, h, p) for layer in range(12) for h in (0, 5) for p in (-1, 0, gh * gw - 1, gw + 3)]
    with sync_api.sync_playwright() as pw:
        browser, page, refused, errors = open_offline(pw, out)
        rows = np.array(page.evaluate(HOVER_ALL, cases))
        page.set_viewport_size({"width": 390, "height": 844})  # a phone: the page is no wider than the screen
        page.wait_for_timeout(300)
        phone_width = page.evaluate("() => document.documentElement.scrollWidth")
        browser.close()
    assert refused == [] and errors == [] and phone_width <= 390
    diff = np.abs(rows - captured_rows(a, cases)).max(axis=1)
    assert diff.max() <= BOUND, (cases[int(diff.argmax())], diff.max())


def test_the_qk_view_costs_the_file_no_layer_bytes_and_224_px_stays_under_15_mb(embedded):
    """The embedded model at 224 px, all 12 layers: the Q·K view reads the layers already embedded, so the file
    grows only by its script and meta (each patch's colour, what every head sorts by), and stays under 15 MB."""
    a = vitviz.analyze(embedded, ASSETS / "chelsea.jpg", longest=224)
    with_qk, without = explorer_html(a), explorer_html(a, with_qk=False)
    assert embedded_json(with_qk, "vitviz-layers") == embedded_json(without, "vitviz-layers")
    meta = embedded_json(with_qk, "vitviz-meta")
    assert (
        meta["qk"]["umap"] is False
        and len(meta["qk"]["sorts"]) == 12
        and "qk" not in embedded_json(without, "vitviz-meta")
    )
    assert len(with_qk) - len(without) < 150_000 and len(with_qk.encode()) <= 15e6, (len(with_qk), len(without))


@pytest.mark.browser
def test_the_files_qk_view_maps_every_layer_and_links_with_the_explorer_both_ways(tmp_path):
    """From file:// with the network refused, five prefix tokens: the Q·K view's coordinates equal the float64 PCA
    of the normalised q and k on every layer (first and last head); the Explorer's query (its handle, the pointer's
    path) moves the view there and marks its point; the real pointer on a key in the view outlines, on the
    Explorer, that patch and the queries that give it the most weight."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES["dinov2_registers"](), random_image(48, 64, seed=7), longest=64)
    gh, gw = a.grid
    path = export_html(a, tmp_path / "qk.html")
    with sync_api.sync_playwright() as pw:
        browser, page, refused, errors = open_offline(pw, path)
        page.wait_for_function("() => window.vitviz.qk && window.vitviz.qk.state().points > 0")
        maps = {}
        for layer in range(a.model.num_layers):
            for head in (0, a.model.num_heads - 1):
                page.evaluate("([l, h]) => window.vitviz.qk.show(l, h)", [layer, head])
                maps[layer, head] = np.array(page.evaluate("() => window.vitviz.qk.coords().xy")).reshape(-1, 2)
        query = a.n_prefix + 3 * gw + 5
        page.evaluate("(p) => window.vitviz.explorer.hover(1, 2, p)", 3 * gw + 5)
        page.wait_for_function("(q) => window.vitviz.qk.state().told?.query === q", arg=query)
        told = page.evaluate("() => window.vitviz.qk.state()")
        page.locator(".qk-over").scroll_into_view_if_needed()
        key = a.n_prefix + gw + 1
        at = page.evaluate("(t) => window.vitviz.qk.pointAt(0, 'key', t)", key)
        page.mouse.move(at["x"] + 30, at["y"] + 30)
        page.mouse.move(at["x"], at["y"])
        page.wait_for_timeout(150)
        hovered = page.evaluate("() => window.vitviz.qk.state().highlight")
        outlined = page.evaluate("() => window.vitviz.explorer.state().highlight")
        hidden = [not page.locator(s).is_visible() for s in (".qk-photos", ".qk-method")]
        browser.close()
    assert refused == [] and errors == []
    for (layer, head), got in maps.items():
        want = reference_map([a], layer, head)
        np.testing.assert_allclose(got, want, atol=1e-6 * np.abs(want).max(), err_msg=f"{layer} {head}")
    assert (told["layer"], told["head"]) == (1, 2) and told["highlight"]["token"] == query
    assert told["highlight"]["tokens"] == top_keys(a, 1, 2, query)
    assert hovered["point"] == at["point"] and outlined == [key, *top_keys(a, 1, 2, key, of_query=False)]
    assert hidden == [True, True]  # one photo, no server: no Photos and no Map to choose


@pytest.mark.parametrize(
    "args, message",
    [
        (["explore", "x.jpg", "--html", "o.html"], "explore: no such file: x.jpg"),
        (["explore", str(ASSETS / "chelsea.jpg"), "--html", "o.png"], "--html must name an .html file"),
        (["explore", str(ASSETS / "chelsea.jpg"), "--html", "no/such/o.html"], "no such folder no/such"),
        (["explore", str(ASSETS / "chelsea.jpg"), "--html", "o.html", "--layers", "1-3"], "--layers must be 'all'"),
        (["explore", str(ASSETS / "chelsea.jpg")], "the following arguments are required: --html"),
    ],
)
def test_explores_usage_errors_exit_2_before_anything_heavy(args, message, tmp_path):
    rc, stderr, heavy, _ = usage(args, tmp_path)
    assert rc == 2 and message in stderr and "Traceback" not in stderr, stderr
    assert heavy == [], HEAVY
