"""The site's forward graph alone in Chromium, variant beside variant and beside torch, in one run:
`python -m benchmarks.site_forward [--repeats 5] [--sizes 224 448] [--graph LABEL=PATH ...] [--profile]`.

Each variant is an ONNX file and the runtime's session options; the page (benchmarks/site_probe.js, served with the
site's headers, so cross-origin isolated) runs every variant's forward in turn, round after round, so that the
machine's load falls on all of them alike. The input is the chelsea photo's, as the Python API prepares it. Printed:
each variant's median and p95, its ratio to torch's bare forward on the same input (2 threads, timed between the
rounds), and the load average. `--profile` prints the runtime's own time by operator for each variant at the
largest size (ONNX Runtime Web's profiler, read from the console).

Without --graph the variants are the site's model.onnx (as `vitviz.site.graph.export` writes it) under the page's
own options (`vitviz/site/page/model.js`) and under alternatives; with it, each named file under the page's options.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

import vitviz
from vitviz.site import graph
from vitviz.site.build import RUNTIME, RUNTIME_FILES
from vitviz.site.serve import server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]
PROBE = Path(__file__).resolve().parent / "site_probe.js"
PAGE_OPTIONS = {"graphOptimizationLevel": "all"}  # what model.js gives the runtime besides the backend


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95))


def inputs(model, sizes: list[int], folder: Path) -> dict[int, list[int]]:
    """The chelsea photo's normalised input at each longest side, written as float32 files input-<size>.bin;
    returns each one's shape [1,3,H,W]."""
    shapes = {}
    for size in sizes:
        a = vitviz.analyze(model, vitviz.example("chelsea"), longest=size)
        np.ascontiguousarray(a.pixel_values, "<f4").tofile(folder / f"input-{size}.bin")
        shapes[size] = list(a.pixel_values.shape)
    return shapes


def torch_ms(model, size: int, repeats: int) -> list[float]:
    a = vitviz.analyze(model, vitviz.example("chelsea"), longest=size)
    x = torch.from_numpy(a.pixel_values)
    times = []
    with torch.inference_mode():
        model.net(pixel_values=x)
        for _ in range(repeats):
            t = time.perf_counter()
            model.net(pixel_values=x)
            times.append(1000 * (time.perf_counter() - t))
    return times


def profile_table(events: list[dict]) -> list[tuple[str, float]]:
    """The runtime's kernel time by operator, ms a run (over every run the profile holds), largest first."""
    runs = max(1, sum(e.get("name") == "model_run" for e in events))
    by = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time"):
            by[e["args"]["op_name"]] += e["dur"] / 1000 / runs
    return sorted(by.items(), key=lambda kv: -kv[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[224, 448])
    parser.add_argument("--graph", action="append", default=[], help="LABEL=PATH: an ONNX file to time")
    parser.add_argument(
        "--options",
        action="append",
        default=[],
        help="LABEL=JSON: session options over the page's, e.g. "
        """'arena={"enableCpuMemArena": true}'""",
    )
    parser.add_argument("--profile", action="store_true", help="the runtime's time by operator at the largest size")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    torch.set_num_threads(2)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores; torch {torch.__version__}")
    folder = Path(tempfile.mkdtemp())
    (folder / "runtime").mkdir()
    for name in RUNTIME_FILES:
        shutil.copyfile(RUNTIME / name, folder / "runtime" / name)
    shutil.copyfile(PROBE, folder / "probe.js")
    (folder / "index.html").write_text('<!doctype html><script type="module" src="probe.js"></script>')
    graphs = dict(item.split("=", 1) for item in args.graph)
    if not graphs:
        graph.export(folder)
        graphs = {"model.onnx": folder / "model.onnx"}
    options = {label: json.loads(text) for label, text in (o.split("=", 1) for o in args.options)}
    variants = []
    for i, (label, path) in enumerate(graphs.items()):
        if Path(path) != folder / "model.onnx":
            shutil.copyfile(path, folder / f"graph-{i}.onnx")
        url = "model.onnx" if Path(path) == folder / "model.onnx" else f"graph-{i}.onnx"
        for name, given in (options or {"page's options": {}}).items():
            variants.append({"label": f"{label}, {name}", "url": url, "options": {**PAGE_OPTIONS, **given}})
    model = vitviz.load_model(device="cpu")
    shapes = inputs(model, args.sizes, folder)
    httpd = server(folder, port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        console = []  # the runtime's profiler writes one event a line
        page.on("console", lambda m: console.append(m.text))
        page.goto(url)
        page.wait_for_function("() => window.probe", timeout=60_000)
        threads = page.evaluate("(v) => window.probe.load(v, false)", variants)
        print(f"the runtime: {threads} threads, cross-origin isolated: {page.evaluate('self.crossOriginIsolated')}")
        for size in args.sizes:
            times = {v["label"]: [] for v in variants}
            base = []
            feed = {"url": f"input-{size}.bin", "dims": shapes[size]}
            page.evaluate("(f) => window.probe.run(f, 1)", feed)  # each session meets this shape once first
            for _ in range(args.repeats):
                for label, ms in page.evaluate("(f) => window.probe.run(f, 1)", feed).items():
                    times[label] += ms
                base += torch_ms(model, size, 1)
            torch_median = statistics.median(base)
            print(
                f"at {size} px {shapes[size][2:]}: torch's bare forward {torch_median:.0f} ms (p95 {p95(base):.0f}); "
                f"load {os.getloadavg()[0]:.2f}"
            )
            for label, ms in times.items():
                print(
                    f"  {label}: {statistics.median(ms):.0f} ms (p95 {p95(ms):.0f}), "
                    f"{statistics.median(ms) / torch_median:.2f}× torch's"
                )
        if args.profile:
            size = max(args.sizes)
            feed = {"url": f"input-{size}.bin", "dims": shapes[size]}
            print(f"the runtime's kernels at {size} px, ms a run (its profiler):")
            for v in variants:
                page.evaluate("(v) => window.probe.load(v, true)", [v])
                page.evaluate("(f) => window.probe.run(f, 3)", feed)
                console.clear()
                page.evaluate("() => window.probe.endProfiling()")
                table = profile_table([json.loads(t.rstrip(",")) for t in console if t.startswith("{")])
                top = ", ".join(f"{op} {ms:.0f}" for op, ms in table[:10])
                print(
                    f"  {v['label']}: {sum(ms for _, ms in table):.0f} ms in kernels: {top}; "
                    f"load {os.getloadavg()[0]:.2f}"
                )
        browser.close()
    httpd.shutdown()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
