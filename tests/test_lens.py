"""The layer lens, checked against transformers' own forward of the model cut after each layer."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import FAMILIES, random_image, tiny_dense

import vitviz
from vitviz.lens import ClassLens, DenseLens, ReadoutLens, layer_lens
from vitviz.outputs import ClassLogit, DenseMap, Output, ReadoutVector
from vitviz.preprocess import prepare_input


def cut_after(model, layers: int) -> torch.nn.Module:
    net = copy.deepcopy(model.net)
    del model.family.blocks(model.family.encoder(net))[layers:]
    return net


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_layer_reads_as_the_model_cut_after_it(name):
    model = FAMILIES[name]()
    image = random_image(40, 56, seed=9)
    lens = layer_lens(model, image, longest=None if model.fixed_size else 56)
    size = (32, 32) if model.fixed_size else (40, 56)
    x = torch.from_numpy(prepare_input(image, size, model.patch_size, model.mean, model.std))
    extra = {"interpolate_pos_encoding": True} if model.fixed_size else {}
    readings = []
    for layers in range(1, model.num_layers + 1):
        with torch.no_grad():
            out = model.family.runner(cut_after(model, layers))(pixel_values=x, **extra)
        if model.labels is not None:
            readings.append(torch.softmax(out.logits[0], -1))
        else:
            pooled = getattr(out, "pooler_output", None)
            readings.append(pooled[0] if pooled is not None else out.last_hidden_state[0, 0])
    assert lens.layers == model.num_layers
    if model.labels is not None:
        assert isinstance(lens, ClassLens)
        np.testing.assert_allclose(lens.values, torch.stack(readings).numpy(), atol=1e-5)
    else:
        assert isinstance(lens, ReadoutLens)
        cos = [float(torch.nn.functional.cosine_similarity(r, readings[-1], 0)) for r in readings]
        np.testing.assert_allclose(lens.values, cos, atol=1e-5)
        assert lens.values[-1] == pytest.approx(1.0)


@pytest.mark.slow
def test_the_dense_lens_is_the_dense_head_on_each_cut_model(embedded, coffee):
    lens = layer_lens(embedded, coffee)
    x = torch.from_numpy(prepare_input(coffee, (224, 224), 14, embedded.mean, embedded.std))
    assert isinstance(lens, DenseLens) and lens.values.shape == (12, 224, 224)
    np.testing.assert_allclose(lens.values[-1], embedded.dense_map_of(coffee, (224, 224)), atol=1e-5)
    for layers in (1, 6):
        with torch.no_grad():
            tokens = cut_after(embedded, layers)(pixel_values=x).last_hidden_state  # after transformers' own norm
            grid = tokens[:, 1:].reshape(1, 16, 16, -1).permute(0, 3, 1, 2)
            np.testing.assert_allclose(lens.values[layers - 1], embedded.dense_head(grid, (224, 224))[0, 0], atol=1e-5)


def test_settles_is_the_first_layer_from_which_the_reading_stays():
    probs = np.array([[0.6, 0.4], [0.3, 0.7], [0.6, 0.4], [0.2, 0.8], [0.1, 0.9]])
    lens = ClassLens(probs, labels=["cat", "dog"])
    assert lens.settles() == 3
    said = lens.sentence()
    assert "**dog**" in said and "from layer 3 on" in said and "80%" in said and "90% at layer 4" in said
    assert ClassLens(probs[[1, 3, 4]], labels=["cat", "dog"]).settles() == 0
    readout = ReadoutLens(np.array([0.2, 0.95, 0.5, 0.97, 1.0]))
    assert readout.settles() == 3  # within 10 % of the largest gap (0.8): 0.03 and 0
    assert "from layer 3 on" in readout.sentence()
    late = DenseLens(np.array([[[0.0]], [[0.5]], [[1.0]]]))
    assert (
        late.settles() == 2
        and "layer 1's still differs from it by 50% as much as layer 0's, the most different one" in late.sentence()
    )


def test_the_lens_follows_its_output_record_and_names_it():
    """Change the output and the readings and the sentence change with it: a class other than the top one, the
    dense map over a box, over the salient region or over the image, each against its own weighted mean."""
    probs = np.array([[0.6, 0.4], [0.3, 0.7], [0.2, 0.8]])
    top = ClassLens(probs, labels=["cat", "dog"])
    cat = ClassLens(probs, ClassLogit(0), "the logit of class 0: cat", ["cat", "dog"])
    np.testing.assert_allclose(top.readings(), probs[:, 1])
    np.testing.assert_allclose(cat.readings(), probs[:, 0])
    assert "follows **the top class's logit**" in top.sentence()
    said = cat.sentence()
    assert "follows **the logit of class 0: cat**: its probability is 60% at layer 0 and 20% at layer 2" in said
    rng = np.random.default_rng(0)
    maps = rng.random((3, 4, 6)).astype(np.float32)
    box = np.zeros((4, 6), np.float32)
    box[1:3, 2:5] = 1
    for output, weights in (
        (DenseMap(), maps[-1]),
        (DenseMap(region="image"), np.ones((4, 6))),
        (DenseMap(box=(2, 1, 5, 3)), box),
    ):
        lens = DenseLens(maps, output, output.short())
        if output.box is not None:
            lens = DenseLens(maps, output, output.short(), weights=output.weights(maps[-1], (4, 6)))
        expected = [(m.astype(np.float64) * weights).sum() / weights.sum() for m in maps]
        np.testing.assert_allclose(lens.readings(), expected, rtol=1e-6)
        said = lens.sentence()
        assert f"follows **{output.short()}**: it reads {expected[0]:.2f} at layer 0 and {expected[-1]:.2f}" in said


@pytest.mark.slow
def test_the_embedded_models_lens_follows_the_readout_when_asked(embedded, coffee):
    """On the dense model, the readout output's lens is the CLS vector's cosine with the last layer's (from the cut
    models' own final-normed CLS token), and its sentence names the readout, not the dense map."""
    lens = layer_lens(embedded, coffee, output=ReadoutVector())
    x = torch.from_numpy(prepare_input(coffee, (224, 224), 14, embedded.mean, embedded.std))
    with torch.no_grad():
        cls = [cut_after(embedded, n)(pixel_values=x).last_hidden_state[0, 0] for n in (3, 12)]
    cos = float(torch.nn.functional.cosine_similarity(cls[0], cls[1], 0))
    assert isinstance(lens, ReadoutLens) and lens.values[2] == pytest.approx(cos, abs=1e-5)
    assert "follows **the readout vector (the CLS token" in lens.sentence()
    assert f"cosine of {lens.values[0]:.2f} with the last layer" in lens.sentence()
    with pytest.raises(ValueError, match="has no classes"):
        layer_lens(embedded, coffee, output=Output("class"))


def test_the_lens_of_an_analysis_reads_its_own_forwards_layers_and_runs_none():
    """On the analysis' own hidden states: each layer's dense map is the head on that layer's captured tokens after
    the final norm, the last one the analysis' own output, and no forward runs."""

    from vitviz.lens import analysis_lens

    model = tiny_dense()
    a = vitviz.analyze(model, random_image(40, 56, seed=9), longest=56)
    lens = analysis_lens(a)
    assert model.forwards == 1 and isinstance(lens, DenseLens) and lens.values.shape == (3, 40, 56)
    np.testing.assert_allclose(lens.values[-1], a.dense_map(), atol=1e-6)
    with torch.no_grad():
        tokens = model.net.layernorm(torch.from_numpy(a.hidden_states[1]))[1:]
        first = model.dense_head(tokens.reshape(1, 5, 7, -1).permute(0, 3, 1, 2), (40, 56))[0, 0].numpy()
    np.testing.assert_allclose(lens.values[0], first, atol=1e-5)
    assert lens.values[-1].max() - lens.values[-1].min() > 0.3 and np.abs(lens.values[0] - lens.values[-1]).max() > 0.01
