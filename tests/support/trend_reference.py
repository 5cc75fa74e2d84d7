"""The trend with depth computed again for the tests, by SciPy where it is installed (scikit-learn brings it),
else by the textbook formula: Spearman's rho and its two-sided permutation p. Not shipped."""

from __future__ import annotations

import math
from itertools import permutations

import numpy as np


def rho_by_formula(values: list[float]) -> float:
    """1 - 6 Σ d² / (n (n² - 1)) against depth 0..n-1, values ranked by hand (no ties among them)."""
    n = len(values)
    assert len(set(values)) == n, "the formula needs values without ties"
    rank = {v: i for i, v in enumerate(sorted(values))}
    d2 = sum((rank[v] - i) ** 2 for i, v in enumerate(values))
    return 1 - 6 * d2 / (n * (n * n - 1))


def exact_p_by_formula(values: list[float]) -> float:
    """The share of all n! orderings of the values whose |rho| (by the formula) is at least the observed one."""
    observed = abs(rho_by_formula(values))
    hits = sum(abs(rho_by_formula(list(order))) >= observed - 1e-12 for order in permutations(values))
    return hits / math.factorial(len(values))


def scipy_trend(values: np.ndarray, resamples: int = 20_000) -> tuple[float, float]:
    """(rho, p) by scipy.stats: spearmanr for rho, permutation_test for p (exact where n! <= resamples, else
    `resamples` random orderings with another seed than vitviz's); (0, 1) for constant values."""
    from scipy import stats

    if np.ptp(values) == 0:  # SciPy's nan: no ordering to follow, which vitviz reads as rho 0, p 1
        return 0.0, 1.0
    depth = np.arange(len(values))
    rho = float(stats.spearmanr(depth, values).statistic)

    def statistic(y, axis):
        ranked = stats.rankdata(y, axis=axis)
        centred = ranked - ranked.mean(axis=axis, keepdims=True)
        x = depth - depth.mean()
        return (centred @ x) / (np.linalg.norm(centred, axis=axis) * np.linalg.norm(x))

    data = (np.asarray(values, float),)
    rng = np.random.default_rng(12345)
    test = stats.permutation_test(data, statistic, permutation_type="pairings", n_resamples=resamples, rng=rng)
    return rho, float(test.pvalue)
