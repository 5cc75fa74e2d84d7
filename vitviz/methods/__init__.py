"""Attribution methods as records, as families are in `families.py`: one module per method here, each defining
`METHOD`, found by this package at import. A method records its label, whether its map is signed, its options
(with their defaults and ranges) and its cost; its map function takes a `Job` (the input, the output explained as
a function of it, the options) and returns the raw map. `attributions.attribute` runs any of them the same way.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field

import cv2
import numpy as np
import torch

from ..models import VitModel
from ..outputs import Output
from ..preprocess import prepare_input

BASELINES = ("blurred", "black", "mean colour")  # blurred first: IG converges along its path


@dataclass(frozen=True)
class Option:
    """One setting of a method: `keyword`, the name `attribute` takes it by; `name`, the app's control and API
    parameter; its default (None: the model's own, e.g. its last block) and the values it accepts: `choices`, or
    low to high (high None: the model's own limit). `slider`: (low, high, step) that the app offers, within them."""

    keyword: str
    name: str
    label: str
    default: object
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    slider: tuple[float, float, float] | None = None

    def checked(self, value: object) -> object:
        """`value` as this option takes it, or a ValueError that names the option and what it accepts."""
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"unknown {self.keyword} {value!r}: use one of {', '.join(self.choices)}")
            return value
        if value is None:
            return None
        number = float(value) if isinstance(self.default, float) else int(value)
        if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
            most = "its model's last" if self.high is None else f"{self.high:g}"
            raise ValueError(f"{self.keyword} must be between {self.low:g} and {most}, got {value}")
        return number


# The options that methods share, in the app's and its API's order; a method lists those it reads.
BASELINE = Option("baseline", "baseline", "Baseline (absent)", "blurred", choices=BASELINES)
STEPS = Option("n_steps", "n_steps", "Integrated Gradients: steps", 32, 1, 512, slider=(4, 128, 4))
SAMPLES = Option("nt_samples", "noise_samples", "NoiseTunnel samples (0 = off)", 0, 0, 256, slider=(0, 16, 1))
BLOCK = Option("layer", "block", "Grad-CAM: block", None, 0, None)
OPTIONS = (BASELINE, STEPS, SAMPLES, BLOCK)
NOISE = 0.15  # SmoothGrad's noise, in normalised input units (`attribute`'s nt_stdev)


@dataclass
class Job:
    """What a method's map is made from. x: [1,3,h,w] the model input on its device; score: the output explained,
    a function of such inputs ([B,3,h,w] -> [B], `attributions.target_function`), with `.grid` (gh, gw) and
    `.reading` (the `outputs.Reading` it calls, which reads any layer's tokens too); options: each of `OPTIONS` by
    keyword (the method's own checked, the others at their defaults) and nt_stdev; batch: the most inputs per
    forward pass."""

    model: VitModel
    rgb: np.ndarray
    x: torch.Tensor
    score: Callable
    output: Output
    options: dict
    batch: int = 8

    @property
    def grid(self) -> tuple[int, int]:
        return self.score.grid

    def absent(self) -> torch.Tensor:
        """The input with nothing in it, as the `baseline` option says (see `absent_input`)."""
        return absent_input(self.options["baseline"], self.rgb, self.x, self.model)


@dataclass(frozen=True)
class Method:
    """One attribution method. map(job) -> (raw, delta): raw [1,3,h,w] on the input's pixels or [gh,gw] one value
    per patch; delta a convergence delta or None. signed: its map can push the output down as well as up.
    calls(options, grid, batch): how many times it calls the output, which images through the model are
    calls(..., batch=1). offered: the Attributions tab's list offers it (rollout is shown beside every map)."""

    key: str
    label: str
    signed: bool
    map: Callable[[Job], tuple[np.ndarray, float | None]]
    options: tuple[Option, ...] = ()
    calls: Callable[[dict, tuple[int, int], int], int] = field(default=lambda options, grid, batch: 1)
    order: int = 100
    offered: bool = True

    def passes(self, options: dict, grid: tuple[int, int]) -> int:
        """How many images one map sends through the model: its cost, whatever the batch size."""
        return self.calls({**defaults(), **options}, grid, 1)


def defaults() -> dict:
    """Every shared option at its default, by keyword."""
    return {o.keyword: o.default for o in OPTIONS}


def absent_input(kind: str, rgb: np.ndarray, x: torch.Tensor, model: VitModel) -> torch.Tensor:
    """The 'absent' input, normalised like x [1,3,h,w]: black pixels, a heavy blur of the image `rgb`, or the mean
    colour (zero once normalised)."""
    if kind == "mean colour":
        return torch.zeros_like(x)
    h, w = x.shape[2:]
    if kind == "black":
        img = np.zeros((h, w, 3), np.uint8)
    else:
        small = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
        img = cv2.GaussianBlur(small, (0, 0), sigmaX=max(h, w) / 16)
    return torch.from_numpy(prepare_input(img, (h, w), model.patch_size, model.mean, model.std)).to(x.device)


def _found() -> dict[str, Method]:
    found = [importlib.import_module(f"{__name__}.{m.name}").METHOD for m in pkgutil.iter_modules(__path__)]
    return {m.key: m for m in sorted(found, key=lambda m: (m.order, m.key))}


REGISTRY: dict[str, Method] = _found()


def get(key: str) -> Method:
    """The method `key`, or a ValueError that lists them."""
    if key not in REGISTRY:
        raise ValueError(f"unknown attribution method {key!r}: use one of {', '.join(REGISTRY)}")
    return REGISTRY[key]
