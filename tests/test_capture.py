"""Running the forward an analysis is captured from: the rollouts that come with it (`ForwardFusions`), and its
bounds. How they equal the reference chain on every family: `tests/test_maps.py -k forward_that_rolls`."""

from __future__ import annotations

import numpy as np
import torch
from conftest import random_image, tiny_vit

import vitviz
from vitviz import maps
from vitviz.capture import ForwardFusions
from vitviz.derived import Derived
from vitviz.outputs import Output


def test_a_forward_too_large_to_hold_its_fused_heads_does_not_roll_and_its_rollouts_come_when_asked(monkeypatch):
    """`ForwardFusions.fits`: past `held_bytes` (a large input: on a CPU, 0.25 GB of fused heads at 672 px) the forward
    holds nothing more and a rollout is made when asked, the same as a rolled forward's."""
    model = tiny_vit()
    image = random_image(32, 32, seed=42)
    rolled = vitviz.analyze(model, image, roll=True)
    n, layers = rolled.num_tokens, model.num_layers
    assert len(rolled.held().rollouts) == 20 and ForwardFusions.fits(model, rolled.pixel_values)
    assert ForwardFusions.held_bytes(model) == ForwardFusions.HELD_BYTES_CPU == 2**27
    monkeypatch.setattr(ForwardFusions, "HELD_BYTES_CPU", layers * n * n * 4 - 1)  # one byte short of the mean
    assert not ForwardFusions.fits(model, rolled.pixel_values)
    lazy = vitviz.analyze(model, image, roll=True)
    assert not lazy.held().rollouts and not lazy.held().thresholds
    np.testing.assert_array_equal(lazy.rollout("min", 0.3), rolled.rollout("min", 0.3))


def test_a_roll_that_fails_is_logged_and_the_analysis_makes_its_rollouts_when_asked(monkeypatch, caplog):
    """Rollouts are an optimisation of the forward: one that fails (a GPU out of memory) leaves the analysis
    whole, and its rollouts are made when asked."""
    model = tiny_vit()
    image = random_image(32, 32, seed=43)
    real = maps.rollouts

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(maps, "rollouts", out_of_memory)
    a = vitviz.analyze(model, image, roll=True)
    assert "the rollouts of a forward" in caplog.text and "out of memory" in caplog.text
    monkeypatch.setattr(maps, "rollouts", real)
    assert not a.held().rollouts
    np.testing.assert_array_equal(a.rollout("max", 0.4), vitviz.analyze(model, image, roll=True).rollout("max", 0.4))


def test_a_dense_models_forward_also_rolls_toward_its_readout_at_every_discard_of_the_slider(embedded, coffee):
    """For a model whose output reads the patches, the forward also makes the rollouts toward the readout (CLS) at
    the slider's discards, which the lesson, the Rollout tab's other choice and its note (the two starts compared
    at the shown discard) read: the same as those made when asked, and no fused heads are made for them later."""
    rolled = vitviz.analyze(embedded, coffee, longest=224, roll=True)
    assert {("readout", "mean", p) for p in Derived.ROLLOUT_PERCENTS} <= rolled.held().rollouts
    made = rolled.rollouts_made
    to_cls = {r: rolled.rollout("mean", r, Output("readout")) for r in (0.0, 0.3, 0.9)}
    assert not rolled.held().fused and rolled.rollouts_made == made
    fresh = vitviz.analyze(embedded, coffee, longest=224)
    for r, got in to_cls.items():
        np.testing.assert_allclose(got, fresh.rollout("mean", r, Output("readout")), rtol=1e-4, atol=1e-7)
    own = rolled.rollout("mean", 0.0)
    assert not np.allclose(to_cls[0.0] / to_cls[0.0].sum(), own / own.sum())


def test_the_apps_forward_answers_first_and_its_rollouts_come_from_its_fused_heads_when_first_needed():
    """`analyze(..., later=True)`, as the app's upload: the thresholds and rollouts are left off the answer, and
    the forward's fused heads are held (counted in `nbytes`) until the first need rolls them, recomputing no layer;
    a cache that sheds the analysis first lets them go, and its rollouts are then recomputed, the same."""
    model = tiny_vit()
    image = random_image(32, 32, seed=3)
    now = vitviz.analyze(model, image, roll=True)
    later = vitviz.analyze(model, image, roll=True, later=True)
    layers, n = model.num_layers, later.num_tokens
    held = later.held()
    assert held.pending_roll and not held.rollouts and not held.thresholds and now.held().rollouts
    assert later.nbytes - later.analysis.nbytes >= layers * n * n * 2  # the fused heads, held
    np.testing.assert_array_equal(later.rollout("mean", 0.35), now.rollout("mean", 0.35))
    assert later.held().rollouts == now.held().rollouts and not later.held().pending_roll
    assert (later.layers_recomputed, later.rollouts_made, later.nbytes) == (0, 0, now.nbytes)
    torch.testing.assert_close(later.percent_thresholds("mean"), now.percent_thresholds("mean"))
    shed = vitviz.analyze(model, image, roll=True, later=True)
    assert shed.shed() >= layers * n * n * 2 and not shed.held().pending_roll
    np.testing.assert_allclose(shed.rollout("mean", 0.35), now.rollout("mean", 0.35), atol=1e-6)
    assert shed.layers_recomputed == layers


def test_a_forward_holds_its_max_and_min_fused_heads_and_their_first_rollout_recomputes_no_layer(monkeypatch):
    """`ForwardFusions.HELD`: the forward also fuses max and min (not rolled), which each analysis keeps as the
    warm's rows: a first rollout of either is the one made from recomputed layers, recomputes none, and makes only
    the percent asked; the warm then makes the slider's others from the same rows and lets them go. Where they do
    not fit beside the mean's (`holds`), the forward still rolls the mean."""
    model = tiny_vit()
    image = random_image(40, 32, seed=5)
    a = vitviz.analyze(model, image, roll=True)
    fresh = vitviz.analyze(model, image)  # every fusion made from recomputed layers
    layers, n = model.num_layers, a.num_tokens
    assert a.held().warm_rows == {"max": layers, "min": layers} and a.nbytes >= 2 * layers * n * n * 2
    for fusion in ForwardFusions.HELD:
        for ratio in (0.0, 0.3, 0.95):
            np.testing.assert_allclose(a.rollout(fusion, ratio), fresh.rollout(fusion, ratio), rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(a.percent_thresholds(fusion), fresh.percent_thresholds(fusion))
    assert (a.layers_recomputed, a.rollouts_made) == (0, 6)  # the three asked of each, no more
    a.warm()
    slider = {(f, p) for f in ForwardFusions.HELD for p in a.ROLLOUT_PERCENTS}
    assert slider <= a.held().rollouts and not a.held().warm_rows
    assert a.layers_recomputed == layers  # once each, for the statistics: no fusion recomputed one
    np.testing.assert_allclose(a.rollout("max", 0.55), fresh.rollout("max", 0.55), rtol=1e-5, atol=1e-7)
    monkeypatch.setattr(ForwardFusions, "HELD_BYTES_CPU", layers * n * n * 4)  # the mean's alone
    assert ForwardFusions.fits(model, a.pixel_values) and not ForwardFusions.holds(model, a.pixel_values)
    mean_only = vitviz.analyze(model, image, roll=True)
    assert not mean_only.held().warm_rows and len(mean_only.held().rollouts) == 20


def test_the_warm_counts_max_and_mins_thresholds_from_the_forwards_rows_and_a_shed_lets_them_go(monkeypatch):
    """With no request first, the background warm counts max's and min's thresholds from the rows the forward
    held (the same as from recomputed layers) and rolls them, recomputing each layer once, for its statistics. A
    cache that sheds an analysis while its forward's roll is pending frees those rows, keeping the mean's, and a
    roll already under way at that moment hands none of them over."""
    model = tiny_vit()
    image = random_image(36, 44, seed=6)
    fresh = vitviz.analyze(model, image)
    warmed = vitviz.analyze(model, image, roll=True, later=True)
    warmed.warm()
    layers, n = model.num_layers, warmed.num_tokens
    assert warmed.layers_recomputed == layers and not warmed.held().warm_rows
    for fusion in ForwardFusions.HELD:
        torch.testing.assert_close(warmed.percent_thresholds(fusion), fresh.percent_thresholds(fusion))
        np.testing.assert_allclose(warmed.rollout(fusion, 0.45), fresh.rollout(fusion, 0.45), rtol=1e-5, atol=1e-7)
    kept = vitviz.analyze(model, image, roll=True, later=True)
    before = kept.nbytes
    assert kept.shed(keep_mean=True) == 2 * layers * n * n * 2 and kept.nbytes == before - 2 * layers * n * n * 2
    kept.settle()  # the mean rolled from the forward's rows; max and min left to when they are asked
    assert len(kept.held().rollouts) == 20 and not kept.held().warm_rows and kept.layers_recomputed == 0
    racing = vitviz.analyze(model, image, roll=True, later=True)
    real = maps.rollouts

    def shed_meanwhile(*args, **kwargs):  # a cache sheds the analysis while its forward's roll is under way
        racing.shed()
        return real(*args, **kwargs)

    monkeypatch.setattr(maps, "rollouts", shed_meanwhile)
    racing.settle()
    monkeypatch.setattr(maps, "rollouts", real)
    assert not racing.held().warm_rows and racing.nbytes == racing.analysis.nbytes + racing.held().rollout_bytes
