"""Dense decoding: a DPT turns ViT tokens into a depth map, and we keep every stage on the way.

The reference text's dense decoder (section 26.2.1): tokens from four encoder layers go
through *reassemble* boxes (read the readout token, assemble tokens into an image-registered
map, project with a 1x1 convolution, resample to scale s), then *combine* (fusion) boxes merge
them coarse to fine, and a small head turns the finest block into depth.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import torch
from torch import nn

from . import maps
from .analysis import Analysis
from .capture import capture
from .families import IMAGENET_MEAN, IMAGENET_STD
from .hub import pretrained_source, read_preprocessor
from .models import VitModel, resolve_device, wrap
from .preprocess import ImageInput, input_size, load_image, prepare_input

DEFAULT_DEPTH_MODEL = "Intel/dpt-hybrid-midas"
DEPTH_CATALOGUE: dict[str, str] = {
    DEFAULT_DEPTH_MODEL: "DPT-Hybrid (ResNet-50 + ViT-B/16), the paper's model, MiDaS training",
    "Intel/dpt-large": "DPT-Large (ViT-L/16), MiDaS training",
    "depth-anything/Depth-Anything-V2-Small-hf": "Depth Anything V2 Small: a DPT decoder on DINOv2-S/14, fast on CPU",
}


@dataclass
class DepthModel:
    """A DPT-style depth model: a ViT encoder, reassemble boxes, fusion (combine) boxes and a head.

    encoder: the ViT inside, through the same adapter as the main model, so the same views
    read its attention. square: transformers' DPT with its own ViT reshapes tokens to a
    square grid, so it must be fed square inputs (the whole image, resized); Depth Anything
    takes any multiple of its patch size. fixed_size: DPT-Hybrid's ResNet stem accepts only
    its training size (input_side x input_side). read_layers: for each reassemble box, the encoder
    layer (1-based) whose tokens it reads, or 0 for a ResNet stage of DPT-Hybrid.
    """

    name: str
    net: nn.Module
    encoder: VitModel
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    input_side: int
    square: bool
    fixed_size: bool
    read_layers: tuple[int, ...]
    reassemble_factors: tuple[float, ...]
    dtype: torch.dtype = torch.float32
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def patch_size(self) -> int:
        return self.encoder.patch_size

    def stage_modules(self) -> dict[str, nn.Module]:
        """The decoder's two stages, each returning a list of four feature maps [1,C,h,w]."""
        return {"reassemble": self.net.neck.reassemble_stage, "fusion": self.net.neck.fusion_stage}

    def forward(self, pixel_values: torch.Tensor):
        """One eager forward: predicted_depth, plus the encoder's attentions and hidden states."""
        with self.lock, torch.inference_mode():
            return self.net(
                pixel_values=pixel_values.to(self.device, self.dtype),
                output_attentions=True,
                output_hidden_states=True,
            )


def wrap_depth(net: nn.Module, name: str, preprocessor: dict | None = None) -> DepthModel:
    """Build the adapter for transformers' DPTForDepthEstimation or DepthAnythingForDepthEstimation.

    preprocessor: the model's preprocessor_config.json, when it has one (mean, std, size).
    """
    cfg = net.config
    pre = preprocessor or {}
    if cfg.model_type == "dpt" and getattr(net, "dpt", None) is not None:
        encoder_net = net.dpt
        square = True
        side = int(pre.get("size", {}).get("height", cfg.image_size))
        default_mean = (0.5, 0.5, 0.5)
        layers = [i + 1 for i in cfg.backbone_out_indices]
        if cfg.is_hybrid:  # the first two reassemble boxes read ResNet stages, not ViT layers
            layers = [0, 0] + layers[2:]
    elif cfg.model_type == "depth_anything":
        encoder_net = net.backbone
        square = False
        side = int(pre.get("size", {}).get("height", 518))
        default_mean = IMAGENET_MEAN
        layers = list(cfg.backbone_config.out_indices)
    else:
        raise ValueError(f"unsupported depth model type {cfg.model_type!r}: vitviz reads DPT and Depth Anything")
    for c in (cfg, getattr(cfg, "backbone_config", None), encoder_net.config):
        if c is not None:
            c._attn_implementation = "eager"  # other kernels return no attention weights
    return DepthModel(
        name=name,
        net=net.eval(),
        encoder=wrap(encoder_net, f"{name} (encoder)"),
        mean=tuple(pre.get("image_mean", default_mean)),
        std=tuple(pre.get("image_std", (0.5, 0.5, 0.5) if square else IMAGENET_STD)),
        input_side=side,
        square=square,
        fixed_size=bool(getattr(cfg, "is_hybrid", False)),
        read_layers=tuple(layers),
        reassemble_factors=tuple(float(f) for f in cfg.reassemble_factors),
    )


def load_depth_model(name: str = DEFAULT_DEPTH_MODEL, device: str = "auto", dtype: str = "auto") -> DepthModel:
    """Load a DPT or Depth Anything model: a hub id from `DEPTH_CATALOGUE` or a local folder.

    Local folders must be in `save_pretrained` layout with safetensors weights. Offline, a hub
    id fails within seconds with ModelUnavailableError. dtype: "auto" is float16 on a GPU and
    float32 on the CPU; "float32", "float16" or "bfloat16" force one.
    """
    from transformers import AutoModelForDepthEstimation

    source, kwargs = pretrained_source(name)
    net = AutoModelForDepthEstimation.from_pretrained(source, attn_implementation="eager", **kwargs)
    preprocessor = read_preprocessor(name, source, kwargs)
    model = wrap_depth(net, name, preprocessor)
    target = resolve_device(device)
    if dtype == "auto":
        dtype = "float16" if target.type == "cuda" else "float32"
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"unknown dtype {dtype!r}: use auto, float32, float16 or bfloat16")
    model.dtype = getattr(torch, dtype)
    model.device = target
    model.net.to(target, model.dtype)
    model.encoder.device = target
    return model


@dataclass
class DecoderStage:
    """One feature map inside the decoder.

    kind: "reassemble" or "fusion". shape: (C, h, w) of the map. scale: input pixels per
    map cell (the text's s). picture: [h,w,3] float32 in [0,1], its first three PCA components.
    """

    name: str
    kind: str
    detail: str
    shape: tuple[int, int, int]
    scale: float
    picture: np.ndarray = field(repr=False)


@dataclass(eq=False)
class DepthResult:
    """depth: [H,W] float32 on the original image's pixel grid, relative inverse depth
    (larger = nearer, unknown scale and shift). prediction: [h',w'] the model's own output.
    pixel_values: the exact model input [1,3,h,w]. stages: reassemble then fusion maps.
    encoder: the encoder's attention and tokens, readable by every attention view.
    """

    model: DepthModel = field(repr=False)
    depth: np.ndarray = field(repr=False)
    prediction: np.ndarray = field(repr=False)
    pixel_values: np.ndarray = field(repr=False)
    stages: list[DecoderStage] = field(repr=False)
    encoder: Analysis = field(repr=False)

    @property
    def nbytes(self) -> int:
        pictures = sum(s.picture.nbytes for s in self.stages)
        return self.depth.nbytes + self.prediction.nbytes + self.pixel_values.nbytes + pictures + self.encoder.nbytes


def depth_input_size(model: DepthModel, height: int, width: int, longest: int | None = None) -> tuple[int, int]:
    """(h, w) of the model input: square for DPT's own ViT, aspect kept (multiples of p) otherwise.

    longest: the input's side in pixels (default: the model's own); DPT-Hybrid always gets its own.
    """
    if longest is not None and not model.patch_size <= longest <= 2048:
        raise ValueError(f"input size must be between {model.patch_size} and 2048 pixels, got {longest}")
    side = model.input_side if model.fixed_size else longest or model.input_side
    if model.square:
        side = max(model.patch_size, side // model.patch_size * model.patch_size)
        return side, side
    return input_size(height, width, model.patch_size, side)


def estimate_depth(
    model: DepthModel, image: ImageInput, longest: int | None = None, progress: Callable[[float], None] | None = None
) -> DepthResult:
    """Run the depth model once on the whole image (no crop) and keep the decoder's stages.

    The model's output is resized back to the image with the same bicubic interpolation as
    transformers' `post_process_depth_estimation`, so it is aligned with the full image:
    the input is the whole image resized, never cropped or padded.
    progress: called with the fraction of the encoder's layers done, after each one; what it raises ends the
    forward there (the app's Stop: a DPT-Large layer is a fraction of a second on a CPU, its forward many).
    """
    rgb = load_image(image)
    size = depth_input_size(model, *rgb.shape[:2], longest)
    pixel_values = prepare_input(rgb, size, model.patch_size, model.mean, model.std)
    captured: dict[str, list[torch.Tensor]] = {}
    hooks = [
        module.register_forward_hook(lambda _m, _i, out, kind=kind: captured.__setitem__(kind, list(out)))
        for kind, module in model.stage_modules().items()
    ]
    if progress is not None:
        layers = model.encoder.blocks
        hooks += [
            block.register_forward_hook(lambda _m, _i, _out, done=done: progress(done))
            for block, done in zip(layers, [(i + 1) / len(layers) for i in range(len(layers))], strict=True)
        ]
    try:
        out = model.forward(torch.from_numpy(pixel_values))
    finally:
        for h in hooks:
            h.remove()
    prediction = out.predicted_depth[:1].float()
    with torch.inference_mode():
        depth = torch.nn.functional.interpolate(
            prediction[:, None], size=rgb.shape[:2], mode="bicubic", align_corners=False
        )[0, 0]
    encoder = capture(model.encoder, rgb, pixel_values, out)
    return DepthResult(
        model=model,
        depth=depth.cpu().numpy(),
        prediction=prediction[0].cpu().numpy(),
        pixel_values=pixel_values,
        stages=decoder_stages(model, size, captured),
        encoder=encoder,
    )


def decoder_stages(
    model: DepthModel, size: tuple[int, int], captured: dict[str, list[torch.Tensor]]
) -> list[DecoderStage]:
    """Name, shape, scale and a PCA picture for each captured reassemble and fusion map."""
    stages = []
    n = len(captured["reassemble"])
    boxes = zip(captured["reassemble"], model.read_layers, model.reassemble_factors, strict=True)
    for i, (feat, layer, factor) in enumerate(boxes):
        source = f"encoder layer {layer}'s tokens" if layer else "a ResNet stage (DPT-Hybrid's convolutional stem)"
        how = f"resampled ×{factor:g}" if layer else "used as they are"
        stages.append(_stage(f"Reassemble {i + 1}", "reassemble", f"{source}, {how}", feat, size))
    # The fusion stage starts from the deepest reassemble map and works back to the finest.
    for i, feat in enumerate(captured["fusion"]):
        detail = f"reassemble {n}" if i == 0 else f"fusion {i} + reassemble {n - i}"
        stages.append(_stage(f"Fusion {i + 1}", "fusion", f"{detail}, then upsampled ×2", feat, size))
    return stages


def _stage(name: str, kind: str, detail: str, feat: torch.Tensor, size: tuple[int, int]) -> DecoderStage:
    c, h, w = feat.shape[1:]
    tokens = feat[0].float().reshape(c, h * w).T.cpu().numpy()
    return DecoderStage(
        name=name,
        kind=kind,
        detail=detail,
        shape=(int(c), int(h), int(w)),
        scale=size[0] / h,
        picture=maps.pca_rgb(tokens, (h, w), 0),
    )


def save_depth(depth: np.ndarray, folder: str | Path, stem: str) -> list[Path]:
    """Write `depth` [H,W] as `<stem>-depth.npy` (float32, as computed) and `<stem>-depth16.png`.

    The PNG holds the relative inverse depth min-max scaled to 0..65535 (bright = near), as
    MiDaS writes its outputs; the .npy keeps the model's own values.
    """
    folder = Path(folder)
    npy, png = folder / f"{stem}-depth.npy", folder / f"{stem}-depth16.png"
    np.save(npy, depth.astype(np.float32))
    lo, hi = float(depth.min()), float(depth.max())
    scaled = (depth - lo) / max(hi - lo, 1e-12) * 65535.0
    if not cv2.imwrite(str(png), np.round(scaled).astype(np.uint16)):
        raise OSError(f"could not write {png}")
    return [npy, png]
