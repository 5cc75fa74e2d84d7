"""The layer lens: the model's own output head read from every layer's tokens, after the final norm.

On the last layer this is the model's output; on earlier ones it shows how that output forms through depth (a
classifier's top class, the dense head's map). The head was trained on the last layer's tokens only, so an early
layer's reading is what the head makes of tokens it never saw, not a trained probe of that layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from . import plots
from .analysis import Analysis
from .attributions import attribution_size
from .models import VitModel
from .outputs import ClassLogit, DenseMap, Output, ReadoutVector, default_output, readout_of
from .preprocess import ImageInput, load_image, prepare_input


@dataclass(eq=False)
class LayerLens:
    """The lens of one kind of output (`output`, named in its sentence by `name`): `values` holds each layer's
    reading, as each subclass says. `LENSES` holds one per output kind that has a head to read."""

    values: np.ndarray
    output: Output | None = None
    name: str = ""

    follows: ClassVar[type[Output]]  # the kind of output this lens reads
    what: ClassVar[str]  # what each layer gives, in words

    def __post_init__(self) -> None:
        if self.output is None:
            self.output = self.follows()
        if not isinstance(self.output, self.follows):
            raise ValueError(f"a {type(self).__name__} follows {self.follows.kind} outputs, not {self.output!r}")

    @classmethod
    def of_layers(
        cls, model: VitModel, hidden, size: tuple[int, int], image_size: tuple[int, int], output: Output
    ) -> LayerLens:
        """The lens from every layer's tokens `hidden` (L tensors [1,N,D]) of a forward of an input of `size`."""
        raise NotImplementedError

    @property
    def layers(self) -> int:
        return len(self.values)

    def readings(self) -> np.ndarray:
        """[L] the followed output read at each layer."""
        return self.values

    def settles(self) -> int:
        """The first layer from which every later layer reads like the last: within 10 % of the largest mean
        absolute difference from the last layer's reading (`ClassLens`: the same top class)."""
        gap = self.gaps()
        return _first_of_last_run(gap <= 0.1 * max(gap.max(), 1e-12))

    def gaps(self) -> np.ndarray:
        """[L] the mean absolute difference of each layer's reading from the last layer's."""
        return np.array([np.abs(v - self.values[-1]).mean() for v in self.values])

    def follows_words(self) -> str:
        return f"The lens follows **{self.name or self.output.short()}**"

    def sentence(self) -> str:
        """What the lens shows on this image, from its own numbers."""
        last, k, gaps = self.layers - 1, self.settles(), self.gaps()
        start = self.start_words(self.readings())
        if k == last:
            far = int(gaps.argmax())
            return start + (
                f" Read through the output head, no layer before the last gives a {self.what} close to the final "
                f"one: layer {last - 1}'s still differs from it by {gaps[last - 1] / gaps.max():.0%} as much as "
                f"layer {far}'s, the most different one (mean absolute difference){CAVEAT}."
            )
        return start + (
            f" Read through the output head, the layers' {self.what}s come within 10 % of the final one (mean "
            f"absolute difference, against the largest) from layer {k} on{CAVEAT}."
        )

    def start_words(self, readings: np.ndarray) -> str:
        """The sentence's start: what the lens follows and where its reading begins."""
        raise NotImplementedError

    def figure(self):
        """The lens drawn: each layer's course through depth."""
        return plots.layer_lens(self.values, None)


CAVEAT = " (the head was trained on the last layer only: earlier readings are a lens, not a trained probe)"


def _first_of_last_run(same: np.ndarray) -> int:
    """The first layer from which every later layer is `same` [L] as the last."""
    layer = len(same) - 1
    while layer > 0 and same[layer - 1]:
        layer -= 1
    return layer


@dataclass(eq=False)
class ClassLens(LayerLens):
    """values: probs [L,C], the softmax of each layer's logits; labels: the class names."""

    labels: list[str] | None = None
    follows: ClassVar[type[Output]] = ClassLogit
    what: ClassVar[str] = "class"

    @classmethod
    def of_layers(cls, model, hidden, size, image_size, output) -> LayerLens:
        logits = torch.cat([model.output_from(t) for t in hidden]).float()
        return cls(torch.softmax(logits, -1).cpu().numpy(), output, output.name(model), model.labels)

    def readings(self) -> np.ndarray:
        """[L] the followed class's probability (the last layer's top class without an index)."""
        return self.values[:, self.followed_class()]

    def followed_class(self) -> int:
        """The class whose probability the lens follows."""
        return int(self.top()[-1]) if self.output.index is None else int(self.output.index)

    def top(self) -> np.ndarray:
        """[L] each layer's top class."""
        return self.values.argmax(1)

    def settles(self) -> int:
        """The first layer from which every later layer has the last layer's top class."""
        return _first_of_last_run(self.top() == self.top()[-1])

    def follows_words(self) -> str:
        return f"The lens follows **{self.name or self.output.short(self.labels)}**"

    def sentence(self) -> str:
        last, k = self.layers - 1, self.settles()
        final, c = int(self.top()[-1]), self.followed_class()
        p = self.values[:, final]
        top = (
            f"The final class, **{self.labels[final]}**, is the head's top reading from layer {k} on "
            f"(its probability {p[k]:.0%} there, {p[-1]:.0%} at layer {last}){CAVEAT}."
        )
        if c == final:
            return f"{self.follows_words()}. {top}"
        q = self.values[:, c]
        return (
            f"{self.follows_words()}: its probability is {q[0]:.0%} at layer 0 and {q[-1]:.0%} at layer {last}. {top}"
        )

    def figure(self):
        return plots.layer_lens(self.values, self.labels)


@dataclass(eq=False)
class DenseLens(LayerLens):
    """values: maps [L,h,w] in [0,1], the dense head on each layer's patch tokens, at the input's size; `weights`
    [h,w] says how much each pixel counts in the followed output (`DenseMap.weights`)."""

    weights: np.ndarray | None = field(default=None, repr=False)
    follows: ClassVar[type[Output]] = DenseMap
    what: ClassVar[str] = "dense map"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.weights is None:
            self.weights = self.output.weights(self.values[-1], self.values.shape[1:])

    @classmethod
    def of_layers(cls, model, hidden, size, image_size, output) -> LayerLens:
        grid = (size[0] // model.patch_size, size[1] // model.patch_size)
        values = torch.stack([model.dense_map(t, grid, size)[0, 0] for t in hidden]).float().cpu().numpy()
        return cls(values, output, output.name(model), output.weights(values[-1], image_size))

    def readings(self) -> np.ndarray:
        """[L] the dense map weighted by `weights`."""
        w = self.weights / max(float(self.weights.sum()), 1e-12)
        return (self.values * w).sum((1, 2))

    def start_words(self, readings: np.ndarray) -> str:
        last = self.layers - 1
        return f"{self.follows_words()}: it reads {readings[0]:.2f} at layer 0 and {readings[-1]:.2f} at layer {last}."

    def figure(self):
        """Each layer's dense map."""
        return plots.map_grid(self.values, [f"layer {i}" for i in range(self.layers)])


@dataclass(eq=False)
class ReadoutLens(LayerLens):
    """values: similarity [L], the cosine of each layer's readout vector with the last layer's."""

    follows: ClassVar[type[Output]] = ReadoutVector
    what: ClassVar[str] = "readout vector"

    @classmethod
    def of_layers(cls, model, hidden, size, image_size, output) -> LayerLens:
        vectors = torch.cat([readout_of(model, t) for t in hidden]).float()
        cosine = torch.nn.functional.cosine_similarity(vectors, vectors[-1:], dim=-1)
        return cls(cosine.cpu().numpy(), output, output.name(model))

    def start_words(self, readings: np.ndarray) -> str:
        cosine = f"{readings[0]:.2f}"
        return f"{self.follows_words()}, whose direction at layer 0 has a cosine of {cosine} with the last layer's."


LENSES: tuple[type[LayerLens], ...] = (ClassLens, DenseLens, ReadoutLens)


def layer_lens(
    model: VitModel, image: ImageInput, longest: int | None = None, output: Output | None = None
) -> LayerLens:
    """The lens on `image`, on the input that attributions use (a classifier's native size, the dense head's
    224x224, else `longest`), following `output` (the model's own by default; a text output has no lens): one
    forward of its own."""
    rgb = load_image(image)
    h, w = attribution_size(model, *rgb.shape[:2], longest)
    x = torch.from_numpy(prepare_input(rgb, (h, w), model.patch_size, model.mean, model.std))
    out = model.forward(x, attentions=lambda layer, weights: None)
    return lens_of(model, out.hidden_states[1:], (h, w), rgb.shape[:2], output)


def analysis_lens(a: Analysis, output: Output | None = None) -> LayerLens:
    """The lens on the tokens of analysis `a`'s own forward (no forward of its own): its last layer is the output
    that the analysis' views draw."""
    hidden = torch.from_numpy(a.hidden_states[1:, None]).to(a.model.device)
    return lens_of(a.model, hidden, tuple(a.pixel_values.shape[2:]), a.image.shape[:2], output)


def lens_of(
    model: VitModel, hidden, size: tuple[int, int], image_size: tuple[int, int], output: Output | None = None
) -> LayerLens:
    """The lens from every layer's tokens `hidden` (L tensors [1,N,D]) of a forward of an input of `size` (h, w),
    of a photo of `image_size`, following `output` (see `layer_lens`)."""
    output = default_output(model) if output is None else output
    lens = next((lens for lens in LENSES if isinstance(output, lens.follows)), None)
    if lens is None:
        raise ValueError(f"the layer lens reads the model's output head, and {output.short()} has none to read")
    output.check(model)
    with model.lock, torch.inference_mode():
        return lens.of_layers(model, hidden, size, image_size, output)
