"""vitviz.head_importance (vitviz.importance): the batched grid against every head ablated alone, its cost, its
progress."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_image, tiny_deit, tiny_siglip, tiny_vit

from vitviz.ablation import ablate
from vitviz.capture import model_input
from vitviz.head_importance import cost, importance, plan

IMAGE = random_image(40, 48, seed=5)
SIZE = 48


def one_by_one(model, image, mode: str, longest: int) -> np.ndarray:
    return np.array(
        [
            [
                ablate(model, image, heads=[(layer, head)], mode=mode, longest=longest).after
                for head in range(model.num_heads)
            ]
            for layer in range(model.num_layers)
        ]
    )


@pytest.mark.parametrize(("mode", "rows"), [("zero", None), ("zero", 3), ("mean", None)])
def test_importance_equals_each_head_ablated_alone_on_every_family(family, mode, rows) -> None:
    _, model = family
    grid = importance(model, IMAGE, mode=mode, longest=SIZE, rows=rows)
    alone = one_by_one(model, IMAGE, mode, SIZE)
    np.testing.assert_allclose(grid.after, alone, atol=1e-5)
    if mode == "zero":  # the heads matter, so the comparison could fail (a random head's mean is near its output)
        assert np.abs(grid.change).max() > 1e-4
    assert grid.before == ablate(model, IMAGE, heads=[(0, 0)], longest=SIZE).before


def test_importance_equals_72_ablations_of_the_embedded_model(embedded, coffee) -> None:
    progress: list[float] = []
    grid = importance(embedded, coffee, longest=112, progress=progress.append)
    assert grid.after.shape == (12, 6)
    alone = one_by_one(embedded, coffee, "zero", 112)
    np.testing.assert_allclose(grid.after, alone, atol=1e-5)
    assert np.abs(grid.change).max() > 1e-3
    assert progress == sorted(progress) and progress[-1] == pytest.approx(1.0)
    assert grid.forwards == cost(embedded, model_input(embedded, coffee, 112).shape[2:]) < 72


def test_the_cost_counts_each_rows_layers() -> None:
    model = tiny_vit()  # 3 layers × 4 heads
    assert plan(model, (40, 48), rows=5) == [
        [(0, 0), (0, 1), (0, 2), (0, 3)],
        [(1, 0), (1, 1), (1, 2), (1, 3)],
        [(2, 0), (2, 1), (2, 2), (2, 3)],
    ]
    # the unablated forward, then per forward its first row through 3 layers and each ablated row from its layer
    assert cost(model, (40, 48), rows=5) == 1 + (3 + 4 * 3 + 3 + 4 * 2 + 3 + 4 * 1) / 3
    assert cost(model, (40, 48), rows=13) == 1 + (3 + 4 * (3 + 2 + 1)) / 3


def test_the_ranking_puts_the_largest_change_first() -> None:
    grid = importance(tiny_deit(), IMAGE, longest=SIZE)
    ranked = grid.ranked()
    assert len(ranked) == 12 and abs(ranked[0][2]) == np.abs(grid.change).max()
    assert [abs(c) for _, _, c in ranked] == sorted((abs(c) for _, _, c in ranked), reverse=True)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown head mode 'half'"):
        importance(tiny_siglip(), IMAGE, mode="half", longest=SIZE)
    with pytest.raises(ValueError, match="rows must be at least 2"):
        importance(tiny_vit(), IMAGE, rows=1, longest=SIZE)
