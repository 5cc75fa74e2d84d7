"""Faithfulness over many images: each method's deletion and insertion areas on each image (`deletion.faithfulness`,
every method of an image ranked against one band of random orders), summarised per method as `vitviz faithfulness`
and docs/benchmarks.md print them."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .deletion import Faithfulness, faithfulness, random_band
from .models import VitModel
from .preprocess import load_image

# What draws a band: random_band's own arguments, besides the model, the image and the progress
_BAND_OPTIONS = set(inspect.signature(random_band).parameters) - {"model", "image", "progress"}


@dataclass
class MethodSummary:
    """One method over many images: mean areas, how often it beat every random order, mean time per map."""

    method: str
    images: int
    deletion_auc: float
    insertion_auc: float
    random_auc: float
    faithful: int
    map_seconds: float
    curve_seconds: float


def over_images(
    model: VitModel,
    files: list,
    methods: list[str],
    on_skip: Callable[[object, Exception], None] | None = None,
    bands: dict | None = None,
    **options,
) -> list[MethodSummary]:
    """Each method's faithfulness on each image (`options` as `faithfulness`'s), summarised per method, every method
    of an image ranked against one band of random orders drawn once. bands: {file: RandomBand}, kept by the caller
    across calls (the CLI calls once per method). A file that cannot be read is skipped and given to `on_skip`; a
    ValueError if none can."""
    results: dict[str, list[Faithfulness]] = {m: [] for m in methods}
    bands = {} if bands is None else bands
    drawing = {k: v for k, v in options.items() if k in _BAND_OPTIONS}
    for path in files:
        try:
            rgb = load_image(path)
        except ValueError as exc:
            if on_skip is not None:
                on_skip(path, exc)
            continue
        if path not in bands:
            bands[path] = random_band(model, rgb, **drawing)
        for method in methods:
            results[method].append(faithfulness(model, rgb, method, band=bands[path], **options))
    if not any(results.values()):
        raise ValueError("no readable image")
    return [
        MethodSummary(
            method=m,
            images=len(rs),
            deletion_auc=float(np.mean([r.deletion_auc for r in rs])),
            insertion_auc=float(np.mean([r.insertion_auc for r in rs])),
            random_auc=float(np.mean([r.random_auc for r in rs])),
            faithful=sum(r.verdict == "faithful" for r in rs),
            map_seconds=float(np.mean([r.map_seconds for r in rs])),
            curve_seconds=float(np.mean([r.seconds for r in rs])),
        )
        for m, rs in results.items()
    ]


def table(rows: list[MethodSummary]) -> str:
    """A plain-text table, most faithful first (lowest deletion area)."""
    head = (
        f"{'method':<22} {'deletion AUC':>12} {'insertion AUC':>13} {'random AUC':>10} {'faithful':>9} "
        f"{'s/map':>6} {'s/curves':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: r.deletion_auc):
        lines.append(
            f"{r.method:<22} {r.deletion_auc:>12.4f} {r.insertion_auc:>13.4f} {r.random_auc:>10.4f} "
            f"{f'{r.faithful}/{r.images}':>9} {r.map_seconds:>6.2f} {r.curve_seconds:>8.2f}"
        )
    return "\n".join(lines)
