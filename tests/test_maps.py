"""Maps checked against transformers' own attentions with plain, independent code."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import ASSETS, PREFIX_COUNT, expected_readout_row, random_image, reference_outputs, reference_readout_rows

import vitviz
from vitviz import maps
from vitviz.capture import ForwardFusions
from vitviz.derived import Derived

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))]


def independent_rollout(attn: np.ndarray, fusion: str, discard: float, keep: tuple[int, ...] = (0,)) -> np.ndarray:
    """The textbook form: full N×N matrices, R ← Â_l · R from the first layer up; the `keep` columns (the
    readout tokens) are never discarded."""
    n = attn.shape[-1]
    result = np.eye(n)
    for layer_attn in attn.astype(np.float64):
        a = {"mean": layer_attn.mean(0), "max": layer_attn.max(0), "min": layer_attn.min(0)}[fusion]
        if discard > 0:
            k = max(1, int(a.size * discard))
            threshold = np.sort(a.ravel())[k - 1]
            kept = a[:, list(keep)].copy()
            a = np.where(a > threshold, a, 0.0)
            a[:, list(keep)] = kept
        a = a + np.eye(n)
        a = a / a.sum(axis=1, keepdims=True)
        result = a @ result
    return result


@pytest.fixture(params=[(40, 72), (32, 32)], ids=["nonsquare", "square"])
def analysis(request, family):
    name, model = family
    height, width = request.param
    return name, vitviz.analyze(model, random_image(height, width), longest=max(height, width))


def test_prefix_tokens_and_grid_from_pixels(analysis):
    name, a = analysis
    h, w = a.pixel_values.shape[2:]
    assert a.n_prefix == PREFIX_COUNT[name]
    assert a.grid == (h // 8, w // 8)
    assert a.num_tokens == a.n_prefix + a.grid[0] * a.grid[1]


# Attentions are kept as float16: relative rounding error 2**-11, and 2**-24 at the smallest values.
F16 = dict(rtol=2**-11, atol=2**-24)


def test_attention_map_keys_on_all_distinct_values():
    """Made-up attention whose every weight differs (row-normalised arange): a key shifted by one, prefix
    keys kept, or the last patch dropped all change the map by far more than float error."""
    layers, heads, prefix, grid = 2, 3, 2, (3, 4)
    n = prefix + grid[0] * grid[1]
    attn = np.arange(layers * heads * n * n, dtype=np.float32).reshape(layers, heads, n, n) + 1
    attn /= attn.sum(-1, keepdims=True)
    for head, query in [(1, 0), (None, prefix + 5), (2, n - 1)]:
        rows = attn[1, :, query, prefix:] if head is None else attn[1, head, query, prefix:][None]
        expected = np.array([[rows[:, r * grid[1] + c].mean() for c in range(grid[1])] for r in range(grid[0])])
        got = maps.attention_map(attn[1, :, query], grid, prefix, head)
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        full = attn[1, :, query] if head is None else attn[1, head, query][None]
        shifted = full[:, prefix - 1 : prefix - 1 + 12].mean(0).reshape(grid)  # an off-by-one slice
        assert np.abs(got - shifted).max() > 100 * 1e-6 * got.max()  # 100x the tolerance above


def test_embedded_attention_rows_match_transformers_to_float16(embedded, coffee):
    """Real, far-from-uniform rows of the embedded model: a one-key shift would show at this tolerance."""
    a = vitviz.analyze(embedded, coffee, longest=224)
    ref = torch.cat(reference_outputs(embedded, a.pixel_values).attentions).numpy()
    row = ref[11, 2, 0, 1:]
    assert row.max() > 20 * np.median(row)  # not uniform
    np.testing.assert_allclose(a.attention_map(11, 2, "cls"), row.reshape(a.grid), **F16)
    np.testing.assert_allclose(a.attention_map(5, None, 40), ref[5, :, 41, 1:].mean(0).reshape(a.grid), **F16)


def test_captured_attentions_match_transformers(analysis):
    _, a = analysis
    ref = reference_outputs(a.model, a.pixel_values)
    expected = torch.cat(ref.attentions).numpy()
    np.testing.assert_allclose(a.attentions.astype(np.float32), expected, **F16)
    np.testing.assert_allclose(a.attentions.astype(np.float32).sum(-1), 1.0, atol=2**-11)  # rounding, summed
    assert a.attentions.shape[:2] == (a.model.num_layers, a.model.num_heads)


def test_attention_map_is_a_row_of_the_attention_matrix(analysis):
    _, a = analysis
    ref_out = reference_outputs(a.model, a.pixel_values)
    ref = torch.cat(ref_out.attentions).numpy()
    p, grid = a.n_prefix, a.grid
    patch = grid[0] * grid[1] - 2
    readout = expected_readout_row(a.model, ref_out, 1)[2, p:].reshape(grid)
    np.testing.assert_allclose(a.attention_map(1, 2, "readout"), readout, **F16)
    mean_of_heads = ref[2, :, p + patch, p:].mean(0).reshape(grid)
    np.testing.assert_allclose(a.attention_map(2, None, patch), mean_of_heads, **F16)
    np.testing.assert_allclose(a.head_maps(0, patch)[3], ref[0, 3, p + patch, p:].reshape(grid), **F16)


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("discard", [0.0, 0.3, 0.9])
def test_rollout_matches_full_matrix_chain(analysis, fusion, discard):
    _, a = analysis
    ref_out = reference_outputs(a.model, a.pixel_values)
    ref = torch.cat(ref_out.attentions).numpy()
    keep = a.model.readout.tokens
    # The capture is float16; the independent chain runs on exactly those values.
    full = independent_rollout(a.attentions.astype(np.float32), fusion, discard, keep)
    np.testing.assert_allclose(full.sum(axis=1), 1.0, atol=1e-9)  # row-stochastic
    start = independent_start(a.model, ref_out, fusion, a.num_tokens)
    expected = (start @ full)[a.n_prefix :].reshape(a.grid)
    np.testing.assert_allclose(a.rollout(fusion, discard), expected, atol=2e-5)
    # And on transformers' float32 attentions, through the pure function.
    row = maps.rollout(maps.fuse_heads(torch.from_numpy(ref), fusion), discard, None, start, keep)
    assert row.sum() == pytest.approx(1.0, abs=1e-5)
    if discard == 0.0:
        np.testing.assert_allclose(row, start @ independent_rollout(ref, fusion, 0.0, keep), atol=1e-5)


def independent_start(model: vitviz.VitModel, ref, fusion: str, n: int) -> np.ndarray:
    """[N] the last row of the full product: the probe's attention (heads fused, summing to 1) for an
    attention-pool, else the readout tokens sharing 1."""
    pool = reference_readout_rows(model, ref)
    if pool is None:
        start = np.zeros(n)
        start[list(model.readout.tokens)] = 1 / len(model.readout.tokens)
        return start
    fused = {"mean": pool.mean(0), "max": pool.max(0), "min": pool.min(0)}[fusion].astype(np.float64)
    return fused / fused.sum()


def test_rollout_of_non_percent_ratio_matches(analysis):
    _, a = analysis
    start = independent_start(a.model, reference_outputs(a.model, a.pixel_values), "mean", a.num_tokens)
    expected = start @ independent_rollout(a.attentions.astype(np.float32), "mean", 0.137, a.model.readout.tokens)
    expected = expected[a.n_prefix :]
    np.testing.assert_allclose(a.rollout("mean", 0.137).ravel(), expected, atol=2e-5)


def test_pos_embed_similarity_matches_weights(family):
    _, model = family
    sim = model.pos_embed_similarity()
    g = model.native_grid
    assert sim.shape == (*g, *g)
    pos = model.family.position_table(model.encoder).detach()
    patches = pos[-g[0] * g[1] :]  # prefix positions (CLS, distillation) come first
    expected = torch.nn.functional.cosine_similarity(patches[:, None], patches[None], dim=-1)
    np.testing.assert_allclose(sim.reshape(g[0] * g[1], -1), expected.numpy(), atol=1e-5)
    np.testing.assert_allclose(np.einsum("ijij->ij", sim), 1.0, atol=1e-5)


def test_mean_attention_distance_against_double_loop(analysis):
    _, a = analysis
    attn = a.attentions.astype(np.float64)
    p, (gh, gw), patch = a.n_prefix, a.grid, a.model.patch_size
    layer, head = 1, 3
    total = 0.0
    for q in range(gh * gw):
        weights = attn[layer, head, p + q, p:]
        weights = weights / weights.sum()
        for k in range(gh * gw):
            dy, dx = (q // gw - k // gw) * patch, (q % gw - k % gw) * patch
            total += weights[k] * np.hypot(dy, dx)
    assert a.mean_attention_distance[layer, head] == pytest.approx(total / (gh * gw), rel=1e-4)
    assert a.mean_attention_distance.shape == (a.model.num_layers, a.model.num_heads)


def test_attention_entropy_bounds_and_value(analysis):
    _, a = analysis
    row = a.layer_attention(2)[1].astype(np.float64)
    expected = -(row * np.log(np.clip(row, 1e-12, None))).sum(-1).mean()
    assert a.attention_entropy[2, 1] == pytest.approx(expected, rel=1e-4)
    assert (a.attention_entropy >= 0).all()
    assert (a.attention_entropy <= np.log(a.num_tokens) + 1e-4).all()


def test_token_norms_and_pca_against_transformers(analysis):
    _, a = analysis
    ref = reference_outputs(a.model, a.pixel_values)
    last = ref.hidden_states[-1][0]
    expected = last[a.n_prefix :].norm(dim=-1).numpy().reshape(a.grid)
    np.testing.assert_allclose(a.token_norms(), expected, rtol=5e-3)
    # PCA: the first component must be the top eigenvector of the feature covariance.
    x = a.model.family.final_norm(a.model.encoder)(last).detach().numpy()[a.n_prefix :].astype(np.float64)
    x -= x.mean(0)
    eigvals, eigvecs = np.linalg.eigh(x.T @ x)
    first = x @ eigvecs[:, -1]
    rgb = a.pca_rgb()
    assert rgb.shape == (*a.grid, 3) and rgb.min() >= 0 and rgb.max() <= 1
    assert abs(np.corrcoef(first, rgb[..., 0].ravel())[0, 1]) > 0.999


def test_high_norm_tokens_flags_an_outlier():
    norms = np.full((6, 7), 10.0) + np.random.default_rng(0).normal(0, 0.5, (6, 7))
    norms[2, 3], norms[4, 1] = 60.0, 35.0
    flagged = maps.high_norm_tokens(norms)
    assert flagged[2, 3] and flagged[4, 1] and flagged.sum() == 2


def test_a_smooth_tail_is_no_artifact():
    """A mostly uniform sky with a brighter skyline band (1.2x the median) flags nothing, and neither
    does a continuum that crosses 2x the median without a gap."""
    norms = np.full((32, 32), 50.0) + np.random.default_rng(0).normal(0, 0.5, (32, 32))
    norms[20:23] = 60.0  # 5 % of the tokens, 1.2x the median
    assert not maps.high_norm_tokens(norms).any()
    ramp = np.linspace(10.0, 30.0, 42).reshape(6, 7)  # up to 2.3x the median, no gap
    assert not maps.high_norm_tokens(ramp).any()


def test_the_embedded_small_dinov2_has_no_artifact_tokens(embedded):
    for name in ("chelsea.jpg", "coffee.jpg", "astronaut.jpg", "rocket.jpg"):
        norms = vitviz.analyze(embedded, vitviz.load_image(ASSETS / name)).token_norms()
        assert norms.max() < 1.5 * np.median(norms), name
        assert not maps.high_norm_tokens(norms).any(), name


def test_classifier_top_classes_are_softmax_of_logits(family):
    name, model = family
    a = vitviz.analyze(model, random_image(32, 32))
    top = a.top_classes(5)
    if model.labels is None:
        assert top == [] and a.logits is None
        return
    logits = reference_outputs(model, a.pixel_values).logits[0]
    probs = torch.softmax(logits, 0)
    best = int(probs.argmax())
    assert top[0] == (f"class {best}", pytest.approx(float(probs[best]), abs=1e-5))
    assert [p for _, p in top] == sorted([p for _, p in top], reverse=True)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda a: a.attention_map(99), "layer"),
        (lambda a: a.attention_map(0, head=17), "head"),
        (lambda a: a.attention_map(0, query=10_000), "query"),
        (lambda a: a.rollout("median"), "head fusion"),
        (lambda a: a.rollout("mean", 1.5), "discard_ratio"),
    ],
)
def test_bad_map_arguments_raise_clear_errors(call, message):
    from conftest import tiny_vit

    a = vitviz.analyze(tiny_vit(), random_image(32, 32))
    with pytest.raises(ValueError, match=message):
        call(a)


def test_colour_scales():
    """robust clips at the 99th percentile and says which values it clipped; log survives zeros."""
    values = np.arange(1000, dtype=np.float32).reshape(10, 100)
    values[0, 0] = 1e6  # a heavy tail: one value 1000x the rest
    shown, lo, hi, clipped = maps.colour_scale(values, "robust")
    assert hi == pytest.approx(np.percentile(values, 99)) and lo == 1.0  # values[0,0] replaced the 0
    assert clipped.sum() == 10 and clipped[0, 0] and clipped[9, 99] and not clipped[9, 89]
    assert maps.colour_scale(values, "min-max")[1:3] == (1.0, 1e6) and not maps.colour_scale(values, "min-max")[3].any()
    logged, lo, hi, clipped = maps.colour_scale(values, "log")  # log10, from the 1st to the 99th percentile
    np.testing.assert_allclose(logged, np.log10(values), rtol=1e-6)
    counted = np.log10(values[values > 1e6 * 1e-6])  # of the values above a millionth of the maximum
    assert (lo, hi) == pytest.approx(tuple(np.percentile(counted, [1, 99])), rel=1e-6)
    assert clipped.sum() == 10 and clipped[0, 0] and clipped[9, 99] and not clipped[9, 89]
    relu = np.zeros((10, 100), np.float32)  # a ReLU'd map: half of it exactly 0
    relu[5:] = np.geomspace(1e-3, 1.0, 500).reshape(5, 100)
    logged, lo, hi, clipped = maps.colour_scale(relu, "log")
    assert np.isfinite(logged).all() and logged.min() == pytest.approx(-6)  # the zeros lifted, not -inf
    assert (lo, hi) == pytest.approx(tuple(np.percentile(np.log10(relu[5:]), [1, 99])))  # not set by the zeros
    assert clipped.sum() == 5 and clipped[9, 95:].all()
    zeros = np.zeros((4, 4), np.float32)
    zeros[1, 1] = 0.5  # one value above the floor: nothing to take percentiles of, so min-max
    logged, lo, hi, clipped = maps.colour_scale(zeros, "log")
    assert (lo, hi) == pytest.approx((np.log10(0.5e-6), np.log10(0.5))) and not clipped.any()
    with pytest.raises(ValueError, match="unknown colour scale"):
        maps.colour_scale(values, "linear")


@pytest.mark.slow
def test_the_default_rollout_and_attention_are_not_mostly_black(embedded):
    """On the default (log) scale at most half of each bundled photo's rollout, whatever the fusion and
    discard ratio, and of its default attention map sits in the colormap's bottom 10 %. Under min-max
    nearly all of it did; on the linear robust scale the rocket, small in a night sky, still did."""

    def dark(values, scale=maps.DEFAULT_SCALE):
        shown, lo, hi, _ = maps.colour_scale(values, scale)
        return np.mean(np.clip((shown - lo) / (hi - lo), 0, 1) < 0.1)

    for name in ("chelsea.jpg", "coffee.jpg", "astronaut.jpg", "rocket.jpg"):
        a = vitviz.analyze(embedded, vitviz.load_image(ASSETS / name))
        for fusion in maps.HEAD_FUSIONS:
            for discard in (0.0, 0.5, 0.9):
                assert dark(a.rollout(fusion, discard)) <= 0.5, (name, fusion, discard)
        assert dark(a.attention_map(a.model.num_layers - 1, None, "cls")) <= 0.5, name
        assert dark(a.rollout(), "min-max") > 0.9, name  # what min-max showed
        if name == "rocket.jpg":
            assert dark(a.rollout(), "robust") > 0.5  # the rocket on the linear scale


def test_one_layers_statistics_equal_the_whole_models(embedded, coffee):
    a = vitviz.analyze(embedded, coffee, longest=224)
    distance, entropy = a.layer_statistics(4)
    np.testing.assert_allclose(distance, a.mean_attention_distance[4], rtol=1e-5)
    np.testing.assert_allclose(entropy, a.attention_entropy[4], rtol=1e-5)


def test_softmax_effective_keys_and_top_share():
    scores = np.array([[1000.0, 1000.0, -1000.0, 0.0]], np.float32)  # would overflow a plain exp
    w = maps.softmax(scores)[0]
    np.testing.assert_allclose(w, [0.5, 0.5, 0, 0], atol=1e-7)
    assert maps.effective_keys(w) == pytest.approx(2.0)  # two equal keys: exp(ln 2)
    assert maps.effective_keys(np.full(50, 1 / 50)) == pytest.approx(50.0)
    assert maps.top_share(np.array([0.5, 0.3, 0.2] + [0.0] * 97), 0.01) == pytest.approx(0.5)  # 1 % of 100 = 1
    assert maps.top_share(np.array([0.5, 0.3, 0.2] + [0.0] * 97), 0.02) == pytest.approx(0.8)


def test_value_norms_project_every_value_through_its_heads_slice():
    rng = np.random.default_rng(0)
    heads, dh, d, n = 3, 4, 12, 7
    v, wo = rng.normal(size=(n, heads * dh)), rng.normal(size=(d, heads * dh))
    for scale in (1.0, 1e-3):  # norms above and below 1
        got = maps.value_norms(v * scale, wo, heads)
        assert got.dtype == np.float32
        for h in range(heads):
            part = slice(h * dh, (h + 1) * dh)
            expected = np.linalg.norm(v[:, part] * scale @ wo[:, part].T, axis=1)
            np.testing.assert_allclose(got[h], expected, rtol=1e-5)


def test_softmax_rows_of_any_scale_and_a_single_row():
    """Each row on its own: a row of huge scores must not zero out a row of small ones (a shared shift
    would), and a 1-D row works as it does for one head's query."""
    scores = np.array([[2000.0, 1999.0, 1990.0], [-3.0, 0.0, 1.0]], np.float32)
    got = maps.softmax(scores)
    for row, expected in zip(got, scores.astype(np.float64), strict=True):
        e = np.exp(expected - expected.max())
        np.testing.assert_allclose(row, e / e.sum(), rtol=1e-6)
    assert got.dtype == np.float32 and got.shape == scores.shape
    np.testing.assert_allclose(maps.softmax(scores[1]), got[1], rtol=1e-7)


def test_scaled_scores_divide_by_the_square_root_of_the_width():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=16), rng.normal(size=(5, 16))
    np.testing.assert_allclose(maps.scaled_scores(q, k, 16**-0.5), k @ q / 4, rtol=1e-5)


def test_top_share_rounds_the_number_of_keys_up():
    w = np.array([0.4, 0.3, 0.2, 0.1] + [0.0] * 96)
    assert maps.top_share(w, 0.015) == pytest.approx(0.7)  # ceil(1.5) = 2 keys
    assert maps.top_share(w, 0.001) == pytest.approx(0.4)  # at least one key


def test_high_norm_tokens_at_their_boundaries():
    """Exactly ratio x the median counts; exactly gap x the largest other norm counts; a mask is bool."""
    base = np.ones(16)
    exact = base.copy()
    exact[3] = 2.0  # the median is 1: exactly 2x
    assert maps.high_norm_tokens(exact).tolist() == (np.arange(16) == 3).tolist()
    touching = base.copy()
    touching[[3, 4]] = [2.5, 2.0]  # 2.0 is the smallest flagged, 1.25 x 1.6 would be 2.0 ...
    touching[5] = 1.6  # ... with 1.6 the largest unflagged: it stands apart exactly at the gap
    assert maps.high_norm_tokens(touching).sum() == 2
    close = touching.copy()
    close[5] = 1.61  # now 2.0 < 1.25 x 1.61: a smooth tail, nothing flagged
    none = maps.high_norm_tokens(close)
    assert none.dtype == bool and not none.any() and maps.high_norm_tokens(exact).dtype == bool
    small = np.full(16, 0.01)
    small[2] = 0.05  # gap must multiply, not divide, the largest unflagged norm
    assert maps.high_norm_tokens(small).sum() == 1
    assert not maps.high_norm_tokens(np.full(16, 3.0)).any()  # everything "high" is nothing special


def test_pca_rgb_channels_span_the_unit_range_with_fixed_signs():
    rng = np.random.default_rng(3)
    tokens = rng.normal(size=(1 + 12, 8))
    rgb = maps.pca_rgb(tokens, (3, 4), 1)
    assert rgb.dtype == np.float32 and rgb.shape == (3, 4, 3)
    np.testing.assert_allclose(rgb.reshape(-1, 3).min(0), 0, atol=1e-6)
    np.testing.assert_allclose(rgb.reshape(-1, 3).max(0), 1, atol=1e-6)
    # the loadings' signs are fixed, so negated tokens give the negated components: every colour inverted
    np.testing.assert_allclose(maps.pca_rgb(-tokens, (3, 4), 1), 1 - rgb, atol=1e-6)
    two = maps.pca_rgb(rng.normal(size=(1 + 2, 8)), (1, 2), 1)  # two patches: two components, blue is 0
    assert two.shape == (1, 2, 3) and (two[..., 2] == 0).all() and two[..., :2].max() == 1


def test_pca_rgb_of_many_patches_is_the_svds_principal_components():
    """More patches than features (a real ViT: 1024 x 384) go through the covariance's eigenvectors: the same
    colours as the SVD's right vectors, the float64 reference, with the same signs."""
    rng = np.random.default_rng(5)
    tokens = rng.normal(size=(1 + 240, 16)) * np.linspace(3, 0.1, 16) @ np.linalg.qr(rng.normal(size=(16, 16)))[0]
    x = tokens[1:] - tokens[1:].mean(0)
    vt = np.linalg.svd(x, full_matrices=False)[2][:3]
    vt *= np.sign(vt[np.arange(3), np.abs(vt).argmax(1)])[:, None]
    comps = x @ vt.T
    expected = (comps - comps.min(0)) / (comps.max(0) - comps.min(0))
    np.testing.assert_allclose(maps.pca_rgb(tokens, (12, 20), 1).reshape(-1, 3), expected, atol=1e-6)


def test_colour_scale_edge_cases():
    shown, lo, hi, clipped = maps.colour_scale(np.zeros((4, 4)), "log")  # all zeros: no log of 0
    assert np.isfinite(shown).all() and clipped.dtype == bool and not clipped.any()
    flat = np.full((4, 4), 0.5)
    shown, lo, hi, clipped = maps.colour_scale(flat, "robust")  # no tail to clip: min-max, nothing marked
    assert (lo, hi) == (0.5, 0.5) and not clipped.any() and shown.dtype == np.float32
    ints = maps.colour_scale(np.arange(16).reshape(4, 4), "min-max")[0]
    assert ints.dtype == np.float32


def test_entropy_sums_each_row_over_its_keys():
    """Entropy per query row, averaged per head. (Summing over queries instead gives the same mean on a
    square matrix: that mutant is equivalent.)"""
    attn = np.array([[[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]]]], np.float32)  # [1,1,3,3]
    rows = [0.0, np.log(2), np.log(3)]
    np.testing.assert_allclose(maps.attention_entropy(attn), [[np.mean(rows)]], rtol=1e-6)
    two_heads = np.concatenate([attn, np.full_like(attn, 1 / 3)], axis=1)  # [1,2,3,3]: one value per head
    np.testing.assert_allclose(maps.attention_entropy(two_heads), [[np.mean(rows), np.log(3)]], rtol=1e-6)


def test_statistics_from_scores_are_the_float64_softmaxs_even_where_its_weights_underflow():
    """`score_statistics`: the mean attention distance and entropy of softmax(scores), against float64, on rows
    that float32 cannot hold whole: a peaked one (its small weights underflow to 0, where log 0 would make the
    entropy NaN), one whose every key but one is 200 below it (entropy 0), and one with a masked key (-inf)."""
    rng = np.random.default_rng(12)
    grid, patch, prefix = (3, 4), 14, 1
    n = prefix + 12
    scores = rng.normal(0.0, 3.0, (2, n, n))
    scores[0, 4] *= 40
    scores[1, 3] = 0.0
    scores[1, 3, 5] = 200.0
    scores[1, 7, 2] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    assert (scores.astype(np.float32)[0, 4] < scores[0, 4].max() - 104).any()  # float32's exp underflows there
    entropy = -(weights * np.log(np.where(weights > 0, weights, 1.0))).sum(-1).mean(-1)
    c = maps.patch_centers(grid, patch)
    dist = np.sqrt(((c[:, None] - c[None]) ** 2).sum(-1))
    patches = weights[:, prefix:, prefix:]
    distance = (patches / patches.sum(-1, keepdims=True) * dist).sum(-1).mean(-1)
    got = maps.score_statistics(torch.tensor(scores, dtype=torch.float32), grid, patch, prefix)
    np.testing.assert_allclose(got[0], distance, rtol=1e-5)
    np.testing.assert_allclose(got[1], entropy, rtol=1e-5)
    assert got[0].dtype == got[1].dtype == np.float32


def test_statistics_from_scores_are_of_the_float32_weights_not_of_weights_rounded_to_float16():
    """Where most of a row's weight sits on many small keys (here 900 keys at 1.2e-5, which float16 holds as
    subnormals), the entropy of float16-rounded weights is off by ~4e-4; `score_statistics`' is float64's."""
    n = 901  # a readout and 30x30 patches
    scores = torch.full((1, n, n), -11.3, dtype=torch.float64)
    scores[0].fill_diagonal_(0.0)
    weights = scores.softmax(-1)
    entropy = float(-(weights * weights.log()).sum(-1).mean())
    rounded = float(torch.special.entr(weights.half().double()).sum(-1).mean())
    assert abs(rounded - entropy) > 1e-4 * entropy  # the bar below tells the two apart
    got = maps.score_statistics(scores.float(), (30, 30), 14, 1)[1]
    assert got[0] == pytest.approx(entropy, rel=1e-5)


def test_patch_centres_are_in_input_pixels():
    c = maps.patch_centers((2, 3), 14)
    np.testing.assert_array_equal(c[0], [7, 7])  # the first patch's centre
    np.testing.assert_array_equal(c[-1], [21, 35])  # row 1, column 2


def test_discard_thresholds_are_the_kth_smallest_weights():
    fused = torch.rand(3, 6, 6, generator=torch.Generator().manual_seed(4))
    flat = fused.reshape(3, -1).numpy()
    ratios = [0.0, 0.3, 0.5, 0.9]
    table = maps.discard_thresholds(fused, ratios).numpy()
    for j, r in enumerate(ratios):
        k = max(1, int(36 * r))
        np.testing.assert_allclose(table[:, j], np.sort(flat, axis=1)[:, k - 1])
    np.testing.assert_allclose(maps.discard_thresholds(fused, [0.5]).numpy()[:, 0], table[:, 2])
    with pytest.raises(ValueError):
        maps.rollout(fused, 1.0)  # discarding everything is refused


def test_robust_scale_marks_only_values_above_the_clip():
    values = np.array([0.0] * 50 + [1.0] * 50)  # the 99th percentile is 1: nothing lies above it
    shown, lo, hi, clipped = maps.colour_scale(values, "robust")
    assert hi == 1.0 and not clipped.any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_discard_thresholds_count_exactly_what_a_sort_finds(dtype, device):
    """The counting select against a full sort: many weights per 16-bit bin (a heavy tail near 0, as in
    attention), ties, negative numbers and -0.0, in float16 (one count) and float32 (its top 16 bits counted on
    a CPU, a sort on a GPU)."""
    g = torch.Generator().manual_seed(7)
    heavy = torch.rand(2, 300, 300, generator=g) ** 8  # most weights crowd into a few bins
    ties = torch.randint(0, 5, (2, 40, 40), generator=g).float() / 4
    signed = torch.randn(2, 50, 50, generator=g)
    signed[0, 0, :7] = -0.0
    zeros = torch.rand(2, 30, 30, generator=g)
    zeros[:, :5] = -0.0  # a sign bit set, but no weight below zero
    ratios = [i / 100 for i in range(100)] + [0.137, 0.999]
    for weights in (heavy, ties, signed, zeros):
        weights = weights.to(dtype)
        flat = weights.reshape(2, -1).double().sort(dim=1).values
        expected = flat[:, [max(1, int(flat.shape[1] * r)) - 1 for r in ratios]]
        got = maps.discard_thresholds(weights.to(device), ratios)
        assert got.dtype == (dtype if dtype != torch.float64 else torch.float32) and got.device.type == device
        np.testing.assert_array_equal(got.double().cpu().numpy(), expected.numpy())


def test_max_and_min_fusions_keep_the_captured_float16(analysis):
    _, a = analysis
    for how, reduce in (("max", np.max), ("min", np.min)):
        fused = maps.fuse_heads(a.attentions, how)
        assert fused.dtype == torch.float16  # a maximum of float16 weights is one of them
        np.testing.assert_array_equal(fused.numpy(), reduce(a.attentions, axis=1))
        as_float32 = maps.rollout(fused.float(), 0.5)
        np.testing.assert_array_equal(maps.rollout(fused, 0.5), as_float32)


def test_maps_come_back_as_float32_whatever_the_input():
    """The cache holds many maps per user: every map is float32, from float16 captures or float64 inputs."""
    rng = np.random.default_rng(8)
    attn = rng.random((2, 3, 7, 7))
    attn /= attn.sum(-1, keepdims=True)
    for dtype in (np.float16, np.float64):
        a = attn.astype(dtype)
        assert maps.attention_map(a[0, :, 0], (2, 3), 1, None).dtype == np.float32
        assert maps.mean_attention_distance(a, (2, 3), 14, 1).dtype == np.float32
        assert maps.attention_entropy(a).dtype == np.float32
        assert maps.token_norms(rng.normal(size=(7, 4)).astype(dtype), (2, 3), 1).dtype == np.float32
        assert maps.pos_embed_similarity(rng.normal(size=(6, 4)).astype(dtype), (2, 3)).dtype == np.float32
        assert maps.scaled_scores(
            rng.normal(size=4).astype(dtype), rng.normal(size=(5, 4)).astype(dtype), 0.5
        ).dtype == (np.float32)
    assert maps.fuse_heads(attn, "max").dtype == torch.float32  # float64 weights: float32, not float64
    assert maps.fuse_heads(attn.astype(np.float16), "max").dtype == torch.float16
    fused = maps.fuse_heads(attn, "mean")
    np.testing.assert_array_equal(maps.rollout(fused), maps.rollout(fused, 0.0))  # the default discards nothing


def test_colour_scale_corner_cases_that_decide_the_picture():
    """All zeros: log10 of the 1e-12 floor everywhere; a maximum so small that a millionth of it would be a
    denormal gets float32's smallest normal number as the floor; when the 1st and 99th percentiles meet,
    the scale falls back to min-max, marking nothing; a value equal to the clip is not above it."""
    shown, lo, hi, clipped = maps.colour_scale(np.zeros((3, 3)), "log")
    np.testing.assert_allclose(shown, -12)
    assert (lo, hi) == pytest.approx((-12.0, -12.0)) and not clipped.any()
    tiny = np.array([[0.0, 1e-35]], np.float32)
    shown = maps.colour_scale(tiny, "log")[0]
    assert shown[0, 0] == pytest.approx(np.log10(np.finfo(np.float32).tiny))  # not a denormal 1e-41
    mostly_one = np.array([0.5] + [1.0] * 198 + [4.0])  # p1 = p99 = 1
    shown, lo, hi, clipped = maps.colour_scale(mostly_one, "log")
    assert (lo, hi) == pytest.approx((np.log10(0.5), np.log10(4.0))) and clipped.dtype == bool and not clipped.any()
    mostly_zero = np.array([0.0] * 199 + [5.0])  # p99 = the minimum
    shown, lo, hi, clipped = maps.colour_scale(mostly_zero, "robust")
    assert (lo, hi) == (0.0, 5.0) and clipped.dtype == bool and not clipped.any()
    shown, lo, hi, clipped = maps.colour_scale(np.arange(1.0, 102.0), "log")  # p99 is exactly 100
    assert hi == pytest.approx(2.0) and clipped.sum() == 1 and clipped[-1]


def test_no_artifact_flags_keep_the_maps_shape_and_small_pca_ranges_still_span_the_colours():
    norms = np.full((3, 4), 10.0)
    norms[0, 0] = 12.0
    assert maps.high_norm_tokens(norms).shape == (3, 4) and not maps.high_norm_tokens(norms).any()
    tokens = np.random.default_rng(2).normal(size=(1 + 12, 8)) * 1e-3  # components spanning far less than 1
    rgb = maps.pca_rgb(tokens, (3, 4), 1)
    np.testing.assert_allclose(rgb.reshape(-1, 3).max(0), 1, atol=1e-6)
    np.testing.assert_array_equal(maps.patch_centers((2, 3), 14)[1], [7, 21])  # row 0, column 1: row-major


def test_value_norms_when_the_width_differs_from_heads_times_head_size():
    rng = np.random.default_rng(3)
    v, wo = rng.normal(size=(5, 6)), rng.normal(size=(10, 6))  # D = 10, H·dh = 2 x 3
    got = maps.value_norms(v, wo, 2)
    for h in range(2):
        np.testing.assert_allclose(
            got[h], np.linalg.norm(v[:, 3 * h : 3 * h + 3] @ wo[:, 3 * h : 3 * h + 3].T, axis=1), rtol=1e-5
        )


def test_rollout_does_not_depend_on_torchs_default_dtype():
    """A notebook may set torch's default dtype to float64: the rollout's own vector stays float32."""
    attn = np.random.default_rng(4).random((3, 2, 5, 5)).astype(np.float32)
    fused = maps.fuse_heads(attn / attn.sum(-1, keepdims=True), "mean")
    expected = maps.rollout(fused, 0.3)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = maps.rollout(fused, 0.3)
    finally:
        torch.set_default_dtype(before)
    np.testing.assert_array_equal(got, expected)


def test_a_forward_that_rolls_makes_every_slider_rollout_without_recomputing_attention(family, monkeypatch):
    """The app's forward (`analyze(..., roll=True)`) fuses each layer's heads as the model makes its weights and
    keeps the rollout slider's 20 discards of the mean fusion (the tab's first): each is the textbook chain of
    transformers' own weights (rounded to float16, as a capture is), and none is made by recomputing a layer's
    attention."""
    _, model = family
    image = random_image(40, 72, seed=41)

    def refused(self, layer):
        raise AssertionError(f"layer {layer}'s attention recomputed")

    with monkeypatch.context() as patched:
        patched.setattr(vitviz.Analysis, "layer_attention", refused)
        patched.setattr(vitviz.Analysis, "device_scores", refused)
        patched.setattr(vitviz.Analysis, "device_attention", refused)
        a = vitviz.analyze(model, image, longest=72, roll=True)
        got = {(f, p): a.rollout(f, p / 100) for f in ForwardFusions.FUSIONS for p in Derived.ROLLOUT_PERCENTS}
    assert (a.layers_recomputed, a.rollouts_made, a.rollouts_served) == (0, 0, len(got))  # the forward's, served
    ref_out = reference_outputs(model, a.pixel_values)
    weights = torch.cat(ref_out.attentions).half().float().numpy()
    keep = model.readout.tokens
    for fusion in ForwardFusions.FUSIONS:
        start = independent_start(model, ref_out, fusion, a.num_tokens)
        for percent in (0, 5, 30, 50, 95):
            expected = (start @ independent_rollout(weights, fusion, percent / 100, keep))[a.n_prefix :]
            np.testing.assert_allclose(got[fusion, percent].ravel(), expected, atol=2e-5, err_msg=f"{fusion} {percent}")
    # the same as an analysis makes them when asked, from its recomputed weights; every percent's threshold too
    lazy = vitviz.analyze(model, image, longest=72)
    for fusion in ForwardFusions.FUSIONS:
        torch.testing.assert_close(a.percent_thresholds(fusion), lazy.percent_thresholds(fusion), rtol=0, atol=0)
    for (fusion, percent), rollout in got.items():
        np.testing.assert_allclose(rollout, lazy.rollout(fusion, percent / 100), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rollouts_of_many_ratios_at_once_are_each_ratios_rollout(dtype, device):
    """`maps.rollouts` puts `chunk` ratios through each layer together (a GPU's way; a CPU's is one at a time):
    every chunking gives each ratio's own rollout, a ratio of 0 among them included, on each device."""
    rng = np.random.default_rng(9)
    attn = rng.random((3, 2, 9, 9)) ** 4
    attn /= attn.sum(-1, keepdims=True)
    fused = maps.fuse_heads(attn.astype(np.float16), "max").to(dtype)
    ratios, start = [0.0, 0.05, 0.3, 0.5, 0.9], rng.random(9)
    start /= start.sum()
    each = np.stack([maps.rollout(fused, r, None, start, (0, 1)) for r in ratios])
    for r, row in zip(ratios, each, strict=True):
        np.testing.assert_allclose(
            row, start @ independent_rollout(fused.float()[:, None].numpy(), "max", r, (0, 1)), atol=1e-6
        )
    for chunk in (1, 2, 5, None):
        got = maps.rollouts(list(fused.to(device)), ratios, None, start, (0, 1), chunk=chunk)
        np.testing.assert_allclose(got, each, rtol=1e-5, atol=1e-9, err_msg=str(chunk))
    # a batch's images together, as a forward's: each image's own rollouts, on the CPU's way and the GPU's
    second = maps.fuse_heads(attn[::-1].copy().astype(np.float16), "max").to(dtype)
    layers = [torch.stack(pair) for pair in zip(fused, second, strict=True)]  # L layers [2,N,N]
    thresholds = torch.stack([maps.discard_thresholds(f, ratios) for f in (fused, second)], dim=1)  # [L,2,R]
    starts = np.stack([start, start[::-1]])
    alone = [maps.rollouts(f, ratios, None, s, (0, 1)) for f, s in ((fused, starts[0]), (second, starts[1]))]
    layers, thresholds = [t.to(device) for t in layers], thresholds.to(device)
    for chunk in (1, 5, None):
        got = maps.rollouts(layers, ratios, thresholds, starts, (0, 1), chunk=chunk)
        np.testing.assert_allclose(got, np.stack(alone), rtol=1e-5, atol=1e-9, err_msg=f"batched, {chunk}")
    with pytest.raises(ValueError, match="need its thresholds"):
        maps.rollouts(layers, ratios, None, starts)
    with pytest.raises(ValueError, match="at least one"):
        maps.rollouts(layers, [], thresholds, starts)
