"""The Analysis: what one forward pass captures, and how a query names its tokens, on every family; and the
`Derived` results kept from it: what they keep, shed and warm, and that they change no answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import FAMILIES, expected_readout_row, random_image, reference_outputs, tiny_vit

import vitviz
from vitviz import maps
from vitviz.derived import Derived


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_queries_name_the_tokens_that_transformers_computes(name):
    model = FAMILIES[name]()
    a = vitviz.analyze(model, random_image(40, 56, seed=31), longest=56)
    ref = reference_outputs(model, a.pixel_values)
    last, n = model.num_layers - 1, a.num_tokens
    # Not kept: every layer's weights recomputed from the hidden states are transformers' own
    assert a.kept_attentions is None and a.attentions.dtype == np.float16
    np.testing.assert_allclose(a.attentions.astype(np.float32), torch.cat(ref.attentions).numpy(), atol=2e-3)
    np.testing.assert_allclose(a.query_rows(last, "readout"), expected_readout_row(model, ref, last), atol=2e-3)
    p = a.grid[0] * a.grid[1] - 1  # the last patch: its token comes after the prefix
    np.testing.assert_allclose(a.query_rows(0, p), ref.attentions[0][0, :, n - 1].numpy(), atol=2e-3)
    assert a.query_index(p) == n - 1 == model.n_prefix + p
    if model.has_cls:
        assert a.query_index("cls") == 0
    else:
        with pytest.raises(ValueError, match="has no CLS token: use 'readout'"):
            a.query_index("cls")
    with pytest.raises(ValueError, match=rf"patch index in \[0, {p + 1}\), got {p + 1}"):
        a.query_index(p + 1)
    start = a.readout_start()
    assert start.shape == (n,) and start.sum() == pytest.approx(1.0, abs=1e-6) and (start >= 0).all()
    if model.readout.pool:  # the probe's attention, its heads fused by their mean
        np.testing.assert_allclose(start, a.pool_attention.mean(0) / a.pool_attention.mean(0).sum(), atol=1e-6)
    else:
        assert set(np.flatnonzero(start)) == set(model.readout.tokens)


def test_nbytes_counts_what_the_analysis_holds_and_what_it_fills():
    record = vitviz.analyze(tiny_vit(), random_image(32, 32, seed=32))
    assert record.kept_attentions is None  # recomputed from the hidden states when asked
    arrays = [record.image, record.pixel_values, record.hidden_states, record.tokens, record.update_norms]
    assert record.nbytes == sum(x.nbytes for x in arrays)
    a = Derived(record)
    assert a.nbytes == record.nbytes
    before = a.nbytes
    fused = a.fused("max")
    assert a.nbytes == before + fused.numel() * fused.element_size()
    projections = a.projections(1)
    held = a.shed_bytes
    assert held == fused.numel() * fused.element_size() + projections.nbytes and a.nbytes == before + held
    # the projections' own arrays, not the model's weights that they read (float32 on a CPU: the same memory)
    parts = a.model.layer_parts(1)
    assert np.shares_memory(projections.wq, parts.q.weight.detach().numpy())
    assert np.shares_memory(projections.wo, parts.o.weight.detach().numpy())
    own = (projections.u, projections.k, projections.v, projections.value_norms)
    assert projections.nbytes == sum(x.nbytes for x in own)
    assert a.shed() == held and a.nbytes == before and a.shed_bytes == 0


def test_shedding_changes_no_answer_and_the_warm_sweep_fills_what_a_request_would():
    model = tiny_vit()
    a = Derived(vitviz.analyze(model, random_image(32, 32, seed=34)))
    for step in range(1 + model.num_layers // 2):  # the dense step, then half the layers swept
        a.warm_step(step)
    fusions = {"mean", "max", "min"}
    held = a.held()
    assert set(held.warm_rows) == fusions and set(held.warm_thresholds) == fusions and not held.fused
    half = {f: a.fused(f).clone() for f in ("mean", "max")}  # swept layers and recomputed ones together; all
    rollouts = {f: a.rollout(f, 0.3) for f in ("mean", "max", "min")}
    assert a.shed() > 0 and not a.held().fused and not a.held().warm_rows and a.held().projections is None
    a.forget(rollouts=True)  # made again, from fused heads made again
    for fusion, rolled in rollouts.items():
        np.testing.assert_array_equal(a.rollout(fusion, 0.3), rolled)
    for fusion, fused in half.items():
        np.testing.assert_array_equal(a.fused(fusion).numpy(), fused.numpy())
        want = maps.fuse_heads(a.attentions, fusion)
        np.testing.assert_array_equal(fused.numpy(), want.numpy())


def test_a_warm_shed_midway_recomputes_nothing_to_be_shed_again():
    model = tiny_vit()
    a = Derived(vitviz.analyze(model, random_image(32, 32, seed=35)))
    for step in range(1 + model.num_layers):  # the dense step and every layer swept
        a.warm_step(step)
    assert a.layers_recomputed == model.num_layers  # once each, by the sweep
    a.shed()  # a cache under pressure
    step = 1 + model.num_layers
    while a.warm_step(step):
        step += 1
    assert a.layers_recomputed == model.num_layers and a.rollouts_made == 0
    assert not a.held().fused and not a.held().rollouts  # the thresholds came from the sweep
    assert a.held().thresholds == {"mean", "max", "min"}


def test_the_warm_steps_fill_what_the_views_read_and_change_no_answer():
    model = tiny_vit()
    image = random_image(32, 32, seed=33)
    cold, warm = vitviz.analyze(model, image), Derived(vitviz.analyze(model, image))
    warm.warm()
    assert not warm.warm_step(10_000)  # past the last step: nothing to do
    held = warm.held()
    assert held.thresholds == {"mean", "max", "min"} and held.statistics == set(range(model.num_layers))
    # What stays is each fusion's rollouts at the slider's discards, not the fused heads they were made from
    assert not held.fused and not held.warm_rows and not held.warm_thresholds and warm.shed_bytes == 0
    slider = {(f, p) for f in ("mean", "max", "min") for p in Derived.ROLLOUT_PERCENTS}
    assert held.rollouts == slider
    for fusion in ("mean", "max", "min"):  # the record's, made now, without a cache
        np.testing.assert_allclose(warm.rollout(fusion, 0.5), cold.rollout(fusion, 0.5), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(warm.attention_entropy, cold.attention_entropy, rtol=1e-6)
    assert warm.hidden_states.shape == (model.num_layers + 1, 17, 32)


def test_after_the_warm_every_rollout_of_the_slider_is_kept_and_recomputes_no_attention():
    """A class moves the discard slider: each position is read from the kept results, none recomputes a layer's
    attention, and each is the rollout of the fused heads of every layer's attention, made independently."""
    model = tiny_vit()
    a = Derived(vitviz.analyze(model, random_image(32, 32, seed=36)))
    a.warm()
    attentions = torch.from_numpy(a.attentions)
    captured = a.nbytes - a.held().rollout_bytes
    assert captured == sum(x.nbytes for x in (a.image, a.pixel_values, a.hidden_states, a.tokens, a.update_norms))
    recomputed, made = a.layers_recomputed, a.rollouts_made
    start, keep = a.readout_start(), model.readout.tokens
    for fusion in ("mean", "max", "min"):
        fused = maps.fuse_heads(attentions, fusion)
        for percent in Derived.ROLLOUT_PERCENTS:
            want = maps.rollout(fused, percent / 100, None, start, keep)[model.n_prefix :].reshape(a.grid)
            got = a.rollout(fusion, percent / 100)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
            got[:] = -1  # a copy: the kept one is unchanged
    np.testing.assert_allclose(
        a.rollout("max", 0.05),
        maps.rollout(maps.fuse_heads(attentions, "max"), 0.05, None, start, keep)[model.n_prefix :].reshape(a.grid),
        rtol=1e-6,
        atol=1e-9,
    )
    assert (a.layers_recomputed, a.rollouts_made) == (recomputed, made)
    assert a.rollouts_served == 3 * len(Derived.ROLLOUT_PERCENTS) + 1
    a.rollout("mean", 0.123)  # a discard off the slider is made when asked
    assert a.layers_recomputed == recomputed + model.num_layers and a.rollouts_made == made + 1


def test_a_request_never_waits_for_the_background_making_the_same_rollouts(monkeypatch):
    """The warm makes a fusion's rollouts under no lock: a user's rollout of that fusion meanwhile is answered
    (making them itself) while the background's are held up."""
    import threading

    model = tiny_vit()
    a = Derived(vitviz.analyze(model, random_image(32, 32, seed=38)))
    for step in range(1 + model.num_layers):  # the dense step and every layer swept
        a.warm_step(step)
    busy, release, roll = threading.Event(), threading.Event(), maps.rollouts
    background = None

    def slow_in_the_background(*args, **kwargs):
        if threading.current_thread() is background:
            busy.set()
            release.wait(10)
        return roll(*args, **kwargs)

    monkeypatch.setattr(maps, "rollouts", slow_in_the_background)
    background = threading.Thread(target=a.warm_step, args=(1 + model.num_layers,), daemon=True)  # the mean's
    background.start()
    try:
        assert busy.wait(10)
        got = {}
        user = threading.Thread(target=lambda: got.update(mean=a.rollout("mean", 0.5)), daemon=True)
        user.start()
        user.join(5)
        assert "mean" in got, "the user's rollout waited for the background's"
    finally:
        release.set()
    background.join(10)
    np.testing.assert_array_equal(a.rollout("mean", 0.5), got["mean"])


def test_ratios_off_the_slider_are_exact_and_a_sweep_of_them_keeps_its_fused_heads():
    """A ratio just above 0 still discards each layer's least weights, one just below 1 is no whole percent, and
    a sweep of percents off the slider remakes the fused heads once, not at every step."""
    model = tiny_vit()
    a = Derived(vitviz.analyze(model, random_image(32, 32, seed=39)))
    fused = maps.fuse_heads(torch.from_numpy(a.attentions), "mean")
    start, keep = a.readout_start(), model.readout.tokens
    for ratio in (1e-12, 1 - 1e-13, 0.07, 0.123):
        want = maps.rollout(fused, ratio, None, start, keep)[model.n_prefix :].reshape(a.grid)
        np.testing.assert_allclose(a.rollout("mean", ratio), want, rtol=1e-6, atol=1e-9, err_msg=str(ratio))
    assert not np.allclose(a.rollout("mean", 1e-12), a.rollout("mean", 0.0))  # the least weights went
    a.shed()
    before = a.layers_recomputed
    for percent in (8, 9, 11):
        a.rollout("mean", percent / 100)
    assert a.layers_recomputed == before + model.num_layers  # made once, kept until a cache sheds it
    assert "mean" in a.held().fused
