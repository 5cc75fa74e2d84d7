"""Sanity checks: the cascade randomises a copy, one layer at a time from the top, and measures rank correlation."""

from __future__ import annotations

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
    np.testing.assert_allclose(s.maps[0], patch_scores(attribute(model, image, "saliency", longest=56).raw, 8),
                               rtol=1e-5)  # fmt: skip
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


def test_sentences_follow_the_correlations():
    def check(corr, layers=3):
        return SanityCheck("saliency", np.zeros((len(corr), 2, 2)), np.arange(len(corr)), np.array(corr), layers, 1.0)

    assert "fails the check" in check([1, 0.95, 0.9, 0.8]).sentence()
    assert "passes the check" in check([1, 0.6, 0.3, 0.1]).sentence()
    said = check([1, 0.6, 0.3, 0.1]).sentence()
    assert "is 0.60" in said and "all 3 layers random, 0.10" in said


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
