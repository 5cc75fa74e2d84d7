"""Attributions: Captum methods and transformer relevancy, checked against independent computations."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import FAMILIES, random_image, reference_outputs, tiny_vit

import vitviz
from vitviz.attributions import METHODS, attribute
from vitviz.outputs import Output
from vitviz.preprocess import prepare_input


def independent_score(model: vitviz.VitModel, out, target):
    """A class logit, or the norm of transformers' own pooled output (CLIP: the CLS token after the final norm;
    SigLIP: its attention-pool's output), else of the normalised CLS token."""
    if model.labels is not None:
        return out.logits[0, target]
    pooled = getattr(out, "pooler_output", None)
    return (pooled if pooled is not None else out.last_hidden_state[:, 0])[0].norm()


def pool_by_hand(model: vitviz.VitModel, last_hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SigLIP's attention-pooling head written out from its modules' weights: (pooled [B,D], the probe's
    attention per head [B,H,N], a leaf of the graph for relevancy's gradient)."""
    encoder = model.family.encoder(model.net)
    head, tokens = encoder.head, encoder.post_layernorm(last_hidden)
    mha, (b, n, d), h = head.attention, tokens.shape, model.num_heads
    wq, wk, wv = mha.in_proj_weight.chunk(3)
    bq, bk, bv = mha.in_proj_bias.chunk(3)
    q = (head.probe @ wq.T + bq).view(1, h, d // h).transpose(0, 1)  # [H,1,dh]
    k = (tokens @ wk.T + bk).view(b, n, h, d // h).transpose(1, 2)  # [B,H,N,dh]
    v = (tokens @ wv.T + bv).view(b, n, h, d // h).transpose(1, 2)
    weights = torch.softmax((q @ k.transpose(-1, -2)) / (d // h) ** 0.5, -1)[:, :, 0]  # [B,H,N]
    weights.retain_grad()
    mixed = mha.out_proj((weights[:, :, None] @ v).transpose(1, 2).reshape(b, 1, d))
    return (mixed + head.mlp(head.layernorm(mixed)))[:, 0], weights


def chefer_by_hand(model, attentions, probe=None) -> np.ndarray:
    """Chefer et al.'s rule in float64 loops, from attentions whose gradients backward() filled: R = I, then
    R += mean over heads of ReLU(grad ⊙ A) @ R per layer; read from the readout tokens' rows, or from the
    probe's own relevance row (an attention-pool has no residual path over the tokens). [P] over the patches."""
    n = attentions[0].shape[-1]

    def cam(attn: np.ndarray, grad: np.ndarray) -> np.ndarray:
        return sum(np.maximum(grad[h] * attn[h], 0) for h in range(len(attn))) / len(attn)

    rel = np.eye(n)
    for a in attentions:
        rel = rel + cam(a[0].detach().double().numpy(), a.grad[0].double().numpy()) @ rel
    if probe is not None:
        readout = cam(probe[0].detach().double().numpy(), probe.grad[0].double().numpy())
    else:
        readout = np.zeros(n)
        readout[list(model.readout.tokens)] = 1 / len(model.readout.tokens)
    return (readout @ rel)[model.n_prefix :]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_relevancy_equals_a_step_by_step_computation(name):
    model = FAMILIES[name]()
    image = random_image(40, 56, seed=3)
    r = attribute(model, image, "relevancy", longest=56)
    # independently: retain_grad + backward, then plain loops in float64
    x = torch.from_numpy(prepare_input(image, (40, 56), model.patch_size, model.mean, model.std))
    assert r.grid == (5, 7)
    extra = {"interpolate_pos_encoding": True} if model.fixed_size else {}
    out = model.family.runner(model.net)(pixel_values=x, output_attentions=True, output_hidden_states=True, **extra)
    for a in out.attentions:
        a.retain_grad()
    target = None if model.labels is None else int(out.logits[0].argmax())
    if model.readout.pool:
        pooled, probe = pool_by_hand(model, out.hidden_states[-1])
        np.testing.assert_allclose(pooled.detach().numpy(), out.pooler_output.detach().numpy(), atol=1e-5)
        pooled[0].norm().backward()
    else:
        independent_score(model, out, target).backward()
    expected = chefer_by_hand(model, out.attentions, probe if model.readout.pool else None).reshape(r.grid)
    np.testing.assert_allclose(r.raw, expected, rtol=1e-4, atol=1e-7)
    assert r.map.shape == image.shape[:2]


def truncated(model: vitviz.VitModel, layers: int) -> torch.nn.Module:
    """A float64 copy of the model that stops after `layers` blocks, its output head kept: transformers' own
    forward of it reads the output from that layer's tokens (the layer lens, computed independently)."""
    net = copy.deepcopy(model.net).double()
    del model.family.blocks(model.family.encoder(net))[layers:]
    return net


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_output_read_from_the_last_layer_is_the_models_own(name):
    model = FAMILIES[name]()
    x = torch.from_numpy(prepare_input(random_image(40, 56, seed=5), (40, 56), model.patch_size, model.mean, model.std))
    out = model.forward(x)
    ref = reference_outputs(model, x.numpy())
    with torch.inference_mode():
        lens = model.output_from(out.hidden_states[-1])
    expected = ref.logits if model.labels is not None else independent_readout(model, ref)
    np.testing.assert_allclose(lens.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def independent_readout(model: vitviz.VitModel, out) -> torch.Tensor:
    """[B,D] transformers' own pooled output, else its normalised CLS token (DINO's ViT has no pooler)."""
    pooled = getattr(out, "pooler_output", None)
    return pooled if pooled is not None else out.last_hidden_state[:, 0]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_legrad_equals_a_float64_computation_from_truncated_models(name):
    """Bousselham et al. (2024), eq. by eq.: for layer l, the model cut after l blocks gives s_l through its own
    output head; ReLU(ds_l/dA_l) averaged over heads and query rows, per key; the patches' values averaged over
    the layers."""
    model = FAMILIES[name]()
    # At init the final LayerNorm has weight 1 and bias 0, which makes a readout's norm sqrt(D) whatever the
    # tokens: its gradient would be float noise. Trained models have neither.
    with torch.no_grad():
        for p in model.family.final_norm(model.encoder).parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.5 + 1)
    image = random_image(40, 56, seed=6)
    r = attribute(model, image, "legrad", longest=56)
    x = torch.from_numpy(prepare_input(image, (40, 56), model.patch_size, model.mean, model.std)).double()
    extra = {"interpolate_pos_encoding": True} if model.fixed_size else {}
    whole = reference_outputs(model, x.float().numpy())
    target = None if model.labels is None else int(whole.logits[0].argmax())
    own = None if model.labels is not None else independent_readout(model, whole)[0].double()  # the photo's readout
    maps = []
    for layers in range(1, model.num_layers + 1):
        net = truncated(model, layers)
        out = model.family.runner(net)(pixel_values=x, output_attentions=True, output_hidden_states=True, **extra)
        # an encoder's output: the readout vector along the photo's own (`outputs.Output("readout")`)
        s = out.logits[0, target] if model.labels is not None else independent_readout(model, out)[0] @ own / own.norm()
        (g,) = torch.autograd.grad(s, out.attentions[-1])
        maps.append(g[0].clamp(min=0).mean((0, 1)).numpy())
    expected = np.mean(maps, 0)[model.n_prefix :].reshape(r.grid)
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(r.raw, expected, rtol=1e-5, atol=1e-7 * np.abs(expected).max())


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_runs_for_every_family(name, method):
    model = FAMILIES[name]()
    image = random_image(40, 72, seed=4)
    r = attribute(model, image, method, n_steps=8, longest=None if model.fixed_size else 72)
    assert r.map.shape == (40, 72) and r.map.dtype == np.float32 and np.isfinite(r.map).all()
    assert np.abs(r.map).max() > 0
    gh, gw = r.grid
    if not model.fixed_size:
        assert (gh, gw) == (5, 9), "the grid comes from pixels, never sqrt(N)"
    if method in ("grad_cam", "relevancy", "occlusion", "legrad"):
        assert r.raw.shape == (gh, gw)
    else:
        assert r.raw.shape == (1, 3, gh * model.patch_size, gw * model.patch_size)
    assert (r.delta is not None) == (method == "integrated_gradients")
    if model.labels is not None:
        assert r.target.startswith("the logit of class")
    else:
        assert "readout" in r.target


def test_occlusion_is_the_drop_when_a_patch_is_hidden():
    model = FAMILIES["vit"]()
    image = random_image(32, 32, seed=5)
    r = attribute(model, image, "occlusion", baseline="mean colour")
    x = torch.from_numpy(prepare_input(image, (32, 32), 8, model.mean, model.std))
    with torch.no_grad():
        logits = model.net(pixel_values=x).logits[0]
        target = int(logits.argmax())
        for row, col in [(0, 0), (1, 2), (3, 3)]:
            hidden = x.clone()
            hidden[:, :, row * 8 : row * 8 + 8, col * 8 : col * 8 + 8] = 0  # mean colour
            drop = float(logits[target] - model.net(pixel_values=hidden).logits[0, target])
            assert r.raw[row, col] == pytest.approx(drop, rel=1e-4, abs=1e-6)


@pytest.mark.slow
def test_integrated_gradients_completeness(embedded, coffee):
    """|delta| shrinks as n_steps grows and ends small against the sum of attributions."""
    deltas = []
    for steps in (4, 16, 64):
        r = attribute(embedded, coffee, "integrated_gradients", n_steps=steps, internal_batch_size=32)
        deltas.append(abs(r.delta))
    assert deltas[0] > deltas[1] > deltas[2]
    assert deltas[2] < 0.05 * abs(r.raw.sum())


def test_the_dense_output_is_the_map_where_salient_over_the_image_or_in_a_box(embedded, coffee):
    """By default the dense head's map weighted by itself on the photo (Σ m·m / Σ m); over the whole image, its
    mean; in a box, its mean there. Each names itself, and each makes another map."""
    salient = attribute(embedded, coffee, "saliency")
    whole = attribute(embedded, coffee, "saliency", output=Output("dense", region="image"))
    left = attribute(embedded, coffee, "saliency", box=(0, 0, 300, 400))  # left half of 600x400
    dense = embedded.dense_map_of(coffee, (224, 224)).astype(np.float64)
    assert salient.score == pytest.approx(float((dense * dense).sum() / dense.sum()), rel=1e-4)
    assert whole.score == pytest.approx(float(dense.mean()), rel=1e-4)
    assert left.score == pytest.approx(float(dense[:, :112].mean()), rel=1e-4)
    assert "inside the box" in left.target and "whole image" in whole.target and "salient" in salient.target
    assert salient.output == Output("dense") and left.output == Output("dense", box=(0, 0, 300, 400))
    assert not np.allclose(left.map, whole.map) and not np.allclose(salient.map, whole.map)


# Faithfulness (deletion) on the dense head's mean: hiding the 20 % of patches a method ranks highest
# lowers the target more than hiding random patches. Relevancy does not pass, even on the mean target
# (its top patches *raise* the mean: 0.457 -> 0.510, random 0.405), nor does Grad-CAM: they rank where
# attention routes information, unsigned. The README says so; a change that makes them pass fails here too.
FAITHFUL = {"integrated_gradients": True, "saliency": True, "occlusion": True, "relevancy": False, "grad_cam": False}


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(FAITHFUL))
def test_deletion_top_patches_lower_the_target_more_than_random(embedded, coffee, method):
    r = attribute(embedded, coffee, method, n_steps=32, internal_batch_size=32, output=Output("dense", region="image"))
    gh, gw = r.grid
    p = embedded.patch_size
    per_patch = r.raw if r.raw.ndim == 2 else r.raw[0].sum(0).reshape(gh, p, gw, p).sum((1, 3))
    x = torch.from_numpy(prepare_input(coffee, (224, 224), p, embedded.mean, embedded.std))
    k = gh * gw // 5

    def score_without(patches) -> float:
        hidden = x.clone()
        for i in patches:
            row, col = divmod(int(i), gw)
            hidden[:, :, row * p : row * p + p, col * p : col * p + p] = 0  # the mean colour
        out = embedded.forward(hidden)
        with torch.inference_mode():
            return float(embedded.dense_map(out.hidden_states[-1], (gh, gw), (224, 224)).mean())

    top = score_without(np.argsort(-per_patch.ravel())[:k])
    rng = np.random.default_rng(0)
    random = np.mean([score_without(rng.choice(gh * gw, k, replace=False)) for _ in range(5)])
    assert (r.score - top > r.score - random) == FAITHFUL[method], (r.score, top, random)


def test_bad_arguments_name_the_problem(embedded, coffee):
    with pytest.raises(ValueError, match="unknown attribution method"):
        attribute(embedded, coffee, "lime")
    with pytest.raises(ValueError, match="covers no pixels"):
        attribute(embedded, coffee, "saliency", box=(700, 10, 800, 20))
    with pytest.raises(ValueError, match="Grad-CAM layer"):
        attribute(embedded, coffee, "grad_cam", layer=12)
    with pytest.raises(ValueError, match="class index"):
        attribute(FAMILIES["vit"](), coffee, "saliency", target=99)


def test_relevancy_does_not_depend_on_torchs_default_dtype():
    """A notebook may set torch's default dtype to float64: relevancy's own tensors stay float32, and the
    map is the same (it failed with a float64 readout row against the float32 R)."""
    model, image = FAMILIES["vit"](), random_image(40, 56, seed=3)
    expected = attribute(model, image, "relevancy", longest=56).raw
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = attribute(model, image, "relevancy", longest=56).raw
    finally:
        torch.set_default_dtype(before)
    np.testing.assert_array_equal(got, expected)


def test_relevancy_keeps_the_identity_on_the_dense_head(embedded, coffee):
    """R = I + sum of gradient-weighted attention: on a mean (logit-sized) target the identity keeps a real
    share of the map, where the summed target gave values up to 1e18 and an identity share of 0.0 %."""
    r = attribute(embedded, coffee, "relevancy", output=Output("dense", region="image"))
    identity = r.raw.size  # each patch's row of I contributes 1 to the readout rows
    assert 0.5 < identity / r.raw.sum() <= 1.0
    assert r.raw.max() / r.raw.min() > 1.001  # and the gradient term still draws structure


def test_relevancy_of_a_box_reads_the_rows_of_the_patches_it_covers(embedded, coffee):
    """The dense head's mean inside a box: relevancy's answer is the sum of the covered patches' rows of R,
    each weighted by how much of the patch the box covers. Checked step by step, in float64."""
    h, w = coffee.shape[:2]  # 400 x 600
    r = attribute(embedded, coffee, "relevancy", box=(0, 0, 321, h))
    assert r.grid == (16, 16)
    # The box ends at x = 321 of 600, that is column 119.84 -> 120 of the 224-pixel input: patches in
    # columns 0..7 are covered, column 8 (pixels 112..125) for 8 of its 14 pixels, the rest not at all.
    cover = np.zeros(16)
    cover[:8], cover[8] = 1.0, 8 / 14
    x = torch.from_numpy(prepare_input(coffee, (224, 224), 14, embedded.mean, embedded.std))
    out = embedded.net(pixel_values=x, output_attentions=True, output_hidden_states=True)
    for a in out.attentions:
        a.retain_grad()
    dense = embedded.dense_map(out.hidden_states[-1], (16, 16), (224, 224))[0, 0]
    dense[:, :120].mean().backward()
    n, k = out.attentions[0].shape[-1], embedded.n_prefix
    rel = np.eye(n)
    for a in out.attentions:
        attn, grad = a[0].detach().double().numpy(), a.grad[0].double().numpy()
        rel = rel + np.maximum(grad * attn, 0).mean(axis=0) @ rel
    weights = np.zeros(n)
    weights[k:] = np.tile(cover, 16)  # row-major patches: the same columns in every row
    expected = (weights @ rel)[k:].reshape(16, 16)
    np.testing.assert_allclose(r.raw, expected, rtol=2e-4, atol=1e-9)
    assert r.score == pytest.approx(float(dense[:, :120].mean().detach()), rel=1e-5)


@pytest.mark.parametrize("baseline", ["blurred", "black", "mean colour"])
def test_integrated_gradients_starts_from_the_baseline_it_names(baseline):
    """sum(attributions) - delta = f(x) - f(baseline), with the baseline built here independently: an
    ignored, mirrored or wrong baseline changes f(baseline) and fails."""
    import cv2

    model = tiny_vit()
    rgb = random_image(40, 56, seed=3)
    r = attribute(model, rgb, "integrated_gradients", target=2, baseline=baseline, n_steps=8)
    h, w = 32, 32  # the tiny classifier's native input
    if baseline == "black":
        absent = prepare_input(np.zeros((h, w, 3), np.uint8), (h, w), 8, model.mean, model.std)
    elif baseline == "mean colour":
        absent = np.zeros((1, 3, h, w), np.float32)  # the normalisation's mean is 0
    else:
        small = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
        absent = prepare_input(cv2.GaussianBlur(small, (0, 0), sigmaX=w / 16), (h, w), 8, model.mean, model.std)
    x = prepare_input(rgb, (h, w), 8, model.mean, model.std)

    def f(pixels: np.ndarray) -> float:
        return float(model.forward(torch.from_numpy(pixels)).logits[0, 2])

    assert float(r.raw.sum()) - r.delta == pytest.approx(f(x) - f(absent), rel=1e-4, abs=1e-6)


def test_the_rollout_beside_an_attribution_reads_the_attributions_input(embedded, coffee):
    """Like for like: the embedded dense head's 224x224 input, not the 448 analysis."""
    from vitviz.attributions import input_analysis

    same = input_analysis(embedded, coffee)
    assert same.pixel_values.shape == (1, 3, 224, 224) and same.grid == (16, 16)
    r = attribute(embedded, coffee, "saliency")
    assert r.grid == same.grid


WORDS = ["[UNK]", "[PAD]", "a", "dog", "cat", "photo", "of"]  # a word-level tokenizer for the tiny text towers


def word_tokenizer():
    """A real transformers tokenizer, built offline: one id per word of WORDS."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", model_max_length=8)


def with_text(name: str, ids: list[int], image: np.ndarray):
    """transformers' own full forward of a CLIP or SigLIP model on the text and the image (its vision
    attentions kept for gradients), and that input."""
    model = FAMILIES[name]()
    x = torch.from_numpy(prepare_input(image, (40, 56), model.patch_size, model.mean, model.std))
    out = model.net(
        input_ids=torch.tensor([ids]),
        pixel_values=x,
        output_attentions=True,
        output_hidden_states=True,
        interpolate_pos_encoding=True,
    )
    return model, x, out


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_the_text_targets_relevancy_equals_chefers_rule_in_float64(name):
    """CLIP relevancy (Chefer et al. 2021): the gradient of transformers' own logits_per_image (the full model's
    forward, text tower and all) with respect to the vision tower's attentions, then the rule in float64 loops."""
    image, ids = random_image(40, 56, seed=3), [0, 5, 6, 3, 2]
    model, x, out = with_text(name, ids, image)
    r = attribute(model, image, "relevancy", longest=56, text=ids)
    vision = out.vision_model_output
    for a in vision.attentions:
        a.retain_grad()
    logit = out.logits_per_image[0, 0]
    assert r.score == pytest.approx(float(logit.detach()), rel=1e-4, abs=1e-5)
    assert r.target == f"the image-text similarity with the token ids {ids} ({model.family.name}'s logit)"
    if model.readout.pool:  # the probe's weights as a leaf; the logit from them, checked against transformers'
        pooled, probe = pool_by_hand(model, vision.hidden_states[-1])
        cosine = torch.nn.functional.normalize(pooled, dim=-1) @ out.text_embeds.T
        logit = (cosine * model.net.logit_scale.exp() + model.net.logit_bias)[0, 0]
        assert float(logit) == pytest.approx(float(out.logits_per_image[0, 0]), rel=1e-5, abs=1e-6)
    logit.backward()
    expected = chefer_by_hand(model, vision.attentions, probe if model.readout.pool else None).reshape(r.grid)
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(r.raw, expected, rtol=1e-4, atol=1e-7)
    other = attribute(model, image, "relevancy", longest=56, text=[0, 4, 2])  # another text, another map
    assert not np.allclose(other.raw, r.raw)


@pytest.mark.parametrize("name", ["clip", "siglip"])
def test_integrated_gradients_of_a_text_target_reports_its_delta(name):
    """IG's convergence delta is sum(attributions) - (f(image) - f(black)), with f transformers' own
    logits_per_image, and shrinks with more steps."""
    image, ids = random_image(40, 56, seed=4), [0, 5, 3, 2]
    model, x, out = with_text(name, ids, image)
    black = prepare_input(np.zeros_like(image), (40, 56), model.patch_size, model.mean, model.std)
    _, _, dark = with_text(name, ids, np.zeros_like(image))
    np.testing.assert_allclose(dark.vision_model_output.pooler_output.detach().numpy().shape[0], 1)
    assert np.abs(black).max() > 0
    gap = float(out.logits_per_image[0, 0] - dark.logits_per_image[0, 0])
    deltas = []
    for steps in (4, 64):
        r = attribute(model, image, "integrated_gradients", longest=56, text=ids, baseline="black", n_steps=steps)
        assert r.delta == pytest.approx(float(r.raw.sum()) - gap, rel=1e-3, abs=1e-5)
        deltas.append(abs(r.delta))
    assert deltas[1] < deltas[0]


def test_a_text_is_tokenized_by_the_models_tokenizer_and_bad_texts_name_the_problem(tmp_path):
    model, image = FAMILIES["clip"](), random_image(40, 56, seed=3)
    model.tokenizer = word_tokenizer()
    ids = model.tokenizer(["a photo of a dog"])["input_ids"][0]
    assert ids == [2, 5, 6, 2, 3]
    words = attribute(model, image, "saliency", longest=56, text="a photo of a dog")
    np.testing.assert_allclose(words.raw, attribute(model, image, "saliency", longest=56, text=ids).raw)
    assert '"a photo of a dog"' in words.target
    with pytest.raises(ValueError, match="no text tower"):
        attribute(FAMILIES["clip_vision"](), image, "saliency", longest=56, text="a dog")
    with pytest.raises(ValueError, match="the text is empty"):
        attribute(model, image, "saliency", longest=56, text="  ")
    with pytest.raises(ValueError, match=r"token ids must be .* in \[0, 99\)"):
        attribute(model, image, "saliency", longest=56, text=[0, 120])
    folder = tmp_path / "clip"
    FAMILIES["clip"]().net.save_pretrained(folder)
    saved = vitviz.load_model(str(folder), device="cpu")
    with pytest.raises(ValueError, match="has no tokenizer files"):
        attribute(saved, image, "saliency", longest=56, text="a dog")


def test_faithfulness_follows_the_text_target():
    """The deletion curve starts at the attribution's own score: the image-text logit, not the readout norm."""
    from vitviz.deletion import faithfulness

    model, image, ids = FAMILIES["siglip"](), random_image(40, 56, seed=3), [0, 5, 2]
    r = attribute(model, image, "saliency", longest=56, text=ids)
    f = faithfulness(model, image, "saliency", longest=56, text=ids, steps=2, random_orders=1)
    assert f.deletion[0] == pytest.approx(r.score, rel=1e-4, abs=1e-6)
    assert f.target == "the similarity with the text"


@pytest.mark.parametrize("region", ["image", "salient"])
def test_legrad_through_a_dense_head_equals_a_float64_computation(region):
    """The embedded model's kind of target: a dense head's map, averaged over the image or weighted by its own map
    on the photo (m0, the last layer's). LeGrad's s_l is that head applied to each layer's normed patch tokens at
    the input's size; written here with the head's module in float64."""
    import transformers as tf
    from conftest import TINY

    from vitviz.embedded import DenseHead

    torch.manual_seed(11)
    net = tf.Dinov2Model(tf.Dinov2Config(**{**TINY, "patch_size": 8}))
    with torch.no_grad():
        for p in net.layernorm.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.5 + 1)
    model = vitviz.wrap(net, "tiny-dense", dense_head=DenseHead(TINY["hidden_size"]))
    image = random_image(40, 56, seed=6)
    r = attribute(model, image, "legrad", longest=56, output=Output("dense", region=region))
    x = torch.from_numpy(prepare_input(image, (40, 56), 8, model.mean, model.std)).double()
    net64, head64 = copy.deepcopy(net).double(), copy.deepcopy(model.dense_head).double()
    out = net64(pixel_values=x, output_attentions=True, output_hidden_states=True)

    def head(hidden):
        return head64(net64.layernorm(hidden)[:, 1:].reshape(1, 5, 7, -1).permute(0, 3, 1, 2), (40, 56))

    weights = head(out.hidden_states[-1]).detach() if region == "salient" else torch.ones(1, 1, 40, 56).double()
    maps = []
    for layer, attention in enumerate(out.attentions):
        s = (head(out.hidden_states[layer + 1]) * weights).sum() / weights.sum()
        (g,) = torch.autograd.grad(s, attention, retain_graph=True)
        maps.append(g[0].clamp(min=0).mean((0, 1)).numpy())
    expected = np.mean(maps, 0)[1:].reshape(5, 7)
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(r.raw, expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())
