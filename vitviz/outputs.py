"""What a map explains: one output of the model, as a record (Captum's `target=`, made a value).

A map (rollout, relevancy, LeGrad, every attribution, the layer lens), the check of that map (faithfulness,
sanity) and the sentence beside it all take the same `Output`, so they cannot speak of different things.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

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

    def check(self, model) -> None:
        """Raise a ValueError naming what `model` lacks to give this output: a text tower, classes or a dense head."""
        if self.kind == "text" and not model.has_text:
            raise ValueError(f"{model.name} has no text tower: a text target needs a full CLIP or SigLIP model")
        if self.kind == "class" and model.labels is None:
            raise ValueError(f"{model.name} is not a classifier: it has no classes; follow its readout or dense "
                             "output instead")  # fmt: skip
        if self.kind == "dense" and model.dense_head is None:
            raise ValueError(f"{model.name} has no dense head: its output is not a map")

    def lens_kind(self) -> str:
        """What the layer lens reads for this output at each layer: "classes" (every class's probability), "dense"
        (the dense head's map) or "readout" (the readout vector); a text output has no head of its own to read."""
        if self.kind == "text":
            raise ValueError("the layer lens reads the model's output head; an image-text similarity has none")
        return {"class": "classes", "dense": "dense", "readout": "readout"}[self.kind]

    def reading(self, model, out, size: tuple[int, int], image_size: tuple[int, int]) -> Reading:
        """This output fixed on one photo, from `out`, the forward of its model input [1,3,h,w] (`size` (h, w)):
        a class of None resolved to the photo's top class, a dense output's pixel weights (its map on the photo,
        or a box in pixels of the original image, of `image_size` (H, W)), the readout vector's direction, a
        text's features. Call it without gradients: what it fixes is a constant of the function it makes."""
        self.check(model)
        grid = (size[0] // model.patch_size, size[1] // model.patch_size)
        if self.kind == "text":
            return _TextLogit(model, self, grid, size, model.text_features(self.text))
        if self.kind == "class":
            index = int(out.logits[0].argmax()) if self.index is None else int(self.index)
            if not 0 <= index < len(model.labels):
                raise ValueError(f"target must be a class index in [0, {len(model.labels)}), got {self.index}")
            return _ClassLogit(model, replace(self, index=index), grid, size)
        if self.kind == "readout":
            vector = model.readout_vector(out)[0].float()
            return _ReadoutLength(model, self, grid, size, vector / vector.norm().clamp(min=1e-12))
        photo = model.dense_map(out.hidden_states[-1], grid, size)[0, 0].float().cpu().numpy()
        weights = torch.from_numpy(dense_weights(self, photo, image_size)).to(model.device)
        return _DenseMean(model, self, grid, size, weights)

    def produced(self, model) -> str:
        """A sentence on this output as the model's own: what gives it, from which tokens."""
        if self.kind == "dense":
            return ("This model's output is its dense head: a small decoder (transposed convolutions) that reads "
                    "every patch token of the last layer and paints a map over the image.")  # fmt: skip
        if self.kind == "class":
            return f"This model's output is a classifier's logits, read from {model.readout.name} after the last layer."
        if self.kind == "text":
            return (f"This model's output is the image-text logit of its two towers, read from "
                    f"{model.readout.name} after the last layer.")  # fmt: skip
        return (f"This model has no output head: what it produces is the readout vector, {model.readout.name} after "
                "the last layer, which a task's head would read.")  # fmt: skip

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


class Reading:
    """An output fixed on one photo (`Output.reading`), as a function of forwards of inputs of the photo's input
    size: `of_output` [B] from a forward's result, `of_tokens` [B] from any layer's tokens [B,N,D] read through
    the output head as if they were the last layer's (on the last layer's, the output itself; on earlier ones, a
    layer lens), `token_weights` [N] how much the output reads each final token (relevancy's row). output: the
    output resolved (a class of None is the photo's top class); grid (gh, gw); size (h, w), the input's."""

    def __init__(self, model, output: Output, grid: tuple[int, int], size: tuple[int, int]) -> None:
        self.model, self.output, self.grid, self.size = model, output, grid, size

    def of_output(self, out) -> torch.Tensor:
        return self.of_tokens(out.hidden_states[-1])

    def of_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def token_weights(self, n: int) -> torch.Tensor:
        """The readout tokens' row: an output read from the readout reads those tokens."""
        return torch.from_numpy(self.model.readout.start(n)).to(self.model.device)


class _ClassLogit(Reading):
    def of_output(self, out) -> torch.Tensor:
        return out.logits[:, self.output.index]

    def of_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.output_from(hidden)[:, self.output.index]


class _TextLogit(Reading):
    def __init__(self, model, output, grid, size, features: torch.Tensor) -> None:
        super().__init__(model, output, grid, size)
        self.features = features  # [1,E] the text tower's

    def of_output(self, out) -> torch.Tensor:
        return self.model.similarity(self.model.readout_vector(out), self.features)

    def of_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.similarity(readout_of(self.model, hidden), self.features)


class _ReadoutLength(Reading):
    def __init__(self, model, output, grid, size, direction: torch.Tensor) -> None:
        super().__init__(model, output, grid, size)
        self.direction = direction  # [D] the photo's readout vector, of length 1

    def of_output(self, out) -> torch.Tensor:
        return self.model.readout_vector(out).float() @ self.direction

    def of_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        return readout_of(self.model, hidden).float() @ self.direction


class _DenseMean(Reading):
    def __init__(self, model, output, grid, size, weights: torch.Tensor) -> None:
        super().__init__(model, output, grid, size)
        self.weights = weights  # [h,w] each input pixel's weight (`dense_weights`)

    def of_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        dense = self.model.dense_map(hidden, self.grid, self.size)[:, 0]
        # A weighted mean, not a sum: Chefer's relevancy is not scale-invariant and was made for logit-sized
        # targets; summed over every pixel, its gradient term would dwarf the identity.
        return (dense * self.weights).sum((1, 2)) / self.weights.sum()

    def token_weights(self, n: int) -> torch.Tensor:
        """The patches', each by the mean of its pixels' weights: the dense head reads no prefix token."""
        m = self.model
        rows = torch.zeros(n, dtype=torch.float32, device=m.device)
        rows[m.n_prefix :] = torch.from_numpy(patch_weights(self.weights.cpu().numpy(), self.grid).ravel())
        return rows


def readout_of(model, hidden: torch.Tensor) -> torch.Tensor:
    """[B,D] the readout vector if `hidden` [B,N,D] were the last layer's tokens (a classifier's is what its head
    reads): the readout tokens after the final norm (their mean where there are several), or the attention-pool."""
    normed = model.final_norm(hidden)
    return model.pool(normed) if model.readout.pool else normed[:, list(model.readout.tokens)].mean(1)


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
