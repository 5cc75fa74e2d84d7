"""The Tokens view: the photo cut into patches, in scan order, and the token sequence in words."""

from __future__ import annotations

import numpy as np

from .. import render
from ..analysis import Analysis
from ..sentences import pixel_words, readout_phrase
from .common import display


def tokens_view(a: Analysis) -> tuple[np.ndarray, str]:
    """The image cut into patches with the scan order, and a sentence on the token sequence."""
    m = a.model
    gh, gw = a.grid
    h, w = a.pixel_values.shape[2:]
    prefix = ", ".join(m.prefix_tokens)
    plus = (
        f", **plus {m.n_prefix} prefix token{'s' if m.n_prefix > 1 else ''}: {prefix}**"
        if m.n_prefix
        else " and no prefix token"
    )
    order = (
        f"In the sequence the prefix tokens come first, so patch p*i* sits at position #*i*+{m.n_prefix} (the "
        "strip under the picture). "
        if m.n_prefix
        else ""
    )
    text = (
        f"**{gh} rows × {gw} columns = {gh * gw} patch tokens** of {m.patch_size}×{m.patch_size} pixels "
        f"(the model sees the image at {pixel_words(h, w)}){plus} → {a.num_tokens} tokens in all. "
        f"Patches are numbered p0, p1, … in scan order, left to right and top to bottom (left margin: the first "
        f"patch of each row; top: the column). {order}{readout_phrase(a)} Each patch token also gets a "
        "learned *position embedding* added (+ pos), so the model knows where the patch came from."
    )
    grid = render.scan_margins(display(a), a.grid)
    named = list(zip(m.prefix_tokens, m.prefix_with_position, strict=True))
    strip = render.token_strip(display(a), a.grid, named, grid.shape[1])
    return np.concatenate([grid, strip]), text
