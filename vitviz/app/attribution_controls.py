"""What the Attributions tab asks for: its controls, built from the methods' records (`vitviz.methods`), and the
settings, display and kept result that its handlers take instead of long lists of values."""

from __future__ import annotations

from dataclasses import dataclass, field

import gradio as gr
import numpy as np

from .. import methods
from ..analysis import Analysis
from ..attributions import METHODS, targets
from ..maps import DEFAULT_SCALE
from ..outputs import output_for
from .internals import take
from .server import Server

METHOD_BY_LABEL = {label: key for key, label in METHODS.items()}
# the most faithful method on docs/benchmarks.md's table (the lowest mean deletion area on 20 photos)
DEFAULT_METHOD = "integrated_gradients"
TARGETS = ["default", "top-2", "top-3", "top-4", "top-5"]  # the default is the top class for a classifier
IMAGE = "image"  # the dense head's map over the whole image, beside its default (where the photo is salient)


def option_list(records) -> tuple[methods.Option, ...]:
    """One control for each option that the methods `records` declare and offer, in the records' order, as the
    first of them declares it (`fit_options` gives a control each method's own label and range)."""
    found: dict[str, methods.Option] = {}
    for record in records:
        for o in record.options:
            if o.offered:
                found.setdefault(o.keyword, o)
    return tuple(found.values())


# The options the tab offers a control for, from the records of the methods it offers
OPTIONS = option_list(m for m in methods.REGISTRY.values() if m.offered)
# Those whose range is the model's (Grad-CAM's block: up to the model's last), set again for each model
MODEL_RANGED = tuple(o for o in OPTIONS if o.most is not None)
# The tab's controls that say what to compute, in its endpoints' order: one control per option
CONTROLS = ["method_label", "target", *(o.name for o in OPTIONS), "points"]


@dataclass(frozen=True)
class Settings:
    """What one map is asked for: the method's key, the target's choice (`TARGETS`, or `IMAGE`), the options by
    `attribute`'s keywords, the box's corners and the text target. The same settings on the same image give the
    same map."""

    method: str = DEFAULT_METHOD
    target: str = "default"
    options: dict = field(default_factory=dict)
    points: tuple = ()
    text: str = ""

    @classmethod
    def of(cls, method_label: str, target: str, *values, text: str = "") -> Settings:
        """From the tab's controls in `CONTROLS`' order (the method by its label or key)."""
        *option_values, points = values
        method = METHOD_BY_LABEL.get(method_label, method_label)
        if method not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS.values())}, got {method_label!r}")
        options = {o.keyword: v for o, v in zip(OPTIONS, option_values, strict=True)}
        points = tuple(tuple(p) for p in points or ())
        return cls(method, target, options, points, (text or "").strip())

    @property
    def record(self) -> methods.Method:
        return methods.REGISTRY[self.method]

    @property
    def label(self) -> str:
        return self.record.label

    def attribute_options(self) -> dict:
        """The method's options as `attribute` takes them (the app batches 4 inputs per forward)."""
        return {**self.record.settings(self.options), "internal_batch_size": 4}

    def described(self) -> str:
        """The method and its options in words, e.g. "Integrated Gradients (baseline blurred, n_steps 32, ...)"."""
        own = self.record.settings(self.options)
        said = ", ".join(f"{o.name} {own[o.keyword]}" for o in self.record.options if o.offered)
        return f"{self.label} ({said})" if said else self.label

    def passes(self, grid: tuple[int, int]) -> int:
        """Images one map sends through the model on an input of `grid` patches (see `methods.Method.passes`)."""
        return self.record.passes(self.options, grid)

    def output_options(self, a: Analysis, image) -> dict:
        """`attribute`'s output, from the target, the box and the text. A text is the target of a model with a
        text tower (a full CLIP or SigLIP) when one is written; a box, the dense head's when one is drawn."""
        if self.target not in (*TARGETS, IMAGE):
            raise ValueError(f"target must be one of {[*TARGETS, IMAGE]}, got {self.target!r}")
        model = a.model
        rank = TARGETS.index(self.target) if self.target in TARGETS else 0
        target = None if rank == 0 or model.labels is None else targets(model, image)[rank][1]
        box = parse_box(self.points) if model.dense_head is not None else None
        text = self.text or None if model.has_text else None
        region = "image" if self.target == IMAGE and model.dense_head is not None else "salient"
        return dict(output=output_for(model, target, box, text, region))


@dataclass(frozen=True)
class Display:
    """How maps are drawn: colormap, opacity and colour scale."""

    cmap: str = "inferno"
    alpha: float = 0.6
    scale: str = DEFAULT_SCALE


@dataclass(frozen=True)
class Kept:
    """A session's last attribution: the analysis it was made for, what its pictures are drawn from
    (`views.attributions.attribution_inputs`), its settings and its map's patch scores (which the faithfulness check
    reuses)."""

    key: str | None
    inputs: tuple
    settings: Settings
    scores: np.ndarray


def parse_box(points) -> tuple[float, float, float, float] | None:
    """Two clicked corners [[x, y], [x, y]] in original-image pixels -> (x0, y0, x1, y1); none or one: no box."""
    if not points or len(points) < 2:
        return None
    try:
        (xa, ya), (xb, yb) = [(float(x), float(y)) for x, y in points[:2]]
    except (TypeError, ValueError):
        raise ValueError(f"box must be two corners [[x0, y0], [x1, y1]] in image pixels, got {points!r}") from None
    return min(xa, xb), min(ya, yb), max(xa, xb), max(ya, yb)


def target_choices(a: Analysis) -> list[tuple[str, str]]:
    """(label, value) of the outputs the Target list offers on this image, the default first, each named in a
    few words (`Output.short`) so that none is cut off: a classifier's top classes; the dense head where the photo
    is salient and over the whole image."""
    model = a.model
    if model.labels is not None:
        return [(label, value) for (label, _), value in zip(targets(model, a.image), TARGETS, strict=False)]
    own = [(output_for(model).short(), TARGETS[0])]
    if model.dense_head is not None:
        own.append((output_for(model, region="image").short(), IMAGE))
    return own


def fit_options(method_label: str, *values) -> tuple:
    """Each option's control for the chosen method: shown where the method reads it, with the method's own label,
    range and default (a value outside its range moves to its default)."""
    record = methods.REGISTRY[METHOD_BY_LABEL.get(method_label, DEFAULT_METHOD)]
    own = {o.keyword: o for o in record.options}
    updates = []
    for shared, value in zip(OPTIONS, values, strict=True):
        option = own.get(shared.keyword)
        if option is None:
            updates.append(gr.update(visible=False))
        elif option.choices:
            updates.append(gr.update(visible=True, label=option.label))
        elif option.slider is None:
            updates.append(gr.update(visible=True, label=option.label))
        else:
            low, high, _ = option.slider
            inside = value is not None and low <= value <= high
            updates.append(
                gr.update(
                    visible=True,
                    label=option.label,
                    minimum=low,
                    maximum=high,
                    value=value if inside else option.default,
                )
            )
    return tuple(updates)


def endpoint(handler, after: list[str] = (), defaults: dict | None = None):
    """handler(server, where, settings, **after) as the handler that the tab's events call with the image, the
    model and the size, the tab's `CONTROLS`, then the inputs named `after` ("text" goes into the settings;
    "cmap", "alpha" and "colour_scale" into a `Display`)."""
    names = ["image", "model_name", "size", *CONTROLS, *after]

    def fn(server: Server, *values):
        *values, request, progress = values
        given = dict(zip(names, values, strict=True))
        where = tuple(given.pop(k) for k in ("image", "model_name", "size"))
        s = Settings.of(*(given.pop(k) for k in CONTROLS), text=given.pop("text", ""))
        if "cmap" in given:
            given["display"] = Display(given.pop("cmap"), given.pop("alpha"), given.pop("colour_scale"))
        return handler(server, where, s, **given, request=request, progress=progress)

    fn.__name__ = handler.__name__
    return take(fn, ["server", *names], defaults=defaults)


def option_control(option: methods.Option, model, shown: bool):
    """The control of one option (one of `OPTIONS`), from its record; one whose range is the model's (`most`) goes
    up to this model's."""
    elem_id = f"option-{option.name}"
    if option.choices:
        return gr.Radio(list(option.choices), value=option.default, label=option.label, visible=shown, elem_id=elem_id)
    most = option.high if option.most is None else option.most(model)
    low, high, step = option.slider or (option.low, most, 1)
    value = most if option.default is None else option.default
    precision = 0 if option.kind is int else None  # a float option keeps its fraction
    return gr.Slider(
        low, high, value=value, step=step, precision=precision, label=option.label, visible=shown, elem_id=elem_id
    )


def model_ranges(model) -> tuple:
    """Each control whose range is the model's (`MODEL_RANGED`) set to this model's, at its most."""
    return tuple(gr.Slider(maximum=o.most(model), value=o.most(model)) for o in MODEL_RANGED)
