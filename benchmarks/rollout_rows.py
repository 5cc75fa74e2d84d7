"""How far rollout depends on where it starts: `python -m benchmarks.rollout_rows [FOLDER...]` from the repository.

For every photo (the bundled ones and the folders' images), the embedded model at the app's 448 px:

- by depth d = 1..L, the full rollout matrix of the last d layers, Â_L ... Â_(L-d+1) (mean fusion, nothing discarded,
  the skip connection added: `maps.rollout`'s steps), whose row i is the rollout that starts from token i. Each row is
  ranked over the patches, and the rank correlation (Spearman's ρ) of every pair of rows is taken: their median, and
  their 5th percentile (how far the least alike pairs agree);
- the Rollout tab's figures: ρ between the rollouts toward the output and toward CLS, and each one's ρ with the
  output's own map (the dense head's, each patch's mean).

A line per photo, then a table by depth (the medians over the photos, and the lowest photo's). Figures go to
docs/benchmarks.md; the median after all L layers is `sentences.ROLLOUT_ROWS`.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from scipy.stats import rankdata

from vitviz import EXAMPLES, analyze, example, load_model
from vitviz.cli import image_files
from vitviz.outputs import Output, patch_weights
from vitviz.sanity import rank_correlation


def row_agreement(fused: np.ndarray, n_prefix: int) -> list[tuple[float, float]]:
    """[(median, 5th percentile)] of the pairwise ρ of the rows of the last d layers' rollout matrix, d = 1..L.
    fused: [L,N,N] a fusion's weights, in float64."""
    n = fused.shape[1]
    steps = fused + np.eye(n)
    steps /= steps.sum(-1, keepdims=True)
    product, out = np.eye(n), []
    pairs = np.triu_indices(n, 1)
    for layer in reversed(range(len(fused))):  # from the last layer down, as a rollout from the output goes
        product = product @ steps[layer]
        ranks = rankdata(product[:, n_prefix:], axis=1)
        rho = np.corrcoef(ranks)[pairs]
        out.append((float(np.median(rho)), float(np.percentile(rho, 5))))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", help="folders of photos besides the bundled ones")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    files = [example(name) for name in EXAMPLES] + (image_files(args.folders) if args.folders else [])
    model = load_model()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print("| photo | ρ(output, CLS) | ρ(output rollout, output map) | ρ(CLS rollout, output map) | same brightest |")
    print("| --- | --- | --- | --- | --- |")
    by_depth = []
    for path in files:
        a = analyze(model, path, dense=True)
        to_output, to_cls = a.rollout("mean", 0.0), a.rollout("mean", 0.0, Output("readout"))
        own = patch_weights(a.dense_map(), a.grid)
        same = "yes" if to_output.argmax() == to_cls.argmax() else "no"
        print(
            f"| {path.stem} | {rank_correlation(to_output, to_cls):.4f} | {rank_correlation(to_output, own):.2f} | "
            f"{rank_correlation(to_cls, own):.2f} | {same} |",
            flush=True,
        )
        by_depth.append(row_agreement(a.fused("mean").double().numpy(), a.n_prefix))
    table = np.array(by_depth)  # [photos, L, 2]
    print(f"\nrows of the rollout matrix, {len(files)} photos: median over the photos (lowest photo)")
    print("| layers rolled | median ρ of two rows | 5th percentile of ρ |")
    print("| --- | --- | --- |")
    for d in range(table.shape[1]):
        median, low = table[:, d, 0], table[:, d, 1]
        print(f"| {d + 1} | {np.median(median):.3f} ({median.min():.3f}) | {np.median(low):.3f} ({low.min():.3f}) |")


if __name__ == "__main__":
    main()
