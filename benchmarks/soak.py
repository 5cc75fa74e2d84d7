"""An hour's soak: `python -m benchmarks.soak [--sessions 200] [--minutes 60] [--cache-mb 2048]`.

`--sessions` students (plain HTTP, each its own session and new photo) arrive evenly over `--minutes`; each uploads,
fetches the Explorer's layers as a browser does, opens tabs and makes moves (`classroom.User`). The server's RSS is
sampled every 5 s. It prints the RSS at the end of each quarter, its peak, and 30 s after the last session: that
must stay within the cache cap + 2 GiB and must not rise over the last three quarters (each quarter's settled RSS,
its last minute's median, within 5 % of the second quarter's).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from tests.support.harness import photos, running_app
from vitviz.memory import rss_bytes

from .bench import figures
from .classroom import GIB, User

SAMPLE_S = 5.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--moves", type=int, default=6)
    parser.add_argument("--cache-mb", type=int, default=2048)
    args = parser.parse_args(argv)
    os.environ["VITVIZ_CACHE_MB"] = str(args.cache_mb)
    folder = Path(tempfile.mkdtemp(prefix="vitviz-soak-"))
    images = photos(args.sessions, folder, prefix="soak")
    gap = args.minutes * 60 / args.sessions
    samples: list[tuple[float, int]] = []  # (s since start, RSS bytes)
    with open(folder / "server.log", "w") as log, running_app(log=log) as (url, pid):
        print(
            f"{args.sessions} sessions over {args.minutes:.0f} min (one every {gap:.1f} s); cache cap "
            f"{args.cache_mb / 1024:.2f} GiB; RSS at start {rss_bytes(pid) / GIB:.2f} GiB; load "
            f"{os.getloadavg()[0]:.2f}",
            flush=True,
        )
        start, users, threads = time.perf_counter(), [], []
        for i, image in enumerate(images):
            while time.perf_counter() - start < i * gap:
                samples.append((time.perf_counter() - start, rss_bytes(pid)))
                time.sleep(min(SAMPLE_S, max(0.0, start + i * gap - time.perf_counter())))
            user = User(url, image, args.moves, seed=i, http=True)
            users.append(user)
            threads.append(threading.Thread(target=user.run, daemon=True))
            threads[-1].start()
            if (i + 1) % max(1, args.sessions // 8) == 0:
                print(
                    f"  {i + 1} sessions, {(time.perf_counter() - start) / 60:.1f} min: RSS "
                    f"{rss_bytes(pid) / GIB:.2f} GiB; load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
        for t in threads:
            while t.is_alive():
                samples.append((time.perf_counter() - start, rss_bytes(pid)))
                t.join(SAMPLE_S)
        time.sleep(30)
        settled = rss_bytes(pid)
    total = samples[-1][0]
    times, rss = np.array([t for t, _ in samples]), np.array([r for _, r in samples]) / GIB
    quarters = []
    for q in range(1, 5):  # each quarter's last minute, its median
        window = (times > q * total / 4 - 60) & (times <= q * total / 4)
        quarters.append(float(np.median(rss[window])) if window.any() else float("nan"))
    cap = args.cache_mb / 1024
    rises = max(quarters[2:]) > quarters[1] * 1.05
    print(
        f"RSS at the end of each quarter (median of its last minute): "
        f"{', '.join(f'{q:.2f}' for q in quarters)} GiB; peak {rss.max():.2f} GiB; 30 s after the last "
        f"session {settled / GIB:.2f} GiB (cap + 2 GiB = {cap + 2:.2f})"
    )
    print(f"within cap + 2 GiB: {settled / GIB <= cap + 2}; rises over the last three quarters: {rises}")
    errors = [e for u in users for e in u.errors]
    print(f"upload to view {figures([u.upload_s for u in users if u.upload_s is not None])}")
    print(f"a move         {figures([s for u in users for s in u.move_s])}")
    print(f"errors {len(errors)}{': ' + errors[0] if errors else ''}; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
