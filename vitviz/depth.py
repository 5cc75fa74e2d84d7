"""Dense decoding: a DPT turns ViT tokens into a depth map, and we keep every stage on the way.

The reference text's dense decoder (section 26.2.1): tokens from four encoder layers go
through *reassemble* boxes (read the readout token, assemble tokens into an image-registered
map, project with a 1x1 convolution, resample to scale s), then *combine* (fusion) boxes merge
them coarse to fine, and a small head turns the finest block into depth.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import torch

from . import maps
from .analysis import Analysis, capture
from .models import DepthModel
from .preprocess import ImageInput, input_size, load_image, prepare_input


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


def estimate_depth(model: DepthModel, image: ImageInput, longest: int | None = None) -> DepthResult:
    """Run the depth model once on the whole image (no crop) and keep the decoder's stages.

    The model's output is resized back to the image with the same bicubic interpolation as
    transformers' `post_process_depth_estimation`, so it is aligned with the full image:
    the input is the whole image resized, never cropped or padded.
    """
    rgb = load_image(image)
    size = depth_input_size(model, *rgb.shape[:2], longest)
    pixel_values = prepare_input(rgb, size, model.patch_size, model.mean, model.std)
    captured: dict[str, list[torch.Tensor]] = {}
    hooks = [
        module.register_forward_hook(lambda _m, _i, out, kind=kind: captured.__setitem__(kind, list(out)))
        for kind, module in model.stage_modules().items()
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
