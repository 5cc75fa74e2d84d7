"""Sanity checks for maps (Adebayo et al. 2018): randomise the model from the top and see whether the map changes.

The layers are re-initialised one at a time, from the last to the first, on a copy of the model (never the served
one): each linear map gets random weights (normal, the config's initializer_range, zero bias) and each LayerNorm
its initial (1, 0). A map that stays the same while the weights become random shows a property of the input (its
edges, its contrast), not of the model.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from . import methods
from .attributions import attribute, patch_scores
from .models import VitModel
from .odds import FEWEST_DRAWS, LEVEL, p_value
from .preprocess import ImageInput, load_image

SHIFTS = 50  # shifted copies a verdict ranks the last map against: p can reach 1 / 51 ≈ 0.02, under LEVEL


@dataclass(eq=False)
class SanityCheck:
    """maps [S+1,gh,gw]: the map on the model, then after each step; randomised [S+1]: how many of the last
    layers are random at that step (0, 1, 2, ...); correlation [S+1]: Spearman's rank correlation of each map
    with the first."""

    method: str
    maps: np.ndarray
    randomised: np.ndarray
    correlation: np.ndarray
    layers: int
    seconds: float

    @property
    def shifted(self) -> np.ndarray:
        """[K] the rank correlations of the original map with shifted copies of the last one (`shifted_correlations`):
        what the last correlation would be if that map kept its own smoothness but no longer followed the original
        patch by patch."""
        return shifted_correlations(self.maps[0], self.maps[-1])

    @property
    def p_same(self) -> float:
        """The one-sided p of the last map matching the original this well by chance: (1 + #copies at least as
        correlated) / (K + 1)."""
        return p_value(-self.correlation[-1], -self.shifted)

    @property
    def verdict(self) -> str:
        """'fails' when the last map still matches the original beyond its shifted copies (p_same ≤ LEVEL): it shows
        the input, not the weights; 'undecided' on a grid with too few shifts for that level; 'passes' otherwise."""
        if self.p_same <= LEVEL:
            return "fails"
        return "undecided" if len(self.shifted) < FEWEST_DRAWS else "passes"

    def sentence(self) -> str:
        """What the check shows on this image, from its own numbers: the correlations, and the last map's rank
        among its shifted copies with its p."""
        first, last = self.correlation[1], self.correlation[-1]
        k = int(self.randomised[-1])
        said = f"With the last layer's weights random, the map's rank correlation with the original is {first:.2f}"
        if k < self.layers:
            follows = "already follows" if first < 0.9 else "hardly follows"
            return (
                f"{said}; with the last {k} of the {self.layers} layers random, {last:.2f}. The map {follows} the "
                f"last layer's weights; randomise all {self.layers} layers to complete the check."
            )
        copies = self.shifted
        n, beaten = len(copies), int(np.sum(copies < last))
        spread = f"their ρ {copies.mean():.2f} ± {copies.std(ddof=1) if n > 1 else 0:.2f}"
        if self.verdict == "fails":
            verdict = (
                f"closer to the original than {beaten} of {n} copies of that map shifted across the grid (p = "
                f"{self.p_same:.2g}, one-sided; {spread}), so at least part of it shows the input, not the "
                "model's weights: it fails the check"
            )
        elif self.verdict == "undecided":
            verdict = (
                f"this grid allows only {n} copies of that map shifted far enough across it, too few for a "
                f"verdict at p ≤ {LEVEL:g} (it beats {beaten} of them, p = {self.p_same:.2g}): the check "
                "cannot tell"
            )
        else:
            verdict = (
                f"not closer to the original than copies of that map shifted across the grid, at p ≤ "
                f"{LEVEL:g} (it beats {beaten} of {n}, p = {self.p_same:.2g}; {spread}), so the check finds "
                "no sign that it shows the input rather than the model's weights: it passes"
            )
        return f"{said}; with all {self.layers} layers random, {last:.2f}: {verdict}."


def shifted_correlations(original: np.ndarray, other: np.ndarray, copies: int = SHIFTS, seed: int = 0) -> np.ndarray:
    """[K] the rank correlation of `original` [gh,gw] with `other` rolled across the grid by K distinct shifts of at
    least a quarter of its height or width (every such shift when there are fewer), drawn from `seed`: the same on
    every call. A roll keeps the map's own smoothness, which a shuffle of its patches would destroy, so a smooth map
    is not called a match merely for being smooth; a shift too small to move it off itself would be one."""
    gh, gw = original.shape
    dy, dx = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    far = (np.minimum(dy, gh - dy) >= gh / 4) | (np.minimum(dx, gw - dx) >= gw / 4)
    shifts = np.flatnonzero(far.ravel())
    chosen = np.random.default_rng(seed).permutation(shifts)[:copies]
    return np.array([rank_correlation(original, np.roll(other, divmod(int(s), gw), (0, 1))) for s in chosen])


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two maps of one shape (ties broken by position)."""
    ra = np.argsort(np.argsort(a.ravel(), kind="stable"), kind="stable").astype(np.float64)
    rb = np.argsort(np.argsort(b.ravel(), kind="stable"), kind="stable").astype(np.float64)
    return float(np.corrcoef(ra, rb)[0, 1])


def randomise(block: nn.Module, std: float, generator: torch.Generator) -> None:
    """Re-initialise one transformer block in place: random linear maps, initial LayerNorms."""
    with torch.no_grad():
        for module in block.modules():
            if isinstance(module, nn.Linear):
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * std)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()


def sanity_check(
    model: VitModel,
    image: ImageInput,
    method: str = "integrated_gradients",
    layers: int | None = None,
    seed: int = 0,
    longest: int | None = None,
    progress: Callable[[float], None] | None = None,
    **options,
) -> SanityCheck:
    """The map of `method` (a key of `methods.REGISTRY`; `options` as `attribute`'s, the output explained among
    them) on `image`, then again after randomising the last 1, 2, ... `layers` layers (default: all) of a copy of
    `model`."""
    methods.get(method)  # an unknown one named before any work
    total = model.num_layers
    layers = total if layers is None else int(layers)
    if not 1 <= layers <= total:
        raise ValueError(f"layers must be between 1 and {total}, got {layers}")
    rgb = load_image(image)
    start = time.perf_counter()
    with model.lock:
        net = copy.deepcopy(model.net)
        dense_head = None if model.dense_head is None else copy.deepcopy(model.dense_head)
    twin = replace(model, net=net, dense_head=dense_head, lock=threading.RLock())
    std = float(getattr(twin.config, "initializer_range", 0.02))
    generator = torch.Generator().manual_seed(seed)

    def current_map() -> np.ndarray:
        return patch_scores(attribute(twin, rgb, method, longest=longest, **options).raw, twin.patch_size)

    maps = [current_map()]
    for step in range(1, layers + 1):
        if progress is not None:
            progress(step / (layers + 1))
        randomise(twin.blocks[total - step], std, generator)
        maps.append(current_map())
    return SanityCheck(
        method=method,
        maps=np.stack(maps),
        randomised=np.arange(layers + 1),
        correlation=np.array([rank_correlation(maps[0], m) for m in maps]),
        layers=total,
        seconds=time.perf_counter() - start,
    )
