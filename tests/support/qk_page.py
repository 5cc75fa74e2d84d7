"""The Q·K view's real script in a bare page, run as Gradio runs js_on_load, its layers served from memory: for the
browser tests and benchmarks/qk.py. Not shipped in the wheel."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

from starlette.requests import Request

from vitviz import explorer, qk
from vitviz.analysis import Analysis
from vitviz.app.explorer import STATIC
from vitviz.app.tabs.qk import script, umap_response

from .harness import CHROMIUM, CHROMIUM_ARGS

# Every vitviz-highlight the page sends, kept in order, and the errors it throws
LISTEN = """window.highlights = []; window.errors = [];
document.addEventListener("vitviz-highlight", (e) => window.highlights.push(e.detail.patches));
window.addEventListener("error", (e) => window.errors.push(String(e.message)));"""


def photo(a: Analysis, key: str) -> tuple[dict, dict[tuple[str, int], bytes]]:
    """(meta, {(key, layer): bytes}) of one analysis, as the app's draw and layer route give them."""
    meta = {**qk.meta(a), "session": "s", "key": key}
    return meta, {(key, layer): explorer.layer_data(a, layer).tobytes() for layer in range(a.model.num_layers)}


def open_page(
    pw,
    layers: dict[tuple[str, int], bytes],
    size=(1200, 1000),
    touch: bool = False,
    analyses: dict[str, Analysis] | None = None,
):
    """(browser, page): the view with no photo yet; `page.evaluate("(m) => window.setMeta(m)", meta)` gives one.
    With `analyses` {key: Analysis}, the app's own UMAP route answers for them (session "s")."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": size[0], "height": size[1]}, has_touch=touch)
    html = f"""<html><head><style>{(STATIC / "qk.css").read_text()}</style></head><body>
    <div id="host" style="max-width:1100px"><div class="qk"></div></div>
    <script>
      {LISTEN}
      window.gradio_config = {{root: "http://vitviz.test"}};
      const watchers = [], props = {{value: null}};
      window.setMeta = (m) => {{ props.value = m; watchers.forEach((cb) => cb()); }};
      (new Function("element", "trigger", "props", "server", "upload", "watch", {script()!r}))(
        document.getElementById("host"), () => {{}}, props, {{}}, null, (name, cb) => watchers.push(cb));
    </script></body></html>"""

    def serve(route):
        url = urlparse(route.request.url)
        if url.path == "/vitviz/explorer/layer":
            q = parse_qs(url.query)
            route.fulfill(body=layers[(q["key"][0], int(q["layer"][0]))], content_type="application/octet-stream")
        elif url.path == "/vitviz/qk/umap" and analyses is not None:
            cache = {("s", key): a for key, a in analyses.items()}
            server = SimpleNamespace(cache=cache, holds_page_token=lambda session, token: True)
            r = umap_response(server, Request({"type": "http", "query_string": url.query.encode(), "headers": []}))
            route.fulfill(status=r.status_code, body=r.body, content_type=r.media_type)
        else:
            route.fulfill(body=html, content_type="text/html")

    page.route("http://vitviz.test/**", serve)
    page.goto("http://vitviz.test/")
    return browser, page


def show(page, meta: dict) -> None:
    """Give the page a photo and wait for its map."""
    page.evaluate("(m) => window.setMeta(m)", meta)
    page.evaluate("() => window.vitviz.qk.ready()")
