"""The static site in Chromium, beside torch's own forward on the same machine in the same run:
`python -m benchmarks.site [--repeats 5] [--class-size 30] [--json OUT.jsonl]`.

It builds the site, serves it (`vitviz.site.serve`, as `vitviz site OUT --serve` does) and prints
- the first visit's bytes, raw and gzip (level 6, as a static host compresses), and the whole folder's;
- the runtime's session creation, and the model's fetch (first visit) and read from the browser's cache (second);
- the browser's forward at 224 and 448 px (median and p95), torch's bare forward on the same input (2 threads, as
  the app runs it), and their ratio; a photo's first view (decode, resize, forward, the Tokens view);
- each view's time to draw after the forward;
- the Explorer's hover, from the real pointer event (Playwright's mouse) to its painted frame (the engine's own
  latencies, as the app's benchmark reads them);
- ten photos in a row: the JS heap after each (after a garbage collection) and the renderer's RSS at 448 px;
- the forward on one thread, as a page runs where it is not cross-origin isolated (a static host without the service
  worker that adds the headers, or a file:// page);
- a class of `--class-size` page loads and photos through the site: what the server spent (CPU-seconds, bytes);
  then, in the same run, the same class through the app (`benchmarks.classroom --rounds 1 --http`), unless
  `--no-app-class`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

import vitviz
from vitviz.site.build import build
from vitviz.site.serve import server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]
DRAWN = """async () => { const t = performance.now(); await window.vitviz.site.tab('TAB');
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))); return performance.now() - t; }"""


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95))


def line(record: dict, out) -> None:
    """A figure as prose, and as a JSON line beside it where asked."""
    print(f"  {record['what']}: {record['text']}", flush=True)
    if out is not None:
        out.write(json.dumps({**record, "load": os.getloadavg()[0]}) + "\n")


def folder_bytes(site: Path) -> tuple[int, int, int, int]:
    """(first visit raw, gzip; whole folder raw, gzip): a visit fetches the page, its script, style, runtime, model
    and positions, not the examples it does not click."""
    first_raw = first_gz = all_raw = all_gz = 0
    for p in site.rglob("*"):
        if not p.is_file():
            continue
        data = p.read_bytes()
        zipped = len(gzip.compress(data, 6))
        all_raw, all_gz = all_raw + len(data), all_gz + zipped
        if "examples" not in p.parts:
            first_raw, first_gz = first_raw + len(data), first_gz + zipped
    return first_raw, first_gz, all_raw, all_gz


def torch_forward_ms(model, longest: int, repeats: int) -> tuple[list[float], list[float]]:
    """(the bare backbone's forward, the site's graph run by torch: the backbone, every layer's q, k and value norms
    and the dense head), in ms, alternately on the same input."""
    from vitviz.site.graph import SiteGraph

    a = vitviz.analyze(model, vitviz.example("chelsea"), longest=longest)
    x, graph = torch.from_numpy(a.pixel_values), SiteGraph(model).eval()
    bare, same = [], []
    with torch.inference_mode():
        model.net(pixel_values=x)
        graph(x)
        for _ in range(repeats):
            for times, run in ((bare, lambda: model.net(pixel_values=x)), (same, lambda: graph(x))):
                t = time.perf_counter()
                run()
                times.append(1000 * (time.perf_counter() - t))
    return bare, same


def renderer_rss_mb() -> float:
    """The largest RSS of Chromium's renderer processes, in MB."""
    best = 0.0
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"chromium" in cmd and b"--type=renderer" in cmd:
                for row in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if row.startswith("VmRSS:"):
                        best = max(best, int(row.split()[1]) / 1024)
        except OSError:
            continue
    return best


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--class-size", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None, help="also write each figure as a JSON line here")
    parser.add_argument("--no-app-class", action="store_true", help="skip the class through the app")
    parser.add_argument("--profile", type=Path, default=None, help="the app's class sampled by py-spy into this file")
    args = parser.parse_args(argv)
    out = args.json.open("a") if args.json else None
    from playwright.sync_api import sync_playwright

    torch.set_num_threads(2)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores; torch {torch.__version__}")
    site = build(Path(tempfile.mkdtemp()) / "site")
    first_raw, first_gz, all_raw, all_gz = folder_bytes(site)
    line(
        {
            "what": "first visit",
            "raw_mb": first_raw / 1e6,
            "gzip_mb": first_gz / 1e6,
            "text": f"{first_raw / 1e6:.1f} MB, {first_gz / 1e6:.1f} MB gzip (the whole folder {all_raw / 1e6:.1f} MB, "
            f"{all_gz / 1e6:.1f} MB gzip; target under 60 MB gzip)",
        },
        out,
    )
    httpd = server(site, port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    model = vitviz.load_model(device="cpu")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page_figures(browser, url, model, args.repeats, out)
        one_thread(browser, site, args.repeats, out)
        browser.close()
    httpd.shutdown()
    class_through_site(site, args.class_size, out)
    if not args.no_app_class:
        class_through_app(args.class_size, args.profile)
    print(f"load average after: {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")


def open_page(browser, url: str):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, bypass_csp=True)
    page = context.new_page()
    t = time.perf_counter()
    page.goto(url)
    page.wait_for_function("() => window.vitviz && window.vitviz.site", timeout=60_000)
    page.evaluate("() => window.vitviz.site.ready.then(() => true)")
    return context, page, 1000 * (time.perf_counter() - t)


def page_figures(browser, url: str, model, repeats: int, out) -> None:
    context, page, first_ms = open_page(browser, url)
    state = page.evaluate("() => window.vitviz.site.state()")
    line(
        {
            "what": "first visit to a ready model",
            "ms": first_ms,
            "create_ms": state["createMs"],
            "text": f"{first_ms:.0f} ms (the model fetched from this machine, its session created in "
            f"{state['createMs']:.0f} ms; {state['threads']} threads, isolated: {state['isolated']})",
        },
        out,
    )
    page.reload()
    page.wait_for_function("() => window.vitviz && window.vitviz.site", timeout=60_000)
    t = time.perf_counter()
    page.evaluate("() => window.vitviz.site.ready.then(() => true)")
    again = page.evaluate("() => window.vitviz.site.state()")
    line(
        {
            "what": "second visit",
            "ms": 1000 * (time.perf_counter() - t),
            "cached": again["cached"],
            "text": f"the model from the browser's cache ({again['cached']}), session {again['createMs']:.0f} ms",
        },
        out,
    )
    for size in (224, 448):
        runs = [
            page.evaluate(f"() => window.vitviz.site.analyse('examples/chelsea.jpg', 'chelsea', {size})")
            for _ in range(repeats + 1)
        ][1:]
        browser_ms = [r["forwardMs"] for r in runs]
        first_view = [r["firstViewMs"] for r in runs]
        torch_ms, torch_graph_ms = torch_forward_ms(model, size, repeats)
        ratio = statistics.median(browser_ms) / statistics.median(torch_ms)
        same = statistics.median(browser_ms) / statistics.median(torch_graph_ms)
        line(
            {
                "what": f"forward at {size} px",
                "browser_ms": browser_ms,
                "torch_ms": torch_ms,
                "ratio": ratio,
                "torch_graph_ms": torch_graph_ms,
                "text": f"browser {statistics.median(browser_ms):.0f} ms (p95 {p95(browser_ms):.0f}); torch's bare "
                f"forward {statistics.median(torch_ms):.0f} ms (p95 {p95(torch_ms):.0f}): {ratio:.2f}× (target 2.5×); "
                f"torch running the same graph {statistics.median(torch_graph_ms):.0f} ms: {same:.2f}×; "
                f"load {os.getloadavg()[0]:.1f}",
            },
            out,
        )
        bound = 3 * statistics.median(torch_ms) + 500
        line(
            {
                "what": f"photo to first view at {size} px",
                "ms": first_view,
                "bound_ms": bound,
                "text": f"{statistics.median(first_view):.0f} ms (p95 {p95(first_view):.0f}); target 3 × torch's "
                f"forward + 0.5 s = {bound:.0f} ms",
            },
            out,
        )
    views = {}
    for tab in ("tokens", "attention", "inside", "qk", "rollout", "positions", "heads", "output"):
        ms = page.evaluate(DRAWN.replace("TAB", tab))
        views[tab] = ms
    line(
        {
            "what": "each view after the forward (448 px)",
            "ms": views,
            "text": ", ".join(f"{k} {v:.0f} ms" for k, v in views.items()),
        },
        out,
    )
    hover_latency(page, out)
    heap_and_rss(page, context, out)
    context.close()


def hover_latency(page, out) -> None:
    page.evaluate("() => window.vitviz.site.tab('attention')")
    page.wait_for_timeout(500)
    box = page.locator(".site-panel[data-tab=attention] .vx-big-canvas").bounding_box()
    for i in range(120):
        page.mouse.move(
            box["x"] + (0.1 + 0.8 * ((i * 37) % 100) / 100) * box["width"],
            box["y"] + (0.1 + 0.8 * ((i * 53) % 100) / 100) * box["height"],
        )
        page.wait_for_timeout(25)
    lat = page.evaluate("() => window.vitviz.explorer.state().latencies")
    line(
        {
            "what": "hover, pointer event to painted maps",
            "ms": lat,
            "text": f"median {statistics.median(lat):.1f} ms, p95 {p95(lat):.1f} ms over {len(lat)} moves "
            "(target p95 ≤ 20 ms)",
        },
        out,
    )


def heap_and_rss(page, context, out) -> None:
    cdp = context.new_cdp_session(page)
    heap = []
    for i in range(10):
        name = vitviz.EXAMPLES[i % len(vitviz.EXAMPLES)]
        page.evaluate(f"() => window.vitviz.site.analyse('examples/{name}.jpg', '{name}', 448)")
        cdp.send("HeapProfiler.collectGarbage")
        heap.append(cdp.send("Runtime.getHeapUsage")["usedSize"] / 1e6)
    rss = renderer_rss_mb()
    line(
        {
            "what": "ten photos in a row at 448 px",
            "heap_mb": heap,
            "renderer_rss_mb": rss,
            "text": f"JS heap {' '.join(f'{h:.0f}' for h in heap)} MB; the renderer's RSS {rss:.0f} MB (target 700)",
        },
        out,
    )


def one_thread(browser, site: Path, repeats: int, out) -> None:
    """The forward where the page is not cross-origin isolated: a plain static server (no COOP/COEP) and no service
    worker to add them, so the runtime has one thread."""
    import http.server
    from functools import partial

    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *_: None
    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, bypass_csp=True, service_workers="block")
    page = context.new_page()
    page.goto(f"http://127.0.0.1:{plain.server_address[1]}/")
    page.wait_for_function("() => window.vitviz && window.vitviz.site", timeout=60_000)
    page.evaluate("() => window.vitviz.site.ready.then(() => true)")
    state = page.evaluate("() => window.vitviz.site.state()")
    for size in (224, 448):
        runs = [
            page.evaluate(f"() => window.vitviz.site.analyse('examples/chelsea.jpg', 'chelsea', {size})")
            for _ in range(repeats + 1)
        ][1:]
        ms = [r["forwardMs"] for r in runs]
        line(
            {
                "what": f"forward at {size} px on one thread",
                "browser_ms": ms,
                "threads": state["threads"],
                "text": f"{statistics.median(ms):.0f} ms (p95 {p95(ms):.0f}) on {state['threads']} thread, isolated: "
                f"{state['isolated']}; load {os.getloadavg()[0]:.1f}",
            },
            out,
        )
    context.close()
    plain.shutdown()


def class_through_app(students: int, profile: Path | None = None) -> None:
    """Today's class of `students` through the app, in this run: benchmarks.classroom's own figures, as it prints
    them (one round, plain HTTP), with its CPU by stage where `profile` names a file for py-spy's samples."""
    print(f"the same class through the app (python -m benchmarks.classroom --users {students} --rounds 1 --http):")
    cmd = [sys.executable, "-m", "benchmarks.classroom", "--users", str(students), "--rounds", "1", "--http"]
    subprocess.run([*cmd, *(["--profile", str(profile)] if profile else [])], check=False)


def class_through_site(site: Path, students: int, out) -> None:
    """The server's cost of a class: `students` fresh browsers, one after another (they share this machine's cores),
    each loading the site with nothing cached and analysing a photo; the server's CPU-seconds and bytes sent."""
    from playwright.sync_api import sync_playwright

    proc = subprocess.Popen(
        [sys.executable, "-m", "vitviz", "site", str(site), "--serve", "--no-build", "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        url = first.split(" on ")[1].split(" ")[0]
        before = cpu_s(proc.pid)
        sent = 0
        t0 = time.perf_counter()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for i in range(students):
                context = browser.new_context(viewport={"width": 390, "height": 844}, bypass_csp=True)
                finished = []
                context.on("requestfinished", lambda r, finished=finished: finished.append(r))
                page = context.new_page()
                page.goto(url + "?size=224")
                page.wait_for_function("() => window.vitviz && window.vitviz.site", timeout=60_000)
                page.evaluate("() => window.vitviz.site.ready.then(() => true)")
                name = vitviz.EXAMPLES[i % len(vitviz.EXAMPLES)]
                page.evaluate(f"() => window.vitviz.site.analyse('examples/{name}.jpg', '{name}')")
                sent += sum(r.sizes()["responseBodySize"] for r in finished)
                context.close()
            browser.close()
        spent = cpu_s(proc.pid) - before
        took = time.perf_counter() - t0
        line(
            {
                "what": f"a class of {students} through the site",
                "server_cpu_s": spent,
                "bytes": sent,
                "text": f"the server spent {spent:.1f} CPU-s ({spent / students:.2f} a student) and sent "
                f"{sent / 1e6:.0f} MB ({sent / students / 1e6:.1f} MB a student, nothing cached) in {took:.0f} s",
            },
            out,
        )
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
