"""Plotly figures: the properties a reader relies on, read from the figure itself."""

from __future__ import annotations

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
