"""What a map explains: one output of the model, as a record (Captum's `target=`, made a value).

A map (rollout, relevancy, LeGrad, every attribution, the layer lens), the check of that map (faithfulness,
sanity) and the sentence beside it all take the same `Output`, so they cannot speak of different things.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in pixels of the original image
Text = str | Sequence[int]  # a text target: words, or token ids of the model's tokenizer

KINDS = ("class", "text", "dense", "readout")
# Where a dense output is read without a box: weighted by the photo's own map (the default: what a deletion test
# should follow, docs/design.md "The output a map explains"), or the plain mean over the whole image.
DENSE_REGIONS = ("salient", "image")


@dataclass(frozen=True)
class Output:
    """One scalar output of a model on an image.

    kind "class": the logit of class `index` (None: the top class on the image). "text": the image-text logit
    with `text` (a full CLIP or SigLIP). "dense": the dense head's map, read inside `box` (original-image pixels)
    or, without one, weighted by the photo's own map (`region` "salient": Σ m₀·m / Σ m₀, where m₀ is the map on
    the unmasked photo) or averaged over the image ("image"). "readout": the readout vector's length along the
    unmasked photo's readout direction (its norm on the photo itself), for an encoder without an output head.
    """

    kind: str
    index: int | None = None
    text: Text | None = None
    box: Box | None = None
    region: str = "salient"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown output kind {self.kind!r}: use one of {', '.join(KINDS)}")
        if self.region not in DENSE_REGIONS:
            raise ValueError(f"unknown dense region {self.region!r}: use one of {', '.join(DENSE_REGIONS)}")
        if self.kind == "text" and self.text is None:
            raise ValueError("a text output needs its text")
        if self.text is not None and not isinstance(self.text, str):
            object.__setattr__(self, "text", tuple(int(t) for t in self.text))  # hashable, a cache key

    @property
    def reads_readout(self) -> bool:
        """Whether this output reads the readout (CLS, the distilled pair, SigLIP's probe) rather than the patches."""
        return self.kind != "dense"

    def name(self, model, labels: Sequence[str] | None = None) -> str:
        """The output in plain words, for the sentence beside a map or a check."""
        labels = labels if labels is not None else model.labels
        if self.kind == "text":
            return f"the image-text similarity with {_quoted(self.text)} ({model.family.name}'s logit)"
        if self.kind == "class":
            which = "the top class" if self.index is None else f"class {self.index}: {labels[self.index]}"
            return f"the logit of {which}"
        if self.kind == "readout":
            return (f"the readout vector ({model.readout.name}, after the final norm), measured as its length "
                    "along your photo's own readout vector")  # fmt: skip
        if self.box is not None:
            return "the dense head's map, averaged inside the box"
        if self.region == "image":
            return "the dense head's map, averaged over the whole image"
        return "the dense head's map where it marks your photo as salient (weighted by its map on your photo)"

    def short(self, labels: Sequence[str] | None = None) -> str:
        """A few words for a legend or a plot's title."""
        if self.kind == "text":
            return "the similarity with " + (f'"{self.text}"' if isinstance(self.text, str) else "the text")
        if self.kind == "class":
            known = self.index is not None and labels is not None
            return f"the logit of {labels[self.index]}" if known else "the top class's logit"
        if self.kind == "readout":
            return "the readout vector"
        if self.box is not None:
            return "the dense map inside the box"
        return "the dense map over the image" if self.region == "image" else "the dense map where salient"


def default_output(model) -> Output:
    """The output a model has: its top class (a classifier), its dense head (the embedded model), else its readout
    vector (an encoder without a head)."""
    if model.labels is not None:
        return Output("class")
    if model.dense_head is not None:
        return Output("dense")
    return Output("readout")


# What a view may follow, by the key its control sends: the model's own output, or its readout vector.
FOLLOWED = {"output": "the model's output", "readout": "the readout token (CLS)"}


def followed(own: Output, key: str) -> Output:
    """The output a view follows: the model's own (`own`, for "output") or the readout vector ("readout")."""
    if key not in FOLLOWED:
        raise ValueError(f"the followed output must be one of {list(FOLLOWED)}, got {key!r}")
    return own if key == "output" else Output("readout")


def output_for(model, target: int | None = None, box: Box | None = None, text: Text | None = None,
               region: str = "salient") -> Output:  # fmt: skip
    """The output that `attribute`'s target, box and text name (see `Output`): a text wins, then a class, the
    dense head (in the box, or over `region`), else the readout vector."""
    if text is not None:
        return Output("text", text=text)
    if model.labels is not None:
        return Output("class", index=None if target is None else int(target))
    if model.dense_head is not None:
        return Output("dense", box=None if box is None else tuple(float(v) for v in box), region=region)
    return Output("readout")


def patch_weights(pixels: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """[gh,gw] the mean of a weight map over each patch's pixels: pixels [h,w], h and w multiples of the grid's
    (a dense output reads a patch as much as its pixels weigh in the output)."""
    (gh, gw), (h, w) = grid, pixels.shape
    if h % gh or w % gw:
        raise ValueError(f"a {h}x{w} weight map does not cut into a {gh}x{gw} grid")
    return pixels.reshape(gh, h // gh, gw, w // gw).mean((1, 3)).astype(np.float32)


def box_mask(box: Box, image_size: tuple[int, int], input_size: tuple[int, int]) -> np.ndarray:
    """A 0/1 mask [h,w] float32 on the model input for a box given in original-image pixels."""
    x0, y0, x1, y1 = (float(v) for v in box)
    (height, width), (h, w) = image_size, input_size
    x0, x1 = (min(max(v, 0.0), float(width)) for v in sorted((x0, x1)))
    y0, y1 = (min(max(v, 0.0), float(height)) for v in sorted((y0, y1)))
    if x1 - x0 < 1 or y1 - y0 < 1:
        raise ValueError(f"the box {box} covers no pixels of the {width}x{height} image")
    mask = np.zeros((h, w), np.float32)
    r0, r1 = int(y0 * h / height), max(int(y0 * h / height) + 1, round(y1 * h / height))
    c0, c1 = int(x0 * w / width), max(int(x0 * w / width) + 1, round(x1 * w / width))
    mask[r0:r1, c0:c1] = 1
    return mask


def dense_weights(output: Output, dense_map: np.ndarray | None, image_size: tuple[int, int]) -> np.ndarray:
    """[h,w] float32 how much each input pixel of the dense map counts in a dense `output`: the box's mask, the
    unmasked photo's map (`dense_map` [h,w], "salient") or ones ("image")."""
    if output.kind != "dense":
        raise ValueError(f"only a dense output weighs pixels, not {output.kind!r}")
    if dense_map is None:
        raise ValueError("this model has no dense head: its output is not a map")
    if output.box is not None:
        return box_mask(output.box, image_size, dense_map.shape)
    if output.region == "image":
        return np.ones(dense_map.shape, np.float32)
    return np.asarray(dense_map, np.float32)


def _quoted(text: Text) -> str:
    return f'"{text}"' if isinstance(text, str) else f"the token ids {list(text)}"
