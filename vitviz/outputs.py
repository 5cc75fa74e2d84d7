"""What a map explains: one output of the model, as a small class per kind (Captum's `target=`, made a value, as
pytorch-grad-cam's targets are: `ClassLogit`, `TextLogit`, `DenseMap`, `ReadoutVector`).

A map (rollout, relevancy, LeGrad, every attribution, the layer lens), the check of that map (faithfulness,
sanity) and the sentence beside it all take the same `Output`, so they cannot speak of different things.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import torch

Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in pixels of the original image
Text = str | Sequence[int]  # a text target: words, or token ids of the model's tokenizer

# Where a dense output is read without a box: weighted by the photo's own map (the default: what a deletion test
# should follow, docs/design.md "The output a map explains"), or the plain mean over the whole image.
DENSE_REGIONS = ("salient", "image")


class _ByKind(type):
    """`Output("class", index=3)` builds that kind's own class, `ClassLogit(index=3)`: a kind's name (`KINDS`) is
    the one word for it in the app, the lens, the sentences and the HTTP API."""

    def __call__(cls, *args, **fields):
        if cls is not Output:
            return super().__call__(*args, **fields)
        if not args:
            raise ValueError(f"name an output kind: one of {', '.join(KINDS)}")
        kind, *rest = args
        if kind not in KINDS:
            raise ValueError(f"unknown output kind {kind!r}: use one of {', '.join(KINDS)}")
        return KINDS[kind](*rest, **fields)


@dataclass(frozen=True)
class Output(metaclass=_ByKind):
    """One scalar output of a model on an image: one of the small classes below, each of which owns its check
    (`check`), its reading on a photo (`reading`) and its words (`name`, `short`, `produced`), as
    pytorch-grad-cam's targets do. `Output(kind, ...)` builds the class of that kind (`KINDS`)."""

    kind: ClassVar[str]
    reads_readout: ClassVar[bool] = True  # whether it reads the readout (CLS, the distilled pair, SigLIP's probe)

    def check(self, model) -> None:
        """Raise a ValueError naming what `model` lacks to give this output: a text tower, classes or a dense head."""

    def reading(
        self, model, out, size: tuple[int, int], image_size: tuple[int, int], dense: np.ndarray | None = None
    ) -> Reading:
        """This output fixed on one photo, from `out`, the forward of its model input [1,3,h,w] (`size` (h, w)):
        a class of None resolved to the photo's top class, a dense output's pixel weights (its map on the photo,
        or a box in pixels of the original image, of `image_size` (H, W)), the readout vector's direction, a
        text's features. Call it without gradients: what it fixes is a constant of the function it makes.
        dense: the dense head's map [h,w] on `out`'s tokens where the caller has it made (not made again)."""
        self.check(model)
        grid = (size[0] // model.patch_size, size[1] // model.patch_size)
        return self.fixed(model, out, grid, size, image_size, dense)

    def fixed(
        self, model, out, grid: tuple[int, int], size: tuple[int, int], image_size: tuple[int, int], dense=None
    ) -> Reading:
        """`reading` once the model is checked, on the input's patch grid (gh, gw)."""
        raise NotImplementedError

    def produced(self, model) -> str:
        """A sentence on this output as the model's own: what gives it, from which tokens."""
        raise NotImplementedError

    def name(self, model, labels: Sequence[str] | None = None) -> str:
        """The output in plain words, for the sentence beside a map or a check."""
        raise NotImplementedError

    def short(self, labels: Sequence[str] | None = None) -> str:
        """A few words for a legend or a plot's title."""
        raise NotImplementedError


@dataclass(frozen=True)
class ClassLogit(Output):
    """The logit of class `index` (None: the top class on the photo)."""

    index: int | None = None
    kind: ClassVar[str] = "class"

    def check(self, model) -> None:
        if model.labels is None:
            raise ValueError(
                f"{model.name} is not a classifier: it has no classes; follow its readout or dense output instead"
            )

    def fixed(self, model, out, grid, size, image_size, dense=None) -> Reading:
        index = int(out.logits[0].argmax()) if self.index is None else int(self.index)
        if not 0 <= index < len(model.labels):
            raise ValueError(f"target must be a class index in [0, {len(model.labels)}), got {self.index}")
        return _ClassReading(model, replace(self, index=index), grid, size)

    def produced(self, model) -> str:
        return f"This model's output is a classifier's logits, read from {model.readout.name} after the last layer."

    def name(self, model, labels: Sequence[str] | None = None) -> str:
        labels = labels if labels is not None else model.labels
        which = "the top class" if self.index is None else f"class {self.index}: {labels[self.index]}"
        return f"the logit of {which}"

    def short(self, labels: Sequence[str] | None = None) -> str:
        known = self.index is not None and labels is not None
        return f"the logit of {labels[self.index]}" if known else "the top class's logit"


@dataclass(frozen=True)
class TextLogit(Output):
    """The image-text logit with `text` (words, or token ids of the model's tokenizer), of a full CLIP or SigLIP."""

    text: Text | None = None
    kind: ClassVar[str] = "text"

    def __post_init__(self) -> None:
        if self.text is None:
            raise ValueError("a text output needs its text")
        if not isinstance(self.text, str):
            object.__setattr__(self, "text", tuple(int(t) for t in self.text))  # hashable, a cache key

    def check(self, model) -> None:
        if not model.has_text:
            raise ValueError(f"{model.name} has no text tower: a text target needs a full CLIP or SigLIP model")

    def fixed(self, model, out, grid, size, image_size, dense=None) -> Reading:
        return _TextReading(model, self, grid, size, model.text_features(self.text))

    def produced(self, model) -> str:
        return (
            f"This model's output is the image-text logit of its two towers, read from "
            f"{model.readout.name} after the last layer."
        )

    def name(self, model, labels: Sequence[str] | None = None) -> str:
        quoted = f'"{self.text}"' if isinstance(self.text, str) else f"the token ids {list(self.text)}"
        return f"the image-text similarity with {quoted} ({model.family.name}'s logit)"

    def short(self, labels: Sequence[str] | None = None) -> str:
        return "the similarity with " + (f'"{self.text}"' if isinstance(self.text, str) else "the text")


@dataclass(frozen=True)
class DenseMap(Output):
    """The dense head's map, read inside `box` (original-image pixels) or, without one, weighted by the photo's own
    map (`region` "salient": Σ m₀·m / Σ m₀, where m₀ is the map on the unmasked photo) or averaged over the image
    ("image"). It reads the patches, not the readout."""

    box: Box | None = None
    region: str = "salient"
    kind: ClassVar[str] = "dense"
    reads_readout: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.region not in DENSE_REGIONS:
            raise ValueError(f"unknown dense region {self.region!r}: use one of {', '.join(DENSE_REGIONS)}")

    def check(self, model) -> None:
        if model.dense_head is None:
            raise ValueError(f"{model.name} has no dense head: its output is not a map")

    def fixed(self, model, out, grid, size, image_size, dense=None) -> Reading:
        photo = dense
        if photo is None:
            photo = model.dense_map(out.hidden_states[-1], grid, size)[0, 0].float().cpu().numpy()
        weights = torch.from_numpy(self.weights(photo, image_size)).to(model.device)
        return _DenseReading(model, self, grid, size, weights)

    def weights(self, dense_map: np.ndarray | None, image_size: tuple[int, int]) -> np.ndarray:
        """[h,w] float32 how much each input pixel of the dense map counts in this output: the box's mask, the
        unmasked photo's map (`dense_map` [h,w], "salient") or ones ("image")."""
        if dense_map is None:
            raise ValueError("this model has no dense head: its output is not a map")
        if self.box is not None:
            return box_mask(self.box, image_size, dense_map.shape)
        if self.region == "image":
            return np.ones(dense_map.shape, np.float32)
        return np.asarray(dense_map, np.float32)

    def where(self) -> str:
        """Which patches the output reads and how it weighs them, for a rollout's sentence."""
        where = "inside the box" if self.box is not None else "over the image"
        weighted = "equally" if self.box is not None or self.region == "image" else "by the head's map"
        return f"{where}, each weighted {weighted}"

    def produced(self, model) -> str:
        return (
            "This model's output is its dense head: a small decoder (transposed convolutions) that reads "
            "every patch token of the last layer and paints a map over the image."
        )

    def name(self, model, labels: Sequence[str] | None = None) -> str:
        if self.box is not None:
            return "the dense head's map, averaged inside the box"
        if self.region == "image":
            return "the dense head's map, averaged over the whole image"
        return "the dense head's map where it marks your photo as salient (weighted by its map on your photo)"

    def short(self, labels: Sequence[str] | None = None) -> str:
        if self.box is not None:
            return "the dense map inside the box"
        return "the dense map over the image" if self.region == "image" else "the dense map on what it marks"


@dataclass(frozen=True)
class ReadoutVector(Output):
    """The readout vector's length along the unmasked photo's readout direction (its norm on the photo itself),
    for an encoder without an output head."""

    kind: ClassVar[str] = "readout"

    def fixed(self, model, out, grid, size, image_size, dense=None) -> Reading:
        vector = model.readout_vector(out)[0].float()
        return _ReadoutReading(model, self, grid, size, vector / vector.norm().clamp(min=1e-12))

    def produced(self, model) -> str:
        return (
            f"This model has no output head: what it produces is the readout vector, {model.readout.name} after "
            "the last layer, which a task's head would read."
        )

    def name(self, model, labels: Sequence[str] | None = None) -> str:
        return (
            f"the readout vector ({model.readout.name}, after the final norm), measured as its length "
            "along your photo's own readout vector"
        )

    def short(self, labels: Sequence[str] | None = None) -> str:
        return "the readout vector"


KINDS: dict[str, type[Output]] = {kind.kind: kind for kind in (ClassLogit, TextLogit, DenseMap, ReadoutVector)}


class Reading:
    """An output fixed on one photo (`Output.reading`), as a function of forwards of inputs of the photo's input
    size: `of_output` [B] from a forward's result, `of_tokens` [B] from any layer's tokens [B,N,D] read through
    the output head as if they were the last layer's (on the last layer's, the output itself; on earlier ones, a
    layer lens), `token_weights` [N] how much the output reads each final token (relevancy's row). output: the
    output resolved (a class of None is the photo's top class); grid (gh, gw); size (h, w), the input's."""

    def __init__(self, model, output: Output, grid: tuple[int, int], size: tuple[int, int]) -> None:
        self.model, self.output, self.grid, self.size = model, output, grid, size

    def of_output(self, out, dense: np.ndarray | None = None) -> torch.Tensor:
        """[B] the output of a forward's result; dense: the dense head's map [h,w] on its tokens where the caller
        has it made (a dense output reads it rather than run the head again; the others need none)."""
        return self.of_tokens(out.hidden_states[-1])

    def of_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def token_weights(self, n: int) -> torch.Tensor:
        """The readout tokens' row: an output read from the readout reads those tokens."""
        return torch.from_numpy(self.model.readout.start(n)).to(self.model.device)


class _ClassReading(Reading):
    def of_output(self, out, dense: np.ndarray | None = None) -> torch.Tensor:
        return out.logits[:, self.output.index]

    def of_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.output_from(hidden)[:, self.output.index]


class _TextReading(Reading):
    def __init__(self, model, output, grid, size, features: torch.Tensor) -> None:
        super().__init__(model, output, grid, size)
        self.features = features  # [1,E] the text tower's

    def of_output(self, out, dense: np.ndarray | None = None) -> torch.Tensor:
        return self.model.similarity(self.model.readout_vector(out), self.features)

    def of_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.similarity(readout_of(self.model, hidden), self.features)


class _ReadoutReading(Reading):
    def __init__(self, model, output, grid, size, direction: torch.Tensor) -> None:
        super().__init__(model, output, grid, size)
        self.direction = direction  # [D] the photo's readout vector, of length 1

    def of_output(self, out, dense: np.ndarray | None = None) -> torch.Tensor:
        return self.model.readout_vector(out).float() @ self.direction

    def of_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        return readout_of(self.model, hidden).float() @ self.direction


class _DenseReading(Reading):
    def __init__(self, model, output, grid, size, weights: torch.Tensor) -> None:
        super().__init__(model, output, grid, size)
        self.weights = weights  # [h,w] each input pixel's weight (`dense_weights`)

    def of_output(self, out, dense: np.ndarray | None = None) -> torch.Tensor:
        if dense is None:
            return self.of_tokens(out.hidden_states[-1])
        return self.of_map(torch.from_numpy(np.asarray(dense, np.float32))[None].to(self.weights.device))

    def of_tokens(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.of_map(self.model.dense_map(hidden, self.grid, self.size)[:, 0])

    def of_map(self, dense: torch.Tensor) -> torch.Tensor:
        """[B] the output of dense maps [B,h,w]. A weighted mean, not a sum: Chefer's relevancy is not
        scale-invariant and was made for logit-sized targets; summed over every pixel, its gradient term would
        dwarf the identity."""
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
        return ClassLogit()
    if model.dense_head is not None:
        return DenseMap()
    return ReadoutVector()


# What a view may follow, by the key its control sends: the model's own output, or its readout vector.
FOLLOWED = {"output": "the model's output", "readout": "the readout token (CLS)"}


def followed(own: Output, key: str) -> Output:
    """The output a view follows: the model's own (`own`, for "output") or the readout vector ("readout")."""
    if key not in FOLLOWED:
        raise ValueError(f"the followed output must be one of {list(FOLLOWED)}, got {key!r}")
    return own if key == "output" else ReadoutVector()


def output_for(
    model, target: int | None = None, box: Box | None = None, text: Text | None = None, region: str = "salient"
) -> Output:
    """The output that `attribute`'s target, box and text name (see `Output`): a text wins, then a class, the
    dense head (in the box, or over `region`), else the readout vector."""
    if text is not None:
        return TextLogit(text)
    if model.labels is not None:
        return ClassLogit(None if target is None else int(target))
    if model.dense_head is not None:
        return DenseMap(box=None if box is None else tuple(float(v) for v in box), region=region)
    return ReadoutVector()


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
