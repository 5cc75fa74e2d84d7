"""One page floods the Explorer's layer route; another user uploads: `python -m benchmarks.flood [--photos 4]`.

The app runs as a process. A flooding session, in a process of its own at the lowest CPU priority, sends
`--flood` requests for its layers at once (100 by default: a script, or a stuck page), again every `--every`
seconds, while another session uploads new 448x448 photos one after another (the upload, /analyze, then its
Tokens view). Each upload is timed alone and under the flood, alternately; it prints both medians, their ratio
(the issue's bound: 1.3x) and what the flood's requests got. `--control`: the same process at the same priority
spins on one core and sends nothing, so that what a client beside the server costs by itself is measured apart.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

from tests.support.harness import photos, running_app

from .classroom import MODEL, SIZE
from .loadtest import HttpApi


def upload(api: HttpApi, path: Path) -> float:
    """Seconds from the upload to its Tokens view."""
    start = time.perf_counter()
    image = api.upload(path)
    api.call("analyze", image, MODEL, SIZE)
    api.call("tokens", image, MODEL, SIZE, False)
    return time.perf_counter() - start


def flood(url: str, meta: dict, width: int, every: float, stop, answers) -> None:
    """In a process of its own: `width` threads, each asking for one of the session's layers at the same moment,
    every `every` s until `stop`; then the answers' status codes counted, on `answers`. The process runs at the
    lowest CPU priority: a flooding page runs on its own machine, and here its 100 clients would otherwise take
    the server's two cores from it, which is not what the server's defence is measured by."""
    import httpx

    os.nice(19)
    if width == 0:  # the control: a busy process beside the server, no request
        while not stop.is_set():
            sum(range(10_000))
        answers.put({})
        return
    got = Counter()
    burst = threading.Barrier(width)

    def one(i: int) -> None:
        with httpx.Client(timeout=60) as http:
            while not stop.is_set():
                try:
                    burst.wait()
                except threading.BrokenBarrierError:  # stopped
                    return
                query = {"session": meta["session"], "key": meta["key"], "layer": i % 12}
                got[http.get(f"{url}vitviz/explorer/layer", params=query).status_code] += 1
                stop.wait(every)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(width)]
    for t in threads:
        t.start()
    stop.wait()
    burst.abort()
    for t in threads:
        t.join(60)
    answers.put(dict(got))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=4)
    parser.add_argument("--flood", type=int, default=100)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--control", action="store_true", help="a busy process beside the server, no request")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="vitviz-flood-"))
    images = photos(2 * args.photos + 2, folder, prefix="flood")
    print(f"load average before: {os.getloadavg()[0]:.2f}; {args.photos} uploads each way; {args.flood} requests at "
          f"once every {args.every:g} s")  # fmt: skip
    with running_app() as (url, _):
        flooder, victim = HttpApi(url, session="flooder"), HttpApi(url, session="victim")
        image = flooder.upload(images[0])
        meta = flooder.call("explorer", image, MODEL, SIZE, "inferno", 0.6, "log", False)[0]
        upload(victim, images[1])  # the server warm
        alone, flooded, got = [], [], Counter()
        for i in range(args.photos):
            time.sleep(3)
            alone.append(upload(victim, images[2 + 2 * i]))
            stop, answers = multiprocessing.Event(), multiprocessing.Queue()
            width = 0 if args.control else args.flood
            worker = multiprocessing.Process(target=flood, args=(url, meta, width, args.every, stop, answers))
            worker.start()
            time.sleep(1)  # the flood is in full swing
            flooded.append(upload(victim, images[3 + 2 * i]))
            stop.set()
            got.update(answers.get(timeout=120))
            worker.join(120)
    a, f = np.median(alone), np.median(flooded)
    beside = "a busy process beside" if args.control else "the flood"
    print(f"an upload to its view: alone {a:.2f} s (max {max(alone):.2f}), under {beside} {f:.2f} s (max "
          f"{max(flooded):.2f}): {f / a:.2f}x (bound 1.3x); the flood's answers {dict(got)}; load "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
