"""Load test of a running app: `python -m benchmarks.loadtest [--clients 8] [--requests 25] [--rounds 3]`.

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
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from tests.support.harness import photos, running_app
from vitviz.memory import rss_bytes

GIB = 2**30


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
        print(
            f"  round {r + 1}: {clients}x{requests} in {took:5.0f} s, server RSS {peak:.2f} GiB at its end, "
            f"{rss[-1]:.2f} GiB {settle_s:.0f} s later, "
            f"{len(errors)} refused{': ' + errors[0] if errors else ''}"
        )
    return rss


def attribute_request(url: str, image: Path, n_steps: int, samples: int, times: list[float]) -> None:
    from gradio_client import Client, handle_file

    start = time.perf_counter()
    client = Client(url, verbose=False, ssl_verify=False)
    client.predict(
        handle_file(str(image)),
        "dinov2-small",
        "model default",
        "Integrated Gradients",
        "default",
        "blurred",
        n_steps,
        samples,
        11,
        [],
        "inferno",
        0.6,
        api_name="/attribute",
    )
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
        print(
            f"4 Integrated Gradients at once (32 steps): done in {max(times):.0f} s, server RSS "
            f"{done:.2f} GiB at their end, {rss_bytes(pid) / GIB:.2f} GiB 15 s later"
        )

        fresh = photos(10, folder, prefix="fresh")
        solo = float(np.median(analyses_ms(url, fresh[:5])))
        times = []
        heavy = threading.Thread(target=attribute_request, args=(url, image, 128, 3, times))
        heavy.start()
        time.sleep(3)
        during = float(np.median(analyses_ms(url, fresh[5:10])))
        heavy.join()
        print(
            f"new 448 px image analysed alone {solo:.0f} ms, during IG at 128 steps x 3 samples {during:.0f} ms:"
            f" {during / solo:.2f}x (target <= 2x)"
        )


if __name__ == "__main__":
    main()
