"""Sanity checks: the cascade randomises a copy, one layer at a time from the top, and measures rank correlation."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
from conftest import random_image, tiny_dinov2, tiny_vit

from vitviz.attributions import attribute, patch_scores
from vitviz.sanity import SanityCheck, randomise, rank_correlation, sanity_check


def test_rank_correlation_is_spearmans():
    a = np.array([[1.0, 5.0], [3.0, 2.0]])
    assert rank_correlation(a, a * 10 + 3) == pytest.approx(1.0)  # any increasing map of the values
    assert rank_correlation(a, -a) == pytest.approx(-1.0)
    b = np.array([[2.0, 4.0], [1.0, 3.0]])  # ranks [0,3,2,1] against [1,3,0,2]
    ranks_a, ranks_b = np.array([0, 3, 2, 1.0]), np.array([1, 3, 0, 2.0])
    assert rank_correlation(a, b) == pytest.approx(np.corrcoef(ranks_a, ranks_b)[0, 1])


def test_the_cascade_randomises_a_copy_from_the_last_layer_down():
    model, image = tiny_dinov2(), random_image(40, 56, seed=21)
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    s = sanity_check(model, image, "saliency", layers=2, longest=56)
    for k, v in model.net.state_dict().items():  # the served model is untouched
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    np.testing.assert_allclose(
        s.maps[0], patch_scores(attribute(model, image, "saliency", longest=56).raw, 8), rtol=1e-5
    )
    assert s.maps.shape == (3, 5, 7) and list(s.randomised) == [0, 1, 2] and s.correlation[0] == pytest.approx(1)
    for step in (1, 2):
        assert s.correlation[step] == pytest.approx(rank_correlation(s.maps[0], s.maps[step]))
        assert not np.allclose(s.maps[step], s.maps[step - 1])
    assert "the last 2 of the 3 layers random" in s.sentence() and "complete the check" in s.sentence()


def test_step_one_is_the_map_with_only_the_last_block_random():
    model, image = tiny_vit(), random_image(32, 32, seed=22)
    s = sanity_check(model, image, "saliency", layers=1, seed=5)
    twin = tiny_vit()  # the same weights, built again
    randomise(twin.blocks[-1], 0.02, torch.Generator().manual_seed(5))
    last = twin.blocks[-1]
    assert float(last.attention.q_proj.weight.detach().std()) == pytest.approx(0.02, rel=0.2)
    assert float(last.layernorm_before.weight.detach().min()) == 1 and not last.attention.q_proj.bias.detach().any()
    torch.testing.assert_close(twin.blocks[0].attention.q_proj.weight, model.blocks[0].attention.q_proj.weight)
    np.testing.assert_allclose(s.maps[1], patch_scores(attribute(twin, image, "saliency").raw, 8), rtol=1e-5)


def smooth(seed: int, shape=(16, 16)) -> np.ndarray:
    """A smooth random map, as attributions are: white noise blurred over about two patches."""
    return cv2.GaussianBlur(np.random.default_rng(seed).normal(size=shape).astype(np.float32), (0, 0), 2)


def cascade(first: np.ndarray, last: np.ndarray, layers: int = 2) -> SanityCheck:
    maps = np.stack([first, *[last] * layers])
    return SanityCheck(
        "saliency", maps, np.arange(layers + 1), np.array([rank_correlation(first, m) for m in maps]), layers, 1.0
    )


def shifted_by_hand(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Every roll of `last` by at least a quarter of the grid's height or width, each one's rank correlation with
    `first`."""
    gh, gw = first.shape
    far = [(dy, dx) for dy in range(gh) for dx in range(gw) if min(dy, gh - dy) >= gh / 4 or min(dx, gw - dx) >= gw / 4]
    return np.array([rank_correlation(first, np.roll(last, s, (0, 1))) for s in far])


def test_the_last_maps_verdict_needs_p_at_most_the_level_among_its_shifted_copies():
    """A map that stays the original plus noise fails (it beats all 50 shifted copies); an unrelated smooth map
    passes; a map near the threshold is called by its p, which the sentence states with its rank."""
    first = smooth(1)
    for noise, verdict in ((0.0, "fails"), (1.0, "fails"), (8.0, "passes")):
        last = first + noise * smooth(2) * first.std() / smooth(2).std()
        s = cascade(first, last)
        copies = s.shifted
        assert len(copies) == 50
        assert set(np.round(copies, 9)) <= set(np.round(shifted_by_hand(first, last), 9))
        p = (1 + np.sum(copies >= s.correlation[-1])) / 51
        assert s.p_same == pytest.approx(p) and s.verdict == verdict, (noise, s.p_same)
        said = s.sentence()
        assert f"p = {p:.2g}" in said and f"{np.sum(copies < s.correlation[-1])} of 50" in said
        assert ("fails the check" in said) == (verdict == "fails") and ("it passes" in said) == (verdict == "passes")
    unrelated = cascade(first, smooth(7))
    assert unrelated.verdict == "passes" and "finds no sign that it shows the input" in unrelated.sentence()


def test_near_the_threshold_the_rank_decides():
    """The last correlation set just above the 48th of the 50 copies' (beats 48: p = 3/51) makes no claim; just above
    the 49th (p = 2/51) fails."""
    first, last = smooth(1), smooth(9)
    s = cascade(first, last)
    ranked = np.sort(s.shifted)
    for between, verdict in (((ranked[47] + ranked[48]) / 2, "passes"), ((ranked[48] + ranked[49]) / 2, "fails")):
        s.correlation = np.array([1.0, between, between])
        assert s.verdict == verdict, (between, s.p_same)


def test_a_grid_with_too_few_shifts_cannot_tell():
    """A 4x4 grid has 15 shifts of a quarter of it or more: p cannot reach 0.05, so even an unchanged map is not
    called a failure, nor a pass."""
    first = smooth(1, (4, 4))
    s = cascade(first, first)
    assert len(s.shifted) == 15 and s.verdict == "undecided"
    said = s.sentence()
    assert "too few for a verdict at p ≤ 0.05" in said and "passes" not in said and "fails" not in said


def test_an_incomplete_cascade_makes_no_verdict():
    s = cascade(smooth(1), smooth(2), layers=2)
    s.randomised, s.layers = np.arange(3), 3
    said = s.sentence()
    assert "complete the check" in said and "passes" not in said and "fails" not in said


@pytest.mark.slow
def test_randomising_the_last_layer_changes_a_gradient_map_on_the_embedded_model(embedded, coffee):
    s = sanity_check(embedded, coffee, "saliency", layers=1)
    assert s.correlation[1] < 0.9, s.correlation


def test_bad_arguments_name_the_problem():
    model, image = tiny_vit(), random_image(32, 32)
    with pytest.raises(ValueError, match="layers must be between 1 and 3"):
        sanity_check(model, image, layers=4)
    with pytest.raises(ValueError, match="unknown attribution method"):
        sanity_check(model, image, "lime")


def test_on_a_tiny_classifiers_4x4_grid_the_full_cascade_cannot_tell():
    """A real cascade on the tiny classifier: its 4x4 grid allows 15 far shifts, too few for p ≤ 0.05, so the
    sentence gives no verdict either way, whatever the correlation."""
    s = sanity_check(tiny_vit(), random_image(32, 32, seed=23), "saliency")
    assert s.layers == 3 and len(s.shifted) == 15 and s.verdict == "undecided"
    said = s.sentence()
    assert "the check cannot tell" in said and "passes" not in said and "fails" not in said


@pytest.mark.slow
def test_the_full_cascade_on_the_embedded_model_states_its_rank_and_p(embedded, coffee):
    """Saliency with all 12 layers random: the verdict and its sentence rest on the last map's rank among its
    shifted copies, which are rolls of that map by a quarter of the grid or more, counted here."""
    s = sanity_check(embedded, coffee, "saliency")
    copies, last = s.shifted, s.correlation[-1]
    assert len(copies) == 50 and set(np.round(copies, 9)) <= set(np.round(shifted_by_hand(s.maps[0], s.maps[-1]), 9))
    p = (1 + np.sum(copies >= last)) / 51
    assert s.p_same == pytest.approx(p) and s.verdict == ("fails" if p <= 0.05 else "passes")
    said = s.sentence()
    assert f"with all 12 layers random, {last:.2f}" in said and f"p = {p:.2g}" in said
    assert f"{np.sum(copies < last)} of 50" in said
