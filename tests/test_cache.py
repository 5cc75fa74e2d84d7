"""The analysis cache stays within its memory cap and per-session limit, counting each analysis with what is
derived from it and kept (`Derived`)."""

from __future__ import annotations

import numpy as np
from conftest import random_image, tiny_vit

import vitviz
from vitviz.cache import AnalysisCache
from vitviz.derived import Derived


def cached(model, image) -> Derived:
    """An analysis as the server's cache holds it."""
    return Derived(vitviz.analyze(model, image))


def test_lru_respects_memory_cap_and_sessions():
    model = tiny_vit()
    analyses = [cached(model, random_image(32, 32, seed=i)) for i in range(6)]
    size = analyses[0].nbytes
    cache = AnalysisCache(max_bytes=3 * size, per_session=2)
    for i, a in enumerate(analyses[:3]):
        cache.put((f"user{i}", "m", i), a)
    assert len(cache) == 3 and cache.nbytes <= 3 * size
    cache.get(("user0", "m", 0))  # user0 used most recently: user1 is now the oldest
    cache.put(("user3", "m", 3), analyses[3])
    assert cache.get(("user1", "m", 1)) is None
    assert cache.get(("user0", "m", 0)) is analyses[0]
    assert cache.nbytes <= 3 * size
    cache.put(("user0", "m", 4), analyses[4])
    cache.put(("user0", "m", 5), analyses[5])  # a third image for user0: its oldest goes
    assert cache.get(("user0", "m", 0)) is None and cache.get(("user0", "m", 5)) is analyses[5]


def test_over_the_cap_the_oldest_shed_their_fused_heads_before_any_is_evicted():
    model = tiny_vit()
    analyses = [cached(model, random_image(32, 32, seed=i)) for i in range(4)]
    bare = analyses[0].nbytes
    for a in analyses:
        a.fused("mean")  # what a request for a discard off the slider, or an export, keeps
    extra = analyses[0].nbytes - bare
    assert extra == analyses[0].shed_bytes > 0  # the fused heads
    rollouts = len(a.ROLLOUT_PERCENTS) * a.rollout().nbytes  # what a fusion's rollouts add (a few kB at 448 px)
    a.forget(rollouts=True)
    cache = AnalysisCache(max_bytes=4 * bare + 2 * extra + rollouts)  # all four, and two with their heads
    for i, a in enumerate(analyses):
        cache.put((f"user{i}", i), a)
    assert len(cache) == 4 and cache.nbytes <= cache.max_bytes  # shed, not evicted
    assert [a.shed_bytes > 0 for a in analyses] == [False, False, True, True]  # the oldest shed first
    rolled = analyses[1].rollout("max", 0.2)  # kept, a few kB; not the fused heads it was made from
    assert analyses[1].shed_bytes == 0 and cache.nbytes <= cache.max_bytes
    analyses[1].fused("max")  # refills it: the cache is over its cap until asked to fit
    assert analyses[1].shed_bytes > 0 and cache.enforce_cap() == 1 and cache.nbytes <= cache.max_bytes  # one shed
    assert [a.shed_bytes > 0 for a in analyses] == [False, False, True, True]  # shed again: among the oldest
    np.testing.assert_array_equal(analyses[1].rollout("max", 0.2), rolled)
    cache.put(("user4", 4), cached(model, random_image(32, 32, seed=4)))  # nothing left to shed
    cache.put(("user5", 5), cached(model, random_image(32, 32, seed=5)))
    assert cache.nbytes <= cache.max_bytes and cache.get(("user0", 0)) is None  # then the oldest go


def test_the_max_and_min_fusions_are_shed_before_any_mean_one():
    model = tiny_vit()
    analyses = [cached(model, random_image(32, 32, seed=10 + i)) for i in range(3)]
    for a in analyses:
        a.fused("mean"), a.fused("max")
    bare = analyses[0].nbytes - analyses[0].shed_bytes
    mean = analyses[0].shed_bytes - analyses[0].shed(keep_mean=True)  # what keeping the mean keeps
    largest = analyses[0].fused("max")
    largest = largest.numel() * largest.element_size()
    cache = AnalysisCache(max_bytes=3 * (bare + mean) + largest)  # every mean fusion, and one max: the newest's
    for i, a in enumerate(analyses):
        cache.put((f"user{i}", i), a)
    assert [set(a.held().fused) for a in analyses] == [{"mean"}, {"mean"}, {"mean", "max"}]  # the newest kept whole
    assert len(cache) == 3 and cache.nbytes <= cache.max_bytes


def test_an_analysis_shared_by_sessions_is_counted_once_and_kept_whole_while_one_of_them_is_the_newest():
    model = tiny_vit()
    shared, other = (cached(model, random_image(32, 32, seed=20 + i)) for i in range(2))
    for a in (shared, other):
        a.fused("mean")
    cache = AnalysisCache(max_bytes=shared.nbytes + other.nbytes)
    cache.put(("ann", "photo"), shared)
    cache.put(("ben", "other"), other)
    cache.put(("cat", "photo"), shared)  # a third session asks for ann's photo: the same analysis, now the newest
    assert cache.nbytes == shared.nbytes + other.nbytes and len(cache) == 3 and cache.find(("photo",)) is shared
    cache.max_bytes -= 1  # over the cap: the older one sheds, not the newest under its older key
    assert cache.enforce_cap() == 1 and other.shed_bytes == 0 and shared.shed_bytes > 0


def test_newest_entry_is_kept_even_over_the_cap():
    a = cached(tiny_vit(), random_image(32, 32))
    cache = AnalysisCache(max_bytes=1)
    cache.put(("s", 1), a)
    assert cache.get(("s", 1)) is a


def test_a_warm_step_fills_a_cached_analysis_and_skips_one_the_cache_let_go():
    """The app's warm steps take a weak reference: an analysis the cache let go is not warmed, and the step
    keeps no reference to it (a thread per analysis that held it while waiting could keep it alive)."""
    import gc
    import weakref

    from vitviz.app.server import Server

    server = Server(device="cpu")
    a = cached(tiny_vit(), random_image(32, 32))
    ref, key = weakref.ref(a), ("warm-test", "m", 0)
    server.cache.put(key, a)
    step = 0
    while server.warm_step(ref, step):
        step += 1
    held = a.held()
    assert step == 4 + a.model.num_layers and held.statistics == set(range(a.model.num_layers))
    assert held.thresholds == {"mean", "max", "min"} and not held.fused  # the rollout controls' rollouts, not
    assert len(held.rollouts) == 3 * len(a.ROLLOUT_PERCENTS)  # the fused heads they came from
    assert held.dense_map  # filled, if only with None (tiny_vit has no dense head)
    assert server.cache.drop(key) is a
    a.forget(statistics=True)
    first_layer = 1  # the step of layer 0's statistics
    assert not server.warm_step(ref, first_layer)  # no longer cached: not warmed
    assert not a.held().statistics
    del a
    gc.collect()
    assert ref() is None  # nothing else held it


def test_a_fusion_never_waits_while_another_is_being_filled(monkeypatch):
    """The background fills the mean fusion while a user asks for max: the max is not held up by it."""
    import threading

    from vitviz import maps

    a = cached(tiny_vit(), random_image(32, 32))
    busy, release, fuse = threading.Event(), threading.Event(), maps.fuse_heads

    def slow_mean(attn, how="mean"):
        if how == "mean":
            busy.set()
            release.wait(10)
        return fuse(attn, how)

    monkeypatch.setattr(maps, "fuse_heads", slow_mean)
    threading.Thread(target=a.percent_thresholds, args=("mean",), daemon=True).start()
    assert busy.wait(10)
    done = threading.Event()
    threading.Thread(target=lambda: (a.rollout("max", 0.5), done.set()), daemon=True).start()
    try:
        assert done.wait(5), "rollout('max') waited for the mean fusion"
    finally:
        release.set()
    assert a.rollout("mean", 0.5).shape == a.grid  # and the mean is there once filled


def test_eviction_counts_what_it_dropped_and_keeps_only_the_newest_over_the_cap():
    model = tiny_vit()
    analyses = [cached(model, random_image(32, 32, seed=i)) for i in range(3)]
    cache = AnalysisCache(max_bytes=1, per_session=5)  # smaller than any analysis
    assert cache.put(("a", 0), analyses[0]) == 0
    assert cache.put(("b", 1), analyses[1]) == 1  # the older one goes, the newest stays
    assert len(cache) == 1 and cache.holds(analyses[1]) and not cache.holds(analyses[0])
    roomy = AnalysisCache(max_bytes=10 * analyses[0].nbytes, per_session=1)
    roomy.put(("a", 0), analyses[0])
    roomy.put(("b", 1), analyses[1])
    assert roomy.put(("a", 2), analyses[2]) == 1 and roomy.get(("a", 0)) is None  # one per session
    assert roomy.get(("b", 1)) is analyses[1] and roomy.holds(analyses[2])


def test_entries_that_grow_in_place_are_brought_back_under_the_cap():
    """A background warm fills fused heads into analyses already cached: the total may then pass the cap
    until `enforce_cap` evicts the oldest, which the app's warm step calls after each step."""
    from vitviz.app.server import Server

    model = tiny_vit()
    analyses = [cached(model, random_image(32, 32, seed=i)) for i in range(4)]
    size = analyses[0].nbytes
    analyses[3].fused("max")
    growth = analyses[3].nbytes - size  # what fusing one analysis' heads adds to it
    cache = AnalysisCache(max_bytes=3 * size + growth // 2, per_session=5)
    for i, a in enumerate(analyses[:3]):
        cache.put(("s", i), a)
    assert cache.enforce_cap() == 0 and len(cache) == 3
    analyses[2].fused("max")  # the newest grows by its fused heads
    assert cache.nbytes > cache.max_bytes
    assert cache.enforce_cap() == 1 and cache.get(("s", 0)) is None and cache.holds(analyses[2])
    assert cache.nbytes <= cache.max_bytes

    server = Server(device="cpu", cache_mb=(2 * size + growth // 2) / 2**20)
    server.cache.per_session = 5
    for i, a in enumerate(analyses[:2]):
        server.cache.put(("warm", i), a)
    server.warm_step(__import__("weakref").ref(analyses[1]), 1)  # the step that fuses the heads
    assert not server.cache.holds(analyses[0]) and server.cache.nbytes <= server.cache.max_bytes


def test_what_drawings_keep_counts_toward_the_cap():
    """The image at display size, made once per analysis by the views, is part of what the cache's cap counts."""
    from vitviz.views.common import display

    a = cached(tiny_vit(), random_image(300, 500))
    before = a.nbytes
    shown = display(a)
    assert display(a) is shown and a.nbytes == before + shown.nbytes
