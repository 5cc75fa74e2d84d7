"""Benchmark: `python -m vitviz.bench [--model NAME] [--device auto|cpu|cuda] [--repeats N]`.

Prints, for a 224 and a 448 input, the bare eager forward, `analyze` and its ratio to the
forward (target <= 1.3x), one `attention_map` + `rollout` on a cached analysis (target
< 30 ms at 448), and the memory one cached analysis holds. Medians of N runs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

from . import Analysis, VitModel, analyze, load_model


def median_ms(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1000)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="dinov2-small")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    model = load_model(args.model, device=args.device)
    print(f"model {model.name} on {model.device}, torch threads {torch.get_num_threads()}")
    for longest in (224, 448):
        a = bench_size(model, longest, args.repeats)
    bench_views(a)


def bench_views(a: Analysis) -> None:
    """Server time of one slider move in the app: a view drawn from the cached analysis."""
    from . import views

    views.rollout_view(a, "max", 0.5)  # first use of a fusion sorts its thresholds once
    last, mid = a.model.num_layers - 1, a.grid[0] * a.grid[1] // 2
    cases = {
        "attention, one head": lambda: views.attention_view(a, last, 2, "cls"),
        "attention, clicked patch": lambda: views.attention_view(a, 3, None, mid),
        "attention, all heads grid": lambda: views.attention_view(a, 5, views.ALL_HEADS, mid),
        "rollout, mean": lambda: views.rollout_view(a, "mean", 0.0),
        "rollout, max, discard 0.5": lambda: views.rollout_view(a, "max", 0.5),
    }
    print(f"\napp views on the cached {a.pixel_values.shape[3]}x{a.pixel_values.shape[2]} analysis (target <= 50 ms)")
    for name, fn in cases.items():
        ms = median_ms(fn, 20, a.model.device)
        print(f"  {name:<28}{ms:8.1f} ms   {ms / 50:.2f}x of target")


def bench_size(model: VitModel, longest: int, repeats: int) -> Analysis:
    """Print the engine's figures for a square random image of side `longest`: the worst case."""
    image = np.random.default_rng(0).integers(0, 256, (longest, longest, 3), dtype=np.uint8)
    a = analyze(model, image, longest=longest)
    x = torch.from_numpy(a.pixel_values).to(model.device)

    def bare_forward() -> None:
        with torch.inference_mode():
            model.net(pixel_values=x)

    bare_forward()
    forward = median_ms(bare_forward, repeats, model.device)
    full = median_ms(lambda: analyze(model, image, longest=longest), repeats, model.device)
    a.rollout("mean")
    a.rollout("max", 0.9)
    layer, query = model.num_layers - 1, a.grid[0] * a.grid[1] // 2
    plain = median_ms(lambda: (a.attention_map(layer, None, query), a.rollout("mean")), 20, model.device)
    discard = median_ms(lambda: (a.attention_map(layer, 2), a.rollout("max", 0.9)), 20, model.device)
    h, w = a.pixel_values.shape[2:]
    print(f"\ninput {w}x{h} -> grid {a.grid}, {a.attentions.shape[-1]} tokens")
    print(f"  bare eager forward            {forward:8.1f} ms")
    print(f"  analyze                       {full:8.1f} ms   ratio {full / forward:.2f}x (target <= 1.3x)")
    print(f"  attention_map + rollout       {plain:8.1f} ms   (target < 30 ms at 448)")
    print(f"  same, max fusion, discard 0.9 {discard:8.1f} ms")
    print(f"  cached analysis memory        {a.nbytes / 2**20:8.1f} MiB")
    return a


if __name__ == "__main__":
    main()
