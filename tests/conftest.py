"""Shared fixtures: tiny random models of every family, the embedded model, test images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as tf

import vitviz

ASSETS = vitviz.ASSETS  # the package's own copy: present in a checkout, an sdist and a wheel
TINY = dict(
    hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8
)


TIER_OF_FILE = {"test_browser.py": "browser", "test_package.py": "package", "test_cuda.py": "gpu"}
APP_FIXTURES = {"client", "depth_app", "app", "app_page"}  # the fixtures that serve the app


def pytest_collection_modifyitems(items) -> None:
    """Whole files belong to one tier; single tests carry their own markers. A test that serves the app (through
    one of APP_FIXTURES, or marked `app` itself) is `app`, and `slow` too: the quick tier starts no server."""
    for item in items:
        tier = TIER_OF_FILE.get(Path(str(item.fspath)).name)
        if tier:
            item.add_marker(tier)
        if APP_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker("app")
        if item.get_closest_marker("app") is not None:
            item.add_marker("slow")


def pytest_configure(config) -> None:
    """Under pytest-xdist (`-n 2`), each worker's torch on one thread: two workers of two threads each on two
    cores would spend their time waiting for each other. The processes that tests start (`python -c`, `python -m
    vitviz`, the served app) import this checkout from any working directory, as pyproject's `pythonpath` makes
    this one do."""
    import os

    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


RUNNING: list = [None]  # the test being set up or run


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    """Before its fixtures: a server that this test's fixtures or body start is checked against its markers."""
    RUNNING[0] = item
    import sys

    if "gradio" in sys.modules:
        guard_launch(sys.modules["gradio"].Blocks)


def refuse_unmarked(what: str) -> None:
    """A RuntimeError when the running test, not marked `app`, starts a server (`what`)."""
    item = RUNNING[0]
    if item is not None and item.get_closest_marker("app") is None:
        raise RuntimeError(f"{item.nodeid} starts {what}: mark it @pytest.mark.app (the quick tier starts no server)")


def guard_launch(blocks: type) -> None:
    """Make `blocks.launch` (Gradio's) refuse to serve for a test not marked `app`; once."""
    launch = blocks.launch
    if getattr(launch, "guarded", False):
        return

    def guarded(self, *args, **kwargs):
        refuse_unmarked("a Gradio server")
        return launch(self, *args, **kwargs)

    guarded.guarded = True
    blocks.launch = guarded


def _guard_app_processes() -> None:
    """The app started as a process of its own (support.harness.running_app, which app_server wraps) refuses too."""
    from contextlib import contextmanager

    from support import harness

    start = harness.running_app

    @contextmanager
    def running_app(*args, **kwargs):
        refuse_unmarked("the app as a process")
        with start(*args, **kwargs) as served:
            yield served

    harness.running_app = running_app


_guard_app_processes()


def sharp_heads(model: vitviz.VitModel, seed: int = 0, std: float = 0.3) -> vitviz.VitModel:
    """`model` with every layer's query and key projections drawn again (normal, `std`), so that each head attends
    sharply and unlike the others: at init (std 0.02) every head's rows are near uniform, and a test that swaps two
    heads could not tell."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in range(model.num_layers):
            parts = model.layer_parts(layer)
            for proj in (parts.q, parts.k):
                proj.weight.copy_(torch.randn(proj.weight.shape, generator=g) * std)
    return model


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


def tiny_dino_vit() -> vitviz.VitModel:
    """DINO's ViT: a ViTModel with no head, its readout the CLS token's norm."""
    torch.manual_seed(3)
    return vitviz.wrap(tf.ViTModel(tf.ViTConfig(**TINY), add_pooling_layer=False), "tiny-dino")


def tiny_dinov2() -> vitviz.VitModel:
    torch.manual_seed(4)
    return vitviz.wrap(tf.Dinov2Model(tf.Dinov2Config(**TINY)), "tiny-dinov2")


def tiny_dense() -> vitviz.VitModel:
    """A tiny DINOv2 with a random dense head of the embedded model's kind: a dense output, in milliseconds."""
    from vitviz.embedded import DenseHead

    torch.manual_seed(12)
    net = tf.Dinov2Model(tf.Dinov2Config(**TINY))
    with torch.no_grad():  # a final norm that is not the identity, so that a test can tell normed tokens apart
        for p in net.layernorm.parameters():
            p.copy_(torch.randn(p.shape) * 0.5 + 1)
    head = DenseHead(TINY["hidden_size"])
    with torch.no_grad():  # maps that span most of [0, 1], not a random head's 0.5 ± 1e-5
        head.final_conv.weight.mul_(300)
    return vitviz.wrap(net, "tiny-dense", dense_head=head)


TINY_TEXT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=99)


def tiny_clip_vision() -> vitviz.VitModel:
    torch.manual_seed(5)
    return vitviz.wrap(tf.CLIPVisionModel(tf.CLIPVisionConfig(**TINY)), "tiny-clip-vision")


def tiny_clip() -> vitviz.VitModel:
    torch.manual_seed(6)
    cfg = tf.CLIPConfig(
        vision_config=TINY, text_config={**TINY_TEXT, "bos_token_id": 0, "eos_token_id": 2}, projection_dim=16
    )
    return vitviz.wrap(tf.CLIPModel(cfg), "tiny-clip")


def tiny_siglip_vision() -> vitviz.VitModel:
    torch.manual_seed(7)
    return vitviz.wrap(tf.SiglipVisionModel(tf.SiglipVisionConfig(**TINY)), "tiny-siglip-vision")


def tiny_siglip() -> vitviz.VitModel:
    torch.manual_seed(8)
    return vitviz.wrap(tf.SiglipModel(tf.SiglipConfig(vision_config=TINY, text_config=TINY_TEXT)), "tiny-siglip")


FAMILIES = {
    "vit": tiny_vit,
    "deit": tiny_deit,
    "dino": tiny_dino_vit,
    "dinov2": tiny_dinov2,
    "dinov2_registers": tiny_dinov2_registers,
    "clip_vision": tiny_clip_vision,
    "clip": tiny_clip,
    "siglip_vision": tiny_siglip_vision,
    "siglip": tiny_siglip,
}
PREFIX_COUNT = {"vit": 1, "deit": 2, "dino": 1, "dinov2": 1, "dinov2_registers": 5, "clip_vision": 1, "clip": 1}
PREFIX_COUNT |= {"siglip_vision": 0, "siglip": 0}


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
        return model.family.runner(model.net)(
            pixel_values=torch.from_numpy(pixel_values),
            output_attentions=True,
            output_hidden_states=True,
            **extra,
        )


def reference_readout_rows(model: vitviz.VitModel, ref) -> np.ndarray | None:
    """[H,N] an attention-pool's probe attention, per head, by calling transformers' own pooling module on its
    final tokens (not through vitviz's hooks); None for token readouts."""
    encoder = model.family.encoder(model.net)
    head = getattr(encoder, "head", None)
    if head is None or not model.readout.pool:
        return None
    with torch.no_grad():
        tokens = encoder.post_layernorm(ref.hidden_states[-1])
        probe = head.probe.repeat(len(tokens), 1, 1)
        return head.attention(probe, tokens, tokens, average_attn_weights=False)[1][0, :, 0].numpy()


def expected_readout_row(model: vitviz.VitModel, ref, layer: int) -> np.ndarray:
    """[H,N] the readout's attention row in `layer` from transformers' outputs: the readout tokens' rows
    averaged, or the probe's attention (the same for every layer)."""
    pool = reference_readout_rows(model, ref)
    if pool is not None:
        return pool
    return ref.attentions[layer][0][:, list(model.readout.tokens)].numpy().mean(1)


TINY_ENCODER = {**TINY, "num_hidden_layers": 4, "image_size": 64, "patch_size": 16}
TINY_NECK = dict(neck_hidden_sizes=[8, 16, 32, 32], fusion_hidden_size=16, reassemble_factors=[4, 2, 1, 0.5])


def tiny_dpt() -> torch.nn.Module:
    """DPT with its own ViT (as Intel/dpt-large): square inputs only."""
    torch.manual_seed(3)
    cfg = tf.DPTConfig(**TINY_ENCODER, backbone_out_indices=[0, 1, 2, 3], **TINY_NECK)
    return tf.DPTForDepthEstimation(cfg)


def tiny_dpt_hybrid() -> torch.nn.Module:
    """DPT-Hybrid (as Intel/dpt-hybrid-midas): a BiT ResNet stem, then ViT layers."""
    torch.manual_seed(4)
    bit = tf.BitConfig(
        global_padding="same",
        layer_type="bottleneck",
        depths=[1, 1, 1],
        hidden_sizes=[8, 16, 32],
        embedding_size=8,
        num_groups=4,
        out_features=["stage1", "stage2", "stage3"],
        embedding_dynamic_padding=True,
    )
    cfg = tf.DPTConfig(
        **TINY_ENCODER,
        is_hybrid=True,
        backbone_config=bit,
        backbone_featmap_shape=[1, 32, 4, 4],
        neck_ignore_stages=[0, 1],
        backbone_out_indices=[0, 1, 2, 3],
        **{**TINY_NECK, "reassemble_factors": [1, 1, 1, 0.5]},
    )
    return tf.DPTForDepthEstimation(cfg)


def tiny_depth_anything() -> torch.nn.Module:
    """Depth Anything: a DPT decoder on a DINOv2 backbone, any multiple of 14."""
    torch.manual_seed(5)
    backbone = tf.Dinov2Config(
        **{**TINY_ENCODER, "image_size": 56, "patch_size": 14}, out_indices=[1, 2, 3, 4], reshape_hidden_states=False
    )
    cfg = tf.DepthAnythingConfig(
        backbone_config=backbone, reassemble_hidden_size=32, patch_size=14, head_hidden_size=8, **TINY_NECK
    )
    return tf.DepthAnythingForDepthEstimation(cfg)


DEPTH_FAMILIES = {"dpt": tiny_dpt, "dpt_hybrid": tiny_dpt_hybrid, "depth_anything": tiny_depth_anything}


@pytest.fixture(params=sorted(DEPTH_FAMILIES))
def depth_folder(request, tmp_path) -> tuple[str, Path]:
    """A tiny random depth model saved with save_pretrained (safetensors) to a temp folder."""
    DEPTH_FAMILIES[request.param]().save_pretrained(tmp_path)
    return request.param, tmp_path


def reference_fused(attentions: np.ndarray, fusion: str) -> np.ndarray:
    """[L,N,N] float64 the heads of [L,H,N,N] `attentions` fused by their mean, max or min."""
    a = np.asarray(attentions, np.float64)
    return {"mean": a.mean(1), "max": a.max(1), "min": a.min(1)}[fusion]


def reference_threshold(layer: np.ndarray, ratio: float) -> float:
    """The k-th smallest weight of one fused layer [N,N], k = max(1, int(N² · ratio)): a discard drops it and
    every weight below it."""
    return float(np.sort(layer, axis=None)[max(1, int(layer.size * ratio)) - 1])


def reference_rollout(fused: np.ndarray, ratio: float, start: np.ndarray, keep: tuple[int, ...]) -> np.ndarray:
    """[N] float64 attention rollout (Abnar & Zuidema 2020) of fused heads [L,N,N], written out as the paper
    does: each layer's weights at or below its `ratio` threshold zeroed (never the `keep` columns), the identity
    added and the rows normalised, Â_l = (A_l + I) / rowsum, then start · Â_L ... Â_1."""
    row = np.asarray(start, np.float64)
    for layer in fused[::-1]:
        a = layer.copy()
        if ratio > 0:
            a[a <= reference_threshold(layer, ratio)] = 0.0
            a[:, list(keep)] = layer[:, list(keep)]
        a = a + np.eye(len(a))
        row = row @ (a / a.sum(axis=1, keepdims=True))
    return row
