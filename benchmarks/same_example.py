"""A class clicks the same example: `python -m benchmarks.same_example` (from the repository).

30 sessions (plain HTTP, each its own) upload the bundled coffee photo, then ask /analyze for it within the same
instant. It prints the p50, p95 and max until each answer, the forwards that the server ran (counted in its log)
and the errors. The app runs on a free loopback port; every wait is bounded.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import vitviz
from tests.support.harness import running_app

from .loadtest import HttpApi

USERS = 30


def main() -> None:
    photo = vitviz.example("coffee")
    times, errors = [], []
    together = threading.Barrier(USERS)
    with tempfile.TemporaryDirectory() as folder, open(Path(folder) / "app.log", "w+") as log:
        with running_app(["--device", "cpu"], log=log) as (url, _):

            def user(n: int) -> None:
                try:
                    api = HttpApi(url, session=f"student-{n}")
                    image = api.upload(photo)
                    together.wait(120)
                    start = time.perf_counter()
                    api.call("analyze", image, "dinov2-small", "model default")
                    times.append(time.perf_counter() - start)
                except Exception as exc:  # noqa: BLE001 (counted and printed)
                    errors.append(repr(exc))

            users = [threading.Thread(target=user, args=(n,)) for n in range(USERS)]
            for u in users:
                u.start()
            for u in users:
                u.join(300)
        log.seek(0)
        forwards = log.read().count("forward: a new analysis")
    print(
        f"{USERS} sessions, one photo: /analyze p50 {np.median(times):.2f} s, p95 {np.percentile(times, 95):.2f} s, "
        f"max {max(times):.2f} s; forwards {forwards}; errors {len(errors)} {errors[:3]}"
    )


if __name__ == "__main__":
    main()
