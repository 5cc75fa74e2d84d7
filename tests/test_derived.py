"""A record and a cache are two things: the `Analysis` keeps nothing it derives (the CLI's and a notebook's), and
`Derived`, the server's, keeps it behind a public API: fill, get through the cache, the warm, the accounting."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from conftest import FAMILIES, random_image, reference_fused, reference_rollout, reference_threshold, tiny_vit

import vitviz
from vitviz import maps
from vitviz.cache import AnalysisCache
from vitviz.derived import Derived
from vitviz.outputs import Output
from vitviz.views.common import display


def test_the_record_keeps_nothing_it_derives_and_answers_as_the_cache_does():
    a = vitviz.analyze(tiny_vit(), random_image(48, 40, seed=50))
    before = a.nbytes
    assert before == sum(x.nbytes for x in (a.image, a.pixel_values, a.hidden_states, a.tokens, a.update_norms))
    first = a.rollout("max", 0.3)
    answers = (
        a.fused("mean"),
        a.percent_thresholds("min"),
        a.layer_statistics(1),
        a.projections(2),
        a.layer_updates(0),
        a.dense_map(),
        a.attention_entropy,
        display(a),
    )
    assert answers[-1] is not display(a)  # made anew: not kept
    assert a.nbytes == before and not hasattr(a, "held") and not hasattr(a, "warm_step")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.tokens = None
    cached = Derived(a)
    # an Analysis, as a view's `a: Analysis` says: the record's own arrays (shared, not copied), as frozen
    assert isinstance(cached, vitviz.Analysis) and cached.analysis is a
    assert all(getattr(cached, f.name) is getattr(a, f.name) for f in dataclasses.fields(a))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cached.tokens = None
    np.testing.assert_allclose(cached.rollout("max", 0.3), first, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(cached.attention_entropy, a.attention_entropy)
    np.testing.assert_array_equal(cached.attention_map(2, None, 3), a.attention_map(2, None, 3))
    assert cached.nbytes > before and a.nbytes == before  # the cache grew, the record did not


def test_what_a_forward_fills_is_served_and_counted_and_nothing_is_recomputed():
    model = tiny_vit()
    record = vitviz.analyze(model, random_image(32, 32, seed=51))
    fused = maps.fuse_heads(torch.from_numpy(record.attentions), "mean")
    percents = list(Derived.ROLLOUT_PERCENTS)
    start, keep = record.readout_start(), model.readout.tokens
    rows = np.stack([maps.rollout(fused, p / 100, None, start, keep) for p in percents])
    thresholds = maps.discard_thresholds(fused, record.PERCENTS)
    d = Derived(record)
    d.fill("mean", percents, rows, thresholds=thresholds)
    rows[:] = -1  # a copy was kept, not the forward's batch
    held = d.held()
    assert held.rollouts == {("mean", p) for p in percents} and held.thresholds == {"mean"}
    assert held.rollout_bytes == len(percents) * record.grid[0] * record.grid[1] * 4
    for p in percents:
        np.testing.assert_allclose(d.rollout("mean", p / 100), record.rollout("mean", p / 100), rtol=1e-6, atol=1e-9)
    assert (d.rollouts_served, d.rollouts_made, d.layers_recomputed) == (len(percents), 0, 0)
    torch.testing.assert_close(d.percent_thresholds("mean"), thresholds, rtol=0, atol=0)
    assert d.layers_recomputed == 0  # the filled thresholds, not counted again
    d.rollout("max", 0.5)  # another fusion: made, and its slider with it
    assert d.rollouts_made == len(percents) and d.layers_recomputed == model.num_layers


def test_the_cache_counts_each_analysis_with_what_is_derived_from_it_and_sheds_that_first():
    model = tiny_vit()
    records = [vitviz.analyze(model, random_image(32, 32, seed=52 + i)) for i in range(2)]
    old, new = (Derived(r) for r in records)
    cache = AnalysisCache(max_bytes=10 * sum(r.nbytes for r in records))
    cache.put(("ann", "old"), old)
    assert cache.get(("ann", "old")) is old
    cache.put(("ben", "new"), new)
    assert cache.nbytes == sum(r.nbytes for r in records)
    old.fused("max"), old.rollout("mean", 0.25), old.layer_statistics(0)
    grown = old.nbytes - records[0].nbytes
    assert (
        grown == old.shed_bytes + old.held().rollout_bytes > 0
        and cache.nbytes == sum(r.nbytes for r in records) + grown
    )
    cache.max_bytes = cache.nbytes - 1  # over by a byte: the oldest sheds its fused heads, neither is evicted
    assert cache.enforce_cap() == 1 and len(cache) == 2 and old.shed_bytes == 0
    assert cache.nbytes == records[0].nbytes + old.held().rollout_bytes + records[1].nbytes


def test_the_warm_fills_thresholds_statistics_and_the_slider_and_the_record_stays_as_it_was():
    model = tiny_vit()
    record = vitviz.analyze(model, random_image(32, 32, seed=54))
    before = record.nbytes
    d = Derived(record)
    step = 0
    while d.warm_step(step):
        step += 1
    held = d.held()
    assert step == 1 + model.num_layers + len(maps.HEAD_FUSIONS) and held.dense_map
    assert held.thresholds == set(maps.HEAD_FUSIONS) and held.statistics == set(range(model.num_layers))
    assert len(held.rollouts) == len(maps.HEAD_FUSIONS) * len(Derived.ROLLOUT_PERCENTS)
    assert d.layers_recomputed == model.num_layers  # each layer's attention once, for everything
    assert record.nbytes == before


def slider_record(family: str = "deit"):
    """A record on a grid that is not square (5x7), with more than one prefix token for DeiT."""
    return vitviz.analyze(FAMILIES[family](), random_image(40, 56, seed=60), longest=56)


@pytest.mark.parametrize("fusion", maps.HEAD_FUSIONS)
def test_each_kept_rollout_and_threshold_is_the_float64_one_of_its_fusion(fusion):
    """The slider's rollouts, made at once from one stack of fused heads, and the discard thresholds they used,
    against the rollout written out in float64 from the record's weights."""
    record = slider_record()
    d = Derived(record)
    fused = reference_fused(record.attentions, fusion)
    start, keep, (gh, gw), prefix = record.readout_start(fusion), record.model.readout.tokens, record.grid, 2
    got = {p: d.rollout(fusion, p / 100) for p in (*Derived.ROLLOUT_PERCENTS, 7)}
    for percent, rolled in got.items():
        want = reference_rollout(fused, percent / 100, start, keep)
        assert rolled.shape == (gh, gw) and rolled.dtype == np.float32
        np.testing.assert_allclose(rolled, want[prefix:].reshape(gh, gw), rtol=1e-5, atol=1e-7, err_msg=str(percent))
    off = reference_rollout(fused, 0.123, start, keep)[prefix:].reshape(gh, gw)
    np.testing.assert_allclose(d.rollout(fusion, 0.123), off, rtol=1e-5, atol=1e-7)
    thresholds = d.percent_thresholds(fusion)
    want = [[reference_threshold(layer, p / 100) for p in range(100)] for layer in fused]
    assert thresholds.shape == (3, 100)
    np.testing.assert_allclose(thresholds.float().numpy(), want, rtol=1e-6, atol=0)


def test_a_sequence_of_requests_counts_what_it_made_served_and_recomputed():
    model = tiny_vit()
    record = vitviz.analyze(model, random_image(32, 32, seed=61))
    d, layers, slider = Derived(record), model.num_layers, len(Derived.ROLLOUT_PERCENTS)
    first = d.rollout("mean", 0.0)  # the slider at once, from fused heads let go
    held = d.held()
    assert (d.rollouts_made, d.rollouts_served, d.layers_recomputed) == (slider, 0, layers)
    assert held.rollouts == {("mean", p) for p in Derived.ROLLOUT_PERCENTS} and not held.fused
    assert held.thresholds == {"mean"} and held.rollout_bytes == slider * 4 * 4 * 4 and d.shed_bytes == 0
    first[:] = -1  # a copy
    assert (d.rollout("mean", 0.0) >= 0).all() and d.rollout("mean", 0.3).sum() > 0 and d.rollout("mean", 0.05).any()
    assert (d.rollouts_made, d.rollouts_served) == (slider, 3)
    d.rollout("mean", 0.07)  # a whole percent off the slider: its fused heads kept for the next
    assert (d.rollouts_made, d.layers_recomputed, d.held().fused) == (slider + 1, 2 * layers, {"mean"})
    d.rollout("mean", 0.01)
    assert (d.rollouts_made, d.layers_recomputed) == (slider + 2, 2 * layers)
    assert d.held().rollouts == {("mean", p) for p in (*Derived.ROLLOUT_PERCENTS, 7, 1)}
    for ratio in (0.3000001, 1e-12, 0.999, 1 - 1e-12):  # no whole percent: made each time, never kept
        d.rollout("mean", ratio)
    assert (d.rollouts_made, d.rollouts_served, len(d.held().rollouts)) == (slider + 6, 3, slider + 2)
    assert d.rollout("mean", 0.07).shape == (4, 4) and d.rollouts_served == 4
    assert d.fused() is d.fused("mean") and d.percent_thresholds() is d.percent_thresholds("mean")
    d.rollout("max", 0.5)
    assert (d.rollouts_made, d.layers_recomputed, d.held().fused) == (2 * slider + 6, 3 * layers, {"mean"})
    assert d.held().thresholds == {"mean", "max"}
    d.fused("min")
    d.rollout("min", 0.5)  # the slider, from the fused heads kept
    assert (d.rollouts_made, d.layers_recomputed) == (3 * slider + 6, 4 * layers)
    for ratio in (1.0, -0.05, float("nan"), 1.5):
        with pytest.raises(ValueError, match=r"discard_ratio must be in \[0, 1\)"):
            d.rollout("mean", ratio)
    assert (d.rollouts_made, d.rollouts_served, d.layers_recomputed) == (3 * slider + 6, 4, 4 * layers)
    for ask in (lambda: d.rollout("median", 0.3), lambda: d.fused("median"), lambda: d.percent_thresholds("median")):
        with pytest.raises(ValueError, match="unknown head fusion 'median'"):
            ask()
    assert d.rollouts_made == 3 * slider + 6 and not d.held().rollouts & {("median", 30)}
    fresh = Derived(record)
    fresh.percent_thresholds("max")  # from fused heads made now, and let go
    assert fresh.layers_recomputed == layers and not fresh.held().fused and fresh.held().thresholds == {"max"}


def test_an_unknown_fusion_is_refused_before_any_layer_is_recomputed():
    d = Derived(vitviz.analyze(tiny_vit(), random_image(32, 32, seed=62)))
    for ask in (d.fused, d.rollout, d.percent_thresholds):
        with pytest.raises(ValueError, match="unknown head fusion 'median'"):
            ask("median")
    assert d.layers_recomputed == 0 and d.rollouts_made == 0


def test_nbytes_and_shed_count_every_kept_array_exactly():
    model = tiny_vit()
    record = vitviz.analyze(model, random_image(32, 32, seed=62))
    d, n, layers = Derived(record), record.num_tokens, model.num_layers
    assert d.nbytes == record.nbytes and d.shed_bytes == 0 and d.shed() == 0
    mean, most = d.fused("mean"), d.fused("max")
    assert d.fused("mean") is mean and d.layers_recomputed == 2 * layers
    assert (mean.dtype, most.dtype) == (torch.float32, torch.float16)
    projections = d.projections(1)
    assert d.projections(1) is projections and d.held().projections == 1
    sizes = {"mean": layers * n * n * 4, "max": layers * n * n * 2, "projections": projections.nbytes}
    assert d.shed_bytes == sum(sizes.values())
    made = []
    drawn = d.drawing("display", lambda: made.append(1) or np.zeros((5, 3), np.float64))
    assert d.drawing("display", lambda: np.zeros(1000)) is drawn and made == [1]
    d.rollout("min", 0.25)
    rolled = d.held().rollout_bytes
    assert rolled == len(Derived.ROLLOUT_PERCENTS) * 4 * 4 * 4
    assert d.nbytes == record.nbytes + 120 + rolled + sum(sizes.values())
    assert d.shed(keep_mean=True) == sizes["max"] + sizes["projections"]
    held = d.held()
    assert held.fused == {"mean"} and held.projections is None and d.shed_bytes == sizes["mean"]
    assert d.nbytes == record.nbytes + 120 + rolled + sizes["mean"]
    assert d.shed() == sizes["mean"] and not d.held().fused and d.nbytes == record.nbytes + 120 + rolled
    other = d.projections(2)
    assert d.projections(2) is other and d.projections(1) is not projections and d.held().projections == 1


def test_the_warm_holds_each_swept_layer_until_its_fusion_rolls():
    model = tiny_vit()
    record = vitviz.analyze(model, random_image(32, 32, seed=63))
    d, layers, n, fusions = Derived(record), model.num_layers, record.num_tokens, maps.HEAD_FUSIONS
    assert not d.held().dense_map and d.warm_step(0) and d.held().dense_map
    assert d.layers_recomputed == 0 and not d.held().statistics
    row_bytes = n * n * (4 + 2 + 2)  # a layer's mean (float32), max and min (float16)
    for step in range(1, layers + 1):
        assert d.warm_step(step)
        held = d.held()
        assert held.statistics == set(range(step)) and d.layers_recomputed == step
        assert held.warm_rows == dict.fromkeys(fusions, step) == held.warm_thresholds
        assert d.shed_bytes == step * row_bytes and not held.fused and not held.thresholds
    for layer in range(layers):  # kept: asked again, nothing is recomputed
        np.testing.assert_array_equal(d.layer_statistics(layer)[1], record.layer_statistics(layer)[1])
    assert d.layers_recomputed == layers
    for i in range(len(fusions)):
        assert d.warm_step(layers + 1 + i)
        held, rolled = d.held(), fusions[: i + 1]
        assert held.warm_rows == dict.fromkeys(fusions[i + 1 :], layers) == held.warm_thresholds
        assert held.thresholds == set(rolled) and d.rollouts_made == (i + 1) * len(Derived.ROLLOUT_PERCENTS)
        assert held.rollouts == {(f, p) for f in rolled for p in Derived.ROLLOUT_PERCENTS}
    assert not d.warm_step(layers + 1 + len(fusions)) and d.layers_recomputed == layers and d.shed_bytes == 0
    start, keep = record.readout_start(), model.readout.tokens
    for fusion in fusions:
        want = reference_rollout(reference_fused(record.attentions, fusion), 0.4, start, keep)
        np.testing.assert_allclose(d.rollout(fusion, 0.4), want[1:].reshape(4, 4), rtol=1e-5, atol=1e-7)
    assert d.rollouts_served == len(fusions) and d.layers_recomputed == layers


def test_a_sweep_after_requests_keeps_what_they_made_and_gathers_the_rest():
    model = tiny_vit()
    record = vitviz.analyze(model, random_image(32, 32, seed=64))
    d, layers, slider = Derived(record), model.num_layers, len(Derived.ROLLOUT_PERCENTS)
    d.fused("max")  # kept: the sweep reads it rather than fusing again
    d.rollout("mean", 0.3)  # rolled: the sweep leaves it alone, and sweeps the others
    assert d.layers_recomputed == 2 * layers
    for step in range(layers + 1):
        d.warm_step(step)
    held = d.held()
    assert held.warm_rows == {"min": layers} and held.warm_thresholds == {"max": layers, "min": layers}
    assert d.layers_recomputed == 3 * layers and held.fused == {"max"}
    thresholds = d.percent_thresholds("max")  # gathered from the sweep's, counted from the kept fused heads
    fused = reference_fused(record.attentions, "max")
    want = [[reference_threshold(layer, p / 100) for p in range(100)] for layer in fused]
    np.testing.assert_array_equal(thresholds.float().numpy(), np.float32(want))
    assert d.held().warm_thresholds == {"min": layers} and d.layers_recomputed == 3 * layers
    step = layers + 1  # each fusion's roll: the mean's kept, the max's none (no rows), the min's from its rows
    while d.warm_step(step):
        step += 1
    held = d.held()
    assert not held.warm_rows and not held.warm_thresholds and held.thresholds == {"mean", "max", "min"}
    assert held.rollouts == {(f, p) for f in ("mean", "min") for p in Derived.ROLLOUT_PERCENTS}
    assert d.rollouts_made == 2 * slider and d.layers_recomputed == 3 * layers
    fresh = Derived(record)
    fresh.warm_step(1)
    fresh.fused("mean")  # made from the swept layer and two recomputed: the swept row let go
    assert fresh.held().warm_rows == {"max": 1, "min": 1} and fresh.layers_recomputed == layers


def test_forget_drops_exactly_what_it_is_told():
    model = tiny_vit()
    d = Derived(vitviz.analyze(model, random_image(32, 32, seed=65)))
    for step in range(1 + 2):  # the dense step, two layers swept
        d.warm_step(step)
    d.rollout("mean", 0.1)
    before = d.held()
    d.forget()
    assert d.held() == before
    d.forget(thresholds=True)
    held = d.held()
    assert not held.thresholds and not held.warm_thresholds and held.warm_rows == before.warm_rows
    assert held.rollouts == before.rollouts and held.statistics == {0, 1}
    d.forget(statistics=True)
    assert not d.held().statistics and d.held().rollouts == before.rollouts
    d.forget(rollouts=True)
    assert not d.held().rollouts and d.held().rollout_bytes == 0
    assert (
        d.layer_statistics(0) is not None and d.layers_recomputed == 2 + 1 + 1
    )  # the sweep, the roll's last layer, now
    d.layer_statistics(0)
    d.layer_statistics(1, scores=d.analysis.device_scores(1))
    assert d.layers_recomputed == 4 and d.held().statistics == {0, 1}


def test_fill_keeps_copies_of_the_rows_it_is_given_as_maps_over_the_patches():
    record = slider_record()
    d, n, (gh, gw) = Derived(record), record.num_tokens, record.grid
    for step in range(1 + record.num_layers):
        d.warm_step(step)
    rows = np.arange(3 * n, dtype=np.float32).reshape(3, n)
    thresholds = torch.rand(record.num_layers, 100)
    d.fill("max", [0, 5, 50], rows, thresholds=thresholds)
    want = rows[:, 2:].reshape(3, gh, gw).copy()
    rows[:] = -1
    thresholds[:] = -1
    for i, percent in enumerate((0, 5, 50)):
        np.testing.assert_array_equal(d.rollout("max", percent / 100), want[i])
    assert d.rollouts_served == 3 and d.rollouts_made == 0 and d.held().warm_rows["max"] == record.num_layers
    assert (d.percent_thresholds("max") >= 0).all() and d.held().rollout_bytes == 3 * gh * gw * 4
    assert d.warm_step(record.num_layers + 2)  # the max's roll: only the rollouts of the slider not filled
    assert d.rollouts_made == len(Derived.ROLLOUT_PERCENTS) - 3 and "max" not in d.held().warm_rows
    np.testing.assert_array_equal(d.rollout("max", 0.05), want[1])
    slider = list(Derived.ROLLOUT_PERCENTS)
    d.fill("min", slider[:-1], np.ones((len(slider) - 1, n), np.float32))
    assert d.held().warm_rows == {"mean": record.num_layers, "min": record.num_layers}
    d.fill("min", slider[-1:], np.ones((1, n), np.float32))
    assert d.held().warm_rows == {"mean": record.num_layers}  # every rollout of the slider kept: the rows let go
    dense = Output("dense", region="image")
    d.fill("mean", [10], np.ones((1, n), np.float32), start=dense)
    assert (dense, "mean", 10) in d.held().rollouts and ("mean", 10) not in d.held().rollouts
    with pytest.raises(ValueError):
        d.fill("mean", [10, 20], np.ones((1, n), np.float32))


def dense_record(seed: int = 66):
    """A tiny ViT's record with a dense map captured over its input, as the embedded model's is."""
    record = vitviz.analyze(tiny_vit(), random_image(32, 32, seed=seed))
    salient = np.random.default_rng(seed).random(record.pixel_values.shape[2:]).astype(np.float32)
    return dataclasses.replace(record, captured_dense=(salient,))


def test_a_rollout_toward_another_output_is_kept_apart_from_the_models_own():
    record = dense_record()
    d, dense = Derived(record), Output("dense")
    toward = d.rollout("mean", 0.2, toward=dense)
    start = np.zeros(record.num_tokens)
    start[1:] = record.captured_dense[0].reshape(4, 8, 4, 8).mean((1, 3)).ravel()
    want = reference_rollout(reference_fused(record.attentions, "mean"), 0.2, start / start.sum(), ())
    np.testing.assert_allclose(toward, want[1:].reshape(4, 4), rtol=1e-5, atol=1e-7)
    # the readout's rollouts (here the model's own output's) are made with them, from the same fused heads: the
    # Rollout tab's note compares the two at each discard
    slider = Derived.ROLLOUT_PERCENTS
    assert d.held().rollouts == {(dense, "mean", p) for p in slider} | {("mean", p) for p in slider}
    assert d.rollouts_made == 2 * len(slider)
    own = d.rollout("mean", 0.2)
    assert not np.allclose(own, toward) and d.rollouts_made == 2 * len(slider) and d.rollouts_served == 1
    cls = np.eye(record.num_tokens)[0]  # the readout: the CLS token, its column never discarded
    want_own = reference_rollout(reference_fused(record.attentions, "mean"), 0.2, cls, (0,))
    np.testing.assert_allclose(own, want_own[1:].reshape(4, 4), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(d.rollout("mean", 0.2, toward=Output("class", index=3)), own)
    np.testing.assert_array_equal(d.rollout("mean", 0.2, toward=dense), toward)
    assert d.rollouts_served == 3
    assert d.dense_map() is record.captured_dense[0] and d.held().dense_map
    off = reference_rollout(reference_fused(record.attentions, "mean"), 0.123, start / start.sum(), ())
    np.testing.assert_allclose(d.rollout("mean", 0.123, toward=dense), off[1:].reshape(4, 4), rtol=1e-5, atol=1e-7)


def test_the_dense_map_is_made_once_and_counted(monkeypatch):
    from conftest import tiny_dense

    model = tiny_dense()
    record = vitviz.analyze(model, random_image(32, 32, seed=67), longest=32)
    made, dense_map = [], model.dense_map
    monkeypatch.setattr(model, "dense_map", lambda *args: made.append(args[2]) or dense_map(*args))
    d = Derived(record)
    assert not d.held().dense_map and d.nbytes == record.nbytes
    assert d.dense_map() is d.dense_map() and made == [(32, 32)] and model.forwards == 1
    assert d.held().dense_map and d.nbytes == record.nbytes + 32 * 32 * 4
    none = Derived(vitviz.analyze(tiny_vit(), random_image(32, 32, seed=67), dense=True))  # no dense head
    assert none.held().dense_map and none.dense_map() is None and none.nbytes == none.analysis.nbytes


def test_layer_updates_are_kept_only_where_the_forward_kept_no_norms():
    record = vitviz.analyze(tiny_vit(), random_image(32, 32, seed=68))
    with_norms, without = Derived(record), Derived(dataclasses.replace(record, update_norms=None))
    for layer in range(3):
        kept = without.layer_updates(layer)
        assert without.layer_updates(layer) is kept and with_norms.layer_updates(layer) is not kept
        read = with_norms.layer_updates(layer)
        assert with_norms.layer_updates(layer) is not read  # the record's norms, read anew
        want = record.layer_updates(layer)
        for part in ("residual", "attention", "mlp"):
            np.testing.assert_array_equal(getattr(read, part), getattr(want, part))
            np.testing.assert_allclose(getattr(kept, part), getattr(want, part), rtol=1e-4, atol=1e-5)


def test_a_copy_of_a_derived_answers_as_it_does():
    d = Derived(vitviz.analyze(tiny_vit(), random_image(32, 32, seed=69)))
    copied = copy.copy(d)
    assert copied.analysis is d.analysis and copied.num_layers == 3
    np.testing.assert_array_equal(copied.rollout("max", 0.1), d.rollout("max", 0.1))


def test_a_fusions_roll_step_lets_its_swept_rows_go_whatever_it_made(monkeypatch):
    """A roll step with a layer not swept rolls nothing, and one whose rollouts fail lets the rows go too: they
    are never held past their fusion's step."""
    model = tiny_vit()
    layers, n = model.num_layers, 17
    partial = Derived(vitviz.analyze(model, random_image(32, 32, seed=70)))
    for step in range(layers):  # the dense step, every layer swept but the last
        partial.warm_step(step)
    assert partial.warm_step(layers + 1)  # the mean's roll
    held = partial.held()
    assert held.warm_rows == {"max": layers - 1, "min": layers - 1} and not held.rollouts and not held.thresholds
    assert partial.shed_bytes == (layers - 1) * n * n * (2 + 2)

    def failing(*args, **kwargs):
        raise RuntimeError("out of memory")

    failed = Derived(vitviz.analyze(model, random_image(32, 32, seed=70)))
    for step in range(layers + 1):
        failed.warm_step(step)
    monkeypatch.setattr(maps, "rollouts", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        failed.warm_step(layers + 2)  # the max's roll
    assert failed.held().warm_rows == {"mean": layers, "min": layers} and not failed.held().rollouts
    monkeypatch.undo()
    failed.shed()  # a cache under pressure: the mean's and the min's steps gather their thresholds, roll nothing
    for step in (layers + 1, layers + 3):
        failed.warm_step(step)
    held = failed.held()
    # the max's thresholds: made before its rollouts failed
    assert held.thresholds == {"mean", "max", "min"} and not held.warm_thresholds and not held.rollouts
    assert failed.layers_recomputed == layers


def test_an_attention_pools_rollouts_start_from_its_probe_fused_as_asked():
    """SigLIP's readout is its probe's attention, its heads fused as the layers' are: max here, not the mean."""
    record = vitviz.analyze(FAMILIES["siglip_vision"](), random_image(32, 32, seed=71))
    d = Derived(record)
    probe = record.pool_attention.max(0).astype(np.float64)
    fused = reference_fused(record.attentions, "max")
    for ratio in (0.3, 0.123):  # the slider's, and one off it
        want = reference_rollout(fused, ratio, probe / probe.sum(), ())
        np.testing.assert_allclose(d.rollout("max", ratio), want.reshape(4, 4), rtol=1e-5, atol=1e-7)


def test_statistics_come_from_the_scores_given_where_the_caller_has_them():
    record = vitviz.analyze(tiny_vit(), random_image(32, 32, seed=72))
    d, n = Derived(record), record.num_tokens
    level = torch.full((4, n, n), 3.0)  # every key scored alike: every row spread evenly, entropy log N
    distance, entropy = d.layer_statistics(2, scores=level)
    np.testing.assert_allclose(entropy, np.full(4, np.log(n)), rtol=1e-5)
    assert d.layer_statistics(2)[1] is entropy and d.layers_recomputed == 0
    assert not np.allclose(record.layer_statistics(2)[1], entropy)


def test_a_derived_without_its_analysis_says_so():
    bare = Derived.__new__(Derived)  # as a copy or an unpickling makes it, before its fields are set
    with pytest.raises(AttributeError, match="analysis"):
        bare.analysis  # noqa: B018


def test_warm_runs_every_step_in_order():
    model = tiny_vit()
    image = random_image(32, 32, seed=73)
    stepped, warmed = (Derived(vitviz.analyze(model, image)) for _ in range(2))
    step = 0
    while stepped.warm_step(step):
        step += 1
    warmed.warm()
    assert warmed.held() == stepped.held() and warmed.held().rollouts
    assert (warmed.layers_recomputed, warmed.rollouts_made) == (stepped.layers_recomputed, stepped.rollouts_made)
