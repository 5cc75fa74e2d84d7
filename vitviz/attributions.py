"""Attributions: which pixels or patches drive one output of the model.

Captum does the gradient and perturbation methods (one uniform call per method); the
transformer relevancy of Chefer et al. (2021) is computed here from attention gradients.
The target is one scalar per image: a class logit, the embedded model's dense head averaged
(over the image or a box), the image-text logit of a CLIP or SigLIP model with its text tower (Chefer et al.'s
CLIP relevancy: which pixels make this photo match "a dog"?), or, for encoders without a head, the readout
token's norm.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import torch
from torch import nn

from .analysis import Analysis
from .capture import capture
from .models import VitModel
from .preprocess import ImageInput, input_size, load_image, prepare_input
from .relevance import legrad, relevancy

METHODS: dict[str, str] = {
    "integrated_gradients": "Integrated Gradients",
    "saliency": "Saliency (|gradient|)",
    "input_x_gradient": "Input × Gradient",
    "grad_cam": "Grad-CAM on one block",
    "occlusion": "Occlusion (one patch at a time)",
    "relevancy": "Transformer relevancy (Chefer et al. 2021)",
    "legrad": "LeGrad (Bousselham et al. 2024)",
}
BASELINES = ("blurred", "black", "mean colour")  # blurred first: IG converges along its path
Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in pixels of the original image


@dataclass(eq=False)
class Attribution:
    """map: [H,W] float32 on the original image's pixel grid (larger = drives the target up).
    raw: the attributions on the model input: [1,3,h,w] for pixel methods, [gh,gw] for
    Grad-CAM, relevancy and occlusion (the target's drop when that patch is hidden). delta: Integrated
    Gradients' convergence delta (sum(raw) - (f(x) - f(baseline))), else None.
    """

    method: str
    map: np.ndarray
    raw: np.ndarray
    delta: float | None
    target: str
    score: float  # the target's value on the image
    grid: tuple[int, int]
    seconds: float


def attribution_size(model: VitModel, height: int, width: int, longest: int | None = None) -> tuple[int, int]:
    """The model input (h, w) for attributions: the size the output was trained at.

    Classifiers get their native square; the embedded dense head its 224x224; other
    encoders an aspect-kept input, 224 px on the longest side unless `longest` is given.
    """
    p = model.patch_size
    if longest is None and (model.fixed_size or model.dense_head is not None):
        if model.dense_head is not None:
            from .embedded import HOME_SIZE

            return HOME_SIZE, HOME_SIZE
        return model.native_grid[0] * p, model.native_grid[1] * p
    return input_size(height, width, p, longest or 224)


def targets(model: VitModel, image: ImageInput, k: int = 5) -> list[tuple[str, int | None]]:
    """The targets to offer: (description, target) pairs, the default first."""
    if model.labels is None:
        return [(describe(model, None, None), None)]
    rgb = load_image(image)
    x = torch.from_numpy(_input(model, rgb, None))
    logits = model.forward(x).logits[0].float()
    probs = torch.softmax(logits, 0)
    best = torch.argsort(probs, descending=True)[:k].tolist()
    return [(f"class {i}: {model.labels[i]} ({probs[i]:.0%})", i) for i in best]


Text = str | Sequence[int]  # a text target: words, or token ids of the model's tokenizer


def describe(model: VitModel, target: int | None, box: Box | None, text: Text | None = None) -> str:
    if text is not None:
        return f"the image-text similarity with {_quoted(text)} ({model.family.name}'s logit)"
    if model.labels is not None:
        return f"the logit of class {target}: {model.labels[target]}"
    if model.dense_head is not None:
        inside = "inside the box" if box else "over the whole image"
        return f"the dense head's mean output {inside}"
    return f"the norm of the readout vector, read from {model.readout.name} (this encoder has no output head)"


def attribute(
    model: VitModel,
    image: ImageInput,
    method: str = "integrated_gradients",
    target: int | None = None,
    n_steps: int = 32,
    baseline: str = "blurred",
    nt_samples: int = 0,
    nt_stdev: float = 0.15,
    layer: int | None = None,
    box: Box | None = None,
    internal_batch_size: int = 8,
    longest: int | None = None,
    progress: Callable[[float], None] | None = None,
    text: Text | None = None,
) -> Attribution:
    """Attribute one scalar output of `model` on `image` to its input with `method` (see METHODS).

    target: a class index for classifiers (default: the top-1 class); ignored otherwise.
    n_steps, internal_batch_size: Integrated Gradients' path steps and the batch size of its
    (and occlusion's) forward passes, which bounds memory. baseline: what "absent" means for
    IG and occlusion (black, blurred or the dataset's mean colour). nt_samples > 0 wraps IG in
    a SmoothGrad NoiseTunnel with noise of `nt_stdev` (in normalised input units).
    layer: the block whose input tokens Grad-CAM reads (default: the last). box: a region of the original image for
    the dense head's target. progress: called with the fraction done. text: for a CLIP or SigLIP model with its
    text tower, the target is the image's similarity logit with this text (words, or token ids).
    """
    if method not in METHODS:
        raise ValueError(f"unknown attribution method {method!r}: use one of {', '.join(METHODS)}")
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}: use one of {', '.join(BASELINES)}")
    if not 1 <= n_steps <= 512:
        raise ValueError(f"n_steps must be between 1 and 512, got {n_steps}")
    if not 1 <= internal_batch_size <= 256:
        raise ValueError(f"internal_batch_size must be between 1 and 256, got {internal_batch_size}")
    rgb = load_image(image)
    start = time.perf_counter()
    with model.lock:
        x, score_fn, score, target = target_function(model, rgb, target, box, longest, progress, text)
        grid = score_fn.grid
        score_fn.expected = _expected_batches(method, n_steps, nt_samples, internal_batch_size, grid)
        raw, delta = _run(method, model, score_fn, x, rgb, grid, n_steps, baseline, nt_samples, nt_stdev, layer,
                          internal_batch_size)  # fmt: skip
    return Attribution(
        method=method,
        map=to_image(raw, rgb.shape[:2]),
        raw=raw,
        delta=delta,
        target=describe(model, target, box, text),
        score=score,
        grid=grid,
        seconds=time.perf_counter() - start,
    )


def target_function(
    model: VitModel,
    rgb: np.ndarray,
    target: int | None = None,
    box: Box | None = None,
    longest: int | None = None,
    progress: Callable[[float], None] | None = None,
    text: Text | None = None,
) -> tuple[torch.Tensor, _CountingScore, float, int | None]:
    """The input that attributions use for `rgb` [H,W,3] (see attribution_size), the target as a function of
    such inputs ([B,3,h,w] -> [B]), its value on this image, and the class it reads (the top-1 class when
    `target` is None; None without labels). text: the image-text similarity is the target instead."""
    features = None if text is None else model.text_features(text)
    x = torch.from_numpy(_input(model, rgb, longest)).to(model.device)
    grid = (x.shape[2] // model.patch_size, x.shape[3] // model.patch_size)
    with model.lock:
        with torch.no_grad():
            out = model.forward(x, attentions="all", grad=True)  # the default class and the target's value
        if model.labels is not None and target is None and features is None:
            target = int(out.logits[0].argmax())
        if model.labels is not None and features is None and not 0 <= int(target) < len(model.labels):
            raise ValueError(f"target must be a class index in [0, {len(model.labels)}), got {target}")
        region = _box_mask(box, rgb.shape[:2], x.shape[2:], model.device) if model.dense_head is not None else None
        score_fn = _CountingScore(model, target, grid, region, progress, features)
        with torch.no_grad():
            score = float(score_fn.from_output(out, x)[0])
    return x, score_fn, score, target


def _quoted(text: Text) -> str:
    return f'"{text}"' if isinstance(text, str) else f"the token ids {list(text)}"


def to_image(raw: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Attributions on the input ([1,3,h,w], summed over colour) or on patches ([gh,gw]) -> [H,W].

    Patch maps are upsampled bilinearly from patch centres; pixel maps are resized with area
    averaging when shrinking, so no attribution mass is dropped.
    """
    m = raw[0].sum(0) if raw.ndim == 4 else raw
    m = m.astype(np.float32)
    h, w = size
    shrinking = m.shape[0] * m.shape[1] > h * w
    return cv2.resize(m, (w, h), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR)


def patch_scores(raw: np.ndarray, patch: int) -> np.ndarray:
    """[gh,gw] one value per patch: patch maps as they are; pixel maps ([1,3,h,w]) summed over colour and over
    each patch's pixels (for Integrated Gradients, the patch's share of f(x) - f(baseline))."""
    if raw.ndim == 2:
        return raw.astype(np.float32)
    m = raw[0].sum(0)
    gh, gw = m.shape[0] // patch, m.shape[1] // patch
    return m.reshape(gh, patch, gw, patch).sum((1, 3)).astype(np.float32)


class _CountingScore:
    """The target as a function of the input, [B] -> [B], reporting progress per call."""

    def __init__(self, model, target, grid, region, progress, text=None) -> None:
        self.model, self.target, self.grid, self.region, self.text = model, target, grid, region, text
        self.progress, self.calls, self.expected = progress, 0, 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        score = self.from_output(self.model.forward(x, attentions="all", grad=True), x)
        self.calls += 1
        if self.progress is not None:
            self.progress(min(1.0, self.calls / max(self.expected, 1)))
        return score

    def readout_rows(self, n: int) -> torch.Tensor:
        """[N] weights of the output tokens that the target reads (for relevancy)."""
        k = self.model.n_prefix
        if self.model.dense_head is None:
            return torch.from_numpy(self.model.readout.start(n)).to(self.model.device)
        rows = torch.zeros(n, dtype=torch.float32, device=self.model.device)
        if self.region is None:
            rows[k:] = 1
        else:
            (gh, gw), (h, w) = self.grid, self.region.shape
            rows[k:] = self.region.reshape(gh, h // gh, gw, w // gw).mean((1, 3)).flatten()
        return rows

    def from_output(self, out, x: torch.Tensor) -> torch.Tensor:
        m = self.model
        if self.text is not None:
            return m.similarity(m.readout_vector(out), self.text)
        if m.labels is not None:
            return out.logits[:, self.target]
        if m.dense_head is None:
            return m.readout_vector(out).norm(dim=-1)
        return self.from_tokens(out.hidden_states[-1], x)

    def from_tokens(self, hidden: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The target read from any layer's tokens [B,N,D] through the model's own output head, as if they were
        the last layer's (on the last layer's, the target itself; on earlier ones, a layer lens)."""
        m = self.model
        if self.text is not None:
            return m.similarity(m.output_from(hidden), self.text)
        if m.dense_head is None:
            out = m.output_from(hidden)
            return out[:, self.target] if m.labels is not None else out.norm(dim=-1)
        dense = m.dense_map(hidden, self.grid, tuple(x.shape[2:]))[:, 0]
        # The mean, not the sum: Chefer's relevancy is not scale-invariant and was made for logit-sized
        # targets. Summed over ~50,000 pixels, its gradient term dwarfed the identity (values up to 1e18).
        if self.region is None:
            return dense.mean((1, 2))
        return (dense * self.region).sum((1, 2)) / self.region.sum()


def input_analysis(model: VitModel, image: ImageInput, longest: int | None = None) -> Analysis:
    """An analysis of the very input that attributions use, so that the rollout shown beside an attribution
    reads the same tokens (the embedded dense head's 224x224, not the app's 448 analysis)."""
    rgb = load_image(image)
    x = _input(model, rgb, longest)
    return capture(model, rgb, x, model.forward(torch.from_numpy(x), attentions="none"))


SIGNED = ("integrated_gradients", "input_x_gradient", "occlusion")  # can push the target down as well as up


def _input(model: VitModel, rgb: np.ndarray, longest: int | None) -> np.ndarray:
    size = attribution_size(model, *rgb.shape[:2], longest)
    return prepare_input(rgb, size, model.patch_size, model.mean, model.std)


def _box_mask(box: Box | None, image_size, input_size, device) -> torch.Tensor | None:
    """A 0/1 mask [h,w] on the model input for a box given in original-image pixels."""
    if box is None:
        return None
    x0, y0, x1, y1 = (float(v) for v in box)
    (height, width), (h, w) = image_size, input_size
    x0, x1 = (min(max(v, 0.0), float(width)) for v in sorted((x0, x1)))
    y0, y1 = (min(max(v, 0.0), float(height)) for v in sorted((y0, y1)))
    if x1 - x0 < 1 or y1 - y0 < 1:
        raise ValueError(f"the box {box} covers no pixels of the {width}x{height} image")
    mask = torch.zeros((h, w), device=device)
    r0, r1 = int(y0 * h / height), max(int(y0 * h / height) + 1, round(y1 * h / height))
    c0, c1 = int(x0 * w / width), max(int(x0 * w / width) + 1, round(x1 * w / width))
    mask[r0:r1, c0:c1] = 1
    return mask


def _baseline(kind: str, rgb: np.ndarray, x: torch.Tensor, model: VitModel) -> torch.Tensor:
    """The 'absent' input, normalised like x: black pixels, a heavy blur of the image, or the mean colour."""
    if kind == "mean colour":
        return torch.zeros_like(x)  # the normalisation's mean is zero
    h, w = x.shape[2:]
    if kind == "black":
        img = np.zeros((h, w, 3), np.uint8)
    else:
        small = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
        img = cv2.GaussianBlur(small, (0, 0), sigmaX=max(h, w) / 16)
    return torch.from_numpy(prepare_input(img, (h, w), model.patch_size, model.mean, model.std)).to(x.device)


def model_passes(method: str, n_steps: int, nt_samples: int, grid: tuple[int, int]) -> int:
    """How many images one attribution sends through the model: its cost, whatever the batch size."""
    return _expected_batches(method, n_steps, nt_samples, 1, grid)


def _expected_batches(method: str, n_steps: int, nt_samples: int, batch: int, grid: tuple[int, int]) -> int:
    if method == "integrated_gradients":
        return -(-n_steps * max(1, nt_samples) // batch) + 2 * max(1, nt_samples)
    if method == "occlusion":
        return -(-grid[0] * grid[1] // batch) + 1
    return 1


class _TokenGrid(nn.Module):
    """An identity that Grad-CAM hooks: it sees a block's patch tokens as a [B,D,gh,gw] map."""

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        return grid


def _grad_cam(model: VitModel, score_fn, x: torch.Tensor, grid: tuple[int, int], layer: int | None) -> np.ndarray:
    from captum.attr import LayerGradCam

    n_layers = len(model.blocks)
    layer = n_layers - 1 if layer is None else int(layer)
    if not 0 <= layer < n_layers:
        raise ValueError(f"Grad-CAM layer must be in [0, {n_layers}), got {layer}")
    view = _TokenGrid()
    k = model.n_prefix

    def as_grid(_module, args, kwargs):
        # Grad-CAM reads the tokens *entering* the block (as pytorch-grad-cam reads blocks[-1].norm1):
        # a block's output patch tokens no longer reach the readout token of the last layer.
        tokens = args[0] if args else kwargs["hidden_states"]
        # The grid comes from the input's pixels (h/p, w/p), never from sqrt(N).
        patches = view(tokens[:, k:].transpose(1, 2).reshape(len(tokens), -1, *grid))
        merged = torch.cat([tokens[:, :k], patches.flatten(2).transpose(1, 2)], 1)
        if args:
            return (merged, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": merged}

    hook = model.blocks[layer].register_forward_pre_hook(as_grid, with_kwargs=True)
    try:
        cam = LayerGradCam(score_fn, view).attribute(x, relu_attributions=True)
    finally:
        hook.remove()
    return cam[0, 0].detach().cpu().numpy()


def _run(method, model, score_fn, x, rgb, grid, n_steps, baseline, nt_samples, nt_stdev, layer, batch):
    """(raw attributions as numpy, convergence delta or None) for one method."""
    from captum.attr import InputXGradient, IntegratedGradients, NoiseTunnel, Occlusion, Saliency

    if method == "relevancy":
        return relevancy(model, x, score_fn), None
    if method == "legrad":
        return legrad(model, x, score_fn), None
    if method == "grad_cam":
        return _grad_cam(model, score_fn, x, grid, layer), None
    if method in ("saliency", "input_x_gradient"):
        x = x.clone().requires_grad_()
    if method == "saliency":
        return Saliency(score_fn).attribute(x, abs=True).detach().cpu().numpy(), None
    if method == "input_x_gradient":
        return InputXGradient(score_fn).attribute(x).detach().cpu().numpy(), None
    base = _baseline(baseline, rgb, x, model)
    if method == "occlusion":
        p = model.patch_size
        attr = Occlusion(score_fn).attribute(
            x, sliding_window_shapes=(3, p, p), strides=(3, p, p), baselines=base, perturbations_per_eval=batch
        )
        return attr[0, 0, ::p, ::p].detach().cpu().numpy(), None  # one value per patch: the drop when hidden
    ig = IntegratedGradients(score_fn)
    options = dict(baselines=base, n_steps=n_steps, internal_batch_size=batch, return_convergence_delta=True)
    if nt_samples > 0:
        attr, delta = NoiseTunnel(ig).attribute(
            x, nt_type="smoothgrad", nt_samples=int(nt_samples), nt_samples_batch_size=1, stdevs=nt_stdev, **options
        )
        return attr.detach().cpu().numpy(), float(delta.abs().max())
    attr, delta = ig.attribute(x, **options)
    return attr.detach().cpu().numpy(), float(delta[0])
