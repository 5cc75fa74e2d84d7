"""Plotly figures: the properties a reader relies on, read from the figure itself."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vitviz import plots


def test_each_small_map_keeps_its_own_aspect():
    """Every tile's y axis is tied to its own x axis (so a wide map stays wide in every tile, not in the first
    alone), its rows run downwards, and its cells are the map's, resized to at most 64 a side."""
    maps = np.random.default_rng(0).random((5, 40, 80)).astype(np.float32)
    fig = plots.map_grid(maps, [f"layer {i}" for i in range(5)])
    layout = fig.to_plotly_json()["layout"]
    for i in range(5):
        x, y = ("xaxis", "yaxis") if i == 0 else (f"xaxis{i + 1}", f"yaxis{i + 1}")
        assert layout[y]["scaleanchor"] == x.replace("axis", "") and layout[y]["autorange"] == "reversed"
    assert [np.asarray(t.z).shape for t in fig.data] == [(32, 64)] * 5


def test_the_grid_of_grids_is_diverging_and_centred_at_zero():
    """The signed cosines' colour scale: -1 at blue, 0 at near-white and 1 at red (render's "diverging"), by
    Plotly's own sampling of the figure's scale, with the scale fixed to [-1, 1] around 0."""
    from plotly.colors import sample_colorscale

    sim = np.random.default_rng(0).uniform(-1, 1, (4, 4, 4, 4)).astype(np.float32)
    heatmap = plots.pos_embed_grid(sim).data[0]
    assert (heatmap.zmin, heatmap.zmid, heatmap.zmax) == (-1, 0, 1)
    scale = [list(stop) for stop in heatmap.colorscale]
    sampled = [[float(v) for v in c[4:-1].split(",")] for c in sample_colorscale(scale, [0.0, 0.5, 1.0, 0.75])]
    want = [(33, 102, 172), (247, 247, 247), (178, 24, 43), (212.5, 135.5, 145)]  # 0.5: halfway from white to red
    np.testing.assert_allclose(sampled, want, atol=0.5)


def test_the_faithfulness_plots_band_is_the_random_orders_middle_90_percent_and_its_title_the_rule():
    from test_faithfulness import made

    f = made(np.linspace(0.5, 1.0, 50), 0.2, steps=4)
    f.band = replace(f.band, curves=f.band.curves + np.random.default_rng(0).normal(size=f.band.curves.shape))
    fig = plots.faithfulness_curves([f], ["a map"])
    high, low = (t for t in fig.data[:2])
    np.testing.assert_allclose(high.y, np.percentile(f.random, 95, 0))
    np.testing.assert_allclose(low.y, np.percentile(f.random, 5, 0))
    assert "50 random orders (middle 90 % at each step)" == low.name
    assert "area below 49 of 50 random orders = faithful" in fig.layout.annotations[0].text
