"""Shared fixtures: tiny random models of every family, the embedded model, test images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as tf

import vitviz

ASSETS = Path(__file__).resolve().parent.parent / "assets"
TINY = dict(
    hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8
)


def tiny_vit() -> vitviz.VitModel:
    torch.manual_seed(0)
    cfg = tf.ViTConfig(**TINY, num_labels=5, id2label={i: f"class {i}" for i in range(5)})
    return vitviz.wrap(tf.ViTForImageClassification(cfg), "tiny-vit")


def tiny_deit() -> vitviz.VitModel:
    torch.manual_seed(1)
    cfg = tf.DeiTConfig(**TINY, num_labels=5, id2label={i: f"class {i}" for i in range(5)})
    net = tf.DeiTForImageClassificationWithTeacher(cfg)
    torch.nn.init.normal_(net.deit.embeddings.position_embeddings, std=0.02)  # zeros at init
    return vitviz.wrap(net, "tiny-deit-distilled")


def tiny_dinov2_registers() -> vitviz.VitModel:
    torch.manual_seed(2)
    cfg = tf.Dinov2WithRegistersConfig(**TINY, num_register_tokens=4)
    return vitviz.wrap(tf.Dinov2WithRegistersModel(cfg), "tiny-dinov2-registers")


FAMILIES = {"vit": tiny_vit, "deit": tiny_deit, "dinov2_registers": tiny_dinov2_registers}
PREFIX_COUNT = {"vit": 1, "deit": 2, "dinov2_registers": 5}


@pytest.fixture(params=sorted(FAMILIES))
def family(request) -> tuple[str, vitviz.VitModel]:
    return request.param, FAMILIES[request.param]()


@pytest.fixture(scope="session")
def embedded() -> vitviz.VitModel:
    return vitviz.load_model(device="cpu")


@pytest.fixture(scope="session")
def coffee() -> np.ndarray:
    return vitviz.load_image(ASSETS / "coffee.jpg")


def random_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def reference_outputs(model: vitviz.VitModel, pixel_values: np.ndarray):
    """transformers' own forward with output_attentions: the independent ground truth."""
    extra = {"interpolate_pos_encoding": True} if model.fixed_size else {}
    with torch.no_grad():
        return model.net(
            pixel_values=torch.from_numpy(pixel_values),
            output_attentions=True,
            output_hidden_states=True,
            **extra,
        )
