"""The trend with depth: Spearman's rho against hand-ranked examples and SciPy, its permutation p exact by
enumeration and against SciPy's permutation test, and the verdict on rises, falls, dips, flats and few layers."""

from __future__ import annotations

import numpy as np
import pytest
from support.trend_reference import exact_p_by_formula, rho_by_formula, scipy_trend

from vitviz import trend

DIPPING = [201, 154, 160, 124, 141, 124, 182, 161, 186, 181, 206, 204]  # a photo's distances: up at the ends only


def test_ranks_share_the_mean_rank_of_their_ties():
    np.testing.assert_array_equal(trend.ranks(np.array([10, 20, 20, 5])), [2, 3.5, 3.5, 1])
    np.testing.assert_array_equal(trend.ranks(np.array([7.0, 7.0, 7.0])), [2, 2, 2])
    np.testing.assert_array_equal(trend.ranks(np.array([0.3, -1.0, 2.0])), [2, 1, 3])


def test_rho_is_the_textbook_formula_on_hand_ranked_values():
    """[1, 3, 2, 5, 4] against depth: d = 0, 1, -1, 1, -1, so rho = 1 - 6·4 / (5·24) = 0.8."""
    assert trend.spearman(np.arange(5), np.array([1, 3, 2, 5, 4])) == pytest.approx(0.8, abs=1e-12)
    assert rho_by_formula([1, 3, 2, 5, 4]) == pytest.approx(0.8, abs=1e-12)
    rng = np.random.default_rng(0)
    for n in (3, 6, 12, 30):
        values = list(rng.permutation(n) + rng.random(n) * 0.1)
        assert trend.spearman(np.arange(n), np.array(values)) == pytest.approx(rho_by_formula(values), abs=1e-12)
    assert trend.spearman(np.arange(4), np.full(4, 3.0)) == 0.0  # flat: no ordering to follow
    with pytest.raises(ValueError, match="one length"):
        trend.spearman(np.arange(3), np.arange(4))


def test_rho_is_scipys_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    for n in (5, 12, 40):
        x, y = rng.integers(0, 4, n), rng.integers(0, 6, n)  # many ties in both
        assert trend.spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


@pytest.mark.parametrize("values", [[1, 3, 2, 5, 4], [4, 1, 3, 2], [2, 1, 3], [5, 3, 6, 1, 7, 2, 4]])
def test_p_is_exact_over_every_ordering_up_to_seven_layers(values):
    """A p by the formula over all n! orderings; increasing values on 4 layers reach only 2 of 24 orderings."""
    got = trend.permutation_p(np.arange(len(values)), np.array(values, float))
    assert got == pytest.approx(exact_p_by_formula(values), abs=1e-12)
    assert trend.permutation_p(np.arange(4), np.arange(4.0)) == pytest.approx(2 / 24)


def test_p_on_twelve_layers_is_scipys_permutation_test():
    """From 8 layers, 20 000 random orderings: within a few standard errors (~0.002) of SciPy's own 20 000."""
    pytest.importorskip("scipy")
    rng = np.random.default_rng(2)
    for values in (DIPPING, list(np.arange(12) + rng.normal(0, 4, 12)), list(rng.normal(size=12))):
        rho, p = scipy_trend(np.array(values, float))
        t = trend.depth_trend(values)
        assert t.rho == pytest.approx(rho, abs=1e-12) and t.p == pytest.approx(p, abs=0.015), values
    assert trend.depth_trend(DIPPING) == trend.depth_trend(DIPPING)  # seeded: the same values, the same p


@pytest.mark.parametrize(
    "values, direction, strength",
    [
        (list(100 + 10 * np.arange(12.0)), "grows", "strong"),
        (list(300 - 10 * np.arange(12.0)), "falls", "strong"),
        (DIPPING, "none", "weak"),  # grows from the first layer to the last, dips in between: rho 0.53, p 0.08
        ([5, 4, 3, 2, 1, 0, 0, 1, 2, 3, 4, 5.0], "none", "weak"),  # a valley
        ([150.0] * 12, "none", "weak"),  # flat
        ([1, 2, 3, 4.0], "none", "strong"),  # rho 1, but 4 layers: p = 2/24 > 0.05
        ([1, 2, 3, 4, 5.0], "grows", "strong"),  # 5 layers: p = 2/120
        ([0, 1, 2, 3, 4, 5, 6, 7, 11, 10, 9, 8.0], "grows", "strong"),
        ([2, 1, 4, 7, 5, 0, 3, 8, 11, 9, 6, 10.0], "grows", "moderate"),  # rho 0.70, p 0.015
        ([4, 11, 9, 6, 8, 10, 7, 5, 2, 0, 3, 1.0], "falls", "moderate"),  # rho -0.70, p 0.014
        ([4, 0, 6, 1, 2, 10, 9, 7, 3, 5, 8, 11.0], "none", "weak"),  # rho 0.58: under 0.6, though p = 0.0498
    ],
)
def test_a_trend_needs_a_strong_rank_correlation_and_a_small_p(values, direction, strength):
    t = trend.depth_trend(values)
    assert (t.direction, t.strength) == (direction, strength), t
    assert t.layers == len(values)


def test_a_trend_needs_two_layers():
    with pytest.raises(ValueError, match="at least 2 layers"):
        trend.depth_trend([1.0])
