"""A verdict's odds over many photos: `python -m benchmarks.odds [FOLDER...] [--tiny] [--outputs all]`.

For every photo (the bundled ones, unless `--no-bundled`, and the folders' images), each output asked for and every
map (each attribution method but those `--skip` names, by default occlusion, whose map alone takes ~40 s; and
rollout toward that same output), the map's rank among the
app's 50 random orders (how many of them its deletion area is below), its verdict at the 5 % level, and the same
against 50 other random orders drawn from another seed: how often a verdict changes with the seed alone. The map's
curves do not depend on the seed, so each map's curves are made once and ranked against both bands. A line per
photo and output as it comes, then a table of ranks per photo and a summary per output. Figures go to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

import numpy as np
import torch

from vitviz import EXAMPLES, example, load_model
from vitviz.attributions import METHODS
from vitviz.cli import image_files
from vitviz.deletion import MAPS, RANDOM_ORDERS, faithfulness, random_band
from vitviz.odds import LEVEL
from vitviz.outputs import Output

SLOW = ("occlusion",)
SHORT = {"faithful": "F", "no better than chance": "·", "worse than random": "W"}


def outputs_of(model, every: bool) -> list[Output]:
    """A classifier's top class; the embedded model's default output (its dense map where the photo is salient),
    or with `every` its dense map over the image and the readout vector too."""
    if model.labels is not None:
        return [Output("class")]
    if model.dense_head is not None:
        return [Output("dense"), Output("dense", region="image"), Output("readout")] if every else [Output("dense")]
    return [Output("readout")]


def run(
    model,
    files: list,
    methods: list[str],
    outputs: list[Output],
    orders: int,
    seeds: tuple[int, int],
    batch: int,
    minutes: float,
) -> dict:
    """{output: {method: [(first, second) Faithfulness per photo]}}: each map against the bands of both seeds,
    printed as it comes; the photos done (none is started after `minutes`); and the seconds of each band and of
    each map's curves."""
    results: dict = {o: {m: [] for m in methods} for o in outputs}
    seconds: dict = {"band": [], "curves": [], "map": []}
    done, began = [], time.perf_counter()
    for path in files:
        if time.perf_counter() - began > 60 * minutes:
            print(f"stopped after {len(done)} photos: {minutes:g} minutes had passed", flush=True)
            break
        done.append(path)
        for output in outputs:
            start = time.perf_counter()
            bands = [random_band(model, path, random_orders=orders, seed=s, output=output, batch=batch) for s in seeds]
            seconds["band"] += [b.seconds for b in bands]
            said = []
            for method in methods:
                f = faithfulness(model, path, method, output=output, band=bands[0], batch=batch)
                g = replace(f, band=bands[1])
                results[output][method].append((f, g))
                seconds["curves"].append(f.seconds)
                seconds["map"].append(f.map_seconds)
                said.append(f"{method} {f.below}/{g.below} {SHORT[f.verdict]}{SHORT[g.verdict]}")
            name = getattr(path, "name", "noise")
            print(
                f"{name} · {output.short(model.labels)} ({time.perf_counter() - start:.0f} s, load "
                f"{os.getloadavg()[0]:.1f}): " + "; ".join(said),
                flush=True,
            )
    return {"results": results, "seconds": seconds, "files": done}


def ranks_table(model, results: dict, files: list, orders: int) -> str:
    """Per output, a markdown table: each photo's rank of each map (how many of the first seed's random orders its
    area is below, then the second seed's) and its verdicts (F faithful, W worse than random, · no better than
    chance)."""
    lines = []
    for output, by_method in results.items():
        methods = list(by_method)
        lines += [
            "",
            f"**{output.name(model)}** ({model.name}: below how many of {orders} random orders, seed 0 / "
            "seed 1, and the verdicts)",
            "",
            "| photo | " + " | ".join(methods) + " |",
            "| --- |" + " --- |" * len(methods),
        ]
        for i, path in enumerate(files):
            cells = [
                f"{f.below} / {g.below} {SHORT[f.verdict]}{SHORT[g.verdict]}"
                for f, g in (by_method[m][i] for m in methods)
            ]
            lines.append(f"| {getattr(path, 'stem', path)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(model, results: dict, orders: int) -> str:
    """Per output and map: the median rank and its range, the verdicts with the first seed, how many changed with the
    second, and the mean area difference from the random orders' mean in their standard deviations."""
    lines = []
    for output, by_method in results.items():
        n = len(next(iter(by_method.values())))
        lines += [
            "",
            f"**{output.name(model)}** ({n} photos, {model.name}, {orders} random orders a seed)",
            "",
            "| map | rank: median (min–max) | faithful | no better than chance | worse than random | "
            "verdicts changed by the seed | area − random mean, in SDs (median) |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for method, pairs in by_method.items():
            below = np.array([f.below for f, _ in pairs])
            verdicts = [f.verdict for f, _ in pairs]
            changed = sum(f.verdict != g.verdict for f, g in pairs)
            z = np.median([(f.deletion_auc - f.random_auc) / max(f.random_spread, 1e-12) for f, _ in pairs])
            counts = [sum(v == key for v in verdicts) for key in SHORT]
            lines.append(
                f"| {method} | {np.median(below):.0f} ({below.min()}–{below.max()}) | "
                + " | ".join(f"{c} / {n}" for c in counts)
                + f" | {changed} / {n} | {z:+.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", help="folders of photos besides the bundled ones")
    parser.add_argument("--tiny", action="store_true", help="a tiny random ViT classifier (tests' fixture) instead")
    parser.add_argument(
        "--outputs",
        choices=("default", "all"),
        default="default",
        help="the embedded model's default output only, or its three",
    )
    parser.add_argument("--orders", type=int, default=RANDOM_ORDERS, help="random orders a seed")
    parser.add_argument("--batch", type=int, default=16, help="masked images per forward (the app's: 16)")
    parser.add_argument("--minutes", type=float, default=float("inf"), help="start no photo after this long")
    parser.add_argument("--skip", default=",".join(SLOW), help="maps left out, comma-separated")
    parser.add_argument("--no-bundled", action="store_true", help="the folders' photos only, not the bundled ones")
    parser.add_argument(
        "--threads",
        type=int,
        default=torch.get_num_threads(),
        help="torch threads (1 on a CPU that others share: two threads then wait on each other)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    bundled = [] if args.no_bundled else [example(name) for name in EXAMPLES]
    files = bundled + (image_files(args.folders) if args.folders else [])
    if args.tiny:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
        from conftest import tiny_vit

        model = tiny_vit()
    else:
        model = load_model()
    methods = [m for m in [*METHODS, *MAPS] if m not in args.skip.split(",")]
    outputs = outputs_of(model, args.outputs == "all")
    print(
        f"{len(files)} photos, {model.name}, torch threads {torch.get_num_threads()}, load average "
        f"{os.getloadavg()[0]:.2f}: 10 % steps, {args.orders} random orders a seed (seeds 0 and 1), hidden "
        f"patches blurred, verdicts at p ≤ {LEVEL:g}",
        flush=True,
    )
    done = run(model, files, methods, outputs, args.orders, (0, 1), args.batch, args.minutes)
    print(ranks_table(model, done["results"], done["files"], args.orders))
    print(summary(model, done["results"], args.orders))
    s = done["seconds"]
    print(
        f"\nseconds: a band of {args.orders} random orders {np.median(s['band']):.1f} (median), a map's curves "
        f"{np.median(s['curves']):.1f}, a map {np.median(s['map']):.1f}; load average at the end "
        f"{os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
