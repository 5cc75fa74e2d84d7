"""Which maps beat random orders, for which output: `python -m benchmarks.outputs [FOLDER...] [--tiny]`.

For every photo (the bundled ones and the folders' images), every output a model has (the embedded model: its dense
map where the photo is salient, its dense map over the image, the readout vector; a tiny classifier: its top class)
and every map (each attribution method but occlusion, whose map alone takes ~40 s, and rollout toward that same
output), the deletion and insertion areas against the 5 random orders' band, as the app's *Check faithfulness*
computes them. A line per photo and output as it comes, then a table per output. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

from vitviz import EXAMPLES, example, load_model
from vitviz.attributions import METHODS
from vitviz.cli import image_files
from vitviz.deletion import MAPS, faithfulness
from vitviz.outputs import Output

SLOW = ("occlusion",)


def outputs_of(model) -> list[Output]:
    """The outputs a model has: a classifier's top class; a dense head's map (salient, whole image) and the
    readout vector beside it; an encoder's readout vector."""
    if model.labels is not None:
        return [Output("class")]
    if model.dense_head is not None:
        return [Output("dense"), Output("dense", region="image"), Output("readout")]
    return [Output("readout")]


def run(model, files: list, methods: list[str]) -> dict:
    """{output: {method: [Faithfulness per photo]}}, printed as it comes."""
    results: dict = {o: {m: [] for m in methods} for o in outputs_of(model)}
    for path in files:
        for output in results:
            start, said = time.perf_counter(), []
            for method in methods:
                f = faithfulness(model, path, method, output=output)
                results[output][method].append(f)
                low, high = f.random_aucs.min(), f.random_aucs.max()
                said.append(f"{method} {f.deletion_auc:.3f} [{low:.3f}-{high:.3f}] {f.verdict}")
            name = getattr(path, "name", "noise")
            print(
                f"{name} · {output.short(model.labels)} ({time.perf_counter() - start:.0f} s): " + "; ".join(said),
                flush=True,
            )
    return results


def table(model, results: dict) -> str:
    """A markdown table per output: mean deletion and insertion areas, the random band's mean, and on how many
    photos the map was below every random order (faithful) or above every one (worse than random)."""
    lines = []
    for output, by_method in results.items():
        n = len(next(iter(by_method.values())))
        lines += [
            "",
            f"**{output.name(model)}** ({n} photos, {model.name})",
            "",
            "| map | deletion | insertion | random | faithful | worse than random |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for method, fs in sorted(by_method.items(), key=lambda kv: np.mean([f.deletion_auc for f in kv[1]])):
            means = [
                float(np.mean([getattr(f, key) for f in fs])) for key in ("deletion_auc", "insertion_auc", "random_auc")
            ]
            good = sum(f.verdict == "faithful" for f in fs)
            bad = sum(f.verdict == "worse than random" for f in fs)
            lines.append(f"| {method} | " + " | ".join(f"{m:.3f}" for m in means) + f" | {good} / {n} | {bad} / {n} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", help="folders of photos besides the bundled ones")
    parser.add_argument("--tiny", action="store_true", help="a tiny random ViT classifier (tests' fixture) instead")
    args = parser.parse_args(argv)
    files = [example(name) for name in EXAMPLES] + (image_files(args.folders) if args.folders else [])
    if args.tiny:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
        from conftest import tiny_vit

        model = tiny_vit()
    else:
        model = load_model()
    methods = [m for m in METHODS if m not in SLOW] + list(MAPS)
    print(
        f"{len(files)} photos, {model.name}, torch threads {torch.get_num_threads()}, load average "
        f"{os.getloadavg()[0]:.2f}: 10 % steps, 5 random orders, hidden patches blurred",
        flush=True,
    )
    print(table(model, run(model, files, methods)))


if __name__ == "__main__":
    main()
