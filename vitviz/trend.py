"""Whether a per-layer number grows or falls with depth, as a test: Spearman's rank correlation of the values with
the layers' depth, and its two-sided permutation p-value. A sentence that says "grows with depth" needs both a
strong correlation and a small p, so that a dip in the middle layers, or a rise between two layers only, is not
told as a trend.

Shapes: L layers; values [L], one number per layer in depth order (layer 0 first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import permutations

import numpy as np

RHO, P = 0.6, 0.05  # a trend: |rho| >= RHO and p <= P; below either, "no clear trend"
STRONG = 0.8  # |rho| from here: strong; from RHO: moderate; below RHO: weak
PERMUTATIONS = 20_000  # random orderings for p where there are more orderings than this (from 8 layers on)
SEED = 0  # the random orderings' seed: the same values always get the same p


def ranks(x: np.ndarray) -> np.ndarray:
    """[n] the ranks 1..n of x [n], float64; tied values share the mean of their ranks (as Spearman's rho ranks)."""
    _, inverse, counts = np.unique(np.asarray(x, np.float64), return_inverse=True, return_counts=True)
    return (np.cumsum(counts) - (counts - 1) / 2.0)[inverse.reshape(-1)]


def standardised(x: np.ndarray) -> np.ndarray:
    """[n] x [n] centred and scaled to unit length, so that the dot product of two is their correlation; all 0 for
    a constant x (whose correlation with anything is then 0, however its mean rounds)."""
    x = np.asarray(x, np.float64)
    if np.ptp(x) == 0:
        return np.zeros_like(x)
    centred = x - x.mean()
    return centred / np.linalg.norm(centred)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of x [n] and y [n]: the correlation of their ranks, in [-1, 1]; 0 where either
    is constant (no ordering to follow)."""
    if np.shape(x) != np.shape(y) or np.ndim(x) != 1:
        raise ValueError(f"x and y must be [n] of one length, got {np.shape(x)} and {np.shape(y)}")
    return float(np.clip(standardised(ranks(x)) @ standardised(ranks(y)), -1.0, 1.0))


def orderings(n: int) -> np.ndarray:
    """[K,n] orderings of n items: all n! where that is at most PERMUTATIONS (exact p), else PERMUTATIONS random
    ones drawn with SEED."""
    if math.factorial(n) <= PERMUTATIONS:
        return np.array(list(permutations(range(n))), np.int64).reshape(-1, n)
    rng = np.random.default_rng(SEED)
    return np.argsort(rng.random((PERMUTATIONS, n)), axis=1)


def permutation_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p of Spearman's rho of x [n] and y [n]: the share of orderings of y whose |rho| is at least the
    observed one (exact over all n! orderings up to n = 7; over PERMUTATIONS random ones, counting the observed
    ordering too, from n = 8). 1 where either is constant."""
    sx, sy = standardised(ranks(x)), standardised(ranks(y))
    observed = abs(sx @ sy)
    if not sx.any() or not sy.any():
        return 1.0
    order = orderings(len(sx))
    hits = int(np.count_nonzero(np.abs(sy[order] @ sx) >= observed - 1e-12))  # ties of rho count, as they should
    if math.factorial(len(sx)) <= PERMUTATIONS:
        return hits / len(order)
    return (hits + 1) / (len(order) + 1)


@dataclass(frozen=True)
class Trend:
    """A per-layer number's trend with depth: rho, Spearman's rank correlation of its values [L] with the layers'
    depth, and p, rho's two-sided permutation p-value."""

    rho: float
    p: float
    layers: int

    @property
    def direction(self) -> str:
        """ "grows", "falls" or "none": a trend needs |rho| >= RHO and p <= P."""
        if abs(self.rho) < RHO or self.p > P:
            return "none"
        return "grows" if self.rho > 0 else "falls"

    @property
    def strength(self) -> str:
        """ "strong" (|rho| >= STRONG), "moderate" (>= RHO) or "weak" (below RHO, too weak to count)."""
        return "strong" if abs(self.rho) >= STRONG else "moderate" if abs(self.rho) >= RHO else "weak"


def depth_trend(values: np.ndarray) -> Trend:
    """The trend of values [L] (layer 0 first) with depth."""
    values = np.asarray(values, np.float64)
    if values.ndim != 1 or len(values) < 2:
        raise ValueError(f"a trend over depth needs one value per layer for at least 2 layers, got {values.shape}")
    depth = np.arange(len(values))
    return Trend(spearman(depth, values), permutation_p(depth, values), len(values))
