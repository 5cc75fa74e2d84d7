"""A record and a cache are two things: the `Analysis` keeps nothing it derives (the CLI's and a notebook's), and
`Derived`, the server's, keeps it behind a public API: fill, get through the cache, the warm, the accounting."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import random_image, tiny_vit

import vitviz
from vitviz import maps, views
from vitviz.cache import AnalysisCache
from vitviz.derived import Derived


def test_the_record_keeps_nothing_it_derives_and_answers_as_the_cache_does():
    a = vitviz.analyze(tiny_vit(), random_image(48, 40, seed=50))
    before = a.nbytes
    assert before == sum(x.nbytes for x in (a.image, a.pixel_values, a.hidden_states, a.tokens, a.update_norms))
    first = a.rollout("max", 0.3)
    answers = (a.fused("mean"), a.percent_thresholds("min"), a.layer_statistics(1), a.projections(2),
               a.layer_updates(0), a.dense_map(), a.attention_entropy, views.display(a))  # fmt: skip
    assert answers[-1] is not views.display(a)  # made anew: not kept
    assert a.nbytes == before and not hasattr(a, "held") and not hasattr(a, "warm_step")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.tokens = None
    cached = Derived(a)
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
