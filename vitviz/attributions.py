"""Attributions: which pixels or patches drive one output of the model.

Captum does the gradient and perturbation methods (one uniform call per method); the
transformer relevancy of Chefer et al. (2021) is computed here from attention gradients.
The target is one scalar per image, an `outputs.Output`: a class logit, the embedded model's dense head (where
the photo is salient, over the image or in a box), the image-text logit of a CLIP or SigLIP model with its text
tower (Chefer et al.'s CLIP relevancy: which pixels make this photo match "a dog"?), or, for encoders without a
head, the readout vector along the photo's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np
import torch

from . import methods
from .analysis import Analysis
from .capture import capture
from .methods import Job
from .models import VitModel
from .outputs import Box, Output, Reading, Text, output_for
from .preprocess import ImageInput, input_size, load_image, prepare_input

# The methods the Attributions tab offers, by key (each a record in vitviz/methods/), and those whose maps are signed
METHODS: dict[str, str] = {m.key: m.label for m in methods.REGISTRY.values() if m.offered}
SIGNED = tuple(m.key for m in methods.REGISTRY.values() if m.signed)
BASELINES = methods.BASELINES


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
    output: Output | None = None  # the output explained (a class resolved to its index)


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


def describe(model: VitModel, target: int | None, box: Box | None, text: Text | None = None) -> str:
    """The output that `attribute`'s target, box and text name, in plain words."""
    return output_for(model, target, box, text).name(model)


def attribute(
    model: VitModel,
    image: ImageInput,
    method: str = "integrated_gradients",
    target: int | None = None,
    *,
    box: Box | None = None,
    text: Text | None = None,
    output: Output | None = None,
    longest: int | None = None,
    internal_batch_size: int = 8,
    progress: Callable[[float], None] | None = None,
    **options,
) -> Attribution:
    """Attribute one scalar output of `model` on `image` to its input with `method` (a key of `methods.REGISTRY`).

    output: the output explained (see `outputs.Output`); by default the one that target, box and text name
    (`outputs.output_for`): target, a class index for classifiers (default: the top-1 class); box, a region of
    the original image for the dense head; text, for a CLIP or SigLIP model with its text tower, the image's
    similarity logit with this text (words, or token ids).
    options: the method's own, as its record declares them (`methods.REGISTRY[method].options`; None: the
    default), e.g. Integrated Gradients' n_steps (its path's steps), baseline (what "absent" means: black, blurred
    or the dataset's mean colour), nt_samples (> 0 wraps it in a SmoothGrad NoiseTunnel) and nt_stdev (that
    noise, in normalised input units); Grad-CAM's layer (the block whose input tokens it reads; default: the last).
    An option that no method declares is a ValueError that lists the method's; another method's is left out (see
    `methods.Method.settings`). internal_batch_size: the most inputs per forward pass, which bounds memory.
    progress: called with the fraction done.
    """
    record = methods.get(method)
    options = record.settings(options)
    if not 1 <= internal_batch_size <= 256:
        raise ValueError(f"internal_batch_size must be between 1 and 256, got {internal_batch_size}")
    rgb = load_image(image)
    output = output_for(model, target, box, text) if output is None else output
    start = time.perf_counter()
    with model.lock:
        x, score_fn, score, output = target_function(model, rgb, output, longest, progress)
        grid = score_fn.grid
        score_fn.expected = record.calls(options, grid, internal_batch_size)
        job = Job(model, rgb, x, score_fn, output, options, internal_batch_size)
        raw, delta = record.map(job)
    return Attribution(
        method=method,
        map=to_image(raw, rgb.shape[:2]),
        raw=raw,
        delta=delta,
        target=output.name(model),
        score=score,
        grid=grid,
        seconds=time.perf_counter() - start,
        output=output,
    )


def target_function(
    model: VitModel,
    rgb: np.ndarray,
    output: Output,
    longest: int | None = None,
    progress: Callable[[float], None] | None = None,
) -> tuple[torch.Tensor, _CountingScore, float, Output]:
    """The input that attributions use for `rgb` [H,W,3] (see attribution_size), `output` as a function of such
    inputs ([B,3,h,w] -> [B]), its value on this image, and the output resolved (a class of None: the top class on
    this image). What the output reads off the unmasked photo is fixed here (`Output.reading`)."""
    output.check(model)
    x = torch.from_numpy(_input(model, rgb, longest)).to(model.device)
    with model.lock:
        with torch.no_grad():
            out = model.forward(x, attentions="all", grad=True)  # the default class and the target's value
            reading = output.reading(model, out, tuple(x.shape[2:]), rgb.shape[:2])
            score = float(reading.of_output(out)[0])
    return x, _CountingScore(reading, progress), score, reading.output


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
    """An output fixed on one photo (`outputs.Reading`) as a function of the input, [B,3,h,w] -> [B], reporting
    progress per call."""

    def __init__(self, reading: Reading, progress: Callable[[float], None] | None = None) -> None:
        self.reading, self.output, self.grid = reading, reading.output, reading.grid
        self.progress, self.calls, self.expected = progress, 0, 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        score = self.reading.of_output(self.reading.model.forward(x, attentions="all", grad=True))
        self.calls += 1
        if self.progress is not None:
            self.progress(min(1.0, self.calls / max(self.expected, 1)))
        return score


def input_analysis(model: VitModel, image: ImageInput, longest: int | None = None) -> Analysis:
    """An analysis of the very input that attributions use, so that the rollout shown beside an attribution
    reads the same tokens (the embedded dense head's 224x224, not the app's 448 analysis)."""
    rgb = load_image(image)
    x = _input(model, rgb, longest)
    return capture(model, rgb, x, model.forward(torch.from_numpy(x), attentions="none"))


def _input(model: VitModel, rgb: np.ndarray, longest: int | None) -> np.ndarray:
    size = attribution_size(model, *rgb.shape[:2], longest)
    return prepare_input(rgb, size, model.patch_size, model.mean, model.std)


def model_passes(method: str, n_steps: int | None, nt_samples: int | None, grid: tuple[int, int]) -> int:
    """How many images one attribution sends through the model: its cost, whatever the batch size (the steps and
    samples as `attribute` takes them: a method that reads neither ignores them)."""
    return methods.get(method).passes({"n_steps": n_steps, "nt_samples": nt_samples}, grid)
