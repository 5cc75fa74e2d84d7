"""The embedded model against onnxruntime on the original file, and model loading."""

from __future__ import annotations

import os
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import random_image, tiny_dinov2_registers

import vitviz
from vitviz import embedded
from vitviz.preprocess import prepare_input

BACKBONE_OUT = "/backbone/layernorm/Add_1_output_0"


@pytest.fixture(scope="module")
def onnx_session() -> ort.InferenceSession:
    """The original file, with the backbone's final LayerNorm exposed as a second output."""
    model = onnx.load(str(embedded.onnx_path()))
    model.graph.output.append(onnx.helper.make_tensor_value_info(BACKBONE_OUT, onnx.TensorProto.FLOAT, None))
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_embedded_model_facts(embedded):
    assert embedded.patch_size == 14 and embedded.native_grid == (37, 37)
    assert embedded.prefix_tokens == ("CLS",) and embedded.labels is None
    assert (embedded.num_layers, embedded.num_heads) == (12, 6)
    assert embedded.pos_embed_similarity().shape == (37, 37, 37, 37)


def test_backbone_and_dense_head_match_onnxruntime(embedded, coffee, onnx_session):
    x = prepare_input(coffee, (224, 224), 14, embedded.mean, embedded.std)
    importance, backbone = onnx_session.run(None, {"input_image": x})
    with torch.no_grad():
        ours = embedded.net(pixel_values=torch.from_numpy(x)).last_hidden_state.numpy()
    assert np.abs(ours - backbone).max() < 1e-4
    np.testing.assert_allclose(embedded.dense_head(coffee, (224, 224)), importance[0, 0], atol=1e-5)


def test_saliency_on_the_analysis_grid(embedded, coffee):
    a = vitviz.analyze(embedded, coffee)
    assert a.grid == (21, 32) and a.pixel_values.shape == (1, 3, 294, 448)
    sal = a.saliency()
    assert sal.shape == (294, 448) and 0.0 <= sal.min() < sal.max() <= 1.0
    assert a.saliency() is sal  # computed once


def test_conversion_is_cached_as_safetensors(tmp_path, monkeypatch, coffee, onnx_session):
    monkeypatch.setenv("VITVIZ_CACHE", str(tmp_path))
    net, decoder = embedded.load_embedded()
    # A fresh conversion (whatever the user's cache holds) computes what the original ONNX file computes.
    x = prepare_input(coffee, (224, 224), 14, vitviz.models.IMAGENET_MEAN, vitviz.models.IMAGENET_STD)
    importance, backbone = onnx_session.run(None, {"input_image": x})
    model = vitviz.wrap(net, "fresh", decoder=decoder)
    with torch.no_grad():
        assert np.abs(net(pixel_values=torch.from_numpy(x)).last_hidden_state.numpy() - backbone).max() < 1e-4
    np.testing.assert_allclose(model.dense_head(coffee, (224, 224)), importance[0, 0], atol=1e-5)
    folder = embedded.cache_dir()
    assert (folder / "model.safetensors").is_file() and (folder / "decoder.safetensors").is_file()
    assert not list(folder.glob("*.bin"))
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    net2, _ = embedded.load_embedded()
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime  # reused, not rewritten
    for (k, v), v2 in zip(net.state_dict().items(), net2.state_dict().values(), strict=False):
        assert torch.equal(v, v2), k


def test_local_folder_loads_safetensors_only(tmp_path):
    model = tiny_dinov2_registers()
    model.net.save_pretrained(tmp_path / "ok", safe_serialization=True)
    loaded = vitviz.load_model(str(tmp_path / "ok"), device="cpu")
    assert loaded.prefix_tokens == model.prefix_tokens
    image = random_image(32, 48)
    np.testing.assert_allclose(
        vitviz.analyze(loaded, image, longest=48).attentions, vitviz.analyze(model, image, longest=48).attentions
    )
    (tmp_path / "pickle").mkdir()
    (tmp_path / "ok" / "config.json").rename(tmp_path / "pickle" / "config.json")
    torch.save(model.net.state_dict(), tmp_path / "pickle" / "pytorch_model.bin")
    with pytest.raises(vitviz.ModelUnavailableError, match="safetensors"):
        vitviz.load_model(str(tmp_path / "pickle"))


def test_offline_hub_model_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on loopback port 9
    start = time.perf_counter()
    with pytest.raises(vitviz.ModelUnavailableError, match="no network"):
        vitviz.load_model("google/vit-base-patch16-224")
    assert time.perf_counter() - start < 5.0


def test_unknown_names_and_devices():
    with pytest.raises(ValueError, match="unknown model"):
        vitviz.load_model("not-a-model")
    with pytest.raises(ValueError, match="unknown device"):
        vitviz.load_model("dinov2-small", device="tpu")


def test_a_killed_conversion_leaves_nothing_behind(tmp_path):
    stale, fresh = tmp_path / ".convert-killed", tmp_path / ".convert-running"
    for folder in (stale, fresh):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half a file")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    assert embedded.remove_stale_conversions(tmp_path) == [stale]
    assert not stale.exists() and fresh.exists()  # a conversion still running in another process is kept
