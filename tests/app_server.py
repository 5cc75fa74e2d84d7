"""Start the real app on a free loopback port, for API and browser tests; its output goes to .pytest_cache."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from support.harness import running_app as app_process

ROOT = Path(__file__).resolve().parent.parent
SERVING: dict[str, int] = {}  # the URL of each app that runs now -> its process id


@contextmanager
def running_app(args: list[str] = (), timeout: float = 120.0, setup: str = ""):
    """Yields the app's URL (`pid_of` gives its process). setup: Python run before the app starts, in its process."""
    cache = ROOT / ".pytest_cache"
    log = open(cache / "app.log", "a") if cache.is_dir() else None  # noqa: SIM115 (closed below)
    try:
        with app_process(list(args), timeout, log, setup) as (url, pid):
            SERVING[url] = pid
            try:
                yield url
            finally:
                del SERVING[url]
    finally:
        if log:
            log.close()


def pid_of(url: str) -> int:
    """The process id of the app that serves `url` (started by `running_app`)."""
    parts = urlsplit(url)
    return SERVING[f"{parts.scheme}://{parts.netloc}/"]
