"""Faithfulness on the user's own image: does hiding a map's top patches change the output faster than
hiding random ones?

Deletion (Petsiuk et al. 2018, RISE): replace the patches in the map's order, most relevant first, 10 % at a time,
and follow the target; a faithful map makes it fall fast (a low area under the curve). Insertion: start from the
replacement and put the patches back in the same order; a faithful map makes it rise fast (a high area). The
baseline band is the deletion curve of random orders: a map whose area lies inside it is no better than chance.
The replacement is a heavy blur of the image by default (the attributions' own "blurred" baseline), so that hidden
patches do not add the sharp edges that a black square would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from . import methods
from .attributions import attribute, patch_scores, target_function
from .methods import absent_input
from .models import VitModel
from .outputs import Box, Output, Text, output_for
from .preprocess import ImageInput, load_image

REPLACEMENTS = {"blur": "blurred", "mean": "mean colour", "black": "black"}  # -> the attributions' baselines
# Besides the methods the Attributions tab offers: the other maps that faithfulness scores too (rollout, toward the
# same output)
MAPS = tuple(key for key, m in methods.REGISTRY.items() if not m.offered)


@dataclass(eq=False)
class Faithfulness:
    """fractions [S+1]: the share of patches replaced (deletion) or put back (insertion), 0 to 1.
    deletion [S+1]: the target with the top fraction of patches replaced, most relevant first.
    insertion [S+1]: the target on the replacement with the top fraction of patches put back.
    random [K,S+1]: deletion curves of K random orders, random_order [K,P]. order [P]: patch indices (row-major),
    most relevant first.
    seconds: the curves' time; map_seconds: the map's own.
    """

    method: str
    target: str
    replacement: str
    grid: tuple[int, int]
    fractions: np.ndarray
    deletion: np.ndarray
    insertion: np.ndarray
    random: np.ndarray
    random_order: np.ndarray
    order: np.ndarray
    seconds: float
    map_seconds: float
    output: Output | None = None  # the output followed, which the map explains

    @property
    def deletion_auc(self) -> float:
        return _auc(self.fractions, self.deletion)

    @property
    def insertion_auc(self) -> float:
        return _auc(self.fractions, self.insertion)

    @property
    def random_aucs(self) -> np.ndarray:
        """[K] the random orders' deletion areas. Putting patches back in a random order is deleting them in
        another random order, backwards: the same band serves insertion."""
        return np.array([_auc(self.fractions, curve) for curve in self.random])

    @property
    def random_auc(self) -> float:
        return float(self.random_aucs.mean())

    @property
    def verdict(self) -> str:
        """'faithful' (deletion below every random order), 'worse than random' (above every one) or 'no better
        than random'."""
        low, high = self.random_aucs.min(), self.random_aucs.max()
        if self.deletion_auc < low:
            return "faithful"
        return "worse than random" if self.deletion_auc > high else "no better than random"

    def sentence(self) -> str:
        """One sentence on this image, from the curves' own numbers."""
        k, low, high = len(self.random), self.random_aucs.min(), self.random_aucs.max()
        replaced = f"replaced by {_REPLACED[self.replacement]}"
        whole = f"than all {k} random orders did, over the whole curve"  # the verdict reads areas, not one step
        if self.verdict == "faithful":
            how = f"lowers {self.target} faster {whole}: faithful"
        elif self.verdict == "worse than random":
            how = f"lowers {self.target} more slowly {whole}: worse than random"
        else:
            how = f"lowers {self.target} no faster than {k} random orders, over the whole curve: no better than random"
        if self.deletion[1:].mean() > self.deletion[0]:  # the curve does not fall at all
            how += f"; hiding them raises it on average, from {self.deletion[0]:.3g} to {self.deletion[1:].mean():.3g}"
        if self.verdict != "faithful":  # a finding about the map, which the reader did nothing to cause
            how += ". So on this image the map is not a reliable guide to what this output uses"
        return (
            f"On this image, removing this map's top patches ({replaced}) {how} "
            f"(area under the deletion curve {self.deletion_auc:.3g}, random orders {low:.3g} to {high:.3g}; "
            f"lower is better). Putting them back first gives an insertion area of {self.insertion_auc:.3g} "
            f"(higher is better)."
        )


_REPLACED = {"blur": "a blur of the image", "mean": "the mean colour", "black": "black"}


def _auc(fractions: np.ndarray, curve: np.ndarray) -> float:
    return float(np.trapezoid(curve, fractions))


def faithfulness(
    model: VitModel,
    image: ImageInput,
    method: str = "integrated_gradients",
    steps: int = 10,
    replacement: str = "blur",
    random_orders: int = 5,
    seed: int = 0,
    target: int | None = None,
    box: Box | None = None,
    longest: int | None = None,
    text: Text | None = None,
    scores: np.ndarray | None = None,
    batch: int = 16,
    progress: Callable[[float], None] | None = None,
    output: Output | None = None,
    **options,
) -> Faithfulness:
    """Deletion and insertion curves of one map on `image`, against `random_orders` random orders.

    method: a key of `methods.REGISTRY` (an attribution, or rollout toward the same output), made with `options`
    such as n_steps; or give `scores` [gh,gw], one value per patch of the attribution input (method then only
    names it). The curves follow the output the map explains: `output`, or
    the one that target, box and text name (as `attribute`'s). steps: the curves' points less one
    (10: every 10 %). replacement: what a hidden patch shows ("blur", "mean" colour or "black"). batch: the
    masked inputs per forward pass.
    """
    if replacement not in REPLACEMENTS:
        raise ValueError(f"unknown replacement {replacement!r}: use one of {', '.join(REPLACEMENTS)}")
    if scores is None:
        methods.get(method)  # an unknown one named before any work
    if not 1 <= steps <= 100:
        raise ValueError(f"steps must be between 1 and 100, got {steps}")
    if not 1 <= random_orders <= 100:
        raise ValueError(f"random_orders must be between 1 and 100, got {random_orders}")
    if not 1 <= batch <= 256:
        raise ValueError(f"batch must be between 1 and 256, got {batch}")
    rgb = load_image(image)
    output = output_for(model, target, box, text) if output is None else output
    x, score_fn, _, output = target_function(model, rgb, output, longest)
    grid, p = score_fn.grid, model.patch_size
    start = time.perf_counter()
    if scores is None:
        half = None if progress is None else (lambda fraction: progress(fraction / 2))  # the map: the first half
        r = attribute(model, rgb, method, longest=longest, progress=half, output=output, **options)
        scores = patch_scores(r.raw, p)
    scores = np.asarray(scores, np.float32)
    if scores.shape != grid:
        raise ValueError(f"scores must be one value per patch, {grid}, got {scores.shape}")
    map_seconds = time.perf_counter() - start
    start = time.perf_counter()
    n = grid[0] * grid[1]
    order = np.argsort(-scores.ravel(), kind="stable")
    rng = np.random.default_rng(seed)
    randoms = [rng.permutation(n) for _ in range(random_orders)]
    counts = np.rint(np.linspace(0, 1, steps + 1) * n).astype(int)

    def hidden(o: np.ndarray, count: int) -> np.ndarray:
        mask = np.zeros(n, bool)
        mask[o[:count]] = True
        return mask

    deletion = [hidden(order, c) for c in counts]
    insertion = [~hidden(order, c) for c in counts]
    random = [[hidden(o, c) for c in counts] for o in randoms]
    masks = {m.tobytes(): m for m in [*deletion, *insertion, *(m for curve in random for m in curve)]}
    base = absent_input(REPLACEMENTS[replacement], rgb, x, model)
    rest = None if progress is None else (lambda fraction: progress(0.5 + fraction / 2))
    values = _scores(model, score_fn, x, base, list(masks.values()), grid, p, batch, rest)
    value = dict(zip(masks, values, strict=True))

    def curve(ms: list[np.ndarray]) -> np.ndarray:
        return np.array([value[m.tobytes()] for m in ms], np.float64)

    return Faithfulness(
        method=method,
        target=output.short(model.labels),
        replacement=replacement,
        grid=grid,
        fractions=counts / n,
        deletion=curve(deletion),
        insertion=curve(insertion),
        random=np.stack([curve(ms) for ms in random]),
        random_order=np.stack(randoms),
        order=order,
        seconds=time.perf_counter() - start,
        map_seconds=map_seconds,
        output=output,
    )


def passes(steps: int = 10, random_orders: int = 5) -> int:
    """At most how many images the curves send through the model (forward only), besides the map's own."""
    return (2 + random_orders) * (steps - 1) + 2


def _scores(model, score_fn, x, base, masks, grid, p, batch, progress) -> list[float]:
    """The target on x with each mask's patches replaced by `base`, `batch` inputs per forward pass."""
    values: list[float] = []
    for i in range(0, len(masks), batch):
        m = torch.from_numpy(np.stack(masks[i : i + batch]).reshape(-1, 1, *grid).astype(np.float32))
        m = m.repeat_interleave(p, 2).repeat_interleave(p, 3).to(x.device)
        inputs = x * (1 - m) + base * m
        with model.lock, torch.inference_mode():
            out = model.forward(inputs, attentions=lambda layer, weights: None)
            values += score_fn.reading.of_output(out).float().cpu().tolist()
        if progress is not None:
            progress(min(1.0, (i + batch) / len(masks)))
    return values


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
    **options,
) -> list[MethodSummary]:
    """Each method's faithfulness on each image (`options` as `faithfulness`'s), summarised per method. A file that
    cannot be read is skipped and given to `on_skip`; a ValueError if none can."""
    results: dict[str, list[Faithfulness]] = {m: [] for m in methods}
    for path in files:
        try:
            rgb = load_image(path)
        except ValueError as exc:
            if on_skip is not None:
                on_skip(path, exc)
            continue
        for method in methods:
            results[method].append(faithfulness(model, rgb, method, **options))
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
    head = f"{'method':<22} {'deletion AUC':>12} {'insertion AUC':>13} {'random AUC':>10} {'faithful':>9} " \
           f"{'s/map':>6} {'s/curves':>8}"  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: r.deletion_auc):
        lines.append(
            f"{r.method:<22} {r.deletion_auc:>12.4f} {r.insertion_auc:>13.4f} {r.random_auc:>10.4f} "
            f"{f'{r.faithful}/{r.images}':>9} {r.map_seconds:>6.2f} {r.curve_seconds:>8.2f}"
        )
    return "\n".join(lines)
