"""The Explorer in a real browser: `python -m benchmarks.explorer [--photos 10]` from the repository.

Serves the app on a free loopback port, opens it in Debian's Chromium (1400x1000) and prints, for a 448 px
square photo (1025 tokens): the work of one hover (every head of the layer computed and painted), the time
from a pointer event to the frame that shows it, a layer switch with the layer in the browser and with a
fetch, the bytes of a layer, and the page's JS heap after scrubbing every layer of `--photos` photos.

`--html`: the offline file instead (`vitviz.export_html`, all 12 layers), at 224 and 448 px square: its size,
the time Chromium takes to open it from file:// until every layer is parsed, one hover's work, and real pointer
events (Playwright's mouse) timed from the event's timeStamp to its maps painted in the next animation frame.
`--notebook`: the widget (`vitviz.explore`) in JupyterLab (a bundled photo, 224 px): the same pointer timing. Its
JS heap over ten runs of one cell: `python -m benchmarks.widget_heap`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

from tests.support.harness import CHROMIUM, CHROMIUM_ARGS, photos, running_app
from vitviz.app.explorer import TOKEN_HEADER

EVENT_TO_FRAME = """async (count) => {
  // a pointer event, then the frame after the Explorer's animation-frame paint: what a user waits for
  const c = document.querySelector('#explorer .vx-big-canvas'), r = c.getBoundingClientRect(), out = [];
  for (let i = 0; i < count; i++) {
    const x = r.left + r.width * ((i * 37) % 100 + 0.5) / 100, y = r.top + r.height * ((i * 61) % 100 + 0.5) / 100;
    const t0 = performance.now();
    c.dispatchEvent(new PointerEvent('pointermove', {clientX: x, clientY: y, bubbles: true}));
    await new Promise((done) => requestAnimationFrame(() => done()));
    out.push(performance.now() - t0);
  }
  return out;
}"""

HOVERS = """async ([layers, heads, patches, count]) => {
  const out = [];
  for (let i = 0; i < count; i++) {
    out.push((await window.vitviz.explorer.hover(i % layers, i % heads, (i * 97) % patches)).paintMs);
  }
  return out;
}"""

SCRUB = """async (layers) => { const e = window.vitviz.explorer, out = [];
  for (let l = 0; l < layers; l++) out.push((await e.layer(l)).ms);
  for (let l = layers - 1; l >= 0; l--) out.push((await e.layer(l)).ms);
  return out; }"""


FETCH = """async ([layers, token]) => {  // what a switch to a layer not yet in the browser costs, the server idle
  const e = window.vitviz.explorer, s = e.state(), out = [];
  for (let l = 0; l < layers; l++) {
    const t0 = performance.now();
    const q = new URLSearchParams({session: s.session, key: s.key, layer: l});
    const r = await fetch('/vitviz/explorer/layer?' + q, {credentials: 'same-origin', headers: token});
    if (!r.ok) throw new Error(`layer ${l}: HTTP ${r.status} ${await r.text()}`);  // a refusal is not a fast fetch
    const data = vitvizLayerCheck(await r.arrayBuffer());
    await e.hover(l, 0, 5);
    out.push(performance.now() - t0 + data);
  }
  return out;
}""".replace("vitvizLayerCheck", "((b) => new Float32Array(b).length * 0)")


def page_token(request) -> dict[str, str]:
    """{header: token} that a request of the page to the Explorer's layer route sent, else {}."""
    if "/vitviz/explorer/layer" not in request.url:
        return {}
    return {TOKEN_HEADER: request.headers[TOKEN_HEADER.lower()]}


def loaded(page, layers: int, key: str | None = None) -> None:
    page.wait_for_function(
        """([n, old]) => { const e = window.vitviz && window.vitviz.explorer; if (!e) return false;
             const s = e.state(); return s.key && s.key !== old && s.loaded.length === n; }""",
        arg=[layers, key],
        timeout=120_000,
    )


def upload(page, path: Path) -> None:
    """A new photo, as a user drops one: the example in the upload box is cleared first."""
    page.locator("#upload button[aria-label='Clear']").first.click()
    page.locator("#upload input[type=file]").set_input_files(str(path))


def stats(name: str, values: list[float]) -> None:
    v = np.array(values)
    print(
        f"{name:<48} p50 {np.median(v):7.2f} ms  p95 {np.percentile(v, 95):7.2f} ms  max {v.max():7.2f} ms (n={len(v)})"
    )


def pointer_latencies(page, canvas: str = ".vx-big-canvas", count: int = 200) -> list[float]:
    """Real pointer moves over the large canvas, one every 20 ms: each event's timeStamp -> its maps painted."""
    box = page.locator(canvas).bounding_box()
    for i in range(count):
        page.mouse.move(box["x"] + box["width"] * ((i * 37) % 100 + 0.5) / 100, box["y"] + box["height"] * 0.5)
        page.wait_for_timeout(20)
    return page.evaluate("() => window.vitviz.explorer.state().latencies")[-count:]


def main_html(tmp: Path) -> None:
    """The offline file at 224 and 448 px: size, opening, hover work and pointer latency."""
    import time

    from playwright.sync_api import sync_playwright

    import vitviz

    model = vitviz.load_model()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for side in (224, 448):
            shot = photos(1, tmp, side=side, prefix=f"html{side}")[0]
            a = vitviz.analyze(model, shot, longest=side)
            path = vitviz.export_html(a, tmp / f"explorer{side}.html")
            print(
                f"{side}x{side} photo, {a.num_tokens} tokens: the file is {path.stat().st_size / 1e6:.1f} MB "
                f"(12 layers, base64 float32)"
            )
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            t0 = time.perf_counter()
            page.goto(path.as_uri())
            page.wait_for_function("() => window.vitviz?.explorer?.state().loaded.length === 12", timeout=120_000)
            print(f"  open from file:// until every layer is parsed: {(time.perf_counter() - t0) * 1e3:.0f} ms")
            tokens = a.num_tokens - a.n_prefix
            stats("  hover: 6 heads computed + 7 maps painted", page.evaluate(HOVERS, [12, 6, tokens, 300]))
            stats("  pointer event -> all its maps painted", pointer_latencies(page))
            page.close()
        browser.close()


NEXT_PHOTO = """i = globals().get("i", -1) + 1  # each run, the next bundled photo
vitviz.explore(vitviz.example(vitviz.EXAMPLES[i % 4]), model, size=224)"""


def main_notebook(tmp: Path) -> None:
    """The widget in JupyterLab: real pointer events over its large canvas."""
    from playwright.sync_api import sync_playwright

    from tests.support.jupyter import open_notebook, run_cell, running_jupyter, write_notebook

    write_notebook(tmp / "explore.ipynb", "import vitviz\nmodel = vitviz.load_model()", NEXT_PHOTO)
    with running_jupyter(tmp) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        open_notebook(page, url, "explore.ipynb")
        run_cell(page, 0)
        run_cell(page, 1)
        page.wait_for_function("() => window.vitviz?.explorer?.state().loaded.length === 12", timeout=120_000)
        page.locator(".jp-OutputArea .vx-big-canvas").scroll_into_view_if_needed()
        stats("widget: pointer event -> all its maps painted", pointer_latencies(page))
        browser.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--photos", type=int, default=10)
    parser.add_argument("--html", action="store_true", help="time the offline HTML file instead of the app")
    parser.add_argument("--notebook", action="store_true", help="time the notebook widget in JupyterLab instead")
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    if args.html or args.notebook:
        with tempfile.TemporaryDirectory() as tmp:
            (main_html if args.html else main_notebook)(Path(tmp))
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        return
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, running_app() as (url, _), sync_playwright() as pw:
        shots = photos(args.photos, Path(tmp), side=448, prefix="explorer")
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        token = {}  # the session's page token, from the page's own layer requests (it is never in a URL)
        page.on("request", lambda r: token.update(page_token(r)))
        page.goto(url)
        page.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        page.get_by_role("tab", name="2 · Attention").click()
        loaded(page, 12)
        key = page.evaluate("() => window.vitviz.explorer.state().key")
        upload(page, shots[0])
        loaded(page, 12, key)
        state = page.evaluate("() => window.vitviz.explorer.state()")
        tokens = state["bytes"] // 4 // (2 * 384 + 6)
        print(f"448x448 photo, {tokens} tokens; a layer over the wire: {state['bytes'] / 1e6:.2f} MB (float32 q, k)")
        stats("fetch of one layer (127.0.0.1), in the background", state["fetchMs"])
        stats("hover: 6 heads computed + 7 maps painted", page.evaluate(HOVERS, [12, 6, tokens - 1, 300]))
        stats("pointer event -> all its maps painted", pointer_latencies(page, "#explorer .vx-big-canvas"))
        stats("dispatched event -> the next animation frame", page.evaluate(EVENT_TO_FRAME, 200))
        stats("layer switch, the layer in the browser", page.evaluate(SCRUB, 12))
        page.wait_for_timeout(3000)  # the new photo's background warm-up is over
        stats("a layer fetched + parsed + painted, idle server", page.evaluate(FETCH, [12, token]))
        page.evaluate("() => window.vitviz.explorer.view('model')")
        stats("hover in the model view (12 x 6 maps)", page.evaluate(HOVERS, [12, 6, tokens - 1, 60]))
        page.evaluate("() => window.vitviz.explorer.view('heads')")
        cdp = page.context.new_cdp_session(page)

        def heap() -> str:
            cdp.send("HeapProfiler.collectGarbage")
            h = cdp.send("Runtime.getHeapUsage")
            extra = h.get("backingStorageSize", h.get("embedderHeapUsedSize", 0))
            return f"JS heap {h['usedSize'] / 2**20:6.1f} MiB + array buffers {extra / 2**20:6.1f} MiB"

        print(f"after photo 1: {heap()}")
        fetched = []
        for i, shot in enumerate(shots[1:], start=2):
            key = page.evaluate("() => window.vitviz.explorer.state().key")
            upload(page, shot)
            page.wait_for_function(
                "(old) => { const k = window.vitviz.explorer.state().key; return k && k !== old; }",
                arg=key,
                timeout=120_000,
            )
            first = page.evaluate("() => window.vitviz.explorer.layer(0)")  # at once: layer 0 is not here yet
            if not first["cached"]:
                fetched.append(first["ms"])
            loaded(page, 12, key)
            page.evaluate(SCRUB, 12)
            print(f"after photo {i} (every layer scrubbed): {heap()}")
        stats("layer switch with a fetch, just after a new photo", fetched)
        browser.close()


if __name__ == "__main__":
    main()
