"""The layer lens: the model's own output head read from every layer's tokens, after the final norm.

On the last layer this is the model's output; on earlier ones it shows how that output forms through depth (a
classifier's top class, the dense head's map). The head was trained on the last layer's tokens only, so an early
layer's reading is what the head makes of tokens it never saw, not a trained probe of that layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .analysis import Analysis
from .attributions import attribution_size
from .models import VitModel
from .outputs import Output, default_output, dense_weights, readout_of
from .preprocess import ImageInput, load_image, prepare_input


@dataclass(eq=False)
class LayerLens:
    """kind: "classes" (probs [L,C], the softmax of each layer's logits), "dense" (maps [L,h,w] in [0,1], the
    dense head on each layer's patch tokens, at the input's size) or "readout" (similarity [L], the cosine of
    each layer's readout vector with the last layer's). labels: the class names, for "classes". output: the output
    the lens follows, named in its sentence (`name`); for "dense", `weights` [h,w] says how much each pixel counts
    in it (`outputs.dense_weights`)."""

    kind: str
    values: np.ndarray
    labels: list[str] | None = None
    output: Output | None = None
    name: str = ""
    weights: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.output is None:
            self.output = Output({"classes": "class", "dense": "dense", "readout": "readout"}[self.kind])
        if self.kind == "dense" and self.weights is None:
            self.weights = dense_weights(self.output, self.values[-1], self.values.shape[1:])

    def readings(self) -> np.ndarray:
        """[L] the followed output read at each layer: its class's probability ("classes"; the last layer's top
        class without an index), the dense map weighted by `weights` ("dense"), the cosine ("readout")."""
        if self.kind == "classes":
            return self.values[:, self.followed_class()]
        if self.kind == "dense":
            w = self.weights / max(float(self.weights.sum()), 1e-12)
            return (self.values * w).sum((1, 2))
        return self.values

    def followed_class(self) -> int:
        """The class whose probability the lens follows (classes only)."""
        return int(self.top()[-1]) if self.output.index is None else int(self.output.index)

    @property
    def layers(self) -> int:
        return len(self.values)

    def top(self) -> np.ndarray:
        """[L] each layer's top class (classes only)."""
        return self.values.argmax(1)

    def settles(self) -> int:
        """The first layer from which every later layer reads like the last: the same top class ("classes"); for
        "dense" and "readout", a mean absolute difference from the last layer's reading within 10 % of the
        largest such difference."""
        if self.kind == "classes":
            same = self.top() == self.top()[-1]
        else:
            gap = self.gaps()
            same = gap <= 0.1 * max(gap.max(), 1e-12)
        layer = self.layers - 1
        while layer > 0 and same[layer - 1]:
            layer -= 1
        return layer

    def sentence(self) -> str:
        """What the lens shows on this image, from its own numbers."""
        last, k = self.layers - 1, self.settles()
        caveat = " (the head was trained on the last layer only: earlier readings are a lens, not a trained probe)"
        follows = f"The lens follows **{self.name or self.output.short(self.labels)}**"
        if self.kind == "classes":
            final, c = int(self.top()[-1]), self.followed_class()
            p = self.values[:, final]
            top = (
                f"The final class, **{self.labels[final]}**, is the head's top reading from layer {k} on "
                f"(its probability {p[k]:.0%} there, {p[-1]:.0%} at layer {last}){caveat}."
            )
            if c == final:
                return f"{follows}. {top}"
            q = self.values[:, c]
            return f"{follows}: its probability is {q[0]:.0%} at layer 0 and {q[-1]:.0%} at layer {last}. {top}"
        r = self.readings()
        if self.kind == "dense":
            follows += f": it reads {r[0]:.2f} at layer 0 and {r[-1]:.2f} at layer {last}."
        else:
            follows += f", whose direction at layer 0 has a cosine of {r[0]:.2f} with the last layer's."
        what = "dense map" if self.kind == "dense" else "readout vector"
        gaps = self.gaps()
        if k == last:
            far = int(gaps.argmax())
            return follows + (
                f" Read through the output head, no layer before the last gives a {what} close to the final one: "
                f"layer {last - 1}'s still differs from it by {gaps[last - 1] / gaps.max():.0%} as much as layer "
                f"{far}'s, the most different one (mean absolute difference){caveat}."
            )
        return follows + (
            f" Read through the output head, the layers' {what}s come within 10 % of the final one (mean absolute "
            f"difference, against the largest) from layer {k} on{caveat}."
        )

    def gaps(self) -> np.ndarray:
        """[L] the mean absolute difference of each layer's reading from the last layer's."""
        return np.array([np.abs(v - self.values[-1]).mean() for v in self.values])


def layer_lens(model: VitModel, image: ImageInput, longest: int | None = None,
               output: Output | None = None) -> LayerLens:  # fmt: skip
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
    kind = output.lens_kind()
    output.check(model)
    name = output.name(model)
    h, w = size
    with model.lock, torch.inference_mode():
        if kind == "dense":
            grid = (h // model.patch_size, w // model.patch_size)
            maps = [model.dense_map(t, grid, (h, w))[0, 0] for t in hidden]
            values = torch.stack(maps).float().cpu().numpy()
            weights = dense_weights(output, values[-1], image_size)
            return LayerLens("dense", values, output=output, name=name, weights=weights)
        if kind == "classes":
            logits = torch.cat([model.output_from(t) for t in hidden]).float()
            return LayerLens("classes", torch.softmax(logits, -1).cpu().numpy(), model.labels, output, name)
        vectors = torch.cat([readout_of(model, t) for t in hidden]).float()
    cosine = torch.nn.functional.cosine_similarity(vectors, vectors[-1:], dim=-1)
    return LayerLens("readout", cosine.cpu().numpy(), output=output, name=name)
