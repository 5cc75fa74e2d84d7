"""A verdict's odds: the permutation p against chance draws, checked against a count made here."""

from __future__ import annotations

import numpy as np
import pytest

from vitviz.odds import FEWEST_DRAWS, LEVEL, needed, p_value


def test_p_is_the_share_of_the_draws_and_the_value_at_or_below_it():
    draws = np.random.default_rng(3).normal(size=50)
    for value in (-9.0, *np.sort(draws)[[0, 1, 2, 24]], 9.0):
        by_hand = (1 + sum(1 for d in draws if d <= value)) / 51
        assert p_value(float(value), draws) == pytest.approx(by_hand)
    assert p_value(-9.0, draws) == pytest.approx(1 / 51) and p_value(9.0, draws) == 1.0


def test_ties_count_against_the_claim():
    assert p_value(0.5, np.full(50, 0.5)) == 1.0
    assert p_value(0.5, np.r_[0.5, np.ones(49)]) == pytest.approx(2 / 51)


@pytest.mark.parametrize("k", [5, 18, 19, 20, 50, 99, 100])
def test_needed_is_the_least_number_of_draws_to_beat_for_the_level(k):
    """Beating `needed(k)` of k draws gives p ≤ LEVEL; beating one fewer does not."""
    b = needed(k)
    if k < FEWEST_DRAWS:
        assert b > k and 1 / (k + 1) > LEVEL
        return
    assert p_value(0.0, np.r_[np.zeros(k - b), np.ones(b)]) <= LEVEL
    assert p_value(0.0, np.r_[np.zeros(k - b + 1), np.ones(b - 1)]) > LEVEL
    assert FEWEST_DRAWS == 19 and needed(50) == 49
