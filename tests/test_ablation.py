"""vitviz.ablation: each ablation against a float64 reference written from the model's own modules, on every tiny
family and on the embedded model; every head of a layer off against the sub-layer reduced to its bias; hidden keys
against a softmax recomputed by hand; the record's names and its errors."""

from __future__ import annotations

import copy
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import random_image, tiny_siglip_vision, tiny_vit

import vitviz
from vitviz import whatif_words
from vitviz.ablation import Ablation, ablate
from vitviz.capture import model_input
from vitviz.methods import absent_input

IMAGE = random_image(40, 48, seed=3)
SIZE = 48  # a 5 × 6 grid of 8 px patches on the tiny models


def double_twin(model: vitviz.VitModel) -> vitviz.VitModel:
    """The same model in float64, wrapped anew: the reference's modules, none of vitviz's hooks on them."""
    head = None if model.dense_head is None else copy.deepcopy(model.dense_head).double()
    return vitviz.wrap(copy.deepcopy(model.net).double(), model.name, head)


def reference_ablated(model: vitviz.VitModel, pixel_values: np.ndarray, layer: int, head: int, mode: str):
    """transformers' forward in float64 with head `head` of `layer` zeroed (or set to its mean over the tokens) by a
    pre-hook of this test's own on the real output projection."""
    twin = double_twin(model)
    dh = twin.layer_parts(layer).o.in_features // twin.num_heads
    cut = slice(head * dh, (head + 1) * dh)

    def switch(_module, args):
        x = args[0].clone()
        x[..., cut] = 0 if mode == "zero" else x[..., cut].mean(1, keepdim=True)
        return (x,)

    hook = twin.layer_parts(layer).o.register_forward_pre_hook(switch)
    extra = {"interpolate_pos_encoding": True} if twin.fixed_size else {}
    try:
        with torch.no_grad():
            out = twin.family.runner(twin.net)(
                pixel_values=torch.from_numpy(pixel_values).double(), output_hidden_states=True, **extra
            )
    finally:
        hook.remove()
    return twin, out


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_an_ablated_head_equals_a_float64_reference_on_every_family(family, mode) -> None:
    _, model = family
    layer, head = model.num_layers - 2, 1
    a = ablate(model, IMAGE, heads=[(layer, head)], mode=mode, longest=SIZE)
    twin, ref = reference_ablated(model, a.pixel_values, layer, head, mode)
    clean_out = twin.reference_forward(torch.from_numpy(a.pixel_values).double())
    with torch.no_grad():
        tokens = twin.final_norm(ref.hidden_states[-1])[0].numpy()
        clean = twin.final_norm(clean_out.hidden_states[-1])
    np.testing.assert_allclose(a.hidden_states, torch.stack(ref.hidden_states)[:, 0].numpy(), atol=2e-5)
    np.testing.assert_allclose(a.tokens, tokens, atol=2e-5)
    assert np.abs(tokens - clean[0].numpy()).max() > 1e-3  # the ablation changed what the test compares
    if a.logits is not None:
        np.testing.assert_allclose(a.logits, ref.logits[0].numpy(), atol=2e-5)
    with torch.no_grad():  # the reading in float64 differs from float32's by less than the noise the sentence allows
        reading = a.output_read.reading(twin, clean_out, tuple(a.pixel_values.shape[2:]), IMAGE.shape[:2])
        assert abs(float(reading.of_output(ref)[0]) - a.after) < a.noise


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_an_ablated_head_of_the_embedded_model_equals_a_float64_reference(embedded, coffee, mode) -> None:
    a = ablate(embedded, coffee, heads=[(9, 3)], mode=mode, longest=224)
    twin, ref = reference_ablated(embedded, a.pixel_values, 9, 3, mode)
    with torch.no_grad():
        dense = twin.dense_map(ref.hidden_states[-1], a.grid, tuple(a.pixel_values.shape[2:]))[0, 0].numpy()
        tokens = twin.final_norm(ref.hidden_states[-1])[0].numpy()
    np.testing.assert_allclose(a.tokens, tokens, atol=1e-4)
    np.testing.assert_allclose(a.dense_map(), dense, atol=1e-5)
    assert np.abs(a.dense_map() - a.baseline.dense_map()).max() > 1e-3
    assert abs(a.after - float((dense * a.baseline.dense_map()).sum() / a.baseline.dense_map().sum())) < a.noise


def test_every_head_of_a_layer_off_leaves_only_the_projections_bias(family) -> None:
    _, model = family
    layer = 1
    with torch.no_grad():  # random models start with a zero bias: give it one to be left
        model.layer_parts(layer).o.bias.normal_(std=0.5, generator=torch.Generator().manual_seed(0))
    a = ablate(model, IMAGE, heads=[(layer, None)], longest=SIZE)
    x = torch.from_numpy(a.hidden_states[layer]).double()
    with torch.no_grad():
        twin = double_twin(model).layer_parts(layer)
        y = x + twin.scale1(twin.o.bias)
        expected = y + twin.scale2(twin.mlp(twin.norm2(y)))
    np.testing.assert_allclose(a.hidden_states[layer + 1], expected.numpy(), atol=2e-5)
    assert np.abs(a.hidden_states[layer + 1] - a.baseline.hidden_states[layer + 1]).max() > 1e-3


def test_a_skipped_layer_passes_its_tokens_and_an_mlp_off_adds_only_attention(family) -> None:
    _, model = family
    a = ablate(model, IMAGE, layers=[1], longest=SIZE)
    np.testing.assert_array_equal(a.hidden_states[2], a.hidden_states[1])
    np.testing.assert_array_equal(a.hidden_states[1], a.baseline.hidden_states[1])
    a = ablate(model, IMAGE, mlp=[0], longest=SIZE)
    parts = double_twin(model).layer_parts(0)
    x = torch.from_numpy(a.hidden_states[0]).double()[None]
    with torch.no_grad():
        expected = x + parts.scale1(parts.attention(parts.norm1(x))[0])
    np.testing.assert_allclose(a.hidden_states[1], expected[0].numpy(), atol=2e-5)


def hand_softmax(model: vitviz.VitModel, tokens: np.ndarray, layer: int, hidden: list[int]) -> np.ndarray:
    """[H,N] float64 every query's attention in `layer`, from the tokens entering it [N,D], keys `hidden` masked."""
    parts = double_twin(model).layer_parts(layer)
    heads = model.num_heads
    with torch.no_grad():
        u = parts.norm1(torch.from_numpy(tokens).double())
        q, k = (p(u).reshape(len(u), heads, -1).transpose(0, 1) for p in (parts.q, parts.k))
        scores = q @ k.transpose(1, 2) / np.sqrt(q.shape[-1])
        scores[..., hidden] = -np.inf
        return torch.softmax(scores, -1).numpy()


def test_hidden_keys_get_no_weight_and_the_rest_are_a_softmax_without_them(family) -> None:
    _, model = family
    patches = [0, 7, 8, 29]
    a = ablate(model, IMAGE, patches=patches, longest=SIZE)
    hidden = [model.n_prefix + p for p in patches]
    kept = [i for i in range(a.num_tokens) if i not in hidden]
    for layer in range(model.num_layers):
        weights = a.layer_attention(layer).astype(np.float64)
        assert not weights[..., hidden].any()
        np.testing.assert_allclose(weights[..., kept].sum(-1), 1, atol=2e-3)  # float16, as every capture keeps them
        np.testing.assert_allclose(weights, hand_softmax(model, a.hidden_states[layer], layer, hidden), atol=1e-3)
    if a.pool_attention is not None:  # an attention-pool's probe may not attend to them either
        assert not a.pool_attention[:, hidden].any()
        np.testing.assert_allclose(a.pool_attention.sum(-1), 1, atol=1e-5)


def test_hidden_keys_of_the_embedded_model(embedded, coffee) -> None:
    a = ablate(embedded, coffee, patches=list(range(20, 60)), longest=224)
    hidden = [1 + p for p in range(20, 60)]
    layer = 10
    weights = a.layer_attention(layer).astype(np.float64)
    assert not weights[..., hidden].any()
    np.testing.assert_allclose(weights, hand_softmax(embedded, a.hidden_states[layer], layer, hidden), atol=1e-3)


def test_blurred_patches_change_only_their_pixels(family) -> None:
    _, model = family
    a = ablate(model, IMAGE, patches=[0, 13], patch_mode="blur", longest=SIZE)
    x = model_input(model, IMAGE, SIZE)
    blur = absent_input("blurred", IMAGE, torch.from_numpy(x), model).numpy()
    p = model.patch_size
    changed = np.zeros(x.shape[2:], bool)
    for patch in (0, 13):
        r, c = divmod(patch, a.grid[1])
        changed[r * p : (r + 1) * p, c * p : (c + 1) * p] = True
    np.testing.assert_array_equal(a.pixel_values[..., ~changed], x[..., ~changed])
    np.testing.assert_array_equal(a.pixel_values[..., changed], blur[..., changed])
    np.testing.assert_array_equal(a.baseline.pixel_values, x)


def test_the_ablation_is_named_for_the_screen() -> None:
    model = tiny_vit()
    a = Ablation(heads=((2, 3), (0, None)), mlp=(1,), layers=(2,), patches=(4, 5, 6))
    assert a.names(model) == [
        "every head of layer 0, zeroed",
        "layer 2, head 3, zeroed",
        "layer 1's MLP off",
        "layer 2 skipped",
        "3 patches hidden as keys",
    ]
    assert a.phrase(model) == (
        "switching off every head of layer 0, switching off layer 2's head 3, switching off "
        "layer 1's MLP, skipping layer 2 and hiding 3 patches as keys"
    )
    every = Ablation(heads=((1, 2), (1, None), (1, 2)), patches=(3, 1, 3))
    assert every.heads == ((1, None), (1, 2)) and every.patches == (1, 3)
    assert every.names(model) == ["every head of layer 1, zeroed", "2 patches hidden as keys"]
    mean = Ablation(heads=((1, 0), (1, 2)), mode="mean", patches=(1,), patch_mode="blur")
    replaced = "replaced by its mean over the photo's tokens"
    assert mean.names(model) == [f"layer 1, head 0, {replaced}", f"layer 1, head 2, {replaced}", "1 patch blurred"]
    means = "their means over the photo's tokens"
    assert mean.phrase(model) == f"replacing layer 1's heads 0 and 2 by {means} and blurring 1 patch"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "nothing to ablate"),
        ({"heads": [(3, 0)]}, "layer 3 out of range: tiny-vit has 3 layers"),
        ({"heads": [(0, 4)]}, "head 4 out of range: tiny-vit has 4 heads a layer"),
        ({"heads": [0]}, "heads must be (layer, head) pairs"),
        ({"heads": [(0, 1.5)]}, "must be whole numbers"),
        ({"heads": [(0, 0)], "mode": "half"}, "unknown head mode 'half'"),
        ({"patches": [30]}, "patch 30 out of range: this photo has 30 patches"),
        ({"patches": [1], "patch_mode": "noise"}, "unknown patch mode 'noise'"),
        ({"mlp": [-1]}, "MLP layer -1 out of range"),
    ],
)
def test_bad_ablations_are_refused_with_their_reason(kwargs, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ablate(tiny_vit(), IMAGE, longest=SIZE, **kwargs)


def test_hiding_every_patch_of_a_model_without_prefix_tokens_is_refused() -> None:
    with pytest.raises(ValueError, match="no prefix token: hiding every patch"):
        ablate(tiny_siglip_vision(), IMAGE, patches=range(30), longest=SIZE)


def numbers(text: str) -> list[float]:
    return [float(t) for t in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", text)]


def test_the_sentence_quotes_the_change_and_its_direction(embedded, coffee) -> None:
    a = ablate(embedded, coffee, heads=[(9, None)], longest=224)
    said = whatif_words.ablation_words(a)
    assert said.startswith("Switching off every head of layer 9 ")
    verb = "raises" if a.change > 0 else "lowers"
    share = re.search(rf"{verb} the dense head's map where it marks your photo as salient .*? by ([\d.]+) %", said)
    assert share and float(share[1]) == pytest.approx(abs(a.relative) * 100, abs=0.5)
    assert f"from {a.before:.3g} to {a.after:.3g}" in said
    assert not a.within_noise and "within float32 rounding" not in said


def test_a_classifiers_sentence_quotes_its_probability() -> None:
    a = ablate(tiny_vit(), IMAGE, heads=[(1, 2)], longest=SIZE)
    said = whatif_words.ablation_words(a)
    index = a.output_read.index
    probs = [torch.softmax(torch.from_numpy(x), 0)[index].item() for x in (a.baseline.logits, a.logits)]
    quoted = re.search(r"its probability ([\d.]+) % → ([\d.]+) %", said)
    assert quoted and [float(q) for q in quoted.groups()] == pytest.approx([p * 100 for p in probs], abs=0.05)
    assert f"the logit of class {index}: class {index}" in said


def test_a_change_within_noise_is_said_to_be_one(embedded, coffee) -> None:
    a = ablate(embedded, coffee, heads=[(0, 0)], longest=224)
    quiet = replace(a, after=a.before + a.noise / 2)
    said = whatif_words.ablation_words(quiet)
    assert "within float32 rounding" in said and "raises" not in said and "lowers" not in said
    assert numbers(said.split("moves by ")[1])[0] == pytest.approx(a.noise / 2, rel=0.5)
    loud = whatif_words.ablation_words(replace(a, after=a.before + 3 * a.noise))
    assert "raises" in loud and "within float32 rounding" not in loud


def test_a_kept_baseline_gives_the_same_ablation_with_one_forward(embedded, coffee, monkeypatch) -> None:
    fresh = ablate(embedded, coffee, heads=[(9, 3)], longest=224)
    kept = vitviz.analyze(embedded, coffee, longest=224, roll=True)
    forwards = []
    forward = embedded.forward
    monkeypatch.setattr(embedded, "forward", lambda *a, **k: forwards.append(1) or forward(*a, **k))
    again = ablate(embedded, coffee, heads=[(9, 3)], longest=224, baseline=kept)
    assert len(forwards) == 1 and again.before == pytest.approx(fresh.before, abs=1e-6)
    assert again.after == fresh.after
    np.testing.assert_array_equal(again.baseline.dense_map(), fresh.baseline.dense_map())
    with pytest.raises(ValueError, match="another model's or another input's analysis"):
        ablate(embedded, coffee, heads=[(9, 3)], longest=112, baseline=kept)


@pytest.mark.parametrize("dense", [False, True])
def test_an_ablation_runs_the_dense_head_once_on_each_forward_it_has_no_map_of(embedded, coffee, monkeypatch, dense):
    """The map of each forward, the output's pixel weights and its reading before and after all come from one run
    of the dense head per forward: two with a baseline that holds no map, one with a baseline that `analyze(...,
    dense=True)` gave its map (the app's). The readings equal the head's own on each forward's tokens."""
    kept = vitviz.analyze(embedded, coffee, longest=224, dense=dense)
    runs = []
    head = embedded.dense_map
    monkeypatch.setattr(embedded, "dense_map", lambda *a, **k: runs.append(1) or head(*a, **k))
    w = ablate(embedded, coffee, heads=[(9, 3)], longest=224, baseline=kept)
    assert len(runs) == (1 if dense else 2)
    weights = w.baseline.dense_map()  # the salient region's weights: the unablated photo's map
    for analysis, said in ((w.baseline, w.before), (w, w.after)):
        assert said == pytest.approx(float((analysis.dense_map() * weights).sum() / weights.sum()), rel=1e-5)
