"""Faithfulness on the user's own image: does hiding a map's top patches change the output faster than
hiding random ones?

Deletion (Petsiuk et al. 2018, RISE): replace the patches in the map's order, most relevant first, 10 % at a time,
and follow the target; a faithful map makes it fall fast (a low area under the curve). Insertion: start from the
replacement and put the patches back in the same order; a faithful map makes it rise fast (a high area). The map's
deletion area is ranked against those of 50 random orders drawn from a fixed seed (`random_band`, shared by every map
of one photo and output): "faithful" only at a one-sided p ≤ 0.05 (`vitviz.odds`), "worse than random" at the
mirror p, else no better than chance.
The replacement is a heavy blur of the image by default (the attributions' own "blurred" baseline), so that hidden
patches do not add the sharp edges that a black square would.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from . import methods
from .attributions import attribute, patch_scores, target_function
from .methods import absent_input
from .models import VitModel
from .odds import FEWEST_DRAWS, LEVEL, needed, p_value
from .outputs import Box, Output, Text, output_for
from .preprocess import ImageInput, load_image

REPLACEMENTS = {"blur": "blurred", "mean": "mean colour", "black": "black"}  # -> the attributions' baselines
# Besides the methods the Attributions tab offers: the other maps that faithfulness scores too (rollout, toward the
# same output)
MAPS = tuple(key for key, m in methods.REGISTRY.items() if not m.offered)
# The random orders a check draws: with K of them the smallest p is 1 / (K + 1), 0.02 here, so a map below 49 of the
# 50 (p = 0.039) can be called faithful.
RANDOM_ORDERS = 50


@dataclass(frozen=True, eq=False)
class RandomBand:
    """The deletion curves of K random orders of one input's patches, for one output: what every map of that output
    is ranked against. It depends on the input, the output, the steps, the replacement and the seed, never on a map,
    so one band serves every map of a check, and a slider that changes only the map keeps it.

    orders [K,P]: patch indices, hidden first to last. curves [K,S+1]: the output at each fraction [S+1].
    input_key: a digest of the model input it was drawn on. seconds: its curves' time."""

    output: Output
    replacement: str
    grid: tuple[int, int]
    seed: int
    fractions: np.ndarray
    orders: np.ndarray
    curves: np.ndarray
    input_key: str
    seconds: float

    @property
    def areas(self) -> np.ndarray:
        """[K] the random orders' deletion areas."""
        return np.array([_auc(self.fractions, curve) for curve in self.curves])


@dataclass(eq=False)
class Faithfulness:
    """fractions [S+1]: the share of patches replaced (deletion) or put back (insertion), 0 to 1.
    deletion [S+1]: the target with the top fraction of patches replaced, most relevant first.
    insertion [S+1]: the target on the replacement with the top fraction of patches put back.
    band: the random orders it is ranked against (random [K,S+1] their curves, random_order [K,P] their orders).
    order [P]: patch indices (row-major), most relevant first.
    seconds: the map's curves' time (and the band's, when drawn for it alone); map_seconds: the map's own.
    """

    method: str
    target: str
    replacement: str
    grid: tuple[int, int]
    fractions: np.ndarray
    deletion: np.ndarray
    insertion: np.ndarray
    band: RandomBand
    order: np.ndarray
    seconds: float
    map_seconds: float
    output: Output | None = None  # the output followed, which the map explains

    @property
    def random(self) -> np.ndarray:
        return self.band.curves

    @property
    def random_order(self) -> np.ndarray:
        return self.band.orders

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
        return self.band.areas

    @property
    def random_auc(self) -> float:
        return float(self.random_aucs.mean())

    @property
    def random_spread(self) -> float:
        """The random orders' areas' standard deviation: how far one random order's area strays from their mean."""
        return float(self.random_aucs.std(ddof=1)) if len(self.random_aucs) > 1 else 0.0

    @property
    def below(self) -> int:
        """How many random orders' areas are above the map's: it fell faster than they did."""
        return int(np.sum(self.random_aucs > self.deletion_auc))

    @property
    def above(self) -> int:
        """How many random orders' areas are below the map's: it fell more slowly than they did."""
        return int(np.sum(self.random_aucs < self.deletion_auc))

    @property
    def p_faithful(self) -> float:
        """The one-sided p of a deletion area this low among random orders (`p_value`)."""
        return p_value(self.deletion_auc, self.random_aucs)

    @property
    def p_worse(self) -> float:
        """The one-sided p of a deletion area this high among random orders."""
        return p_value(-self.deletion_auc, -self.random_aucs)

    @property
    def verdict(self) -> str:
        """'faithful' (p_faithful ≤ LEVEL), 'worse than random' (p_worse ≤ LEVEL) or 'no better than chance'."""
        if self.p_faithful <= LEVEL:
            return "faithful"
        return "worse than random" if self.p_worse <= LEVEL else "no better than chance"

    @property
    def rises_at_end(self) -> bool:
        """Whether the deletion curve rises at its last step, every patch hidden (`_END` says why it may)."""
        return len(self.deletion) > 2 and bool(self.deletion[-1] > self.deletion[-2])

    def sentence(self, why_end: bool = True) -> str:
        """One sentence on this image, from the curves' own numbers: the verdict, the map's rank among the random
        orders with its p, and the area's difference from theirs with their spread. why_end: say why a curve that
        rises at its last point does (False where `end_note` says it once for several maps)."""
        k, verdict = len(self.random_aucs), self.verdict
        replaced = f"replaced by {_REPLACED[self.replacement]}"
        whole = "over the whole curve"  # the verdict reads areas, not one step
        if verdict == "faithful":
            how = (
                f"lowers {self.target} faster than {self.below} of {k} random orders did, {whole} "
                f"(p = {self.p_faithful:.2g}, one-sided; faithful needs p ≤ {LEVEL:g}): faithful"
            )
        elif verdict == "worse than random":
            # "keeps higher", not "lowers more slowly": the curve may not fall at all (said below)
            how = (
                f"keeps {self.target} higher than {self.above} of {k} random orders did, {whole} "
                f"(p = {self.p_worse:.2g}, one-sided; worse than random needs p ≤ {LEVEL:g}): "
                "worse than random"
            )
        else:
            p = min(self.p_faithful, self.p_worse)
            how = (
                f"lowers {self.target} faster than {self.below} of {k} random orders did and more slowly than "
                f"{self.above}, {whole} (p = {p:.2g}; a verdict needs p ≤ {LEVEL:g} either way): no better than "
                "chance"
            )
            if k < FEWEST_DRAWS:
                how += (
                    f" (with {k} random orders p cannot go below {1 / (k + 1):.2g}: a verdict needs at least "
                    f"{FEWEST_DRAWS})"
                )
        if self.deletion[1:].mean() > self.deletion[0]:  # the curve does not fall at all
            how += f"; hiding them raises it on average, from {self.deletion[0]:.3g} to {self.deletion[1:].mean():.3g}"
        if verdict != "faithful":  # a finding about the map, which the reader did nothing to cause
            how += ". So on this image the map is not a reliable guide to what this output uses"
        gap = self.deletion_auc - self.random_auc
        side = "below" if gap < 0 else "above"
        said = (
            f"On this image, removing this map's top patches ({replaced}) {how}. Its area under the deletion curve "
            f"is {self.deletion_auc:.4g}, {abs(gap):.2g} {side} the random orders' mean of {self.random_auc:.4g} "
            f"(their standard deviation {self.random_spread:.2g}; lower is better)."
        )
        if self.rises_at_end:
            said += (
                f" The curve's last point, every patch hidden, is {_REPLACED[self.replacement]} alone, the same for "
                f"every order: there the output is {self.deletion[-1]:.3g}, above its {self.deletion[-2]:.3g} at "
                f"{self.fractions[-2]:.0%} hidden."
            ) + (f" {_END}" if why_end else "")
        return (
            said + f" Putting the top patches back first gives an insertion area of {self.insertion_auc:.3g} "
            "(higher is better)."
        )


_REPLACED = {"blur": "a blur of the image", "mean": "the mean colour", "black": "black"}
# Why a curve may rise at its end (docs/design.md, "The end of a deletion curve"): true of any output, since none is a
# sum over patches.
_END = (
    "So that step says nothing of this map's order, and its value adds the same to every order's area. The "
    "replacement is no absence to the model: its output on the replacement alone can be higher than with a few "
    "patches left."
)


def end_note(results) -> str | None:
    """Why some of these curves rise at their last point, said once for them all (their sentences then leave it
    out: `Faithfulness.sentence(why_end=False)`); None when none does."""
    rising = sum(r.rises_at_end for r in results)
    if not rising:
        return None
    which = "Its curve rises" if len(results) == 1 else f"{rising} of these {len(results)} curves rise"
    return f"{which} at the last point, every patch hidden. {_END}"


def band_note(band: RandomBand) -> str:
    """What every verdict of a check is ranked against, said once: how many random orders, from which seed, and
    why a setting that changes only the map cannot change them."""
    k = len(band.orders)
    if k < FEWEST_DRAWS:
        return (
            f"Each map is ranked against the same {k} random orders of the patches (seed {band.seed}): too few "
            f"for any verdict at p ≤ {LEVEL:g}, which needs at least {FEWEST_DRAWS}."
        )
    return (
        f"Each map is ranked against the same {k} random orders of the patches (seed {band.seed}, drawn for this "
        f"photo and this output, {band.seconds:.1f} s), so a setting that changes only the map changes a verdict "
        f"only when its area crosses theirs. A verdict needs p ≤ {LEVEL:g}, one-sided: below at least "
        f"{needed(k)} of the {k} for faithful, above at least {needed(k)} for worse than random."
    )


def _auc(fractions: np.ndarray, curve: np.ndarray) -> float:
    return float(np.trapezoid(curve, fractions))


@dataclass(eq=False)
class _Masking:
    """What masking one input for one output needs: the input x [1,3,h,w], the output as a function of inputs, the
    output resolved, the replacement `base` [1,3,h,w], the patch grid and the input's digest."""

    rgb: np.ndarray
    x: torch.Tensor
    score_fn: object
    output: Output
    base: torch.Tensor
    grid: tuple[int, int]
    key: str

    def counts(self, steps: int) -> np.ndarray:
        n = self.grid[0] * self.grid[1]
        return np.rint(np.linspace(0, 1, steps + 1) * n).astype(int)

    def hidden(self, order: np.ndarray, count: int) -> np.ndarray:
        mask = np.zeros(self.grid[0] * self.grid[1], bool)
        mask[order[:count]] = True
        return mask


def _masking(model, image, output, target, box, text, longest, replacement) -> _Masking:
    rgb = load_image(image)
    output = output_for(model, target, box, text) if output is None else output
    x, score_fn, _, output = target_function(model, rgb, output, longest)
    base = absent_input(REPLACEMENTS[replacement], rgb, x, model)
    key = hashlib.blake2b(x.detach().cpu().numpy().tobytes(), digest_size=16).hexdigest()
    return _Masking(rgb, x, score_fn, output, base, score_fn.grid, key)


def _check_arguments(replacement: str, steps: int, random_orders: int, batch: int) -> None:
    if replacement not in REPLACEMENTS:
        raise ValueError(f"unknown replacement {replacement!r}: use one of {', '.join(REPLACEMENTS)}")
    if not 1 <= steps <= 100:
        raise ValueError(f"steps must be between 1 and 100, got {steps}")
    if not 1 <= random_orders <= 1000:
        raise ValueError(f"random_orders must be between 1 and 1000, got {random_orders}")
    if not 1 <= batch <= 256:
        raise ValueError(f"batch must be between 1 and 256, got {batch}")


def _random_orders(n: int, random_orders: int, seed: int) -> np.ndarray:
    """[K,n] K random orders of n patches, from `seed` alone: the same on every call with it."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(n) for _ in range(random_orders)])


def random_band(
    model: VitModel,
    image: ImageInput,
    steps: int = 10,
    replacement: str = "blur",
    random_orders: int = RANDOM_ORDERS,
    seed: int = 0,
    target: int | None = None,
    box: Box | None = None,
    longest: int | None = None,
    text: Text | None = None,
    batch: int = 16,
    progress: Callable[[float], None] | None = None,
    output: Output | None = None,
) -> RandomBand:
    """The deletion curves of `random_orders` random orders (drawn from `seed`) on `image` for one output (as
    `faithfulness`'s arguments name it): give it to `faithfulness(band=...)` for each map of that output, so that
    they are ranked against the same orders and the orders' images go through the model once."""
    _check_arguments(replacement, steps, random_orders, batch)
    m = _masking(model, image, output, target, box, text, longest, replacement)
    start = time.perf_counter()
    orders = _random_orders(m.grid[0] * m.grid[1], random_orders, seed)
    counts = m.counts(steps)
    curves = [[m.hidden(o, c) for c in counts] for o in orders]
    value = _values(model, m, [mask for curve in curves for mask in curve], batch, progress, {})
    return RandomBand(
        m.output,
        replacement,
        m.grid,
        seed,
        counts / counts[-1],
        orders,
        np.array([[value[mask.tobytes()] for mask in curve] for curve in curves], np.float64),
        m.key,
        time.perf_counter() - start,
    )


def faithfulness(
    model: VitModel,
    image: ImageInput,
    method: str = "integrated_gradients",
    steps: int = 10,
    replacement: str = "blur",
    random_orders: int = RANDOM_ORDERS,
    seed: int = 0,
    target: int | None = None,
    box: Box | None = None,
    longest: int | None = None,
    text: Text | None = None,
    scores: np.ndarray | None = None,
    batch: int = 16,
    progress: Callable[[float], None] | None = None,
    output: Output | None = None,
    band: RandomBand | None = None,
    **options,
) -> Faithfulness:
    """Deletion and insertion curves of one map on `image`, ranked against `random_orders` random orders drawn from
    `seed` (the same orders on every call with the same seed, whatever the map).

    method: a key of `methods.REGISTRY` (an attribution, or rollout toward the same output), made with `options`
    such as n_steps; or give `scores` [gh,gw], one value per patch of the attribution input (method then only
    names it). The curves follow the output the map explains: `output`, or
    the one that target, box and text name (as `attribute`'s). steps: the curves' points less one
    (10: every 10 %). replacement: what a hidden patch shows ("blur", "mean" colour or "black"). batch: the
    masked inputs per forward pass. band: random orders already drawn on this input for this output
    (`random_band`), used instead of drawing them (random_orders and seed are then the band's).
    """
    if scores is None:
        methods.get(method)  # an unknown one named before any work
    _check_arguments(replacement, steps, random_orders, batch)
    m = _masking(model, image, output, target, box, text, longest, replacement)
    if band is not None:
        _check_band(band, m, replacement, steps)
    grid, p = m.grid, model.patch_size
    start = time.perf_counter()
    if scores is None:
        half = None if progress is None else (lambda fraction: progress(fraction / 2))  # the map: the first half
        r = attribute(model, m.rgb, method, longest=longest, progress=half, output=m.output, **options)
        scores = patch_scores(r.raw, p)
    scores = np.asarray(scores, np.float32)
    if scores.shape != grid:
        raise ValueError(f"scores must be one value per patch, {grid}, got {scores.shape}")
    map_seconds = time.perf_counter() - start
    start = time.perf_counter()
    n = grid[0] * grid[1]
    order = np.argsort(-scores.ravel(), kind="stable")
    counts = m.counts(steps)
    deletion = [m.hidden(order, c) for c in counts]
    insertion = [~m.hidden(order, c) for c in counts]
    orders = _random_orders(n, random_orders, seed) if band is None else band.orders
    random = [] if band is not None else [[m.hidden(o, c) for c in counts] for o in orders]
    known = {}
    if band is not None:  # every order's first and last images are the same: the band's
        known = {deletion[0].tobytes(): band.curves[0, 0], deletion[-1].tobytes(): band.curves[0, -1]}
    rest = None if progress is None else (lambda fraction: progress(0.5 + fraction / 2))
    value = _values(
        model, m, [*deletion, *insertion, *(mask for curve in random for mask in curve)], batch, rest, known
    )

    def curve(ms: list[np.ndarray]) -> np.ndarray:
        return np.array([value[mask.tobytes()] for mask in ms], np.float64)

    seconds = time.perf_counter() - start
    if band is None:
        band = RandomBand(
            m.output,
            replacement,
            grid,
            seed,
            counts / n,
            orders,
            np.stack([curve(ms) for ms in random]),
            m.key,
            seconds,
        )
    return Faithfulness(
        method=method,
        target=m.output.short(model.labels),
        replacement=replacement,
        grid=grid,
        fractions=counts / n,
        deletion=curve(deletion),
        insertion=curve(insertion),
        band=band,
        order=order,
        seconds=seconds,
        map_seconds=map_seconds,
        output=m.output,
    )


def _check_band(band: RandomBand, m: _Masking, replacement: str, steps: int) -> None:
    """A band drawn for another input, output, replacement or number of steps names what differs."""
    if band.input_key != m.key or band.grid != m.grid:
        raise ValueError("the random orders were drawn on another image or input size: draw them on this one")
    if band.output != m.output:
        raise ValueError(f"the random orders follow another output ({band.output}), not {m.output}")
    if band.replacement != replacement or len(band.fractions) != steps + 1:
        raise ValueError(
            f"the random orders hide patches by {band.replacement} in {len(band.fractions) - 1} steps, "
            f"not by {replacement} in {steps}"
        )


def passes(steps: int = 10, random_orders: int = RANDOM_ORDERS, maps: int = 1) -> int:
    """At most how many images the curves of `maps` maps that share one band of random orders send through the
    model (forward only), besides the maps' own."""
    return (2 * maps + random_orders) * (steps - 1) + 2


def _values(model, m: _Masking, masks: list[np.ndarray], batch: int, progress, known: dict) -> dict[bytes, float]:
    """{mask's bytes: the output on x with the mask's patches replaced by the replacement}: `known` as given, the
    other masks (each once) through the model, `batch` inputs per forward pass."""
    todo = list({mask.tobytes(): mask for mask in masks if mask.tobytes() not in known}.values())
    value = dict(known)
    p = model.patch_size
    for i in range(0, len(todo), batch):
        chunk = todo[i : i + batch]
        w = torch.from_numpy(np.stack(chunk).reshape(-1, 1, *m.grid).astype(np.float32))
        w = w.repeat_interleave(p, 2).repeat_interleave(p, 3).to(m.x.device)
        inputs = m.x * (1 - w) + m.base * w
        with model.lock, torch.inference_mode():
            out = model.forward(inputs, attentions=lambda layer, weights: None)
            values = m.score_fn.reading.of_output(out).float().cpu().tolist()
        value.update(zip((c.tobytes() for c in chunk), values, strict=True))
        if progress is not None:
            progress(min(1.0, (i + batch) / len(todo)))
    return value
