"""A class of 30: `python -m benchmarks.classroom [--users 30] [--moves 10] [--rounds 3] [--cache-mb 2048]
[--device cpu|cuda] [--http]`.

The teacher says "now try your own photo": every user (its own gradio_client, so its own session) uploads its
own new photo within the same two seconds and waits for its view (/analyze, then /attention drawn), then makes
`--moves` mixed moves (/attention at any layer, head or query; /rollout at any fusion and discard), each after
a think time of 1 to 4 s, and opens three tabs among Heads, Tokens, Inside a head, Positions and the Lesson (each
timed by its view). With `--http`, each user's page also fetches the Explorer's meta and its 12 layers, one at a
time, as a browser does after an upload. Each round uses new photos. It prints, per round and over all rounds, the
p50, p95 and max from upload to view and of a move, the errors, the forward passes the server ran (one per upload
means that no move re-ran one), and the server's RSS before the round, at its peak (sampled every 0.25 s) and
30 s after it, the CPU seconds that the server and the clients used, and what a student cost the server
in bare forwards of its model timed in this run: here both share the same cores,
where a class's clients run on 30 devices. `--http` makes each user plain HTTP requests (`loadtest.HttpApi`)
in place of gradio_client, whose polling and downloads cost this process more CPU. The app runs on a free
loopback port: only 127.0.0.1 is contacted, and every loop is bounded.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from tests.support.harness import photos, running_app
from vitviz.maps import DEFAULT_SCALE
from vitviz.memory import rss_bytes

from . import stages
from .bench import api_call, figures, mixed_moves, run_together
from .loadtest import HttpApi

GIB = 2**30
MODEL, SIZE, LAYERS, HEADS, PATCHES = "dinov2-small", "model default", 12, 6, (448 // 14) ** 2
# The tabs a student opens: (API name, its inputs after the photo, model and size, or None for Positions, which
# takes the model alone); large_text goes last
TABS = [
    ("heads", ("inferno", DEFAULT_SCALE)),
    ("tokens", ()),
    ("inside_head", (LAYERS - 1, 0, "readout", -1, "inferno", 0.6, DEFAULT_SCALE)),
    ("position_embeddings", None),
    ("lesson", (6, "inferno", 0.6, DEFAULT_SCALE)),
]


class User:
    """One student: a photo, an upload, then moves with think times; keeps its timings (s) and errors."""

    def __init__(self, url: str, photo: Path, moves: int, seed: int, http: bool = False) -> None:
        self.url, self.photo, self.moves, self.http = url, photo, moves, http
        self.rng = np.random.default_rng(seed)
        self.upload_s: float | None = None
        self.uploaded_at = 0.0  # time.perf_counter() when its view came
        self.move_s: list[float] = []
        self.move_at: list[float] = []  # when each move was made
        self.move_kind: list[str] = []  # what each move was (see `kind`)
        self.view_s: dict[str, list[float]] = {}  # a tab's view, by its API name
        self.layer_s: list[float] = []  # an Explorer layer, from its request to its last byte
        self.errors: list[str] = []
        self.api: HttpApi | None = None

    def connect(self):
        """(call(api_name, *args), the image argument) through gradio_client or plain HTTP."""
        if self.http:
            api = self.api = HttpApi(self.url, session=f"student-{id(self)}")
            return api.call, api.upload(self.photo)
        from gradio_client import Client, handle_file

        client = Client(self.url, verbose=False, ssl_verify=False)
        return lambda name, *args: client.predict(*args, api_name=f"/{name}"), handle_file(str(self.photo))

    def run(self) -> None:
        try:
            call, image = self.connect()
            time.sleep(float(self.rng.uniform(0, 2)))  # "now": everyone within two seconds
            start = time.perf_counter()
            call("analyze", image, MODEL, SIZE)
            call(*api_call(("attention", LAYERS - 1, None, "cls"), image, MODEL, SIZE))
            self.uploaded_at = time.perf_counter()
            self.upload_s = self.uploaded_at - start
        except Exception as exc:  # a refused request is a finding, not a crash of the benchmark
            self.errors.append(f"upload: {type(exc).__name__}: {exc}")
            return
        if self.api is not None:
            self.explorer_layers(image)
        seed = int(self.rng.integers(1 << 30))
        moves = list(mixed_moves_of(seed))[: self.moves]
        tabs = [TABS[i] for i in self.rng.permutation(len(TABS))[:3]]
        made = []  # the moves made so far (a tab takes some moves' turns)
        for i, move in enumerate(moves):
            time.sleep(float(self.rng.uniform(1, 4)))
            if i % 3 == 1 and tabs:  # now and then a tab: its view, with the page's settings
                name, args = tabs.pop()
                start = time.perf_counter()
                try:
                    call(name, *((MODEL, 7, 7) if args is None else (image, MODEL, SIZE, *args)), False)
                    self.view_s.setdefault(name, []).append(time.perf_counter() - start)
                except Exception as exc:
                    self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            start = time.perf_counter()
            self.move_at.append(start)
            try:
                call(*api_call(move, image, MODEL, SIZE))
                self.move_s.append(time.perf_counter() - start)
                self.move_kind.append(kind(move, made))
                made.append(move)
            except Exception as exc:
                self.errors.append(f"{move[0]}: {type(exc).__name__}: {exc}")

    def explorer_layers(self, image) -> None:
        """As a browser's Explorer: the meta, then each layer, one at a time (a 503 is asked again)."""
        try:
            meta = self.api.call("explorer", image, MODEL, SIZE, "inferno", 0.6, DEFAULT_SCALE, False)[0]
            for layer in range(LAYERS):
                start = time.perf_counter()
                while True:
                    query = {"session": meta["session"], "key": meta["key"], "layer": layer}
                    token = {meta["tokenHeader"]: meta["token"]}  # the session's page token, as the page sends it
                    response = self.api.http.get(f"{self.url}vitviz/explorer/layer", params=query, headers=token)
                    if response.status_code != 503:
                        break
                    time.sleep(0.3)
                response.raise_for_status()
                self.layer_s.append(time.perf_counter() - start)
        except Exception as exc:
            self.errors.append(f"explorer: {type(exc).__name__}: {exc}")


def kind(move: tuple, earlier: list[tuple]) -> str:
    """A move as the server's cost sees it: an attention view, or a rollout of a fusion this user rolled before
    (kept, or made from kept thresholds), or the first of its fusion (its layers recomputed, unless warmed)."""
    if move[0] == "attention":
        return "attention"
    again = any(m[0] == "rollout" and m[1] == move[1] for m in earlier)
    return f"rollout, {move[1]} {'again' if again else 'first'}"


def mixed_moves_of(seed: int):
    """`bench.mixed_moves` for the embedded model's shape, in an order of this user's own."""
    from types import SimpleNamespace

    moves = list(mixed_moves(SimpleNamespace(num_heads=HEADS, num_layers=LAYERS), PATCHES, 60))
    order = np.random.default_rng(seed).permutation(len(moves))
    return [moves[i] for i in order]


def cpu_s(pid: int | str = "self") -> float:
    """User + system CPU seconds of a process, all its threads, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def forward_cpu_s(image: Path, device: str, repeats: int = 5) -> float:
    """The CPU seconds of one bare eager forward of the server's model on a student's photo at the app's size,
    in this process before the app starts, on as many torch threads as the server's: what a student would cost
    if the server did nothing but their forward."""
    from vitviz.capture import analyze
    from vitviz.models import load_model

    model = load_model(device=device)
    x = torch.from_numpy(analyze(model, image).pixel_values).to(model.device)
    with torch.inference_mode():
        model.net(pixel_values=x)
        start = cpu_s()
        for _ in range(repeats):
            model.net(pixel_values=x)
    return (cpu_s() - start) / repeats


def peak_rss(pid: int, stop: threading.Event, into: list[int]) -> None:
    while not stop.wait(0.25):
        into.append(rss_bytes(pid))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--moves", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-mb", type=int, default=2048)
    parser.add_argument("--settle-s", type=float, default=30.0)
    parser.add_argument("--http", action="store_true", help="plain HTTP requests in place of gradio_client")
    parser.add_argument("--device", default="cpu", help="the app's device: cpu, cuda or auto")
    parser.add_argument("--profile", type=Path, default=None, help="sample the server with py-spy into this file")
    args = parser.parse_args(argv)
    os.environ["VITVIZ_CACHE_MB"] = str(args.cache_mb)
    folder = Path(tempfile.mkdtemp(prefix="vitviz-class-"))
    images = photos(args.users * args.rounds, folder, prefix="student")
    uploads, moves, errors, views, layers, by_kind, server_total = [], [], [], {}, [], {}, 0.0
    log = folder / "server.log"
    forward = forward_cpu_s(images[0], args.device)
    with open(log, "w") as out, running_app(["--device", args.device], log=out) as (url, pid):  # the last wins
        client = "plain HTTP" if args.http else "gradio_client"
        print(f"{client}, {os.cpu_count()} cores")
        print(
            f"{args.users} users x (1 upload + {args.moves} moves) x {args.rounds} rounds; cache cap "
            f"{args.cache_mb / 1024:.2f} GiB; server RSS at start {rss_bytes(pid) / GIB:.2f} GiB"
        )
        spy = stages.record(pid, args.profile) if args.profile else None
        for r in range(args.rounds):
            before, samples, stop = rss_bytes(pid), [], threading.Event()
            monitor = threading.Thread(target=peak_rss, args=(pid, stop, samples), daemon=True)
            monitor.start()
            seeds = range(1000 * r, 1000 * r + args.users)
            users = [User(url, images[r * args.users + u], args.moves, s, args.http) for u, s in enumerate(seeds)]
            cpu = cpu_s(pid), cpu_s()
            took = run_together([threading.Thread(target=u.run) for u in users], 1800)
            server_cpu, client_cpu = cpu_s(pid) - cpu[0], cpu_s() - cpu[1]
            server_total += server_cpu
            stop.set()
            monitor.join()
            peak = max(samples + [before])
            time.sleep(args.settle_s)
            after = rss_bytes(pid)
            round_uploads = [u.upload_s for u in users if u.upload_s is not None]
            round_moves = [s for u in users for s in u.move_s]
            round_errors = [e for u in users for e in u.errors]
            uploads += round_uploads
            moves += round_moves
            errors += round_errors
            layers += [s for u in users for s in u.layer_s]
            for u in users:
                for seconds, name in zip(u.move_s, u.move_kind, strict=True):
                    by_kind.setdefault(name, []).append(seconds)
            for u in users:
                for name, seconds in u.view_s.items():
                    views.setdefault(name, []).extend(seconds)
            forwards = log.read_text().count("forward: a new analysis")
            print(
                f"round {r + 1} ({took:.0f} s): RSS {before / GIB:.2f} GiB before, {peak / GIB:.2f} at peak, "
                f"{after / GIB:.2f} {args.settle_s:.0f} s after; {forwards} forwards so far for "
                f"{(r + 1) * args.users} uploads; {len(round_errors)} errors"
                f"{': ' + round_errors[0] if round_errors else ''}"
            )
            cores_s = took * os.cpu_count()
            print(f"  CPU: the server {server_cpu:.0f} s, the clients {client_cpu:.0f} s, of {cores_s:.0f} s")
            print(
                f"  a student cost the server {server_cpu / args.users:.2f} CPU-s, "
                f"{server_cpu / args.users / forward:.2f} bare forwards of {forward:.2f} CPU-s (this run)"
            )
            print(f"  upload to view  {figures(round_uploads)}")
            print(f"  a move          {figures(round_moves)}")
            last = max(u.uploaded_at for u in users)
            quiet = [s for u in users for s, at in zip(u.move_s, u.move_at, strict=False) if at > last]
            print(f"  a move after every upload's view came: {figures(quiet)}")
        if spy:
            stages.stop(spy)
            print(stages.table(args.profile, server_total, stages.RATE))
        print(f"all rounds: upload to view {figures(uploads)}")
        print(f"            a move         {figures(moves)}")
        for name in sorted(set(by_kind)):
            print(f"              {name:<20} {figures(by_kind[name])}")
        print(f"            an Explorer layer {figures(layers)}")
        for name, seconds in sorted(views.items()):
            print(f"            /{name:<20} {figures(seconds)}")
        print(f"            errors         {len(errors)}")
        print(f"load average after: {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")


if __name__ == "__main__":
    main()
