"""The CUDA path against the CPU path: the same image through both must tell the same story. Skipped where
there is no CUDA GPU (CI has none); run by hand on one: `python -m pytest tests/test_cuda.py`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import ASSETS, DEPTH_FAMILIES

import vitviz
from vitviz import attributions, maps, stats
from vitviz.capture import ForwardFusions, analyze_frame
from vitviz.derived import Derived

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


@pytest.fixture(scope="module")
def pair() -> tuple[vitviz.VitModel, vitviz.VitModel]:
    return vitviz.load_model(device="cpu"), vitviz.load_model(device="cuda")


@pytest.fixture(scope="module")
def coffee_pair(pair):
    cpu, gpu = pair
    image = vitviz.load_image(ASSETS / "coffee.jpg")
    return vitviz.analyze(cpu, image), vitviz.analyze(gpu, image)


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def test_the_gpu_analysis_is_the_cpu_analysis(coffee_pair):
    a, b = coffee_pair
    assert (
        b.model.device.type == "cuda" and b.attentions.dtype == np.float16 and b.attentions.shape == a.attentions.shape
    )
    rows = b.attentions.astype(np.float32).sum(-1)
    np.testing.assert_allclose(rows, 1.0, atol=2e-3)  # softmax rows, stored as float16
    # relative: on the device the weights are random, and attention rows are then nearly uniform (~1/N each)
    np.testing.assert_allclose(b.attentions.astype(np.float32), a.attentions.astype(np.float32), rtol=0.02, atol=1e-5)
    np.testing.assert_allclose(b.tokens, a.tokens, rtol=0.02, atol=0.02)
    for fusion in maps.HEAD_FUSIONS:
        for discard in (0.0, 0.9):
            np.testing.assert_allclose(b.rollout(fusion, discard), a.rollout(fusion, discard), rtol=0.01, atol=1e-7)
    np.testing.assert_allclose(b.mean_attention_distance, a.mean_attention_distance, rtol=2e-3)
    np.testing.assert_allclose(b.attention_entropy, a.attention_entropy, rtol=2e-3)
    np.testing.assert_allclose(b.dense_map(), a.dense_map(), atol=0.02)


def test_the_gpu_forward_rolls_on_the_device_as_the_cpu_does(pair):
    """The app's forward on a GPU (`roll=True`) fuses, counts thresholds and makes the slider's rollouts of every
    fusion on the device: each is the CPU's. A discard off the slider is fused there too, when asked."""
    cpu, gpu = pair
    image = vitviz.load_image(ASSETS / "coffee.jpg")
    a, b = vitviz.analyze(cpu, image), vitviz.analyze(gpu, image, roll=True)
    slider = {(f, p) for f in ForwardFusions.FUSIONS for p in Derived.ROLLOUT_PERCENTS}
    assert {k for k in b.held().rollouts if len(k) == 2} == slider and all(
        b.percent_thresholds(f).is_cuda for f in b.held().thresholds
    )
    for fusion, percent in sorted(slider):
        want, message = a.rollout(fusion, percent / 100), f"{fusion} {percent}"
        np.testing.assert_allclose(b.rollout(fusion, percent / 100), want, rtol=0.01, atol=1e-7, err_msg=message)
    np.testing.assert_allclose(b.rollout("max", 0.123), a.rollout("max", 0.123), rtol=0.01, atol=1e-7)
    assert b.fused("max").is_cuda
    b.warm()
    np.testing.assert_allclose(b.mean_attention_distance, a.mean_attention_distance, rtol=2e-3)
    np.testing.assert_allclose(b.attention_entropy, a.attention_entropy, rtol=2e-3)


def test_the_gpu_recomputed_weights_are_what_transformers_returns(pair):
    """The float16 weights an analysis recomputes on the GPU from its hidden states are transformers' own
    `output_attentions` there."""
    _, gpu = pair
    b = vitviz.analyze(gpu, vitviz.load_image(ASSETS / "rocket.jpg"), longest=224)
    with torch.inference_mode():
        out = gpu.net(pixel_values=torch.from_numpy(b.pixel_values).cuda(), output_attentions=True)
    own = torch.stack([w[0] for w in out.attentions]).float().cpu().numpy()
    np.testing.assert_allclose(b.attentions.astype(np.float32), own, atol=1e-3)
    on_gpu = b.device_attention(3)  # where fusions and rollouts are made: recomputed there, not sent back
    assert on_gpu.is_cuda and on_gpu.dtype == torch.float16
    np.testing.assert_allclose(on_gpu.float().cpu().numpy(), own[3], atol=1e-3)


def test_inside_a_head_on_the_gpu_is_the_cpus(coffee_pair):
    a, b = coffee_pair
    layer, head, query = 7, 2, 300
    x, y = a.inside_head(layer, head, query), b.inside_head(layer, head, query)
    np.testing.assert_allclose(y.weights, x.weights, rtol=0.02, atol=1e-5)
    np.testing.assert_allclose(y.weights, b.attentions[layer, head, b.query_index(query)], rtol=0.02, atol=1e-5)
    np.testing.assert_allclose(y.output, x.output, rtol=0.02, atol=0.02 * float(np.abs(x.output).max()))


def lively(net: torch.nn.Module) -> torch.nn.Module:
    """He-initialised convolutions. A tiny random depth model's 0.02-std weights shrink its output to ~1e-11
    through the neck and head, which float16 flushes to zero; a trained model's depths are O(1) to O(100),
    and so are these (0.7 to 160)."""
    torch.manual_seed(0)
    for m in net.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d)):
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    return net


@pytest.mark.parametrize("family", sorted(DEPTH_FAMILIES))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_depth_in_half_precision_on_the_gpu_is_the_cpus(family, dtype, tmp_path):
    lively(DEPTH_FAMILIES[family]()).save_pretrained(tmp_path)
    cpu = vitviz.load_depth_model(str(tmp_path), device="cpu")
    gpu = vitviz.load_depth_model(str(tmp_path), device="cuda", dtype=dtype)
    image = vitviz.load_image(ASSETS / "astronaut.jpg")
    r, s = vitviz.estimate_depth(cpu, image), vitviz.estimate_depth(gpu, image)
    assert s.depth.dtype == np.float32 and s.depth.shape == r.depth.shape and np.isfinite(s.depth).all()
    assert correlation(s.depth, r.depth) > 0.99
    assert [st.shape for st in s.stages] == [st.shape for st in r.stages]
    rows = s.encoder.attentions.astype(np.float32).sum(-1)
    np.testing.assert_allclose(rows, 1.0, atol=2e-2)


def test_stats_batches_on_the_gpu_as_one_by_one_on_the_cpu(pair, tmp_path):
    import cv2

    cpu, gpu = pair
    files = []
    for photo in sorted(ASSETS.glob("*.jpg")):
        files.append(tmp_path / f"{photo.stem}.png")
        cv2.imwrite(str(files[-1]), cv2.resize(cv2.imread(str(photo)), (320, 240), interpolation=cv2.INTER_AREA))
    one, _ = stats.over_images(cpu, files, 224, batch=1, progress_bar=False)
    four, _ = stats.over_images(gpu, files, 224, batch=4, progress_bar=False)
    np.testing.assert_allclose(four.distance_mean, one.distance_mean, rtol=2e-3)
    np.testing.assert_allclose(four.entropy_mean, one.entropy_mean, rtol=2e-3)


def test_a_live_frame_on_the_gpu_is_the_cpus(pair):
    cpu, gpu = pair
    frame = np.ascontiguousarray(vitviz.load_image(ASSETS / "chelsea.jpg")[:, ::-1])  # a webcam mirrors
    a, b = analyze_frame(cpu, frame), analyze_frame(gpu, frame)
    assert b.grid == a.grid
    last = b.model.num_layers - 1
    np.testing.assert_allclose(b.attention_map(last), a.attention_map(last), rtol=0.02, atol=1e-6)


@pytest.mark.parametrize("method", ["saliency", "integrated_gradients", "grad_cam", "relevancy"])
def test_attributions_on_the_gpu_are_the_cpus(pair, method):
    cpu, gpu = pair
    image = ASSETS / "rocket.jpg"
    r = attributions.attribute(cpu, image, method, n_steps=8, longest=224)
    s = attributions.attribute(gpu, image, method, n_steps=8, longest=224)
    assert np.isfinite(s.raw).all() and s.raw.shape == r.raw.shape
    if np.ptp(r.raw) < 1e-4 * np.abs(r.raw).max():  # nothing to compare: float32 noise on a flat map
        pytest.skip(f"{method} is flat on these weights (random ones: relevancy is the identity to 1e-6)")
    assert correlation(s.raw, r.raw) > 0.99, method
