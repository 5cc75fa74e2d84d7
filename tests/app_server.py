"""Start the real app on a free loopback port, for API and browser tests; its output goes to .pytest_cache."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from support.harness import running_app as app_process

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def running_app(args: list[str] = (), timeout: float = 120.0):
    """Yields the app's URL."""
    cache = ROOT / ".pytest_cache"
    log = open(cache / "app.log", "a") if cache.is_dir() else None  # noqa: SIM115 (closed below)
    try:
        with app_process(list(args), timeout, log) as (url, _):
            yield url
    finally:
        if log:
            log.close()
