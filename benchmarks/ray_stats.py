"""`vitviz stats --ray` against `vitviz stats` in one process, and against the bare batched forward.

    python -m benchmarks.ray_stats [--count 32] [--size 448] [--workers 2] [--batch 4] [--device auto]

Prints images per second for: the bare batched forward (no statistics, no file reading: the ceiling), the
single-process `stats.over_images`, and `ray_stats.over_images` on a local Ray with `--workers` model replicas
(one per GPU on a GPU machine), each on the same `--count` photos of `--size` px, with the ratios. The Ray run
includes its workers' start and model loading, as a user's does; `ray.init` is timed apart.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from tests.support.harness import photos
from vitviz import load_model, ray_stats, stats
from vitviz.capture import model_input
from vitviz.preprocess import load_image


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=32)
    parser.add_argument("--size", type=int, default=448)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    import ray

    folder = Path(tempfile.mkdtemp(prefix="vitviz-ray-"))
    files = photos(args.count, folder, side=args.size)
    model = load_model(device=args.device)
    print(
        f"{args.count} photos of {args.size}x{args.size}, batches of {args.batch}, {model.device}, "
        f"torch threads {torch.get_num_threads()}"
    )

    pixels = np.concatenate([model_input(model, load_image(f), args.size) for f in files[: args.batch]])
    model.forward(torch.from_numpy(pixels), attentions=lambda layer, w: None)  # warm up
    sync(model.device)
    start = time.perf_counter()
    for _ in range(args.count // args.batch):
        model.forward(torch.from_numpy(pixels), attentions=lambda layer, w: None)
    sync(model.device)
    bare = args.count // args.batch * args.batch / (time.perf_counter() - start)

    start = time.perf_counter()
    alone, _ = stats.over_images(model, files, args.size, args.batch, progress_bar=False)
    sync(model.device)
    single = args.count / (time.perf_counter() - start)

    start = time.perf_counter()
    ray.init(num_cpus=args.workers or 2, log_to_driver=False, include_dashboard=False)
    warm = time.perf_counter() - start
    start = time.perf_counter()  # the run includes starting the workers and loading their models
    spread, _ = ray_stats.over_images(
        model.name, files, args.size, args.batch, workers=args.workers, device=args.device
    )
    on_ray = args.count / (time.perf_counter() - start)
    ray.shutdown()
    worst = max(
        float(np.max(np.abs(getattr(spread, k) / getattr(alone, k) - 1))) for k in ("distance_mean", "entropy_mean")
    )
    print(f"  bare batched forward        {bare:7.2f} images/s")
    print(f"  vitviz stats, one process   {single:7.2f} images/s   {single / bare:.2f}x the bare forward")
    print(
        f"  vitviz stats --ray          {on_ray:7.2f} images/s   {on_ray / bare:.2f}x the bare forward, "
        f"{on_ray / single:.2f}x one process (with its workers' start; ray.init took {warm:.1f} s more)"
    )
    print(f"  largest relative difference of the two tables' means: {worst:.1e}")


if __name__ == "__main__":
    main()
