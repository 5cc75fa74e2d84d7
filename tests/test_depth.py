"""Depth: tiny random DPT, DPT-Hybrid and Depth Anything models, loaded from save_pretrained folders."""

from __future__ import annotations

import time

import cv2
import numpy as np
import pytest
import torch
import transformers as tf
from conftest import random_image
from transformers.models.dpt.image_processing_pil_dpt import DPTImageProcessorPil

import vitviz


def reference(folder, pixel_values: np.ndarray, size: tuple[int, int]):
    """transformers' own model and post-processing, independent of vitviz."""
    net = tf.AutoModelForDepthEstimation.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        out = net(torch.from_numpy(pixel_values), output_attentions=True)
    depth = DPTImageProcessorPil().post_process_depth_estimation(out, target_sizes=[size])[0]["predicted_depth"]
    return out, depth.numpy()


def test_depth_matches_transformers_on_the_full_image(depth_folder):
    name, folder = depth_folder
    dm = vitviz.load_depth_model(str(folder), device="cpu")
    image = random_image(75, 130, seed=7)
    r = vitviz.estimate_depth(dm, image, longest=112)
    assert r.depth.shape == (75, 130) and r.depth.dtype == np.float32
    h, w = r.pixel_values.shape[2:]
    if name == "dpt_hybrid":
        assert h == w == 64, "DPT-Hybrid's ResNet stem takes only its training size"
    elif name == "dpt":
        assert h == w == 112, "DPT's own ViT needs a square grid"
    else:
        assert (h, w) == (70, 112) and h % 14 == 0 and w % 14 == 0, "Depth Anything keeps the aspect ratio"
    out, expected = reference(folder, r.pixel_values, (75, 130))
    scale = float(np.abs(expected).max()) + 1e-6
    assert np.abs(r.depth - expected).max() / scale < 1e-4
    np.testing.assert_allclose(r.prediction, out.predicted_depth[0].numpy(), rtol=1e-4, atol=1e-6)
    # the encoder's attention, as transformers returns it, rows summing to 1
    ref = np.stack([a[0].numpy() for a in out.attentions])
    # float16 storage: relative rounding 2**-11
    np.testing.assert_allclose(r.encoder.attentions.astype(np.float32), ref, rtol=2**-11, atol=2**-24)
    np.testing.assert_allclose(r.encoder.attentions.astype(np.float32).sum(-1), 1.0, atol=2**-11)
    assert r.encoder.grid == (h // dm.patch_size, w // dm.patch_size)


def test_model_input_is_the_whole_image_no_crop_no_shift(depth_folder):
    """Colour bands at the four edges of a non-square image must reach the input's four edges."""
    _, folder = depth_folder
    dm = vitviz.load_depth_model(str(folder), device="cpu")
    image = np.full((120, 300, 3), 128, np.uint8)
    image[:, :30] = (255, 0, 0)
    image[:, -30:] = (0, 0, 255)
    image[:12, 30:-30] = (0, 255, 0)
    image[-12:, 30:-30] = (255, 255, 0)
    r = vitviz.estimate_depth(dm, image, longest=112)
    rgb = r.pixel_values[0].transpose(1, 2, 0) * np.float32(dm.std) + np.float32(dm.mean)
    h, w = rgb.shape[:2]
    mid_y, mid_x = h // 2, w // 2
    np.testing.assert_allclose(rgb[mid_y, 0], (1, 0, 0), atol=0.05)
    np.testing.assert_allclose(rgb[mid_y, w - 1], (0, 0, 1), atol=0.05)
    np.testing.assert_allclose(rgb[0, mid_x], (0, 1, 0), atol=0.05)
    np.testing.assert_allclose(rgb[h - 1, mid_x], (1, 1, 0), atol=0.05)
    # the red band covers 10% of the width in the input as in the image
    red = (rgb[mid_y, :, 0] > 0.9) & (rgb[mid_y, :, 2] < 0.1)
    assert abs(red.mean() - 0.1) <= 1.5 / w


def test_decoder_stages_count_shapes_and_names(depth_folder):
    name, folder = depth_folder
    dm = vitviz.load_depth_model(str(folder), device="cpu")
    r = vitviz.estimate_depth(dm, random_image(64, 64), longest=112)
    reassemble = [s for s in r.stages if s.kind == "reassemble"]
    fusion = [s for s in r.stages if s.kind == "fusion"]
    assert [s.name for s in reassemble] == [f"Reassemble {i}" for i in range(1, 5)]
    assert [s.name for s in fusion] == [f"Fusion {i}" for i in range(1, 5)]
    assert [s.shape[0] for s in reassemble] == [8, 16, 32, 32]  # neck_hidden_sizes
    assert all(s.shape[0] == 16 for s in fusion)  # fusion_hidden_size
    # each fusion map is twice as fine as the one before
    assert [s.shape[1] * 2 for s in fusion[:-1]] == [s.shape[1] for s in fusion[1:]]
    grid = r.encoder.grid[0]
    if name == "dpt_hybrid":
        assert "ResNet" in reassemble[0].detail and reassemble[3].shape[1] == -(-grid // 2)
    else:
        assert [s.shape[1] for s in reassemble] == [grid * 4, grid * 2, grid, -(-grid // 2)]
    for s in r.stages:
        assert s.picture.shape == (*s.shape[1:], 3) and 0 <= s.picture.min() and s.picture.max() <= 1
        assert s.scale == pytest.approx(r.pixel_values.shape[2] / s.shape[1])


def test_save_depth_writes_16_bit_png_and_npy(tmp_path):
    depth = np.linspace(0, 3, 40 * 60, dtype=np.float32).reshape(40, 60)
    npy, png = vitviz.depth.save_depth(depth, tmp_path, "cat")
    np.testing.assert_array_equal(np.load(npy), depth)
    img = cv2.imread(str(png), cv2.IMREAD_UNCHANGED)
    assert img.dtype == np.uint16 and img.shape == (40, 60)
    assert img.min() == 0 and img.max() == 65535 and img[0, 0] < img[-1, -1]


def test_folder_without_safetensors_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(vitviz.ModelUnavailableError, match="safetensors"):
        vitviz.load_depth_model(str(tmp_path), device="cpu")


def test_offline_hub_id_fails_fast_and_says_how_to_enable(monkeypatch):
    """In Python the message names no command-line option: the app and the commands add their own."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(vitviz.ModelUnavailableError, match="no network.*give a local folder") as raised:
        vitviz.load_depth_model("vitviz-tests/no-such-depth-model", device="cpu")
    assert time.monotonic() - start < 5
    assert "--" not in str(raised.value)


def test_bad_input_size_names_the_problem(depth_folder):
    _, folder = depth_folder
    dm = vitviz.load_depth_model(str(folder), device="cpu")
    with pytest.raises(ValueError, match="input size"):
        vitviz.estimate_depth(dm, random_image(64, 64), longest=4000)


class Halt(Exception):
    """What the progress callback raises to stop a run (the app's `heavy.stoppable` raises a ValueError)."""


def test_progress_follows_the_encoders_layers_and_what_it_raises_ends_the_forward(depth_folder):
    """progress gets the fraction of the encoder's layers done right after each one ran, as hooks of the test's own
    on the same blocks count them; what it raises ends the forward there: the decoder never runs, the model's lock
    is free, and no hook is left behind for the next run."""
    _, folder = depth_folder
    dm = vitviz.load_depth_model(str(folder), device="cpu")
    blocks, ran = dm.encoder.blocks, []
    for i, block in enumerate(blocks):
        block.register_forward_hook(lambda _m, _i, _o, i=i: ran.append(i))
    fused = []
    dm.stage_modules()["fusion"].register_forward_hook(lambda *_: fused.append(True))
    said = []
    vitviz.estimate_depth(dm, random_image(64, 64), progress=lambda f: said.append((f, len(ran))))
    n = len(blocks)
    assert said == [((i + 1) / n, i + 1) for i in range(n)] and fused == [True]

    def halt_at_half(fraction: float) -> None:
        if fraction >= 0.5:
            raise Halt

    ran.clear()
    fused.clear()
    with pytest.raises(Halt):
        vitviz.estimate_depth(dm, random_image(64, 64), progress=halt_at_half)
    assert ran == list(range(n // 2)) and fused == []
    assert dm.lock.acquire(blocking=False)
    dm.lock.release()
    ran.clear()
    vitviz.estimate_depth(dm, random_image(64, 64))  # no progress: nothing of the last run's calls it
    assert ran == list(range(n))
