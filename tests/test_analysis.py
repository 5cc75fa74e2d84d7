"""The Analysis: what one forward pass captures, and how a query names its tokens, on every family; and the
`Derived` results kept from it: what they keep, shed and warm, and that they change no answer."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch
import transformers as tf
from conftest import (
    FAMILIES,
    TINY,
    expected_readout_row,
    random_image,
    reference_fused,
    reference_outputs,
    reference_rollout,
    tiny_dense,
    tiny_vit,
)

import vitviz
from vitviz import maps
from vitviz.derived import Derived
from vitviz.outputs import Output


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
    assert projections.nbytes == sum(x.nbytes for x in (projections.u, projections.k, projections.v))
    norms = projections.value_norms  # made when first asked (a view of the weights alone needs none), then counted
    assert projections.nbytes == sum(x.nbytes for x in (projections.u, projections.k, projections.v, norms))
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


def float64_heads(model, x: np.ndarray, layer: int):
    """(q, k, v [H,N,dh], wo [D,H,dh]) of `layer` from the tokens x [N,D] that enter it, in float64: the
    layer's own norm and projections, written out."""
    parts = model.layer_parts(layer)
    w = {name: getattr(parts, name) for name in ("q", "k", "v", "o")}
    norm = parts.norm1
    u = (
        torch.nn.functional.layer_norm(
            torch.from_numpy(x).double(), norm.normalized_shape, norm.weight.double(), norm.bias.double(), norm.eps
        )
        .detach()
        .numpy()
    )
    heads = model.num_heads

    def project(linear):
        bias = 0.0 if linear.bias is None else linear.bias.detach().double().numpy()
        out = u @ linear.weight.detach().double().numpy().T + bias
        return out.reshape(len(u), heads, -1).transpose(1, 0, 2)

    wo = w["o"].weight.detach().double().numpy()
    return project(w["q"]), project(w["k"]), project(w["v"]), wo.reshape(len(wo), heads, -1)


def float64_softmax(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("name", ["vit", "deit", "dinov2_registers", "clip", "siglip_vision"])
def test_inside_a_head_and_its_contributions_are_the_layer_recomputed_in_float64(name):
    model = FAMILIES[name]()
    a = vitviz.analyze(model, random_image(40, 56, seed=40), longest=56)
    ref = reference_outputs(model, a.pixel_values)
    layer, head, patch, (gh, gw) = 1, 2, 9, a.grid
    token = model.n_prefix + patch
    q, k, v, wo = float64_heads(model, a.hidden_states[layer].astype(np.float64), layer)
    dh = q.shape[-1]
    weights = float64_softmax(q @ k.transpose(0, 2, 1) * dh**-0.5)  # [H,N,N]
    np.testing.assert_allclose(weights, ref.attentions[layer][0].numpy(), atol=1e-5)  # transformers' own
    value_norms = np.linalg.norm(np.einsum("hnd,Dhd->hnD", v, wo), axis=-1)  # [H,N] ||W_O,h v_j||
    h = a.inside_head(layer, head, patch)
    assert (h.layer, h.head, h.query, h.scale, h.head_width) == (layer, head, token, pytest.approx(dh**-0.5), dh)
    close = dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h.q, q[head, token], **close)
    np.testing.assert_allclose(h.k, k[head], **close)
    np.testing.assert_allclose(h.v, v[head], **close)
    np.testing.assert_allclose(h.scores, q[head, token] @ k[head].T * dh**-0.5, **close)
    np.testing.assert_allclose(h.weights, weights[head, token], **close)
    np.testing.assert_allclose(h.contributions, weights[head, token] * value_norms[head], **close)
    np.testing.assert_allclose(h.output, weights[head, token] @ v[head], **close)
    out = np.linalg.norm(np.einsum("hn,hnd,Dhd->hD", weights[:, token], v, wo), axis=-1)
    np.testing.assert_allclose(h.head_shares, out / out.sum(), **close)
    carried = weights[:, token] * value_norms  # [H,N]
    want = carried[:, model.n_prefix :].reshape(-1, gh, gw)
    np.testing.assert_allclose(a.contribution_map(layer, head, patch), want[head], **close)
    np.testing.assert_allclose(a.contribution_map(layer, None, patch), want.mean(0), **close)
    if model.readout.pool:
        with pytest.raises(
            ValueError, match="^tiny-siglip-vision's probe has values of its own: weight × value reads a token query$"
        ):
            a.contribution_map(layer, None, "readout")
    else:
        readout = list(model.readout.tokens)
        rows = (weights[:, readout].mean(1) * value_norms)[:, model.n_prefix :].reshape(-1, gh, gw)
        np.testing.assert_allclose(a.contribution_map(layer, None, "readout"), rows.mean(0), **close)
        np.testing.assert_allclose(a.contribution_map(2, 3, "readout").shape, (gh, gw))
    if model.has_cls:
        assert a.inside_head(0, 0, "cls").query == 0
    with pytest.raises(ValueError, match="^head must be a head index: inside a head looks at one head$"):
        a.inside_head(layer, None, patch)
    with pytest.raises(ValueError, match=r"head must be None or in \[0, 4\), got 4"):
        a.inside_head(layer, 4, patch)
    with pytest.raises(ValueError, match=r"layer must be in \[0, 3\), got 3"):
        a.contribution_map(3, None, patch)
    with pytest.raises(ValueError, match=r"head must be None or in \[0, 4\), got -1"):
        a.contribution_map(layer, -1, patch)


@pytest.mark.parametrize("name", ["vit", "dinov2"])  # dinov2: LayerScale after each sub-layer
def test_layer_updates_are_the_norms_of_what_each_sub_layer_adds(name):
    """The attention's update recomputed from the layer's modules, the MLP's as what is left of the next hidden
    state: with the forward's norms, and recomputed where the forward kept none."""
    model = FAMILIES[name]()
    record = vitviz.analyze(model, random_image(40, 56, seed=41), longest=56)
    recomputed = dataclasses.replace(record, update_norms=None)
    for layer in range(model.num_layers):
        parts, x = model.layer_parts(layer), torch.from_numpy(record.hidden_states[layer])
        with torch.no_grad():
            attention = parts.scale1(parts.attention(parts.norm1(x[None]))[0])[0].double().numpy()
        mlp = record.hidden_states[layer + 1].astype(np.float64) - x.double().numpy() - attention
        want = [np.linalg.norm(t, axis=-1) for t in (x.double().numpy(), attention, mlp)]
        for updates in (record.layer_updates(layer), recomputed.layer_updates(layer)):
            for part, expected in zip(("residual", "attention", "mlp"), want, strict=True):
                got = getattr(updates, part)
                assert got.shape == (record.num_tokens,)
                np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=f"{layer} {part}")
    for bad in (-1, model.num_layers):
        with pytest.raises(ValueError, match=rf"layer must be in \[0, 3\), got {bad}"):
            record.layer_updates(bad)


def test_pca_colours_are_the_first_three_components_of_the_patch_tokens():
    """On DeiT (two prefix tokens) and a 5x7 grid: the eigenvectors of the patches' covariance, each signed so
    that its largest loading is positive, min-max scaled."""
    a = vitviz.analyze(FAMILIES["deit"](), random_image(40, 56, seed=42), longest=56)
    x = a.tokens[2:].astype(np.float64)
    x = x - x.mean(0)
    vectors = np.linalg.eigh(x.T @ x)[1][:, ::-1][:, :3].T  # largest first
    vectors *= np.sign(vectors[np.arange(3), np.abs(vectors).argmax(1)])[:, None]
    comps = x @ vectors.T
    want = ((comps - comps.min(0)) / (comps.max(0) - comps.min(0))).reshape(5, 7, 3)
    got = a.pca_rgb()
    assert got.shape == (5, 7, 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_top_classes_are_the_softmax_of_the_logits_best_first():
    a = vitviz.analyze(tiny_vit(), random_image(32, 32, seed=43))
    logits = a.logits.astype(np.float64)
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    order = np.argsort(-probs)
    got = a.top_classes(3)
    assert [label for label, _ in got] == [f"class {i}" for i in order[:3]]
    np.testing.assert_allclose([p for _, p in got], probs[order[:3]], rtol=1e-6)
    assert all(type(p) is float for _, p in got)
    assert [label for label, _ in a.top_classes()] == [f"class {i}" for i in order]  # 5 by default: every class
    assert len(a.top_classes(1)) == 1 and len(a.top_classes(10)) == 5
    assert vitviz.analyze(FAMILIES["dino"](), random_image(32, 32, seed=43)).top_classes() == []
    assert dataclasses.replace(a, logits=None).top_classes() == []  # labels, but no logits captured
    seven = tf.ViTConfig(**TINY, num_labels=7, id2label={i: f"kind {i}" for i in range(7)})
    torch.manual_seed(0)
    many = vitviz.analyze(vitviz.wrap(tf.ViTForImageClassification(seven), "tiny-vit-7"), random_image(32, 32))
    assert len(many.top_classes()) == 5 and len(many.top_classes(7)) == 7


def test_a_rollout_toward_the_dense_head_starts_from_its_patches_weighted_as_the_output_reads_them():
    record = vitviz.analyze(tiny_vit(), random_image(48, 32, seed=44), longest=32)  # an image twice as tall
    (gh, gw), (h, w) = record.grid, record.pixel_values.shape[2:]
    salient = np.random.default_rng(44).random((h, w)).astype(np.float32)
    a = dataclasses.replace(record, captured_dense=(salient,))
    n = a.num_tokens

    def start_over(weights):
        row = np.zeros(n)
        row[1:] = weights.reshape(gh, h // gh, gw, w // gw).mean((1, 3)).ravel()
        return row / row.sum()

    box = np.zeros((h, w))
    box[:, : w // 2] = 1  # the box's left half of the image, in its own pixels
    outputs = {
        Output("dense"): start_over(salient),
        Output("dense", region="image"): np.r_[0.0, np.full(n - 1, 1 / (n - 1))],
        Output("dense", box=(0, 0, 16, 48)): start_over(box),
    }
    fused = reference_fused(a.attentions, "mean")
    for output, want in outputs.items():
        start, keep = a.rollout_start("mean", output)
        assert keep == () and start.dtype == np.float32 and start.shape == (n,)
        np.testing.assert_allclose(start, want, rtol=1e-5, atol=1e-8, err_msg=str(output))
        rolled = reference_rollout(fused, 0.3, want, ())[1:].reshape(gh, gw)
        np.testing.assert_allclose(a.rollout("mean", 0.3, output), rolled, rtol=1e-5, atol=1e-7)
    for toward in (None, "readout", Output("class", index=2), Output("readout")):
        start, keep = a.rollout_start("max", toward)
        assert keep == (0,) and list(start) == [1.0] + [0.0] * (n - 1)
    assert a.start_of(None) == "readout" and a.start_of(Output("dense")) == Output("dense")
    with pytest.raises(ValueError, match="this model has no dense head: its output is not a map"):
        record.rollout_start("mean", Output("dense"))


@pytest.mark.parametrize("fusion", maps.HEAD_FUSIONS)
def test_an_attention_pool_starts_from_its_probes_heads_fused_as_the_layers_are(fusion):
    a = vitviz.analyze(FAMILIES["siglip_vision"](), random_image(32, 32, seed=45))
    probe = reference_fused(a.pool_attention[None, :, None], fusion)[0, 0]
    start, keep = a.rollout_start(fusion)
    assert keep == ()
    np.testing.assert_allclose(start, probe / probe.sum(), rtol=1e-6)
    np.testing.assert_allclose(a.readout_start(fusion), start, rtol=0)


def test_the_layers_statistics_are_the_attention_distance_and_entropy_in_float64():
    """Mean attention distance (ViT paper, App. D.7): each patch query's pixel distance to the patch keys,
    weighted by its attention renormalised over them, averaged over the queries; entropy in nats, over all
    rows. Of transformers' own float32 weights, on DeiT's two prefix tokens and a 5x7 grid of 8-pixel patches."""
    model = FAMILIES["deit"]()
    a = vitviz.analyze(model, random_image(40, 56, seed=46), longest=56)
    ys, xs = np.divmod(np.arange(35), 7)
    centres = np.stack([ys, xs], 1) * 8.0 + 4.0
    distances = np.hypot(*(centres[:, None] - centres[None]).transpose(2, 0, 1))  # [P,P]
    attention = torch.cat(reference_outputs(model, a.pixel_values).attentions).double().numpy()  # [L,H,N,N]
    patches = attention[:, :, 2:, 2:]
    want = (patches / patches.sum(-1, keepdims=True) * distances).sum(-1).mean(-1)
    entropy = -(attention * np.log(np.where(attention > 0, attention, 1.0))).sum(-1).mean(-1)
    np.testing.assert_allclose(a.mean_attention_distance, want, rtol=1e-5)
    np.testing.assert_allclose(a.attention_entropy, entropy, rtol=1e-5)
    for layer in range(3):
        distance, nats = a.layer_statistics(layer)
        np.testing.assert_allclose(distance, want[layer], rtol=1e-5)
        np.testing.assert_allclose(nats, entropy[layer], rtol=1e-5)


def test_a_querys_maps_read_its_row_and_the_patches_after_the_prefix():
    model = FAMILIES["deit"]()
    a = vitviz.analyze(model, random_image(40, 56, seed=47), longest=56)
    ref = reference_outputs(model, a.pixel_values)
    attention = ref.attentions[1][0].numpy()  # [H,N,N], transformers' own
    rows = a.query_rows(1, 4)
    assert rows.dtype == np.float32 and rows.shape == (4, 37)
    np.testing.assert_allclose(rows, attention[:, 2 + 4], atol=1e-5)
    heads = a.head_maps(1, 4)
    np.testing.assert_allclose(heads, attention[:, 6, 2:].reshape(4, 5, 7), atol=1e-5)
    np.testing.assert_allclose(a.attention_map(1, 2, 4), heads[2], rtol=1e-6)
    np.testing.assert_allclose(a.attention_map(1, None, 4), heads.mean(0), rtol=1e-6)
    readout = attention[:, [0, 1]].mean(1)[:, 2:].reshape(4, 5, 7)  # the CLS and distillation rows' mean
    np.testing.assert_allclose(a.head_maps(1), readout, atol=1e-5)
    np.testing.assert_allclose(a.attention_map(1), readout.mean(0), atol=1e-5)
    with pytest.raises(ValueError, match=r"^head must be None or in \[0, 4\), got 4$"):
        a.attention_map(1, 4, 4)
    norms = np.linalg.norm(ref.hidden_states[-1][0, 2:].double().numpy(), axis=-1).reshape(5, 7)
    np.testing.assert_allclose(a.token_norms(), norms, rtol=1e-5)
    assert a.query_index(0) == 2 and a.query_index(np.int64(34)) == 36
    message = f"{model.name} reads out from {model.readout.name}, which is not one token: pick a patch"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        a.query_index("readout")
    for bad in (-1, 35, 1.0, "patch"):
        with pytest.raises(ValueError, match=r"^query must be 'readout', 'cls' or a patch index in \[0, 35\)"):
            a.query_index(bad)
    pool = vitviz.analyze(FAMILIES["siglip_vision"](), random_image(32, 32, seed=47))
    assert pool.query_rows(0, "readout").dtype == np.float32


def test_attentions_kept_by_the_forward_are_read_as_the_recomputed_ones():
    """A model whose layers vitviz cannot open (a DPT's encoder) keeps its weights: read the same way."""
    record = vitviz.analyze(tiny_vit(), random_image(32, 32, seed=48))
    weights = record.attentions
    kept = dataclasses.replace(record, kept_attentions=weights)
    assert kept.attentions is weights and np.shares_memory(kept.layer_attention(1), weights[1])
    np.testing.assert_array_equal(kept.layer_attention(1), weights[1])
    assert kept.nbytes == record.nbytes + weights.nbytes
    for query in ("readout", 5):
        np.testing.assert_allclose(kept.query_rows(2, query), record.query_rows(2, query), atol=1e-3)
        assert kept.query_rows(2, query).dtype == np.float32
    np.testing.assert_array_equal(kept.query_rows(2, 5), weights[2][:, 6].astype(np.float32))
    with pytest.raises(ValueError, match="^this capture kept its attention weights and has no scores"):
        kept.device_scores(0)
    warm = Derived(kept)  # its statistics and fusions from the kept float16 weights
    warm.warm()
    assert warm.layers_recomputed == record.num_layers  # each layer's weights read once, for the fusions
    for layer in range(record.num_layers):
        for got, want in zip(warm.layer_statistics(layer), record.layer_statistics(layer), strict=True):
            np.testing.assert_allclose(got, want, rtol=2e-3)
    np.testing.assert_allclose(warm.rollout("max", 0.5), record.rollout("max", 0.5), rtol=1e-6, atol=1e-9)


def test_the_defaults_are_the_mean_fusion_no_discard_and_the_readout():
    a = vitviz.analyze(tiny_vit(), random_image(32, 32, seed=49))
    np.testing.assert_array_equal(a.rollout(), a.rollout("mean", 0.0, None))
    assert not np.array_equal(a.rollout(), a.rollout("max"))
    torch.testing.assert_close(a.fused(), a.fused("mean"), rtol=0, atol=0)
    torch.testing.assert_close(a.percent_thresholds(), a.percent_thresholds("mean"), rtol=0, atol=0)
    np.testing.assert_array_equal(a.contribution_map(1), a.contribution_map(1, None, "readout"))
    assert a.inside_head(1, 2).query == 0
    np.testing.assert_array_equal(a.inside_head(1, 2).weights, a.inside_head(1, 2, "cls").weights)
    pool = vitviz.analyze(FAMILIES["siglip_vision"](), random_image(32, 32, seed=49))
    np.testing.assert_array_equal(pool.rollout_start()[0], pool.rollout_start("mean")[0])
    assert not np.array_equal(pool.rollout_start()[0], pool.rollout_start("max")[0])
    probe = pool.pool_attention.max(0).astype(np.float64)
    want = reference_rollout(reference_fused(pool.attentions, "max"), 0.2, probe / probe.sum(), ())
    np.testing.assert_allclose(pool.rollout("max", 0.2), want.reshape(4, 4), rtol=1e-5, atol=1e-7)


def test_the_dense_map_is_the_head_on_the_forwards_own_tokens_and_runs_no_forward():
    """The output that every view of an analysis draws is the head on that very forward's final tokens: transformers'
    own final tokens (after its final norm), decoded in float64 here. Made when asked, it runs no forward (the public
    counter); captured, it is the same map."""
    import copy

    model = tiny_dense()
    image = random_image(40, 56, seed=50)
    record = vitviz.analyze(model, image, longest=56)
    assert record.grid == (5, 7) and model.forwards == 1
    made = record.dense_map()
    assert model.forwards == 1 and made.shape == (40, 56)
    net64, head64 = copy.deepcopy(model.net).double(), copy.deepcopy(model.dense_head).double()
    with torch.no_grad():
        last = net64(pixel_values=torch.from_numpy(record.pixel_values).double()).last_hidden_state  # normed
        patches = last[:, 1:].reshape(1, 5, 7, -1).permute(0, 3, 1, 2)
        want = head64(patches, (40, 56))[0, 0].numpy()
    np.testing.assert_allclose(made, want, atol=1e-5)
    home = model.dense_map_of(image, (40, 56))  # the head at its home input, the other forward: not this map
    assert model.forwards == 2 and np.abs(home - want).max() > 1e-3
    captured = vitviz.analyze(model, image, longest=56, dense=True)
    assert model.forwards == 3 and captured.captured_dense  # one forward, the map captured with it
    np.testing.assert_allclose(captured.dense_map(), want, atol=1e-5)


def test_a_fusion_recomputes_each_layer_on_the_models_device_never_through_host_arrays(monkeypatch):
    """A fusion's layers are recomputed where the model runs (`device_attention`) and stay there: no tensor is
    made a host array meanwhile (on a GPU that round trip waited for every other user's queued work). They are
    transformers' own weights, rounded to float16 as a capture is."""
    model = tiny_vit()
    a = vitviz.analyze(model, random_image(32, 32, seed=35))
    own = reference_outputs(model, a.pixel_values).attentions  # independent: transformers' forward

    def refused(*args, **kwargs):
        raise AssertionError("a tensor made a host array during a fusion")

    monkeypatch.setattr(torch.Tensor, "numpy", refused)
    fused = {fusion: a.fused(fusion) for fusion in maps.HEAD_FUSIONS}
    monkeypatch.undo()
    for fusion, got in fused.items():
        expected = torch.stack([maps.fuse_heads(w.half(), fusion)[0] for w in own])
        torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=1e-4, msg=fusion)
    assert a.device_attention(1).dtype == torch.float16
