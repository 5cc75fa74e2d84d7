"""The Explorer in a notebook (`vitviz.explore`): the widget's traits and answers in Python; its ES module (the
app's engine and boot_widget.js) rendered in Chromium on a model that stands in for anywidget's, whose messages
the widget answers; and the widget in a real JupyterLab. Rows are compared with the attention the forward captured."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import FAMILIES, random_image, sharp_heads
from support.harness import CHROMIUM
from support.harness import CHROMIUM_ARGS as ARGS
from test_explorer import BOUND, HOVER_ALL, browser_or_skip, captured_rows, wrong_head_miss

import vitviz
from vitviz import explorer

pytest.importorskip("anywidget")
from vitviz.widget import CSS, ENGINE, ENGINE_KEY, ESM  # noqa: E402 (after the skip: anywidget is an optional extra)


def test_the_widget_carries_the_meta_and_answers_a_layer_with_its_bytes():
    a = vitviz.analyze(FAMILIES["deit"](), random_image(40, 56, seed=2), longest=56)
    w = vitviz.explore(a, layer=1, opacity=0.25)
    assert w.meta["start"] == 1 and w.meta["alpha"] == 0.25 and w.meta["colourScale"] == "log"
    assert w.meta["readout"]["tokens"] == [0, 1] and w.meta["grid"] == list(a.grid)
    assert w.layer_message({"want": 2}) == ({"layer": 2}, [explorer.layer_data(a, 2).tobytes()])
    assert w.layer_message({"want": 7}) == ({"layer": 7, "error": "layer must be in [0, 3), got 7"}, [])
    assert w.layer_message({"other": 1}) is None
    assert w.layer_message({"want": "engine"}) == ({"engine": ENGINE_KEY}, [ENGINE])
    # the photo and the Q·K part are not in the state (a host keeps a closed widget's), but asked for once a view
    standalone = explorer.standalone_meta(a, "inferno", 0.25, "log", 1)
    assert "photo" not in w.meta and "qk" not in w.meta and w.meta["tokens"] == standalone["tokens"]
    reply, [extras] = w.layer_message({"want": "extras"})
    extras = json.loads(extras)
    assert reply == {"extras": True} and extras["photo"] == standalone["photo"] and extras["qk"]["sorts"]
    assert len(ESM) < 3000 and ENGINE_KEY in ESM and ENGINE.isascii() and b"vitvizExplorer" in ENGINE
    w.cmap, w.scale = "magma", "min-max"  # set again: the page gets them in the meta
    assert (w.meta["cmap"], w.meta["colourScale"]) == ("magma", "min-max")
    with pytest.raises(ValueError, match="unknown colour scale 'loud'"):
        vitviz.explore(a, scale="loud")
    with pytest.raises(ValueError, match="an Analysis already has both"):
        vitviz.explore(a, model=a.model)


MODEL = """(meta) => {
  // anywidget's model as render() sees it: get, on, off, send; a custom message goes to Python and back
  const handlers = {}, state = {meta};
  window.model = {
    get: (k) => state[k],
    on: (name, cb) => (handlers[name] ||= []).push(cb),
    off: (name, cb) => { handlers[name] = (handlers[name] || []).filter((x) => x !== cb); },
    send: (content) => window.kernel(content).then(([reply, b64]) => {
      const raw = b64 ? Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)) : null;
      for (const cb of handlers["msg:custom"] || []) cb(reply, raw ? [new DataView(raw.buffer)] : []);
    }),
    change: (meta) => { state.meta = meta; for (const cb of handlers["change:meta"] || []) cb(); },
    listeners: () => Object.values(handlers).reduce((n, list) => n + list.length, 0),
  };
}"""


def answered(widget, content) -> list:
    """What the kernel sends back to the page's message `content`, as `widget` answers it: [reply, its one buffer
    in base64, or None]."""
    reply, buffers = widget.layer_message(content)
    return [reply, base64.b64encode(buffers[0]).decode() if buffers else None]


def stand_in_page(pw, kernel, meta: dict):
    """(browser, page): Chromium on an empty page that holds the stand-in model (MODEL) with `meta`, whose messages
    `kernel(content)` answers (see `answered`)."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    page.route(
        "http://vitviz.test/**", lambda r: r.fulfill(body="<html><body></body></html>", content_type="text/html")
    )
    page.goto("http://vitviz.test/")
    page.expose_function("kernel", kernel)
    page.evaluate(MODEL, meta)
    return browser, page


RENDER = """async (esm) => {
  const url = URL.createObjectURL(new Blob([esm], {type: "text/javascript"}));
  const widget = (await import(url)).default, el = document.createElement("div");
  document.body.appendChild(el);
  window.cleanup = await widget.render({model: window.model, el});
}"""


@pytest.mark.browser
def test_the_widgets_module_computes_the_captured_weights_from_the_kernels_layers():
    """The widget's own _esm rendered on a stand-in model whose messages the widget answers: every layer and
    head within 1e-3 of the forward; a new opacity repaints with no layer asked again; its clean-up leaves no
    listener on the model, ten times in a row."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(sharp_heads(FAMILIES["deit"]()), random_image(48, 64, seed=4), longest=64)
    w = vitviz.explore(a)
    asked = []

    def kernel(content):  # what the kernel sends back, as the widget answers it
        asked.append(content["want"])
        return answered(w, content)

    gh, gw = a.grid
    cases = [(layer, h, p) for layer in range(3) for h in range(a.model.num_heads) for p in (-1, 0, gh * gw - 1, 9)]
    assert wrong_head_miss(a, cases) >= 10 * BOUND  # two heads swapped would miss the bound tenfold
    with sync_api.sync_playwright() as pw:
        browser, page = stand_in_page(pw, kernel, w.meta)
        page.evaluate(RENDER, ESM)
        rows = np.array(page.evaluate(HOVER_ALL, cases))
        page.wait_for_function("() => window.vitviz.explorer.state().loaded.length === 3")
        photo = page.evaluate("() => window.vitviz.explorer.state().photo")
        w.opacity = 0.2
        page.evaluate("(m) => window.model.change(m)", w.meta)
        page.wait_for_timeout(100)
        after = page.evaluate("() => window.vitviz.explorer.state()")
        left = []
        for _ in range(10):
            page.evaluate("() => { window.cleanup(); document.body.innerHTML = ''; }")
            left.append(page.evaluate("() => [window.model.listeners(), 'explorer' in window.vitviz]"))
            page.evaluate(RENDER, ESM)
        styles = page.evaluate("() => [...document.querySelectorAll('style[data-vitviz]')].map((s) => s.textContent)")
        browser.close()
    assert np.abs(rows - captured_rows(a, cases)).max() <= BOUND
    assert sorted(x for x in asked if isinstance(x, int)) == [0, 1, 2] and len(after["loaded"]) == 3  # once each
    assert asked[0] == "engine" and asked.count("engine") == 1  # the engine once a page, for eleven widgets
    assert asked[1] == "extras" and asked.count("extras") == 11  # the photo once a view: drawn, at its size
    assert photo == w.meta["photoSize"]
    assert styles == [CSS] and "_css" not in w.keys  # the style sheet once a page, from the engine, not the state
    assert left == [[0, False]] * 10


# A cell that ends with the widget: a tiny model of `family` on a random photo
NOTEBOOK_CELL = """import sys
sys.path[:0] = [{tests!r}]
from conftest import FAMILIES, random_image, sharp_heads
import vitviz
a = vitviz.analyze(sharp_heads(FAMILIES[{family!r}]()), random_image(48, 64, seed={seed}), longest=64)
vitviz.explore(a, layer=1)"""


@pytest.mark.slow
@pytest.mark.browser
def test_in_jupyterlab_the_widget_shows_the_captured_weights(tmp_path):
    """A real notebook server and Chromium: a cell that ends with vitviz.explore(...) is run; the widget's handle,
    hovered on every layer and head, reads the forward's attention within 1e-3; a real pointer moves its query."""
    sync_api = browser_or_skip()
    pytest.importorskip("jupyterlab")
    from support.jupyter import open_notebook, run_cell, running_jupyter, write_notebook

    write_notebook(
        tmp_path / "explore.ipynb",
        NOTEBOOK_CELL.format(tests=str(Path(__file__).resolve().parent), family="deit", seed=4),
    )
    a = vitviz.analyze(sharp_heads(FAMILIES["deit"]()), random_image(48, 64, seed=4), longest=64)  # the cell's
    gh, gw = a.grid
    cases = [(layer, h, p) for layer in range(3) for h in range(a.model.num_heads) for p in (-1, 0, gh * gw - 1, 9)]
    assert wrong_head_miss(a, cases) >= 10 * BOUND  # two heads swapped would miss the bound tenfold
    with running_jupyter(tmp_path) as url, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        open_notebook(page, url, "explore.ipynb")
        run_cell(page)
        page.wait_for_function("() => window.vitviz?.explorer?.state().loaded.length === 3", timeout=120_000)
        rows = np.array(page.evaluate(HOVER_ALL, cases))
        canvas = page.locator(".jp-OutputArea .vx-big-canvas")
        canvas.scroll_into_view_if_needed()
        box = canvas.bounding_box()
        page.mouse.move(box["x"] + 2.5 * box["width"] / gw, box["y"] + 1.5 * box["height"] / gh)
        page.wait_for_timeout(200)
        state = page.evaluate("() => window.vitviz.explorer.state()")
        browser.close()
    assert np.abs(rows - captured_rows(a, cases)).max() <= BOUND
    assert state["query"] == a.n_prefix + gw + 2


@pytest.mark.browser
def test_the_widgets_qk_view_maps_the_kernels_layers_and_links_with_its_explorer():
    """The same stand-in model: under the Explorer, the Q·K view's coordinates equal the float64 PCA of the
    normalised q and k on every layer and head, from layers the kernel sent once for both views; the Explorer's
    query marks its point there, and the real pointer on a query point outlines its patch and top keys on the
    Explorer. Without the Q·K part in the meta, there is no view."""
    from test_qk import reference_map, top_keys

    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES["deit"](), random_image(48, 64, seed=4), longest=64)
    w = [vitviz.explore(a)]  # the widget that the kernel answers for
    asked = []

    def kernel(content):
        asked.append(content["want"])
        return answered(w[0], content)

    gh, gw = a.grid
    with sync_api.sync_playwright() as pw:
        browser, page = stand_in_page(pw, kernel, w[0].meta)
        page.evaluate(RENDER, ESM)
        page.wait_for_function("() => window.vitviz.qk && window.vitviz.qk.state().points > 0")
        maps = {}
        for layer in range(a.model.num_layers):
            for head in range(a.model.num_heads):
                page.evaluate("([l, h]) => window.vitviz.qk.show(l, h)", [layer, head])
                maps[layer, head] = np.array(page.evaluate("() => window.vitviz.qk.coords().xy")).reshape(-1, 2)
        query = a.n_prefix + 2 * gw + 3
        page.evaluate("(p) => window.vitviz.explorer.hover(2, 1, p)", 2 * gw + 3)
        page.wait_for_function("(q) => window.vitviz.qk.state().told?.query === q", arg=query)
        told = page.evaluate("() => window.vitviz.qk.state()")
        page.locator(".qk-over").scroll_into_view_if_needed()
        token = a.n_prefix + gw
        at = page.evaluate("(t) => window.vitviz.qk.pointAt(0, 'query', t)", token)
        page.mouse.move(at["x"] + 30, at["y"] + 30)
        page.mouse.move(at["x"], at["y"])
        page.wait_for_timeout(150)
        hovered = page.evaluate("() => window.vitviz.qk.state().highlight")
        outlined = page.evaluate("() => window.vitviz.explorer.state().highlight")
        page.evaluate("() => { window.cleanup(); document.body.innerHTML = ''; }")
        after = page.evaluate("() => [window.model.listeners(), 'qk' in window.vitviz]")
        w[0] = vitviz.explore(a, with_qk=False)
        page.evaluate(MODEL, w[0].meta)
        page.evaluate(RENDER, ESM)
        bare = page.locator(".qk").count()
        browser.close()
    for (layer, head), got in maps.items():
        want = reference_map([a], layer, head)
        np.testing.assert_allclose(got, want, atol=1e-6 * np.abs(want).max(), err_msg=f"{layer} {head}")
    assert asked[:2] == ["engine", "extras"] and sorted(x for x in asked if isinstance(x, int)) == list(
        range(a.model.num_layers)
    )  # each layer once, for both views
    assert (told["layer"], told["head"]) == (2, 1) and told["highlight"]["tokens"] == top_keys(a, 2, 1, query)
    assert hovered["point"] == at["point"] and outlined == [token, *top_keys(a, 2, 1, token)]
    assert after == [0, False] and bare == 0


@pytest.mark.browser
def test_a_widget_whose_kernel_cannot_send_its_photo_says_so_and_builds_nothing():
    """The photo comes from the kernel before anything is built: an answer with an error (as a kernel that is gone
    times out) leaves the view saying why, with no Explorer and no listener on the model."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES["deit"](), random_image(48, 64, seed=4), longest=64)
    w = vitviz.explore(a)

    def kernel(content):
        if content["want"] == "extras":
            return [{"extras": True, "error": "the kernel was restarted"}, None]
        return answered(w, content)

    with sync_api.sync_playwright() as pw:
        browser, page = stand_in_page(pw, kernel, w.meta)
        page.evaluate(RENDER, ESM)
        shown = page.evaluate("() => [document.body.innerText, document.querySelectorAll('.vx, canvas').length]")
        left = page.evaluate("() => [window.model.listeners(), 'explorer' in (window.vitviz || {})]")
        browser.close()
    assert shown == ["The Explorer could not start: the kernel was restarted", 0] and left == [0, False]


HOST_RENDER = """async (esm) => {
  // as JupyterLab does: the module imported once per widget, each view's element kept after the view is removed
  if (!window.widgetModule) {
    const url = URL.createObjectURL(new Blob([esm], {type: "text/javascript"}));
    window.widgetModule = (await import(url)).default;
    window.keptViews = [];
  }
  const el = document.createElement("div");
  document.body.appendChild(el);
  window.keptViews.push(el);
  window.cleanup = await window.widgetModule.render({model: window.model, el});
}"""

LOADED = "() => window.vitviz.explorer?.state().loaded.length === 3 && window.vitviz.qk?.state().points > 0"


@pytest.mark.browser
def test_ten_views_of_the_widget_in_a_row_leave_nothing_of_the_removed_ones():
    """Ten views of one widget, each rendered, loaded and removed, while a stand-in host keeps every removed
    view's element (JupyterLab keeps them while the kernel holds the widget): after a forced collection the page
    holds no more canvases out of the document than with one view (the engine's one offscreen canvas), and the
    kept elements are empty."""
    sync_api = browser_or_skip()
    from support.heap import collect, count_objects

    a = vitviz.analyze(FAMILIES["deit"](), random_image(48, 64, seed=4), longest=64)
    w = vitviz.explore(a)

    def kernel(content):
        return answered(w, content)

    def detached(cdp) -> int:
        collect(cdp)
        return count_objects(cdp, "HTMLCanvasElement.prototype", "!o.isConnected")

    with sync_api.sync_playwright() as pw:
        browser, page = stand_in_page(pw, kernel, w.meta)
        cdp = page.context.new_cdp_session(page)
        page.evaluate(HOST_RENDER, ESM)
        page.wait_for_function(LOADED)
        one = (detached(cdp), count_objects(cdp, "HTMLCanvasElement.prototype"))
        for _ in range(10):
            page.evaluate("() => { window.cleanup(); window.keptViews.at(-1).remove(); delete window.vitviz.qk; }")
            page.evaluate(HOST_RENDER, ESM)
            page.wait_for_function(LOADED)
        after = detached(cdp)
        kept = page.evaluate("() => window.keptViews.map((el) => el.childElementCount)")
        browser.close()
    assert one[1] > a.model.num_layers * a.model.num_heads  # the every-layer grid's canvases are counted
    assert one[0] == 1 and after == one[0], f"canvases out of the document: {one[0]} with one view, {after} after ten"
    assert kept[:-1] == [0] * 10 and kept[-1] > 0


@pytest.mark.slow
@pytest.mark.browser
def test_in_jupyterlab_the_qk_view_maps_the_kernels_layers_and_a_point_lights_its_patches(tmp_path):
    """A real notebook: under the widget's Explorer, the Q·K view's coordinates equal the float64 PCA on every layer
    (first and last head), and the real pointer on a key point outlines, on the Explorer, its patch and the queries
    that give it the most weight."""
    sync_api = browser_or_skip()
    pytest.importorskip("jupyterlab")
    from support.jupyter import open_notebook, run_cell, running_jupyter, write_notebook
    from test_qk import reference_map, top_keys

    write_notebook(
        tmp_path / "qk.ipynb",
        NOTEBOOK_CELL.format(tests=str(Path(__file__).resolve().parent), family="dinov2_registers", seed=7),
    )
    model = sharp_heads(FAMILIES["dinov2_registers"]())  # the cell's
    a = vitviz.analyze(model, random_image(48, 64, seed=7), longest=64)
    maps = {}
    with running_jupyter(tmp_path) as url, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        open_notebook(page, url, "qk.ipynb")
        run_cell(page)
        page.wait_for_function("() => window.vitviz?.qk?.state().points > 0", timeout=120_000)
        for layer in range(a.model.num_layers):
            for head in (0, a.model.num_heads - 1):
                page.evaluate("([l, h]) => window.vitviz.qk.show(l, h)", [layer, head])
                maps[layer, head] = np.array(page.evaluate("() => window.vitviz.qk.coords().xy")).reshape(-1, 2)
        page.evaluate("() => window.vitviz.qk.show(1, 2)")
        page.locator(".jp-OutputArea .qk-over").scroll_into_view_if_needed()
        key = a.n_prefix + a.grid[1] + 2
        at = page.evaluate("(t) => window.vitviz.qk.pointAt(0, 'key', t)", key)
        page.mouse.move(at["x"] + 30, at["y"] + 30)
        page.mouse.move(at["x"], at["y"])
        page.wait_for_timeout(200)
        hovered = page.evaluate("() => window.vitviz.qk.state().highlight")
        outlined = page.evaluate("() => window.vitviz.explorer.state().highlight")
        browser.close()
    for (layer, head), got in maps.items():
        want = reference_map([a], layer, head)
        np.testing.assert_allclose(got, want, atol=1e-6 * np.abs(want).max(), err_msg=f"{layer} {head}")
    assert hovered["point"] == at["point"] and outlined == [key, *top_keys(a, 1, 2, key, of_query=False)]
