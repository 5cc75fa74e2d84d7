"""The layer lens: the model's own output head read from every layer's tokens, after the final norm.

On the last layer this is the model's output; on earlier ones it shows how that output forms through depth (a
classifier's top class, the dense head's map). The head was trained on the last layer's tokens only, so an early
layer's reading is what the head makes of tokens it never saw, not a trained probe of that layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .attributions import attribution_size
from .models import VitModel
from .preprocess import ImageInput, load_image, prepare_input


@dataclass(eq=False)
class LayerLens:
    """kind: "classes" (probs [L,C], the softmax of each layer's logits), "dense" (maps [L,h,w] in [0,1], the
    dense head on each layer's patch tokens, on its 224x224 input) or "readout" (similarity [L], the cosine of
    each layer's readout vector with the last layer's). labels: the class names, for "classes"."""

    kind: str
    values: np.ndarray
    labels: list[str] | None = None

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
        if self.kind == "classes":
            final = int(self.top()[-1])
            p = self.values[:, final]
            return (
                f"The final class, **{self.labels[final]}**, is the head's top reading from layer {k} on "
                f"(its probability {p[k]:.0%} there, {p[-1]:.0%} at layer {last}){caveat}."
            )
        what = "dense map" if self.kind == "dense" else "readout vector"
        gaps = self.gaps()
        if k == last:
            far = int(gaps.argmax())
            return (
                f"Read through the output head, no layer before the last gives a {what} close to the final one: "
                f"layer {last - 1}'s still differs from it by {gaps[last - 1] / gaps.max():.0%} as much as layer "
                f"{far}'s, the most different one (mean absolute difference){caveat}."
            )
        return (
            f"Read through the output head, the layers' {what}s come within 10 % of the final one (mean absolute "
            f"difference, against the largest) from layer {k} on{caveat}."
        )

    def gaps(self) -> np.ndarray:
        """[L] the mean absolute difference of each layer's reading from the last layer's."""
        return np.array([np.abs(v - self.values[-1]).mean() for v in self.values])


def layer_lens(model: VitModel, image: ImageInput, longest: int | None = None) -> LayerLens:
    """The lens on `image`, on the input that attributions use (a classifier's native size, the dense head's
    224x224, else `longest`)."""
    rgb = load_image(image)
    h, w = attribution_size(model, *rgb.shape[:2], longest)
    x = torch.from_numpy(prepare_input(rgb, (h, w), model.patch_size, model.mean, model.std))
    out = model.forward(x, attentions=lambda layer, weights: None)
    hidden = out.hidden_states[1:]
    with model.lock, torch.inference_mode():
        if model.dense_head is not None:
            grid = (h // model.patch_size, w // model.patch_size)
            maps = [model.dense_map(t, grid, (h, w))[0, 0] for t in hidden]
            return LayerLens("dense", torch.stack(maps).float().cpu().numpy())
        outputs = torch.cat([model.output_from(t) for t in hidden]).float()
    if model.labels is not None:
        return LayerLens("classes", torch.softmax(outputs, -1).cpu().numpy(), model.labels)
    cosine = torch.nn.functional.cosine_similarity(outputs, outputs[-1:], dim=-1)
    return LayerLens("readout", cosine.cpu().numpy())
