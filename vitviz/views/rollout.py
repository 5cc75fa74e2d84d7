"""The Rollout view: attention rollout toward an output over the photo, and what it can tell on it."""

from __future__ import annotations

import numpy as np

from ..analysis import Analysis
from ..maps import DEFAULT_SCALE
from ..outputs import Output, patch_weights
from ..sanity import rank_correlation
from ..sentences import rollout_note, rollout_readout_truth, rollout_truth
from .common import display, scaled_overlay


def rollout_view(
    a: Analysis,
    fusion: str,
    discard: float,
    cmap: str = "inferno",
    alpha: float = 0.6,
    scale: str = DEFAULT_SCALE,
    toward: Output | None = None,
) -> tuple[np.ndarray, str]:
    """(the rollout toward `toward` (default: the model's own output) over the image, bilinear, with a colorbar
    in the note's unit, each patch's share of what the patches pass on, in %; the note: what the map follows and
    what its brightest patch is)."""
    toward = a.output if toward is None else toward
    values = a.rollout(fusion, discard, toward)
    shares = values / max(float(values.sum()), 1e-12) * 100
    quantity = f"% of the flow to {'the readout' if toward.reads_readout else 'the output'}"
    picture = scaled_overlay(display(a), shares, cmap, alpha, scale, False, a.grid, quantity=quantity)
    return picture, rollout_note(a, values, toward)


def rollout_truth_note(a: Analysis, fusion: str, discard: float) -> str:
    """What a rollout with this fusion and discard ratio can tell on this photo (`sentences.rollout_truth`): for a
    dense output, the rank correlations of the rollouts toward the output and toward the readout with each other and
    with the output's own map (each patch's mean), as the site computes them."""
    if a.output.reads_readout:
        return rollout_readout_truth(a.num_layers, a.model.readout.name)
    to_output, to_readout = a.rollout(fusion, discard), a.rollout(fusion, discard, Output("readout"))
    own = patch_weights(a.dense_map(), a.grid)
    return rollout_truth(
        a.num_layers,
        a.model.readout.name,
        rank_correlation(to_output, to_readout),
        rank_correlation(to_output, own),
        rank_correlation(to_readout, own),
    )
