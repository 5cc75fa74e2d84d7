"""Load test of a running app: `python -m vitviz.loadtest [--clients 8] [--requests 25] [--rounds 3]`.

Starts the app on a free loopback port and, through gradio_client, sends bounded loops of requests
from concurrent clients: each request a new photo (so nothing is cached) analysed at a mixed input
size, then a view drawn. After each round it prints the server's RSS (what the system sees, not
the cache's own count). Then it runs 4 Integrated Gradients requests at once and prints the RSS
again, and measures how long a new image's analysis takes while the heaviest allowed attribution
runs, against its time alone. Only 127.0.0.1 is ever contacted; every loop is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cv2
import numpy as np

from . import ASSETS
from .memory import rss_bytes
from .preprocess import load_image

GIB = 2**30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_app(args: list[str] = (), timeout: float = 180.0, log=None) -> Iterator[tuple[str, int]]:
    """The app in a subprocess on a free loopback port, offline: yields (url, pid). log: a file for its output."""
    port = free_port()
    code = f"from vitviz.app import main; main({['--port', str(port), '--device', 'cpu', *args]!r})"
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1")
    out = log or subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the app exited with {proc.returncode}")
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the app did not start in time") from None
                time.sleep(0.5)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


class HttpApi:
    """The app's HTTP API without gradio_client, which polls for results every 50 ms: a file upload, then
    POST /gradio_api/call/NAME and the result read from its event stream, in one session."""

    def __init__(self, url: str, session: str = "vitviz-http") -> None:
        import httpx

        self.url, self.session, self.http = url, session, httpx.Client(timeout=120)

    def upload(self, path: Path) -> dict:
        with open(path, "rb") as f:
            response = self.http.post(f"{self.url}gradio_api/upload", files={"files": (path.name, f, "image/jpeg")})
        response.raise_for_status()
        return {"path": response.json()[0], "meta": {"_type": "gradio.FileData"}}

    def call(self, name: str, *data) -> list:
        response = self.http.post(
            f"{self.url}gradio_api/call/{name}", json={"data": list(data), "session_hash": self.session}
        )
        response.raise_for_status()
        event = None
        with self.http.stream("GET", f"{self.url}gradio_api/call/{name}/{response.json()['event_id']}") as stream:
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event in ("complete", "error"):
                    if event == "error":
                        raise RuntimeError(f"/{name}: {line[5:].strip()}")
                    return json.loads(line[5:])
        raise RuntimeError(f"/{name}: the event stream ended without a result")


def fake_camera(path: Path, images: list[np.ndarray], size: tuple[int, int] = (640, 480), repeat: int = 5) -> list:
    """Write a fake camera's video (each RGB image held for `repeat` frames at 10 fps, YUV 4:2:0 .y4m, what
    Chromium plays) and return the Chromium arguments that make it the camera."""
    w, h = size
    with open(path, "wb") as f:
        f.write(f"YUV4MPEG2 W{w} H{h} F10:1 Ip A1:1 C420jpeg\n".encode())
        for image in images:
            yuv = cv2.cvtColor(cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2YUV_I420)
            f.write((b"FRAME\n" + yuv.tobytes()) * repeat)
    return ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-video-capture={path}"]  # fmt: skip


def start_live_stream(page) -> None:
    """On an open app page: the Live tab, the camera, and its stream started."""
    page.get_by_role("tab", name="10 · Live").click()
    page.locator("#live-camera").get_by_text("Click to Access Webcam").click()
    page.locator("#live-camera button[aria-label='capture photo']").click()


def photos(count: int, folder: Path, side: int = 448, prefix: str = "photo") -> list[Path]:
    """`count` different side x side JPEG photos: crops of the bundled examples at shifting offsets (a crop
    cut short by the photo's edge is stretched to the square), so that each has as many tokens as the
    square forward it is timed against."""
    sources = [load_image(p) for p in sorted(ASSETS.glob("*.jpg"))]
    paths = []
    for i in range(count):
        rgb = sources[i % len(sources)]
        h, w = rgb.shape[:2]
        shift = zlib.crc32(prefix.encode())  # photos of different prefixes differ
        y, x = (i * 7 + shift) % max(1, h - side // 2), (i * 13 + shift // 7) % max(1, w - side // 2)
        crop = cv2.resize(rgb[y : y + side, x : x + side], (side, side), interpolation=cv2.INTER_CUBIC)
        path = folder / f"{prefix}{i}.jpg"
        cv2.imwrite(str(path), cv2.cvtColor(crop, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])
        paths.append(path)
    return paths


def one_client(url: str, images: list[Path], sizes: list[str], errors: list[str]) -> None:
    from gradio_client import Client, handle_file

    client = Client(url, verbose=False, ssl_verify=False)
    for i, path in enumerate(images):
        where = dict(image=handle_file(str(path)), model_name="dinov2-small", size=sizes[i % len(sizes)])
        try:
            client.predict(**where, api_name="/analyze")
            client.predict(**where, fusion="mean", discard=0.0, cmap="inferno", alpha=0.6, api_name="/rollout")
        except Exception as exc:  # a refused request is a finding, not a crash of the test
            errors.append(f"{type(exc).__name__}: {exc}")


def load(
    url: str, pid: int, clients: int, requests: int, rounds: int, folder: Path, settle_s: float = 15.0
) -> list[float]:
    """Rounds of `clients` concurrent users x `requests` new photos; returns the RSS (GiB) settled after each."""
    sizes = ["model default", "224", "448", "336"]
    images = photos(clients * requests * rounds, folder)
    rss = []
    for r in range(rounds):
        errors: list[str] = []
        start = time.perf_counter()
        threads = [
            threading.Thread(
                target=one_client, args=(url, images[(r * clients + c) * requests :][:requests], sizes, errors)
            )
            for c in range(clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - start
        peak = rss_bytes(pid) / GIB
        time.sleep(settle_s)  # the server frees evicted results at most once per 10 s (its janitor)
        rss.append(rss_bytes(pid) / GIB)
        print(f"  round {r + 1}: {clients}x{requests} in {took:5.0f} s, server RSS {peak:.2f} GiB at its end, "
              f"{rss[-1]:.2f} GiB {settle_s:.0f} s later, "
              f"{len(errors)} refused{': ' + errors[0] if errors else ''}")  # fmt: skip
    return rss


def attribute_request(url: str, image: Path, n_steps: int, samples: int, times: list[float]) -> None:
    from gradio_client import Client, handle_file

    start = time.perf_counter()
    client = Client(url, verbose=False, ssl_verify=False)
    client.predict(handle_file(str(image)), "dinov2-small", "model default", "Integrated Gradients", "default",
                   "blurred", n_steps, samples, 11, [], "inferno", 0.6, api_name="/attribute")  # fmt: skip
    times.append(time.perf_counter() - start)


def analyses_ms(url: str, images: list[Path]) -> list[float]:
    from gradio_client import Client, handle_file

    client, times = Client(url, verbose=False, ssl_verify=False), []
    for path in images:
        start = time.perf_counter()
        client.predict(handle_file(str(path)), "dinov2-small", "448", api_name="/analyze")
        times.append((time.perf_counter() - start) * 1000)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-mb", type=int, default=2048)
    args = parser.parse_args(argv)
    os.environ["VITVIZ_CACHE_MB"] = str(args.cache_mb)
    folder = Path(tempfile.mkdtemp(prefix="vitviz-load-"))
    with running_app() as (url, pid):
        start_rss = rss_bytes(pid) / GIB
        print(f"server started, RSS {start_rss:.2f} GiB; cache cap {args.cache_mb / 1024:.2f} GiB")
        rss = load(url, pid, args.clients, args.requests, args.rounds, folder)
        if len(rss) >= 3:
            print(f"  round 3 over round 2: {100 * (rss[2] / rss[1] - 1):+.1f} % (target < 5 %)")
        bound = start_rss + args.cache_mb / 1024 + 1.5
        print(f"  highest RSS {max(rss):.2f} GiB; bound (start + cache cap + 1.5 GiB) {bound:.2f} GiB")

        times: list[float] = []
        image = photos(1, folder)[0]
        threads = [threading.Thread(target=attribute_request, args=(url, image, 32, 0, times)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done = rss_bytes(pid) / GIB
        time.sleep(15)
        print(f"4 Integrated Gradients at once (32 steps): done in {max(times):.0f} s, server RSS "
              f"{done:.2f} GiB at their end, {rss_bytes(pid) / GIB:.2f} GiB 15 s later")  # fmt: skip

        fresh = photos(10, folder, prefix="fresh")
        solo = float(np.median(analyses_ms(url, fresh[:5])))
        times = []
        heavy = threading.Thread(target=attribute_request, args=(url, image, 128, 3, times))
        heavy.start()
        time.sleep(3)
        during = float(np.median(analyses_ms(url, fresh[5:10])))
        heavy.join()
        print(f"new 448 px image analysed alone {solo:.0f} ms, during IG at 128 steps x 3 samples {during:.0f} ms:"
              f" {during / solo:.2f}x (target <= 2x)")  # fmt: skip


if __name__ == "__main__":
    main()
