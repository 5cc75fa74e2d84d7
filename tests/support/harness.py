"""What the browser tests, the API tests and the benchmarks share: the app on a free loopback port, Chromium
with the flags this offline machine needs, a fake camera, and generated photos. Not shipped in the wheel."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cv2
import numpy as np

from vitviz import ASSETS
from vitviz.preprocess import load_image
from vitviz.tabs import label


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_app(args: list[str] = (), timeout: float = 180.0, log=None, setup: str = "") -> Iterator[tuple[str, int]]:
    """The app in a subprocess on a free loopback port, offline: yields (url, pid). log: a file for its output.
    setup: Python run in that process before the app starts (a test's slowed model)."""
    port = free_port()
    code = f"{setup}\nfrom vitviz.app import main; main({['--port', str(port), '--device', 'cpu', *args]!r})"
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


CHROMIUM = os.environ.get("VITVIZ_CHROMIUM", "/usr/bin/chromium")  # Debian's, by default
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def fake_camera(path: Path, images: list[np.ndarray], size: tuple[int, int] = (640, 480), repeat: int = 5) -> list:
    """Write a fake camera's video (each RGB image held for `repeat` frames at 10 fps, YUV 4:2:0 .y4m, what
    Chromium plays) and return the Chromium arguments that make it the camera."""
    w, h = size
    with open(path, "wb") as f:
        f.write(f"YUV4MPEG2 W{w} H{h} F10:1 Ip A1:1 C420jpeg\n".encode())
        for image in images:
            yuv = cv2.cvtColor(cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2YUV_I420)
            f.write((b"FRAME\n" + yuv.tobytes()) * repeat)
    return [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-video-capture={path}",
    ]


def start_live_stream(page) -> None:
    """On an open app page: the Live tab, the camera, and its stream started."""
    page.get_by_role("tab", name=label("live")).click()
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


def tallest_label(rgb: np.ndarray) -> int:
    """The inked height, in pixels, of the tallest label glyph in a picture: a dark blob shaped like a digit or a
    letter (not a colour ramp, not a line) with white all around it. The projector mode draws every label of a
    picture at one size (render.font), so this is that size."""
    dark = (rgb.max(axis=2) < 110).astype(np.uint8)
    white = rgb.min(axis=2) > 200
    count, blobs, stats, _ = cv2.connectedComponentsWithStats(dark, connectivity=8)
    tallest = 0
    for i in range(1, count):
        x, y, w, h, _ = stats[i]
        if not (8 <= h <= 45 and 0.15 <= w / h <= 1.2):
            continue
        y0, y1, x0, x1 = max(0, y - 2), min(rgb.shape[0], y + h + 2), max(0, x - 2), min(rgb.shape[1], x + w + 2)
        ring = np.ones((y1 - y0, x1 - x0), bool)
        ring[y - y0 + 1 : y - y0 + h - 1, x - x0 + 1 : x - x0 + w - 1] = False
        if (white[y0:y1, x0:x1] | (blobs[y0:y1, x0:x1] == i))[ring].mean() > 0.9:
            tallest = max(tallest, int(h))
    return tallest


def fetch_picture(url: str) -> np.ndarray:
    """A picture the app serves, as RGB."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        data = np.frombuffer(answer.read(), np.uint8)
    return cv2.imdecode(data, cv2.IMREAD_COLOR)[..., ::-1]


def browser_or_skip():
    """Playwright's sync API, where Debian's Chromium is here: else a skip (a failure under VITVIZ_REQUIRE_BROWSER)."""
    import pytest

    if not Path(CHROMIUM).exists():
        if os.environ.get("VITVIZ_REQUIRE_BROWSER"):
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    return pytest.importorskip("playwright.sync_api")
