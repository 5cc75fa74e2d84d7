"""The views' pictures and where a click on them lands."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FAMILIES, random_image

import vitviz
from vitviz import render, views


@pytest.fixture(scope="module")
def wide() -> vitviz.Analysis:
    """A non-square grid (5 x 9) with 5 prefix tokens: rows and columns cannot be swapped unseen."""
    image = (random_image(40, 72, seed=8) // 2 + 64).astype(np.uint8)  # no saturated colour: none is the marker's
    return vitviz.analyze(FAMILIES["dinov2_registers"](), image, longest=72)


def marker_centre(picture: np.ndarray) -> tuple[float, float]:
    """(x, y) of the centre of the query marker (render.QUERY pixels) on a drawn picture."""
    ys, xs = np.nonzero((picture == np.array(render.QUERY, np.uint8)).all(axis=-1))
    assert len(xs), "no query marker drawn"
    return (xs.min() + xs.max()) / 2, (ys.min() + ys.max()) / 2


@pytest.mark.parametrize("corner", ["top left", "top right", "bottom left", "bottom right", "middle"])
def test_a_click_on_inside_a_heads_maps_picks_the_patch_drawn_there(wide, corner):
    """Each of the three maps of inside a head: the patch marked as the query is the patch a click on its
    marker picks (they are drawn smaller than the display, with a colour scale below)."""
    gh, gw = wide.grid
    patch = {"top left": 0, "top right": gw - 1, "bottom left": (gh - 1) * gw, "bottom right": gh * gw - 1}.get(
        corner, (gh // 2) * gw + gw // 2 + 1
    )
    for picture in views.inside_views(wide, 1, 2, patch)[:3]:
        assert views.patch_at_inside(wide, *marker_centre(picture)) == patch


def test_a_click_on_the_attention_picker_picks_the_patch_drawn_there(wide):
    gh, gw = wide.grid
    for patch in (0, gw - 1, (gh - 1) * gw, gh * gw - 1, 2 * gw + 3):
        picker = views.attention_view(wide, 1, None, patch)[1]
        assert views.patch_at_display(wide, *marker_centre(picker)) == patch
