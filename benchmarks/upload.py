"""An upload's first view against the bare forward, in one run: `python -m benchmarks.upload [--photos 6]`.

The app is served from this process on the embedded model. Each new 448x448 photo goes to an idle server through
the plain HTTP API, as a browser's page sends it (the upload, then the shown view's request, to its finished
picture): the Tokens view (the tab shown first, which the upload's forward answers before it rolls) and the Rollout
view (which needs the forward's rollouts, made in its request when the warm has not made them yet). Each is compared
with the bare eager forward at 448 timed just before it on the server's own model. The load average is printed
beside the figures.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench import app_in_process, median_ms
from benchmarks.loadtest import HttpApi
from tests.support.harness import photos
from vitviz import load_model, maps
from vitviz.capture import model_input
from vitviz.models import VitModel


def uploads(model: VitModel, folder: Path, count: int, view: str) -> tuple[list[float], list[float]]:
    """(ms from upload to the finished `view`, ms of the bare forward just before) for `count` new photos."""
    import torch

    waited, bare = [], []
    x = torch.from_numpy(model_input(model, np.zeros((448, 448, 3), np.uint8), 448))
    rest = {"tokens": (), "rollout": ("mean", 0.0, "output", "inferno", 0.6, maps.DEFAULT_SCALE)}[view]
    with app_in_process(model) as url:
        http = HttpApi(url)
        for path in photos(count + 1, folder, prefix=view):
            time.sleep(2.0)  # the last photo's background warm is done
            with model.lock:
                bare.append(median_ms(lambda: model.forward(x, attentions="none"), 3, model.device))
            start = time.perf_counter()
            http.call(view, http.upload(path), model.name, "448", *rest, False)
            waited.append((time.perf_counter() - start) * 1000)
    return waited[1:], bare[1:]  # the first warms the server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=6)
    args = parser.parse_args(argv)
    model, folder = load_model(device="cpu"), Path(tempfile.mkdtemp(prefix="vitviz-upload-"))
    print(f"load average before: {os.getloadavg()[0]:.2f}; {args.photos} new 448x448 photos each way, medians")
    for view in ("tokens", "rollout"):
        waited, bare = uploads(model, folder, args.photos, view)
        ratio = np.median(np.array(waited) / np.array(bare))
        print(
            f"  upload -> {view:<8} view {np.median(waited):6.0f} ms (p95 {np.percentile(waited, 95):5.0f}), "
            f"bare forward {np.median(bare):4.0f} ms: {ratio:.2f}x; target 1.5x + 0.5 s = "
            f"{1.5 * np.median(bare) + 500:.0f} ms; load {os.getloadavg()[0]:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
