"""The Attributions view: an attribution beside the rollout and the relevancy, each on its colour scale."""

from __future__ import annotations

import numpy as np

from .. import render
from ..analysis import Analysis
from ..attributions import SIGNED, Attribution
from ..maps import DEFAULT_SCALE
from .common import display, scaled_overlay

ATTRIBUTION_SIDE = 360  # and of the three of the attributions view


def attribution_inputs(
    a: Analysis, r: Attribution, rel: Attribution | None, rollout: np.ndarray | None = None
) -> tuple[np.ndarray, bool, np.ndarray, np.ndarray, np.ndarray | None]:
    """What the attributions view draws, at the size it is shown (under a megabyte, so that an app can keep
    it and recolour it): (the image, whether the attribution is signed, the attribution, the rollout, the
    relevancy or None). rollout: [gh,gw] computed on the attribution's own input (see
    `attributions.input_analysis`); the analysis' own by default."""
    base = render.fit(display(a), ATTRIBUTION_SIDE)  # shown three abreast: the colour scales go under them
    side = max(base.shape[:2])

    def small(values: np.ndarray) -> np.ndarray:
        return render.fit(values, side) if max(values.shape) > side else values  # area-averaged, not aliased

    roll = a.rollout("mean", 0.0) if rollout is None else rollout
    return base, r.method in SIGNED, small(r.map), roll, None if rel is None else small(rel.map)


def attribution_pictures(
    inputs: tuple, cmap: str = "inferno", alpha: float = 0.6, scale: str = DEFAULT_SCALE
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(the attribution, attention rollout, relevancy) of `attribution_inputs` over the image, each with
    its colour scale under it. Signed maps (IG, input x gradient, occlusion) use a diverging colormap
    centred at 0: red pushes the target up, blue down. Their scale is clipped at the 99.5th percentile of
    the magnitudes, as Captum's own visualisation does, since a few pixels dominate otherwise. Unsigned
    maps use the colour `scale`."""
    base, signed, attribution, roll, relevancy = inputs

    def draw(values: np.ndarray, signed: bool, quantity: str) -> np.ndarray:
        if signed:
            limit = float(np.percentile(np.abs(values), 99.5)) or float(np.abs(values).max()) or 1.0
            img = render.overlay(base, values, "diverging", alpha, -limit, limit, nearest=False)
            return render.with_colorbar_below(img, "diverging", -limit, limit, "signed", quantity)
        return scaled_overlay(base, values, cmap, alpha, scale, False, colorbar="below", quantity=quantity)

    said = "red pushes the output up, blue down" if signed else "how much it drives the output"
    shares = roll / max(float(roll.sum()), 1e-12) * 100
    drawn = [draw(attribution, signed, said), draw(shares, False, "% of the flow to the output")]
    drawn += [] if relevancy is None else [draw(relevancy, False, "relevance to the output")]
    tall = max(p.shape[0] for p in drawn)  # shown abreast: one height, whatever lines their scales' words take
    drawn = [render.pad_to(p, height=tall) for p in drawn]
    return drawn[0], drawn[1], drawn[2] if relevancy is not None else None
