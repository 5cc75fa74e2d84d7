"""Inside a head: the recomputed attention checked against transformers' own attentions and against
forward hooks on the real modules, for every family."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import FAMILIES, random_image, reference_outputs, tiny_dpt

import vitviz
from vitviz import inside


def sharpened(name: str) -> vitviz.VitModel:
    """A tiny random model whose attention is far from uniform (so a wrong sqrt(d) shows) and whose
    LayerScale, where the family has one, is not the identity it starts as."""
    model = FAMILIES[name]()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for layer in range(model.num_layers):
            parts = model.layer_parts(layer)
            parts.q.weight.mul_(12)
            parts.k.weight.mul_(12)
            for scale in (parts.scale1, parts.scale2) if parts.layer_scale else ():
                scale.lambda1.copy_(torch.rand(scale.lambda1.shape, generator=gen) + 0.5)
    return model


def token_queries(a: vitviz.Analysis) -> tuple:
    """CLS where the model has one, the first patch and the last."""
    return ("cls",) * a.model.has_cls + (0, a.grid[0] * a.grid[1] - 1)


def first(out) -> torch.Tensor:
    """A module's output (a tensor, or a tuple led by one) for the batch's first image."""
    return (out[0] if isinstance(out, tuple) else out)[0]


@pytest.fixture(params=sorted(FAMILIES))
def case(request):
    model = sharpened(request.param)
    a = vitviz.analyze(model, random_image(40, 56, seed=3), longest=56)
    return model, a


def hooked(model: vitviz.VitModel, pixel_values: np.ndarray, layer: int) -> dict[str, torch.Tensor]:
    """transformers' own forward, with what enters the block, what the attention module returns and
    what leaves the block caught by forward hooks on the real modules."""
    block, parts, seen = model.blocks[layer], model.layer_parts(layer), {}

    def entering(_m, args, kwargs, out):
        seen.update(x=(args[0] if args else kwargs["hidden_states"])[0], y=first(out))

    hooks = [
        block.register_forward_hook(entering, with_kwargs=True),
        parts.attention.register_forward_hook(lambda m, args, out: seen.update(attn=first(out))),
        parts.v.register_forward_hook(lambda m, args, out: seen.update(v=out[0])),
    ]
    try:
        seen["attentions"] = reference_outputs(model, pixel_values).attentions[layer][0]
    finally:
        for h in hooks:
            h.remove()
    return seen


def test_softmax_of_the_recomputed_scores_is_the_captured_attention(case):
    model, a = case
    heads, width = model.num_heads, model.config.hidden_size
    assert a.layer_attention(0)[0].std() > 1e-3, "the test model's attention should be far from uniform"
    for layer in range(model.num_layers):
        truth = reference_outputs(model, a.pixel_values).attentions[layer][0].numpy()
        for head in range(heads):
            for query in token_queries(a):
                d = a.inside_head(layer, head, query)
                q = a.query_index(query)
                assert d.head_width == width // heads
                np.testing.assert_allclose(d.scores, d.k @ d.q / np.sqrt(width // heads), rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(d.weights, truth[head, q], atol=2e-3, rtol=1e-2)
                np.testing.assert_allclose(d.weights.sum(), 1.0, atol=1e-5)
                np.testing.assert_allclose(d.output, d.weights @ d.v, rtol=1e-4, atol=1e-5)


def test_heads_through_the_output_projection_give_the_attention_sub_layer(case):
    model, a = case
    heads = model.num_heads
    for layer in range(model.num_layers):
        seen = hooked(model, a.pixel_values, layer)
        o_proj = model.layer_parts(layer).o
        dh = model.config.hidden_size // heads
        for query in token_queries(a):
            q = a.query_index(query)
            parts = [a.inside_head(layer, h, query) for h in range(heads)]
            joined = torch.from_numpy(np.concatenate([d.output for d in parts]))
            with torch.no_grad():
                out = o_proj(joined).numpy()
            truth = seen["attn"][q].numpy()
            np.testing.assert_allclose(out, truth, atol=1e-2 * np.abs(truth).max())
            # weight × value norm: the captured weights times ||W_O,h v_j|| from the hooked v_proj output
            w = o_proj.weight.detach().numpy()
            for h, d in enumerate(parts):
                v = seen["v"][:, h * dh : (h + 1) * dh].numpy()
                expected = seen["attentions"][h, q].numpy() * np.linalg.norm(v @ w[:, h * dh : (h + 1) * dh].T, axis=1)
                np.testing.assert_allclose(d.contributions, expected, rtol=2e-2, atol=1e-2 * expected.max())
                assert (d.layer, d.head, d.query) == (layer, h, q)
            # each head's share: ||W_O,h Σ_j α_j v_j|| from the captured weights and the hooked values, over all heads
            w, v = o_proj.weight.detach().numpy(), seen["v"].numpy()
            norms = [
                np.linalg.norm(
                    seen["attentions"][h, q].numpy() @ v[:, h * dh : (h + 1) * dh] @ w[:, h * dh : (h + 1) * dh].T
                )
                for h in range(heads)
            ]
            for d in parts:
                assert d.head_shares.dtype == np.float32
                np.testing.assert_allclose(d.head_shares, np.array(norms) / sum(norms), rtol=2e-2, atol=2e-3)


def test_a_layers_projections_give_every_heads_captured_weights_for_one_query(case):
    """LayerProjections.weights(query) [H,N], all heads at once (what the head shares read), against
    transformers' own attentions; and the score factor is the module's own 1/sqrt(dh)."""
    model, a = case
    dh = model.config.hidden_size // model.num_heads
    for layer in range(model.num_layers):
        truth = reference_outputs(model, a.pixel_values).attentions[layer][0].numpy()
        p = a.projections(layer)
        assert p.layer == layer and p.scale == pytest.approx(dh**-0.5)
        for query in token_queries(a):
            q = a.query_index(query)
            np.testing.assert_allclose(p.weights(q), truth[:, q], atol=2e-3, rtol=1e-2)
            assert a.inside_head(layer, 0, query).scale == pytest.approx(dh**-0.5)


def test_a_vit_without_query_key_value_biases():
    """qkv_bias=False (as in some ViT checkpoints): the queries get a zero bias, and the weights are still the
    captured ones."""
    import transformers as tf
    from conftest import TINY

    torch.manual_seed(9)
    model = vitviz.wrap(tf.ViTModel(tf.ViTConfig(**TINY, qkv_bias=False), add_pooling_layer=False), "no-bias")
    a = vitviz.analyze(model, random_image(32, 48, seed=5), longest=48)
    p = a.projections(1)
    assert model.layer_parts(1).q.bias is None and p.bq.shape == (model.config.hidden_size,) and not p.bq.any()
    truth = reference_outputs(model, a.pixel_values).attentions[1][0].numpy()
    for head in range(model.num_heads):
        np.testing.assert_allclose(a.inside_head(1, head, "cls").weights, truth[head, 0], atol=1e-4, rtol=1e-3)


def test_layer_updates_match_hooks_on_the_block(case):
    """Both ways to the updates: the norms the forward keeps, and the recomputation from one layer's input
    (used where a forward kept none)."""
    model, a = case
    for layer in range(model.num_layers):
        seen = hooked(model, a.pixel_values, layer)
        parts = model.layer_parts(layer)
        attention = seen["attn"] * parts.scale1.lambda1 if parts.layer_scale else seen["attn"]
        mlp = seen["y"] - seen["x"] - attention
        kept, recomputed = a.layer_updates(layer), inside.layer_updates(model, a.hidden_states[layer], layer)
        for u in (kept, recomputed):
            for got, truth in ((u.residual, seen["x"]), (u.attention, attention), (u.mlp, mlp)):
                truth = torch.linalg.vector_norm(truth.detach(), dim=-1).numpy()
                np.testing.assert_allclose(got, truth, rtol=2e-2, atol=1e-2 * truth.max())


def test_the_embedded_model_inside_a_head(embedded, coffee):
    """The real DINOv2 at 448: weights equal the captured row, and the statistics mean what they say."""
    a = vitviz.analyze(embedded, coffee)
    for layer, head, query in ((0, 0, "cls"), (6, 3, 100), (11, 5, "cls")):
        d = a.inside_head(layer, head, query)
        row = a.layer_attention(layer)[head, a.query_index(query)].astype(np.float32)
        np.testing.assert_allclose(d.weights, row, atol=2e-3)
        assert d.head_width == 64 and d.k.shape == d.v.shape == (a.num_tokens, 64)
        w = np.sort(d.weights)[::-1]
        assert d.top_share == pytest.approx(w[: int(np.ceil(0.01 * len(w)))].sum(), rel=1e-5)
        assert d.effective_keys == pytest.approx(np.exp(-(w * np.log(w)).sum()), rel=1e-4)
        assert 1 <= d.effective_keys <= len(w)
        expected = d.weights[1:] * a.projections(layer).value_norms[head, 1:]  # the same weights, by another sum
        np.testing.assert_allclose(a.contribution_map(layer, head, query).ravel(), expected, rtol=5e-5)
    mean = a.contribution_map(11, None, "cls")
    heads = np.stack([a.contribution_map(11, h, "cls") for h in range(6)])
    np.testing.assert_allclose(mean, heads.mean(0), rtol=1e-5)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda a: a.inside_head(9, 0), "layer must be in"),
        (lambda a: a.inside_head(0, 4), "head must be"),
        (lambda a: a.inside_head(0, None), "one head"),
        (lambda a: a.inside_head(0, 0, 10_000), "query must be"),
        (lambda a: a.layer_updates(-1), "layer must be in"),
    ],
)
def test_bad_arguments_name_the_problem(call, message):
    a = vitviz.analyze(FAMILIES["vit"](), random_image(32, 32), longest=32)
    with pytest.raises(ValueError, match=message):
        call(a)


def test_a_dpt_encoder_says_why_it_cannot_be_opened():
    model = vitviz.wrap(tiny_dpt(), "tiny-dpt")
    a = vitviz.analyze(model, random_image(64, 64))
    with pytest.raises(ValueError, match="q_proj"):
        a.inside_head(0, 0)


def test_concurrent_forwards_keep_their_own_updates():
    """The update hooks sit on shared modules: two forwards at once must not record into each other."""
    model = FAMILIES["dinov2_registers"]()
    images = [random_image(32, 32, seed=1), random_image(64, 96, seed=2)] * 4
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda im: vitviz.analyze(model, im, longest=max(im.shape[:2])), images))
    for a in done:
        assert a.update_norms.shape == (model.num_layers, 2, a.num_tokens)
