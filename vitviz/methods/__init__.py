"""Attribution methods as records, as families are in `families.py`: one module per method here, each defining
`METHOD`, found by this package at import. A method records its label, whether its map is signed, its options
(with their defaults and ranges: a method owns its options, as a Captum method owns its `attribute`'s keywords) and
its cost; its map function takes a `Job` (the input, the output explained as a function of it, as a callable and as
an `nn.Module` for a method that hooks one, and the method's own options) and returns the raw map.
`attributions.attribute` runs any of them the same way.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import cv2
import numpy as np
import torch
from torch import nn

from ..models import VitModel
from ..outputs import Output
from ..preprocess import prepare_input

BASELINES = ("blurred", "black", "mean colour")  # blurred first: IG converges along its path


@dataclass(frozen=True)
class Option:
    """One option of a method: `keyword`, the name `attribute` takes it by; `name`, the app's control and API
    parameter; `label`, the control's; its default (None: the model's own, `most`) and the values it accepts:
    `choices`, or numbers (floats if the default is one, else integers) from low to high (high None: no limit, or
    the model's own, `most(model)`, which the method checks). `slider`: (low, high, step) that the app offers, within
    them. `offered`: the app makes a control for it (else it keeps its default there)."""

    keyword: str
    name: str
    label: str
    default: object
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    slider: tuple[float, float, float] | None = None
    most: Callable[[VitModel], int] | None = None
    offered: bool = True

    @property
    def kind(self) -> type:
        """What its values are: str (one of `choices`), float or int."""
        return str if self.choices else float if isinstance(self.default, float) else int

    def checked(self, value: object) -> object:
        """`value` as this option takes it, or a ValueError that names the option and what it accepts."""
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"unknown {self.keyword} {value!r}: use one of {', '.join(self.choices)}")
            return value
        if value is None:
            return None
        number = self.kind(value)
        if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
            if self.high is None and self.most is None:
                raise ValueError(f"{self.keyword} must be at least {self.low:g}, got {value}")
            most = "its model's last" if self.high is None else f"{self.high:g}"
            raise ValueError(f"{self.keyword} must be between {self.low:g} and {most}, got {value}")
        return number


# Options that several methods read, declared once so that the app shows one control for them; a method lists
# those it reads, and may narrow one with `dataclasses.replace` (as SmoothGrad's copies start at 1).
BASELINE = Option("baseline", "baseline", "Baseline (absent)", "blurred", choices=BASELINES)
STEPS = Option("n_steps", "n_steps", "Integrated Gradients: steps", 32, 1, 512, slider=(4, 128, 4))
SAMPLES = Option("nt_samples", "noise_samples", "NoiseTunnel samples (0 = off)", 0, 0, 256, slider=(0, 16, 1))
BLOCK = Option("layer", "block", "Grad-CAM: block", None, 0, None, most=lambda model: model.num_layers - 1)
# SmoothGrad's noise, in normalised input units: the Python API's, not a control of the app
NOISE = Option("nt_stdev", "noise_stdev", "NoiseTunnel: noise (normalised units)", 0.15, 0.0, offered=False)


@dataclass
class Job:
    """What a method's map is made from. x: [1,3,h,w] the model input on its device; score: the output explained,
    a function of such inputs ([B,3,h,w] -> [B], `attributions.target_function`), with `.grid` (gh, gw) and
    `.reading` (the `outputs.Reading` it calls, which reads any layer's tokens too); `module`: the same function as
    an `nn.Module` holding the model's, for a method that hooks modules (Captum's GuidedBackprop); options: the
    method's own options by keyword, and only those (`Method.settings`); batch: the most inputs per forward pass."""

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

    @cached_property
    def module(self) -> nn.Module:
        return ScoreModule(self.score, self.model)

    def absent(self) -> torch.Tensor:
        """The input with nothing in it, as the `baseline` option says (see `absent_input`)."""
        return absent_input(self.options["baseline"], self.rgb, self.x, self.model)


@dataclass(frozen=True)
class Method:
    """One attribution method. map(job) -> (raw, delta): raw [1,3,h,w] on the input's pixels or [gh,gw] one value
    per patch; delta a convergence delta or None. signed: its map can push the output down as well as up.
    calls(options, grid, batch): how many times it calls the output, which images through the model are
    calls(..., batch=1). offered: the Attributions tab's list offers it (rollout is shown beside every map).
    repeats: the method whose map this one's equals on the ViTs vitviz loads (their MLPs use GELU), so that a
    table of every method runs it only when it is named."""

    key: str
    label: str
    signed: bool
    map: Callable[[Job], tuple[np.ndarray, float | None]]
    options: tuple[Option, ...] = ()
    calls: Callable[[dict, tuple[int, int], int], int] = field(default=lambda options, grid, batch: 1)
    order: int = 100
    offered: bool = True
    repeats: str | None = None

    def settings(self, given: dict) -> dict:
        """This method's options by keyword, and only those: each value given checked against its declaration
        here, None or absent its default. A keyword that no method declares is a ValueError naming it and this
        method's options. Another method's option is checked as that method declares it, then left out: one set of
        options runs over every method (as the app's controls and `vitviz faithfulness` pass them)."""
        own = {o.keyword: o for o in self.options}
        others = declared()
        for keyword, value in given.items():
            if keyword not in own and keyword not in others:
                mine = f"its options are {', '.join(own)}" if own else "it takes no options"
                raise ValueError(f"unknown option {keyword!r} for the method {self.key!r}: {mine}")
            if keyword not in own and value is not None:
                others[keyword].checked(value)
        return {k: o.default if given.get(k) is None else o.checked(given[k]) for k, o in own.items()}

    def passes(self, options: dict, grid: tuple[int, int]) -> int:
        """How many images one map with `options` (as `settings` takes them) sends through the model: its cost,
        whatever the batch size."""
        return self.calls(self.settings(options), grid, 1)


class ScoreModule(nn.Module):
    """The output explained ([B,3,h,w] -> [B]) as a module whose submodules are the model's (its network and dense
    head), so that a method that hooks modules (Captum asks `isinstance(model, nn.Module)`) reaches its layers."""

    def __init__(self, score: Callable, model: VitModel) -> None:
        super().__init__()
        self.score, self.net, self.dense_head = score, model.net, model.dense_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.score(x)


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


def declared() -> dict[str, Option]:
    """Every option that a method declares, by keyword: the first method's declaration, in the registry's order."""
    found: dict[str, Option] = {}
    for m in REGISTRY.values():
        for o in m.options:
            found.setdefault(o.keyword, o)
    return found


def get(key: str) -> Method:
    """The method `key`, or a ValueError that lists them."""
    if key not in REGISTRY:
        raise ValueError(f"unknown attribution method {key!r}: use one of {', '.join(REGISTRY)}")
    return REGISTRY[key]
