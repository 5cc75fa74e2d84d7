"""`vitviz check MODEL`: vitviz's capture of a model against transformers' own outputs, on one photo.

It compares what every view reads (attentions, hidden states, the readout and the logits or pooled output, and
a full CLIP or SigLIP model's image-text logit) with a plain forward of transformers' module that asks for its
attentions, with no hook of vitviz's on it. Run it on any hub model before trusting vitviz's views of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .capture import analyze
from .models import VitModel
from .preprocess import ImageInput

F16_ATOL = 2e-3  # attentions are kept as float16: 2**-11 relative, and weights are at most 1


@dataclass(frozen=True)
class Row:
    """One compared quantity: the largest difference, relative to the reference's largest value where
    `relative`, against `tolerance`."""

    quantity: str
    difference: float
    tolerance: float
    relative: bool

    @property
    def ok(self) -> bool:
        return bool(self.difference <= self.tolerance)


def check(model: VitModel, image: ImageInput, longest: int | None = None) -> list[Row]:
    """Compare `analyze(model, image)` with transformers' own forward on the same input."""
    a = analyze(model, image, longest)
    ref = model.reference_forward(torch.from_numpy(a.pixel_values))
    with torch.no_grad():
        ours = model.forward(torch.from_numpy(a.pixel_values), attentions="all", grad=True)
    theirs = torch.cat(ref.attentions).float().cpu().numpy()
    rows = [
        Row("attentions [L,H,N,N]", float(np.abs(a.attentions.astype(np.float32) - theirs).max()), F16_ATOL, False),
        _relative("hidden states [L+1,N,D]", a.hidden_states, torch.cat(ref.hidden_states).float().cpu().numpy()),
    ]
    if model.readout.pool:
        pool = model.probe_attention(ref.hidden_states[-1])[0].float().cpu().numpy()
        rows.append(Row("probe attention [H,N]", float(np.abs(a.pool_attention - pool).max()), 1e-5, False))
    if getattr(ref, "logits", None) is not None:
        rows.append(_relative("logits", ours.logits.detach(), ref.logits))
    else:
        theirs_pooled = model.family.readout_in_output(ref)
        rows.append(_relative("readout vector", model.readout_vector(ours).detach(), theirs_pooled))
    if model.has_text:
        rows.append(_text_row(model, ours, torch.from_numpy(a.pixel_values)))
    return rows


TEXT_IDS = [1, 2, 3, 4]  # any ids: the same text goes through both sides; what is checked is the image-text logit


def _text_row(model: VitModel, ours, pixel_values: torch.Tensor) -> Row:
    """The image-text logit that a text target explains, against the full model's own logits_per_image."""
    extra = {"interpolate_pos_encoding": True} if model.fixed_size else {}
    ids = torch.tensor([TEXT_IDS], device=model.device)
    with model.lock, torch.inference_mode():
        theirs = model.net(input_ids=ids, pixel_values=pixel_values.to(model.device), **extra).logits_per_image[:, 0]
        mine = model.similarity(model.readout_vector(ours), model.text_features(TEXT_IDS))
    return _relative(f"image-text logit (token ids {TEXT_IDS})", mine, theirs)


def _relative(quantity: str, ours, theirs) -> Row:
    ours, theirs = (_numpy(t) for t in (ours, theirs))
    scale = max(float(np.abs(theirs).max()), 1e-12)
    return Row(quantity, float(np.abs(ours - theirs).max()) / scale, 1e-4, True)


def _numpy(t) -> np.ndarray:
    return np.asarray(t.float().cpu().numpy() if torch.is_tensor(t) else t, np.float32)


def table(model: VitModel, rows: list[Row]) -> str:
    """The rows as the command prints them."""
    width = max(len(r.quantity) for r in rows)
    lines = [f"{model.name}: {model.family.name}, readout {model.readout.name}", ""]
    lines.append(f"{'quantity':<{width}}  {'difference':>11}  {'tolerance':>9}  result")
    for r in rows:
        kind = "rel" if r.relative else "abs"
        result = "ok" if r.ok else "MISMATCH"
        lines.append(f"{r.quantity:<{width}}  {r.difference:>11.2e}  {r.tolerance:>9.0e}  {result} ({kind})")
    return "\n".join(lines)
