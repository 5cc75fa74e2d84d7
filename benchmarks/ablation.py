"""One ablation against a forward, and the full head-importance grid: `python -m benchmarks.ablation [--repeat 5]`.

A forward: `analyze` of the photo (one eager forward and its capture). An ablation after a click: `ablate` of one
head with the unablated analysis kept (`baseline=`, as the app keeps it): the ablated forward, its capture, the dense
head on both forwards and the output's reading; then the same with the ablated rollout, the first view it redraws.
The target is ≤ 1.5× a forward. The grid: `importance`, every head alone, once, with its stated cost in forwards.
Medians over --repeat runs after one warm-up, at 224 and 448 px on chelsea.jpg. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from vitviz import ablate, analyze, example, importance, load_model
from vitviz.head_importance import cost


def median_seconds(work, repeat: int) -> float:
    work()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def at(model, photo, side: int, repeat: int) -> None:
    """One size's figures, printed."""
    kept = analyze(model, photo, longest=side)
    h, w = kept.pixel_values.shape[2:]
    forward = median_seconds(lambda: analyze(model, photo, longest=side), repeat)

    def clicked():
        return ablate(model, photo, heads=[(9, 3)], longest=side, baseline=kept)

    click = median_seconds(clicked, repeat)
    viewed = median_seconds(lambda: clicked().rollout(), repeat)
    print(
        f"{w}×{h} px: forward {forward:.3f} s; ablation {click:.3f} s ({click / forward:.2f}× a forward); "
        f"with its rollout {viewed:.3f} s ({viewed / forward:.2f}×)",
        flush=True,
    )
    start = time.perf_counter()
    grid = importance(model, photo, longest=side)
    seconds = time.perf_counter() - start
    stated = cost(model, (h, w))
    print(
        f"{w}×{h} px: importance of {grid.after.size} heads {seconds:.1f} s = {seconds / forward:.1f} forwards "
        f"(stated cost {stated:.0f} forwards' work); load {os.getloadavg()[0]:.2f}",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--sizes", default="224,448")
    args = p.parse_args()
    model, photo = load_model(device="cpu"), example("chelsea")
    print(f"load average before: {os.getloadavg()[0]:.2f}; {torch.get_num_threads()} threads", flush=True)
    for side in (int(s) for s in args.sizes.split(",")):
        at(model, photo, side, args.repeat)
    print(f"load average after: {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")


if __name__ == "__main__":
    main()
