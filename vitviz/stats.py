"""Attention statistics over a dataset (the ViT paper's Fig. 7, right, on your own images): the mean
attention distance and entropy of every (layer, head), averaged over images, with their spread.

Images that share an input size go through the model in batches. Each layer's attention is reduced to
its statistics as soon as the layer has run (a forward hook), so memory holds one layer of one batch,
whatever the number of images. The images' values are summed (`Sums`, float64), so that any split of the
images (Ray's batches, see ray_stats.py) adds up to the same table. Shards (`--shard i/n`) write tables that
`merge` combines exactly.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import maps, plots, render
from .capture import model_input
from .models import VitModel
from .preprocess import load_image

COLUMNS = [
    "model",
    "layer",
    "head",
    "images",
    "distance_mean_px",
    "distance_std_px",
    "entropy_mean_nats",
    "entropy_std_nats",
]


@dataclass
class Table:
    """Per (layer, head), over `images` images: mean and standard deviation (over images, ddof=0) of the
    mean attention distance in pixels and of the attention entropy in nats; each array [L,H]."""

    model: str
    images: int
    distance_mean: np.ndarray
    distance_std: np.ndarray
    entropy_mean: np.ndarray
    entropy_std: np.ndarray


@dataclass
class Sums:
    """Per (layer, head), over `images` images: the sums of each image's values and of their squares, float64,
    [2,L,H] each (mean attention distance in pixels, entropy in nats). Sums of disjoint sets of images add up."""

    model: str
    images: int
    total: np.ndarray
    squares: np.ndarray

    @classmethod
    def of(cls, model: str, values: np.ndarray) -> Sums:
        """values: [images,2,L,H], one row per image."""
        v = np.asarray(values, np.float64)
        return cls(model, len(v), v.sum(0), (v**2).sum(0))

    @classmethod
    def of_table(cls, table: Table) -> Sums:
        """The sums back from a table of float64 means and standard deviations (exact to float64 rounding)."""
        mean = np.stack([table.distance_mean, table.entropy_mean]).astype(np.float64)
        std = np.stack([table.distance_std, table.entropy_std]).astype(np.float64)
        return cls(table.model, table.images, mean * table.images, (std**2 + mean**2) * table.images)

    def __add__(self, other: Sums) -> Sums:
        if other.model != self.model:
            raise ValueError(f"the sums come from different models: {self.model}, {other.model}")
        return Sums(self.model, self.images + other.images, self.total + other.total, self.squares + other.squares)

    def table(self) -> Table:
        if not self.images:
            raise ValueError("no image could be read")
        mean = self.total / self.images
        std = np.sqrt(np.maximum(self.squares / self.images - mean**2, 0))
        return Table(self.model, self.images, mean[0], std[0], mean[1], std[1])


def over_images(
    model: VitModel,
    files: list[Path],
    longest: int | None = None,
    batch: int = 4,
    on_skip: Callable[[Path, Exception], None] = lambda path, exc: None,
    progress_bar: bool = True,
) -> tuple[Table, int]:
    """(the table over the images that could be read, how many were skipped). A file that cannot be read
    is passed to on_skip with the reason and left out. On this 2-core CPU batches of 4 run as fast as one
    image at a time (larger ones slower); a GPU gains from larger batches."""
    from tqdm.auto import tqdm

    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    per_image: list[np.ndarray] = []  # [2,L,H] per image: distance, entropy
    pending: dict[tuple[int, int], list[np.ndarray]] = {}
    skipped = 0
    with tqdm(total=len(files), unit="image", desc="attention statistics", disable=not progress_bar) as progress:
        for path in files:
            try:
                pixels = model_input(model, load_image(path), longest)
            except (OSError, ValueError) as exc:
                on_skip(path, exc)
                skipped += 1
                progress.update()
                continue
            group = pending.setdefault(pixels.shape[2:], [])
            group.append(pixels)
            if len(group) == batch:
                per_image.extend(batch_statistics(model, np.concatenate(group)))
                progress.update(len(group))
                group.clear()
        for group in pending.values():
            if group:
                per_image.extend(batch_statistics(model, np.concatenate(group)))
                progress.update(len(group))
    values = np.stack(per_image) if per_image else np.zeros((0, 2, model.num_layers, model.num_heads))
    return Sums.of(model.name, values).table(), skipped


def batch_statistics(model: VitModel, pixel_values: np.ndarray) -> list[np.ndarray]:
    """[B,3,h,w] of one size -> per image [2,L,H]: mean attention distance (px) and entropy (nats).
    Each layer's weights [B,H,N,N] are reduced by a hook as the layer runs, then dropped."""
    p = model.patch_size
    grid = (pixel_values.shape[2] // p, pixel_values.shape[3] // p)
    out = np.empty((len(pixel_values), 2, model.num_layers, model.num_heads), np.float32)

    def reduce(layer: int, weights: torch.Tensor) -> None:
        # eager attention returns its weights: reduced where they are (CPU or GPU), then dropped
        out[:, 0, layer] = maps.mean_attention_distance(weights, grid, p, model.n_prefix)
        out[:, 1, layer] = maps.attention_entropy(weights)

    model.forward(torch.from_numpy(pixel_values), attentions=reduce)
    return list(out)


def merge(tables: list[Table]) -> Table:
    """Shards' tables -> the table over all their images (exact: pooled means and variances)."""
    if len({t.model for t in tables}) != 1:
        raise ValueError(f"the tables come from different models: {sorted({t.model for t in tables})}")
    n = np.array([t.images for t in tables], np.float64)[:, None, None]
    total = float(n.sum())

    def pooled(means: list[np.ndarray], stds: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        m, s = np.stack(means), np.stack(stds)
        mean = (n * m).sum(0) / total
        return mean, np.sqrt(np.maximum((n * (s**2 + m**2)).sum(0) / total - mean**2, 0))

    dm, ds = pooled([t.distance_mean for t in tables], [t.distance_std for t in tables])
    em, es = pooled([t.entropy_mean for t in tables], [t.entropy_std for t in tables])
    return Table(tables[0].model, int(total), dm, ds, em, es)


def write(table: Table, folder: Path) -> None:
    """stats.csv (one header row, then one row per layer and head, the model a column: pandas.read_csv and
    csv.DictReader read it as it is), stats.html (interactive, with error bars) and stats.png."""
    folder.mkdir(parents=True, exist_ok=True)
    layers, heads = table.distance_mean.shape
    with open(folder / "stats.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(COLUMNS)
        for i in range(layers):
            for h in range(heads):
                out.writerow([table.model, i, h, table.images, *(f"{a[i, h]:.6g}" for a in _arrays(table))])
    title = f"{table.model}: mean attention distance over {table.images} images (bars: ± 1 std over images)"
    plots.distance_with_spread(table.distance_mean, table.distance_std, title).write_html(
        folder / "stats.html",
        include_plotlyjs=True,  # offline: the figure carries plotly.js
    )
    import cv2

    picture = render.layer_head_grid(table.distance_mean, "viridis")
    cv2.imwrite(str(folder / "stats.png"), cv2.cvtColor(picture, cv2.COLOR_RGB2BGR))


def _arrays(table: Table) -> tuple[np.ndarray, ...]:
    return table.distance_mean, table.distance_std, table.entropy_mean, table.entropy_std


def read_csv(path: Path) -> Table:
    """A stats.csv written by `write` (e.g. by one shard) back into a Table."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2 or rows[0] != COLUMNS or len({r[0] for r in rows[1:]}) != 1:
        raise ValueError(f"{path} is not a vitviz stats.csv (one model, columns {', '.join(COLUMNS)})")
    body = np.array([[float(x) for x in r[1:]] for r in rows[1:]])
    layers, heads = int(body[:, 0].max()) + 1, int(body[:, 1].max()) + 1
    cols = [body[:, k].reshape(layers, heads) for k in range(3, 7)]
    return Table(rows[1][0], int(body[0, 2]), *cols)


def summary_table(table: Table) -> str:
    """A short table per layer: the heads' mean distance (range) and mean entropy."""
    lines = [f"{table.model}, {table.images} images", "layer  distance px (heads' min-max)  entropy nats"]
    for i, (d, e) in enumerate(zip(table.distance_mean, table.entropy_mean, strict=True)):
        lines.append(f"{i:5d}  {d.mean():7.1f} ({d.min():6.1f}-{d.max():6.1f})      {e.mean():6.2f}")
    return "\n".join(lines)
