"""Micro-batching: concurrent new images through one forward, each getting the analysis it would get alone."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest
from conftest import ASSETS, FAMILIES, random_image

import vitviz
from vitviz.batching import Batcher
from vitviz.capture import ForwardFusions
from vitviz.derived import Derived


def together(batcher: Batcher, jobs: list[tuple]) -> list:
    """Run batcher.analyze(*job) for every job in its own thread, all released at once; results in job order
    (an exception in place of a result where one was raised)."""
    results: list = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = batcher.analyze(*jobs[i])
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def assert_same_analysis(batched: vitviz.Analysis, alone: vitviz.Analysis, rolled: bool = False) -> None:
    """Equal to float noise: the hidden states and what is made of them, and attention to float16 rounding;
    where the batch `rolled`, every slider rollout made by its forward."""
    np.testing.assert_array_equal(batched.image, alone.image)
    np.testing.assert_array_equal(batched.pixel_values, alone.pixel_values)
    scale = np.abs(alone.hidden_states).max()
    np.testing.assert_allclose(batched.hidden_states, alone.hidden_states, atol=1e-5 * scale)
    np.testing.assert_allclose(batched.tokens, alone.tokens, atol=1e-5 * np.abs(alone.tokens).max())
    np.testing.assert_allclose(batched.attentions.astype(np.float32), alone.attentions.astype(np.float32), atol=2e-3)
    np.testing.assert_allclose(batched.update_norms, alone.update_norms, rtol=1e-4, atol=1e-5)
    for name in ("logits", "pool_attention"):
        mine, theirs = getattr(batched, name), getattr(alone, name)
        assert (mine is None) == (theirs is None), name
        if theirs is not None:
            np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)
    if rolled:  # made from the batch's forward (roll=True, as the app asks) when first needed: each image's own
        slider = {(f, p) for f in ForwardFusions.FUSIONS for p in Derived.ROLLOUT_PERCENTS}
        # and toward the readout at the same discards, where the output is not the readout (the Rollout tab's note)
        readout = set() if alone.output.reads_readout else {("readout", *key) for key in slider}
        held = batched.held()
        assert held.pending_roll or held.rollouts == slider | readout  # another image of the batch rolled them all
        batched.settle()
        held = batched.held()
        assert held.rollouts == slider | readout and not held.pending_roll and batched.layers_recomputed == 0
        for fusion, percent in slider:
            want = alone.rollout(fusion, percent / 100)
            np.testing.assert_allclose(batched.rollout(fusion, percent / 100), want, atol=1e-4, err_msg=fusion)
        rows = sum(held.warm_rows.values())  # where the batch held them: each image's own rows, not the batch's
        assert held.warm_storage_bytes == rows * batched.num_tokens**2 * 2
        for fusion in ForwardFusions.HELD:
            np.testing.assert_allclose(batched.rollout(fusion, 0.3), alone.rollout(fusion, 0.3), atol=1e-4)
    np.testing.assert_allclose(batched.rollout("mean", 0.5), alone.rollout("mean", 0.5), atol=1e-4)


def photos(size: tuple[int, int], count: int) -> list[np.ndarray]:
    """The bundled photos, then generated ones, all resized to `size` (w, h): different images of one size."""
    bundled = [cv2.cvtColor(cv2.imread(str(ASSETS / f"{n}.jpg")), cv2.COLOR_BGR2RGB) for n in vitviz.EXAMPLES]
    made = [random_image(size[1], size[0], seed=i) for i in range(count)]
    return [cv2.resize(p, size, interpolation=cv2.INTER_AREA) for p in bundled + made][:count]


def test_eight_concurrent_uploads_of_one_size_go_as_one_batch_and_each_equals_its_solo_analysis(embedded, monkeypatch):
    """As the app asks (rolled, with the dense head's maps): the eight share one forward, and the dense head reads
    each one's own tokens of it, with no forward of its own: each map is the map of its own image alone."""
    images = photos((300, 200), 8)
    batcher = Batcher(window_s=5.0, max_batch=8)  # the eighth image closes the batch long before the window ends
    forwards, forward = [], embedded.forward
    monkeypatch.setattr(embedded, "forward", lambda x, *args, **kw: forwards.append(len(x)) or forward(x, *args, **kw))
    results = together(batcher, [(embedded, image, 224, True, True) for image in images])
    assert list(batcher.sizes) == [8] and forwards == [8]  # the batch's only
    monkeypatch.undo()
    for image, batched in zip(images, results, strict=True):
        assert isinstance(batched, Derived) and isinstance(batched.analysis, vitviz.Analysis), batched
        assert_same_analysis(batched, vitviz.analyze(embedded, image, longest=224), rolled=True)
        assert batched.held().dense_map  # made with the batch, before any view asked
        made = batched.dense_map()
        assert made.shape == batched.pixel_values.shape[2:]
        np.testing.assert_allclose(made, vitviz.analyze(embedded, image, longest=224).dense_map(), atol=1e-4)


def test_a_dense_head_that_fails_leaves_each_analysis_whole_and_its_view_says_why(embedded, monkeypatch, caplog):
    def broken(last_hidden, grid, size):
        raise RuntimeError("CUDA out of memory")

    images = photos((300, 200), 2)
    monkeypatch.setattr(embedded, "dense_map", broken)
    results = together(Batcher(window_s=5.0, max_batch=2), [(embedded, image, 224, True, True) for image in images])
    assert "the dense head's maps" in caplog.text
    for image, batched in zip(images, results, strict=True):
        assert isinstance(batched, Derived) and isinstance(batched.analysis, vitviz.Analysis), batched
        # no map yet, and no rollout toward it: the forward does not ask the head again for each image
        assert not batched.held().rollouts and not batched.held().dense_map
        with pytest.raises(RuntimeError, match="CUDA out of memory"):  # asked again, where a view needs it
            batched.dense_map()
        monkeypatch.undo()
        alone = vitviz.analyze(embedded, image, longest=224)
        # a batch of two and a forward alone round apart (float32, ~1e-6 on this [0,1] map), as the test above allows
        np.testing.assert_allclose(batched.dense_map(), alone.dense_map(), atol=1e-5)
        monkeypatch.setattr(embedded, "dense_map", broken)


def test_mixed_sizes_batch_by_size_and_each_equals_its_solo_analysis():
    model = FAMILIES["dinov2"]()
    images = [random_image(48, 64, seed=i) if i % 2 else random_image(40, 40, seed=i) for i in range(8)]
    batcher = Batcher(window_s=5.0, max_batch=4)  # four of each size: each batch closes when full
    results = together(batcher, [(model, image, 64) for image in images])
    assert sorted(batcher.sizes) == [4, 4]
    shapes = {r.pixel_values.shape for r in results}
    assert len(shapes) == 2
    for image, batched in zip(images, results, strict=True):
        assert_same_analysis(batched, vitviz.analyze(model, image, longest=64))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_batched_equals_alone(name):
    """Each image's slice of the readout, the update norms and an attention-pool's probe, not the first image's."""
    model = FAMILIES[name]()
    images = [random_image(40, 56, seed=10 + i) for i in range(3)]
    batcher = Batcher(window_s=5.0, max_batch=3)
    results = together(batcher, [(model, image, 56, True) for image in images])  # rolled, as the app asks
    assert list(batcher.sizes) == [3]
    for image, batched in zip(images, results, strict=True):
        assert_same_analysis(batched, vitviz.analyze(model, image, longest=56), rolled=True)


def test_a_broken_upload_fails_alone_and_a_failed_forward_fails_its_whole_batch(tmp_path, monkeypatch):
    model = FAMILIES["vit"]()
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8 not really a jpeg")
    batcher = Batcher(window_s=0.5, max_batch=3)
    jobs = [(model, random_image(32, 32, seed=1)), (model, str(broken)), (model, random_image(32, 32))]
    results = together(batcher, jobs)
    assert isinstance(results[1], ValueError) and str(results[1]).startswith("broken.jpg is not an image")
    assert all(isinstance(r, vitviz.Analysis) for r in (results[0], results[2])) and list(batcher.sizes) == [2]

    def fail(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(model, "forward", fail, raising=False)
    results = together(batcher, [(model, random_image(32, 32, seed=i)) for i in range(2)])
    assert [str(r) for r in results] == ["the batch of 2 failed: out of memory"] * 2
    assert batcher.analyze(FAMILIES["deit"](), random_image(32, 32)).num_tokens == 18  # it goes on


def test_the_server_batches_where_asked_and_only_on_a_gpu_by_default(tmp_path):
    from types import SimpleNamespace

    from vitviz.app.scheduling import BATCH_MAX, SLOTS, batcher, slots
    from vitviz.app.server import Server

    assert batcher("auto", "cpu") is None and batcher("off", "cpu") is None
    assert batcher("3", "cpu").window_s == pytest.approx(0.003) and batcher("3", "cpu").max_batch == BATCH_MAX
    with pytest.raises(ValueError, match="VITVIZ_BATCH_MS must be 'auto', 'off' or milliseconds, got 'soon'"):
        batcher("soon", "cpu")
    assert slots("forward", Server(device="cpu"))["concurrency_limit"] == SLOTS["forward"]
    server = Server(device="cpu", batch_ms="5000")
    assert slots("forward", server)["concurrency_limit"] == BATCH_MAX
    server.models["tiny"] = FAMILIES["vit"]()
    server.batcher.max_batch = 3

    def upload(i: int):
        path = str(tmp_path / f"{i}.png")
        cv2.imwrite(path, random_image(32, 32, seed=i))
        return server.get_analysis(path, "tiny", "224", SimpleNamespace(session_hash=f"student{i}"))

    results = [None] * 3
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, upload(i))) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert list(server.batcher.sizes) == [3] and len({id(r) for r in results}) == 3 and len(server.cache) == 3


def test_a_batch_that_rolls_holds_no_more_fused_heads_than_fit(monkeypatch):
    """Concurrent uploads that roll go in batches of as many images as `ForwardFusions.held_bytes` holds (here
    two), each rolled: never one batch too large to roll."""
    from vitviz.capture import ForwardFusions, model_input

    model = FAMILIES["dinov2"]()
    images = [random_image(40, 40, seed=20 + i) for i in range(4)]
    x = model_input(model, images[0], 40)
    n = model.n_prefix + (x.shape[2] // model.patch_size) * (x.shape[3] // model.patch_size)
    monkeypatch.setattr(ForwardFusions, "HELD_BYTES_CPU", 2 * model.num_layers * n * n * 4)  # the mean's float32
    batcher = Batcher(window_s=5.0, max_batch=8)  # each batch closes at two, long before the window ends
    results = together(batcher, [(model, image, 40, True) for image in images])
    assert list(batcher.sizes) == [2, 2]
    for image, batched in zip(images, results, strict=True):
        assert_same_analysis(batched, vitviz.analyze(model, image, longest=40), rolled=True)


def test_a_server_that_batches_warms_each_model_it_loads_with_one_full_batch_that_counts_nowhere(monkeypatch):
    """Where uploads are batched (a GPU), loading a model runs one full batch of the default size, rolled, then
    another fusion's rollout (from the forward's held rows) and every layer's statistics, each layer recomputed
    once, as the heads view asks: the first class's uploads would otherwise set up the kernels and memory. The
    warm is no upload: no batch size is counted and nothing is cached. Without a batcher (a CPU) nothing runs."""
    from vitviz.app import server as server_module

    model = FAMILIES["vit"]()
    batches, recomputed = [], []
    forward, scores = model.forward, vitviz.Analysis.device_scores

    def counted(pixel_values, **kwargs):
        batches.append((len(pixel_values), kwargs.get("each_layer") is not None))
        return forward(pixel_values, **kwargs)

    monkeypatch.setattr(model, "forward", counted)
    monkeypatch.setattr(vitviz.Analysis, "device_scores", lambda a, i: recomputed.append(i) or scores(a, i))
    monkeypatch.setattr(server_module, "load_model", lambda name, device: model)
    server = server_module.Server(device="cpu", batch_ms="5")
    assert server.get_model("tiny") is model and server.get_model("tiny") is model  # loaded and warmed once
    assert batches == [(server.batcher.max_batch, True)]  # one full batch, its heads fused as it ran
    assert sorted(recomputed) == list(range(model.num_layers))  # once each, for the statistics
    assert not server.batcher.sizes and len(server.cache) == 0
    batches.clear()
    assert server_module.Server(device="cpu", batch_ms="off").get_model("other") is model and batches == []


def test_a_warm_that_fails_is_logged_and_the_model_is_served(monkeypatch, caplog):
    from vitviz.app import server as server_module

    model = FAMILIES["vit"]()
    monkeypatch.setattr(server_module, "load_model", lambda name, device: model)
    monkeypatch.setattr(Batcher, "warm", lambda self, model: 1 / 0)
    with caplog.at_level("ERROR", logger="vitviz"):
        assert server_module.Server(device="cpu", batch_ms="5").get_model("tiny") is model
    assert "warming tiny" in caplog.text and "ZeroDivisionError" in caplog.text
