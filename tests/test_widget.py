"""The Explorer in a notebook (`vitviz.explore`): the widget's traits and answers in Python; its ES module (the
app's engine and boot_widget.js) rendered in Chromium on a model that stands in for anywidget's, whose messages
the widget answers; and the widget in a real JupyterLab. Rows are compared with the attention the forward captured."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
from conftest import FAMILIES, random_image
from support.harness import CHROMIUM
from support.harness import CHROMIUM_ARGS as ARGS
from test_explorer import BOUND, HOVER_ALL, browser_or_skip, captured_rows

import vitviz
from vitviz import explorer

pytest.importorskip("anywidget")
from vitviz.widget import CSS, ESM  # noqa: E402 (after the skip: anywidget is an optional extra)


def test_the_widget_carries_the_meta_and_answers_a_layer_with_its_bytes():
    a = vitviz.analyze(FAMILIES["deit"](), random_image(40, 56, seed=2), longest=56)
    w = vitviz.explore(a, layer=1, opacity=0.25)
    assert w.meta["start"] == 1 and w.meta["alpha"] == 0.25 and w.meta["colourScale"] == "log"
    assert w.meta["readout"]["tokens"] == [0, 1] and w.meta["grid"] == list(a.grid)
    assert w.layer_message({"want": 2}) == ({"layer": 2}, [explorer.layer_data(a, 2).tobytes()])
    assert w.layer_message({"want": 7}) == ({"layer": 7, "error": "layer must be in [0, 3), got 7"}, [])
    assert w.layer_message({"other": 1}) is None
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

RENDER = """async (esm) => {
  const url = URL.createObjectURL(new Blob([esm], {type: "text/javascript"}));
  const widget = (await import(url)).default, el = document.createElement("div");
  document.body.appendChild(el);
  window.cleanup = widget.render({model: window.model, el});
}"""


@pytest.mark.browser
def test_the_widgets_module_computes_the_captured_weights_from_the_kernels_layers():
    """The widget's own _esm rendered on a stand-in model whose messages the widget answers: every layer and
    head within 1e-3 of the forward; a new opacity repaints with no layer asked again; its clean-up leaves no
    listener on the model, ten times in a row."""
    sync_api = browser_or_skip()
    a = vitviz.analyze(FAMILIES["deit"](), random_image(48, 64, seed=4), longest=64)
    w = vitviz.explore(a)
    asked = []

    def kernel(content):  # what the kernel sends back, as the widget answers it
        asked.append(content["want"])
        reply, buffers = w.layer_message(content)
        return [reply, base64.b64encode(buffers[0]).decode() if buffers else None]

    gh, gw = a.grid
    cases = [(layer, h, p) for layer in range(3) for h in range(a.model.num_heads) for p in (-1, 0, gh * gw - 1, 9)]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1000, "height": 800})
        page.route("http://vitviz.test/**", lambda r: r.fulfill(body="<html><body></body></html>",
                                                               content_type="text/html"))  # fmt: skip
        page.goto("http://vitviz.test/")
        page.expose_function("kernel", kernel)
        page.evaluate(MODEL, w.meta)
        page.add_style_tag(content=CSS)
        page.evaluate(RENDER, ESM)
        rows = np.array(page.evaluate(HOVER_ALL, cases))
        page.wait_for_function("() => window.vitviz.explorer.state().loaded.length === 3")
        w.opacity = 0.2
        page.evaluate("(m) => window.model.change(m)", w.meta)
        page.wait_for_timeout(100)
        after = page.evaluate("() => window.vitviz.explorer.state()")
        left = []
        for _ in range(10):
            page.evaluate("() => { window.cleanup(); document.body.innerHTML = ''; }")
            left.append(page.evaluate("() => [window.model.listeners(), 'explorer' in window.vitviz]"))
            page.evaluate(RENDER, ESM)
        browser.close()
    assert np.abs(rows - captured_rows(a, cases)).max() <= BOUND
    assert sorted(asked) == [0, 1, 2] and after["loaded"] and len(after["loaded"]) == 3  # each layer asked once
    assert left == [[0, False]] * 10


NOTEBOOK_CELL = """import sys
sys.path[:0] = [{tests!r}]
from conftest import FAMILIES, random_image
import vitviz
a = vitviz.analyze(FAMILIES["deit"](), random_image(48, 64, seed=4), longest=64)
vitviz.explore(a, layer=1)"""


@pytest.fixture()
def jupyter_lab(tmp_path):
    """JupyterLab on a free loopback port, with no token, serving tmp_path: yields its URL."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    pytest.importorskip("jupyterlab")
    from support.harness import free_port

    port = free_port()
    args = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1",
            "--IdentityProvider.token=", f"--ServerApp.root_dir={tmp_path}", "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly",
            "--allow-root"]  # fmt: skip
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"))  # fmt: skip
    log = open(tmp_path / "jupyter.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "api", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((tmp_path / "jupyter.log").read_text()[-2000:]) from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.mark.slow
@pytest.mark.browser
def test_in_jupyterlab_the_widget_shows_the_captured_weights(jupyter_lab, tmp_path):
    """A real notebook server and Chromium: a cell that ends with vitviz.explore(...) is run; the widget's handle,
    hovered on every layer and head, reads the forward's attention within 1e-3; a real pointer moves its query."""
    import nbformat

    sync_api = browser_or_skip()
    tests = str(Path(__file__).resolve().parent)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(NOTEBOOK_CELL.format(tests=tests))])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "explore.ipynb")
    a = vitviz.analyze(FAMILIES["deit"](), random_image(48, 64, seed=4), longest=64)  # the cell's, seeded alike
    gh, gw = a.grid
    cases = [(layer, h, p) for layer in range(3) for h in range(a.model.num_heads) for p in (-1, 0, gh * gw - 1, 9)]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(jupyter_lab + "lab/tree/explore.ipynb")
        page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=90_000)
        prompt = page.locator(".jp-Cell .jp-InputPrompt").first
        for _ in range(5):  # a keystroke made while the kernel's connection still settles is lost: again, then
            page.locator(".jp-Cell .cm-content").first.click()
            page.keyboard.press("Control+Enter")  # run the cell in place, as a user does
            try:
                page.wait_for_function("(p) => !p.textContent.includes('[ ]')", arg=prompt.element_handle(),
                                       timeout=10_000)  # fmt: skip
                break
            except sync_api.TimeoutError:
                continue
        try:
            page.wait_for_function("() => window.vitviz?.explorer?.state().loaded.length === 3", timeout=120_000)
        except sync_api.TimeoutError:
            page.screenshot(path=tmp_path / "notebook.png")
            raise AssertionError(page.locator(".jp-Notebook").inner_text()[-1500:]) from None
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
