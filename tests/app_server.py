"""Start the real app (`python app.py`) on a free loopback port, for API and browser tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_app(args: list[str] = (), timeout: float = 120.0):
    port = free_port()
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1")
    log = open(ROOT / ".pytest_cache" / f"app-{port}.log", "w") if (ROOT / ".pytest_cache").is_dir() else None
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--device", "cpu", *args],
        cwd=ROOT,
        env=env,
        stdout=log or subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"app.py exited with {proc.returncode}")
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("app.py did not start in time") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log:
            log.close()
