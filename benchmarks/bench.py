"""Benchmark: `python -m benchmarks.bench [--model NAME] [--device auto|cpu|cuda] [--repeats N]`.

Prints, for a 224 and a 448 input, the bare eager forward, `analyze` and its ratio to the
forward (target <= 1.3x), one `attention_map` + `rollout` on a cached analysis (target
< 30 ms at 448), and the memory one cached analysis holds. Medians of N runs.

`--app` also serves the app from this process on a free loopback port, on the same model object,
and times it through gradio_client and plain HTTP, as a user sees it: a new 448x448 image from
upload to the shown view drawn (target <= 1.5x a bare forward of that model in this process, under
the server's allocator settings), the first draw of each other view on that image (target <= 300
ms; the heads view's statistics over all the attention are the exception), and mixed slider moves.

`--faithfulness [FOLDER ...]` instead prints each attribution method's faithfulness (deletion, insertion and
random areas, images where it beat every random order, seconds per map and per set of curves) over the bundled
photos and the folders given, with the code of the app's panel and of `vitviz faithfulness`.

`--explorer` also times the Explorer in Chromium (see `benchmarks/explorer.py`): hover p50/p95, pointer to
paint, layer switch with and without a fetch, bytes per layer and the page's JS heap over ten photos.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch

from vitviz import VitModel, analyze, load_model, memory
from vitviz.derived import Derived
from vitviz.maps import DEFAULT_SCALE


def median_ms(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1000)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="dinov2-small")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--app", action="store_true", help="also time the running app through gradio_client")
    parser.add_argument("--stats", action="store_true", help="also time `vitviz stats` and its peak memory")
    parser.add_argument(
        "--explorer", action="store_true", help="also time the Explorer in Chromium (benchmarks.explorer)"
    )
    parser.add_argument("--faithfulness", nargs="*", metavar="FOLDER", help="only the faithfulness table (see above)")
    args = parser.parse_args(argv)
    if args.faithfulness is not None:
        bench_faithfulness(load_model(args.model, device=args.device), args.faithfulness)
        return

    memory.tune_malloc()  # as the server does: its forward and the bare one here allocate alike
    model = load_model(args.model, device=args.device)
    print(f"model {model.name} on {model.device}, torch threads {torch.get_num_threads()}")
    for longest in (224, 448):
        a, bare_forward = bench_size(model, longest, args.repeats)
    bench_views(a)
    bench_interactions(model)
    bench_live(model)
    if args.app:
        bench_app(model, args.repeats, bare_forward)
        bench_live_app(args.model)
    if args.stats:
        bench_stats(model)
    if args.explorer:
        from benchmarks import explorer

        explorer.main([])


def bench_app(model: VitModel, repeats: int, bare_forward: Callable[[], object]) -> None:
    """Upload-to-view, first-draw and slider-move times against the app, through gradio_client and
    through the plain HTTP API (gradio_client polls for its results every 50 ms; a browser does not). Each
    new 448x448 photo goes to an idle server: the previous photo's background work has had `idle_s` to
    finish. This CPU's speed drifts by a third within minutes, so each upload is compared with the bare
    forward at 448 (`bare_forward`) timed just before it, on the server's own model in the server's own
    process: a forward timed in another process ran up to 1.3x slower than the server's whole upload. The
    client then shares the server's interpreter lock, which can only lengthen the upload it times."""
    import tempfile
    from pathlib import Path

    from gradio_client import Client, handle_file

    from benchmarks.loadtest import HttpApi
    from tests.support.harness import photos

    model_name, folder, idle_s, look_s = model.name, Path(tempfile.mkdtemp(prefix="vitviz-bench-")), 1.5, 1.0
    with app_in_process(model) as url:
        # no certificate store to load for each of its connections to a plain http:// address (~20 ms each)
        client, http = Client(url, verbose=False, ssl_verify=False), HttpApi(url)
        where = dict(model_name=model_name, size="448")
        times: dict[str, list[float]] = {}
        ratios: dict[str, list[float]] = {}
        forward_ms = 0.0

        @contextmanager
        def timed(name: str) -> Iterator[None]:
            start = time.perf_counter()
            yield
            times.setdefault(name, []).append((time.perf_counter() - start) * 1000)
            ratios.setdefault(name, []).append(times[name][-1] / forward_ms)

        for i, path in enumerate(photos(4 * (repeats + 1), folder)):  # each a new photo: nothing is cached
            image = handle_file(str(path))
            time.sleep(idle_s)
            with model.lock:
                forward_ms = median_ms(bare_forward, 3, model.device)
            if i % 4 in (0, 3):  # the browser's way: the analysis, then the shown view, then the other tabs
                with timed("trivial"):
                    client.predict(model_name, 3, 3, api_name="/position_map")
                with timed("two"):
                    client.predict(image, **where, api_name="/analyze")
                    client.predict(image, **where, api_name="/tokens")
                person = i % 4 == 0  # looks at the shown view before choosing a tab; else back to back, a script
                for name, args in {
                    "/attention": (11, -1, "readout", -1, "weight", "inferno", 0.6, "shared across heads"),
                    "/rollout": ("mean", 0.0, "output", "inferno", 0.6),
                    "/output": ("inferno", 0.6),
                    "/heads": ("inferno",),
                }.items():
                    time.sleep(look_s if person else 0.0)
                    with timed(name + (" person" if person else "")):
                        client.predict(image, model_name, "448", *args, api_name=name)
            elif i % 4 == 1:  # one request: the new image straight to the view
                with timed("one"):
                    client.predict(image, **where, api_name="/tokens")
            else:
                with timed("http trivial"):
                    http.call("position_map", model_name, 3, 3, False)
                with timed("http one"):
                    http.call("tokens", http.upload(path), model_name, "448", False)

    ms = {name: float(np.median(values[1:])) for name, values in times.items()}  # round 1 warms the server
    ratio = {name: float(np.median(values[1:])) for name, values in ratios.items()}
    print(f"\napp served from this process on 127.0.0.1, new 448x448 photos to an idle server, median of {repeats}")
    print(f"  gradio_client round trip, trivial view {ms['trivial']:8.1f} ms   (it polls every 50 ms)")
    print(f"  plain HTTP round trip, trivial view    {ms['http trivial']:8.1f} ms")
    for name, label in (
        ("one", "gradio_client: new image -> /tokens"),
        ("http one", "plain HTTP: upload + /tokens"),
        ("two", "gradio_client: /analyze, then /tokens"),
    ):
        print(f"  {label:<39}{ms[name]:8.1f} ms   {ratio[name]:.2f}x the bare forward before it (target <= 1.5x)")
    print(f"  first draw of each other tab (gradio_client), {look_s:.0f} s after the last | back to back:")
    for name in ("/attention", "/rollout", "/output", "/heads"):
        note = "statistics over all L x H x N x N weights" if name == "/heads" else "target <= 300 ms"
        print(f"    {name:<11}{ms[name + ' person']:8.1f} ms | {ms[name]:8.1f} ms   ({note})")
    bench_app_moves(model, folder, look_s)


def bench_app_moves(model: VitModel, folder, look_s: float) -> None:
    """Mixed slider moves over plain HTTP against the app in its own process (a client in the server's
    process would share its interpreter lock), on new photos: sent as soon as the analysis returns, and
    `look_s` after the shown view is drawn, once the background has filled what the controls read first."""
    from benchmarks.loadtest import HttpApi
    from tests.support.harness import photos, running_app

    with running_app(["--model", model.name]) as (url, _):
        http, trivial = HttpApi(url), []
        for _ in range(40):
            start = time.perf_counter()
            http.call("position_map", model.name, 3, 3, False)
            trivial.append((time.perf_counter() - start) * 1000)
        api_interactions(http, photos(1, folder, prefix="warm-up")[0], model, 1.0, count=20)  # the server's first uses
        new = photos(2, folder, prefix="moves")
        paced = {
            "as soon as the analysis returns": api_interactions(http, new[0], model, None),
            f"{look_s:.0f} s after the shown view is drawn": api_interactions(http, new[1], model, look_s),
        }
    p50, p95 = np.percentile(trivial[10:], [50, 95])
    print(f"\napp in its own process, plain HTTP: a trivial view (one small picture) p50 {p50:.1f}, p95 {p95:.1f} ms")
    for name, moves in paced.items():
        p50, p95, top = np.percentile(moves, [50, 95, 100])
        print(f"  {len(moves)} mixed slider moves on a fresh analysis, first touches included, {name}:")
        print(f"    p50 {p50:6.1f} ms   p95 {p95:6.1f} ms ({p95 / 30:.2f}x of 30 ms)   max {top:6.1f} ms")


@contextmanager
def app_in_process(model: VitModel) -> Iterator[str]:
    """The app served from this process on a free loopback port, on `model` itself; yields its URL."""
    import logging

    from tests.support.harness import free_port
    from vitviz.app import main as serve
    from vitviz.app.server import Server

    server = Server(device=model.device.type)
    server.models[model.name] = model
    port = free_port()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    demo = serve(
        ["--port", str(port), "--model", model.name, "--device", model.device.type], block=False, server=server
    )
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def mixed_moves(model: VitModel, patches: int, count: int = 60) -> Iterator[tuple]:
    """The same `count` mixed slider moves for every measurement: ("attention", layer, head, query), head an
    index, None (mean of heads) or "all" (the grid), query "cls" or a patch; or ("rollout", fusion, discard)."""
    rng = np.random.default_rng(0)
    for _ in range(count):
        if rng.random() < 0.5:
            head = [None, "all", int(rng.integers(model.num_heads))][int(rng.integers(3))]
            query = "cls" if rng.random() < 0.5 else int(rng.integers(patches))
            yield "attention", int(rng.integers(model.num_layers)), head, query
        else:
            fusion = ("mean", "max", "min")[int(rng.integers(3))]
            yield "rollout", fusion, float(rng.choice([0.0, 0.1, 0.3, 0.5, 0.7, 0.9]))


def api_interactions(http, path, model: VitModel, look_s: float | None, count: int = 60) -> list[float]:
    """Milliseconds of the `mixed_moves` as /attention and /rollout requests on a new 448x448 photo: from the
    moment its analysis returns (look_s None), or `look_s` after its shown view (/tokens) is drawn."""
    image, times, model_name = http.upload(path), [], model.name
    http.call("analyze", image, model_name, "448")
    if look_s is not None:
        http.call("tokens", image, model_name, "448", False)
        time.sleep(look_s)
    for move in mixed_moves(model, (448 // model.patch_size) ** 2, count):
        start = time.perf_counter()
        http.call(*api_call(move, image, model_name, "448"))
        times.append((time.perf_counter() - start) * 1000)
    return times


def run_together(threads: list, timeout_s: float) -> float:
    """Start `threads` at once, wait for each (at most `timeout_s`); the seconds it took."""
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    return time.perf_counter() - start


def figures(seconds: list[float]) -> str:
    if not seconds:
        return "none"
    p50, p95 = np.percentile(seconds, [50, 95])
    return f"p50 {p50:6.2f} s  p95 {p95:6.2f} s  max {max(seconds):6.2f} s  (n={len(seconds)})"


def api_call(move: tuple, image, model_name: str, size: str) -> tuple:
    """(API name, its arguments) of one of `mixed_moves`."""
    if move[0] == "rollout":  # every input, as a plain HTTP call must send them (large_text last)
        return ("rollout", image, model_name, size, *move[1:], "output", "inferno", 0.6, DEFAULT_SCALE, False)
    _, layer, head, query = move
    head = {None: -1, "all": -2}.get(head, head)  # the API's head values
    query = ("readout", -1) if query == "cls" else ("a patch (click one in a picture)", query)
    return (
        "attention",
        image,
        model_name,
        size,
        layer,
        head,
        *query,
        "weight",
        "inferno",
        0.6,
        "shared across heads",
        DEFAULT_SCALE,
        0,
        False,
    )


def bench_live(model: VitModel, frames: int = 20) -> None:
    """Server time of one live camera frame: a 640x480 frame analysed at the square live input, with the
    CLS attention, the rollout and the dense head drawn (target >= 5 frames a second on this CPU)."""
    from vitviz.capture import analyze_frame
    from vitviz.views.live import live_views

    rng = np.random.default_rng(1)
    shots = [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8) for _ in range(4)]
    live_views(analyze_frame(model, shots[0]), model.num_layers - 1, None)
    times = []
    for i in range(frames):
        start = time.perf_counter()
        live_views(analyze_frame(model, shots[i % 4]), model.num_layers - 1, None)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    ms = float(np.median(times))
    print(f"\nlive camera, one 640x480 frame: analysed and three overlays drawn, median of {frames}")
    print(f"  per frame                     {ms:8.1f} ms   {1000 / ms:.1f} frames/s (target >= 5)")


def bench_live_app(model_name: str, rounds: int = 15) -> None:
    """A cheap request's latency through gradio_client, idle and while a browser streams its (fake) camera
    to the Live view: one user's stream must not stall the others. Needs Chromium and playwright."""
    import tempfile
    from pathlib import Path

    from gradio_client import Client

    from tests.support.harness import CHROMIUM, CHROMIUM_ARGS, fake_camera, running_app, start_live_stream

    if not Path(CHROMIUM).exists():
        print(f"\nlive stream and other users: skipped ({CHROMIUM} is missing)")
        return
    from playwright.sync_api import sync_playwright

    rng = np.random.default_rng(2)
    shots = [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8) for _ in range(4)]
    camera = fake_camera(Path(tempfile.mkdtemp(prefix="vitviz-bench-")) / "camera.y4m", shots)

    def cheap(client: Client) -> float:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            client.predict(model_name, 3, 3, api_name="/position_map")
            times.append((time.perf_counter() - start) * 1000)
        return float(np.median(times))

    with running_app(["--model", model_name]) as (url, _), sync_playwright() as pw:
        client = Client(url, verbose=False, ssl_verify=False)
        cheap(client)  # warm up
        idle = cheap(client)
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS + camera)
        page = browser.new_context(permissions=["camera"]).new_page()
        page.goto(url)
        page.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        start_live_stream(page)
        page.locator("#live-attention img").first.wait_for(timeout=60_000)
        streaming = cheap(client)
        info = page.locator("#live-info").inner_text().strip()
        browser.close()
    print("\nanother user's cheap request (/position_map) through gradio_client, median of", rounds)
    print(f"  idle                          {idle:8.1f} ms")
    print(f"  while a camera streams        {streaming:8.1f} ms   {streaming / idle:.2f}x idle")
    print(f"  the stream's last frame: {info}")


def bench_faithfulness(model: VitModel, folders: list[str]) -> None:
    from vitviz import EXAMPLES, example
    from vitviz.attributions import METHODS
    from vitviz.cli import image_files
    from vitviz.deletion import MAPS
    from vitviz.deletion_table import MethodSummary, over_images, table

    files = [example(name) for name in EXAMPLES] + (image_files(folders) if folders else [])
    methods = [*METHODS, *MAPS]
    print(
        f"faithfulness of every map on {len(files)} photos, model {model.name}, torch threads "
        f"{torch.get_num_threads()}: 10 % steps, 5 random orders, hidden patches blurred",
        flush=True,
    )
    rows: list[list[MethodSummary]] = []
    for path in files:  # one photo at a time, printed as it comes: a long run leaves its figures behind
        rows.append(over_images(model, [path], methods, on_skip=lambda p, e: print(f"skipped {p}: {e}")))
        print(
            f"{path.name}: " + ", ".join(f"{r.method} {r.deletion_auc:.3f}/{r.random_auc:.3f}" for r in rows[-1]),
            flush=True,
        )
    print(
        table(
            [
                MethodSummary(
                    method=m,
                    images=len(rows),
                    faithful=sum(r[i].faithful for r in rows),
                    **{
                        k: float(np.mean([getattr(r[i], k) for r in rows]))
                        for k in ("deletion_auc", "insertion_auc", "random_auc", "map_seconds", "curve_seconds")
                    },
                )
                for i, m in enumerate(methods)
            ]
        )
    )


def bench_stats(model: VitModel, counts: tuple[int, ...] = (16, 64), batch: int = 4) -> None:
    """`vitviz stats`: time per image against a plain loop over `analyze` (plus the two statistics), and the
    peak RSS of the command on 16 and on 64 photos of one size: it must not grow with the number of images."""
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import cv2

    from tests.support.harness import photos
    from vitviz import stats

    folder = Path(tempfile.mkdtemp(prefix="vitviz-stats-"))
    files = photos(max(counts), folder)
    for f in files:  # one input size, so that batches fill
        cv2.imwrite(str(f), cv2.resize(cv2.imread(str(f)), (448, 336), interpolation=cv2.INTER_AREA))
    few = files[: min(counts)]
    stats.over_images(model, few[:2], batch=batch, progress_bar=False)  # warm up

    def loop() -> None:
        for f in few:
            a = analyze(model, f)
            [a.layer_statistics(layer) for layer in range(a.num_layers)]  # each layer's attention recomputed once

    looped = median_ms(loop, 3, model.device) / len(few)
    batched = median_ms(lambda: stats.over_images(model, few, batch=batch, progress_bar=False), 3, model.device) / len(
        few
    )
    print(f"\nvitviz stats on {len(few)} photos of 448x336, batches of {batch}")
    print(f"  a loop over analyze           {looped:8.1f} ms per image")
    print(
        f"  vitviz stats                  {batched:8.1f} ms per image   {batched / looped:.2f}x the loop (target <= 1)"
    )
    for count in counts:
        sub = folder / f"first{count}"
        sub.mkdir()
        for f in files[:count]:
            (sub / f.name).symlink_to(f)
        cmd = [
            sys.executable,
            "-m",
            "vitviz",
            "stats",
            str(sub),
            "--out",
            str(folder / f"out{count}"),
            "--batch",
            str(batch),
            "--device",
            str(model.device.type),
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        print(f"  peak RSS, {count:3d} images          {usage.ru_maxrss / 2**20:8.2f} GiB   (exit {status >> 8})")


def bench_interactions(model: VitModel, count: int = 60) -> None:
    """p95 of the `mixed_moves` on a fresh 448 analysis, first touches of every control included: layers,
    heads (and the all-heads grid), queries, fusions and discard ratios. Server time of what the app's
    handlers draw, pictures and numbers (target <= 30 ms): once the background has filled the analysis, as
    the app does in the first second after an upload, and with nothing filled."""
    from vitviz import sentences
    from vitviz.views.attention import attention_view
    from vitviz.views.rollout import rollout_view

    image = np.random.default_rng(0).integers(0, 256, (448, 448, 3), dtype=np.uint8)
    print(f"\n{count} mixed interactions on a fresh 448x448 analysis, first touches included (target p95 <= 30 ms)")
    for filled in (True, False):
        a, times = Derived(analyze(model, image, longest=448)), []  # as the server's cache holds it
        if filled:
            a.warm()  # as the app does once the shown view is drawn
        for move in mixed_moves(model, a.grid[0] * a.grid[1], count):
            start = time.perf_counter()
            if move[0] == "attention":
                attention_view(a, *move[1:])
                sentences.attention_note(a, *move[1:])
            else:
                rollout_view(a, *move[1:])
            times.append((time.perf_counter() - start) * 1000)
        p50, p95, top = np.percentile(times, [50, 95, 100])
        label = "background filled" if filled else "nothing filled   "
        print(f"  {label} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms ({p95 / 30:.2f}x of target)   max {top:6.1f} ms")


def bench_views(a: Derived) -> None:
    """Server time of one slider move in the app: a view drawn from the cached analysis."""
    from vitviz.views.attention import ALL_HEADS, attention_view
    from vitviz.views.inside import inside_views
    from vitviz.views.rollout import rollout_view

    rollout_view(a, "max", 0.5)  # first use of a fusion sorts its thresholds once
    last, mid = a.model.num_layers - 1, a.grid[0] * a.grid[1] // 2
    layers, heads = itertools.cycle(range(last + 1)), itertools.cycle(range(a.model.num_heads))
    cases = {
        "attention, one head": lambda: attention_view(a, last, 2, "cls"),
        "attention, clicked patch": lambda: attention_view(a, 3, None, mid),
        "attention, all heads grid": lambda: attention_view(a, 5, ALL_HEADS, mid),
        "rollout, mean": lambda: rollout_view(a, "mean", 0.0),
        "rollout, max, discard 0.5": lambda: rollout_view(a, "max", 0.5),
        "inside a head, new layer": lambda: inside_views(a, next(layers), 1, mid),
        "inside a head, other head": lambda: inside_views(a, last, next(heads), mid),
    }
    print(f"\napp views on the cached {a.pixel_values.shape[3]}x{a.pixel_values.shape[2]} analysis (target <= 50 ms)")
    for name, fn in cases.items():
        ms = median_ms(fn, 20, a.model.device)
        print(f"  {name:<28}{ms:8.1f} ms   {ms / 50:.2f}x of target")


def bench_size(model: VitModel, longest: int, repeats: int) -> tuple[Derived, Callable[[], None]]:
    """Print the engine's figures for a square random image of side `longest`, the worst case; return its
    analysis, as the server's cache holds it, and its bare forward."""
    image = np.random.default_rng(0).integers(0, 256, (longest, longest, 3), dtype=np.uint8)
    a = Derived(analyze(model, image, longest=longest))
    x = torch.from_numpy(a.pixel_values).to(model.device)

    def bare_forward() -> None:
        with torch.inference_mode():
            model.net(pixel_values=x)

    bare_forward()
    forward = median_ms(bare_forward, repeats, model.device)
    full = median_ms(lambda: analyze(model, image, longest=longest), repeats, model.device)
    rolled = median_ms(lambda: analyze(model, image, longest=longest, roll=True), repeats, model.device)
    a.rollout("mean")
    a.rollout("max", 0.9)
    layer, query = model.num_layers - 1, a.grid[0] * a.grid[1] // 2
    plain = median_ms(lambda: (a.attention_map(layer, None, query), a.rollout("mean")), 20, model.device)
    discard = median_ms(lambda: (a.attention_map(layer, 2), a.rollout("max", 0.9)), 20, model.device)
    layers = itertools.cycle(range(model.num_layers))
    new_layer = median_ms(lambda: a.attention_map(next(layers), None, query), 24, model.device)
    bare = analyze(model, image, longest=longest).nbytes
    shed = median_ms(lambda: (a.shed(), a.forget(rollouts=True), a.rollout("mean")), repeats, model.device)
    a.warm()  # what the app's background fills: every fusion, for the memory below
    h, w = a.pixel_values.shape[2:]
    print(f"\ninput {w}x{h} -> grid {a.grid}, {a.num_tokens} tokens")
    print(f"  bare eager forward            {forward:8.1f} ms")
    print(f"  analyze                       {full:8.1f} ms   ratio {full / forward:.2f}x (target <= 1.3x)")
    print(f"  analyze, rolled (the app's)   {rolled:8.1f} ms   ratio {rolled / forward:.2f}x (with 60 rollouts)")
    print(f"  attention_map + rollout       {plain:8.1f} ms   (target < 30 ms at 448)")
    print(f"  same, max fusion, discard 0.9 {discard:8.1f} ms")
    print(f"  attention_map, a new layer    {new_layer:8.1f} ms   (its weights recomputed from the hidden states)")
    made = f"the fused heads remade, and the slider's {len(a.ROLLOUT_PERCENTS)} rollouts made from them"
    print(f"  a fusion's first rollout      {shed:8.1f} ms   ({shed / forward:.2f}x a forward: {made})")
    print(f"  analysis memory, bare         {bare / 2**20:8.1f} MiB   (what a cache keeps of it at the least)")
    print(f"  analysis memory, filled       {a.nbytes / 2**20:8.1f} MiB   (once the background has filled it)")
    return a, bare_forward


if __name__ == "__main__":
    main()
