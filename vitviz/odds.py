"""A verdict's odds against random draws: the one-sided permutation p of a statistic among K draws of it under
chance (random orders of the patches, shifted copies of a map), and the level a verdict needs. With K draws the
smallest p is 1 / (K + 1), so a check needs at least FEWEST_DRAWS of them before it can call anything.
"""

from __future__ import annotations

import numpy as np

LEVEL = 0.05  # a verdict's one-sided significance level, each way
FEWEST_DRAWS = int(np.ceil(1 / LEVEL - 1))  # the fewest draws that let p reach LEVEL: 1 / (K + 1) ≤ LEVEL


def p_value(value: float, draws: np.ndarray) -> float:
    """The one-sided p of `value` being lower than the chance draws [K]: (1 + #draws ≤ value) / (K + 1), the share of
    the K + 1 values (this one among them) at or below it. Ties count against the claim."""
    return (1 + int(np.sum(draws <= value))) / (len(draws) + 1)


def needed(draws: int) -> int:
    """How many of K draws a value must beat for p ≤ LEVEL: the least b with (1 + K − b) / (K + 1) ≤ LEVEL (more than
    K when K is under FEWEST_DRAWS)."""
    return draws + 1 - int(np.floor(LEVEL * (draws + 1) + 1e-9))
