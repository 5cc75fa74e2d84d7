"""Overlays are faithful to patches, clicks map to the right patch, colour scales are honest."""

from __future__ import annotations

import numpy as np

from vitviz import render


def test_nearest_overlay_is_flat_inside_each_patch():
    image = np.zeros((60, 90, 3), np.uint8)
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = render.overlay(image, values, "gray", alpha=1.0, nearest=True)
    assert out.shape == image.shape
    for r in range(2):
        for c in range(3):
            block = out[r * 30 : (r + 1) * 30, c * 30 : (c + 1) * 30]
            assert (block == block[0, 0]).all()
    assert out[0, 0, 0] == 0 and out[-1, -1, 0] == 255  # min and max of the scale


def test_patch_at_inverts_patch_box():
    grid, size = (21, 32), (427, 640)
    for index in (0, 31, 32, 300, 21 * 32 - 1):
        x0, y0, x1, y1 = render.patch_box(grid, size, index)
        assert render.patch_at(grid, size, (x0 + x1) / 2, (y0 + y1) / 2) == index
    assert render.patch_at(grid, size, 700, 10) is None


def test_colorize_uses_the_given_scale():
    values = np.array([[0.0, 0.5, 1.0]], np.float32)
    gray = render.colorize(values, "gray", 0.0, 2.0)
    assert list(gray[0, :, 0]) == [0, 64, 128]
