"""Overlays are faithful to patches, clicks map to the right patch, colour scales are honest."""

from __future__ import annotations

import cv2
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


def test_a_maximum_lands_where_it_is_on_both_paths_and_non_square_images():
    """A map's maximum off-centre (row 1, column 4 of a 3x5 grid) shows at that patch's pixels, for the
    nearest (patch) and the smooth (bilinear) overlays: no flip, no transpose, no shift."""
    image = np.zeros((120, 250, 3), np.uint8)
    values = np.zeros((3, 5), np.float32)
    values[1, 4] = 1.0
    for nearest in (True, False):
        out = render.overlay(image, values, "gray", alpha=1.0, nearest=nearest)[..., 0]
        y, x = np.unravel_index(np.argmax(out), out.shape)
        assert 40 <= y < 80 and 200 <= x < 250, (nearest, y, x)
        assert out[:40].max() < out[y, x] and out[:, :150].max() < out[y, x]


def test_colorbar_numbers_are_compact():
    assert render._fmt(2723656.0) == "2.7e6" and render._fmt(3.8e21) == "3.8e21"
    assert render._fmt(0.0312) == "0.031" and render._fmt(42.0) == "42" and render._fmt(2.4e-4) == "2.4e-4"


def test_the_diverging_colormap_is_centred_at_zero():
    values = np.array([[-2.0, 0.0, 2.0]], np.float32)
    rgb = render.colorize(values, "diverging", -2.0, 2.0)[0].astype(int)
    assert rgb[0, 2] > rgb[0, 0] and rgb[2, 0] > rgb[2, 2]  # negative blue, positive red
    assert (rgb[1] > 240).all()  # zero is white


def test_a_colorbar_below_runs_low_to_high_under_the_picture():
    image = np.zeros((50, 200, 3), np.uint8)
    out = render.with_colorbar_below(image, "gray", 0.0, 1.0, "robust")
    assert out.shape[1] == 200 and out.shape[0] > 50 + 60
    np.testing.assert_array_equal(out[:50], image)  # the picture itself is untouched
    ramp = out[50 + 15, 6:194, 0].astype(int)
    assert ramp[0] < 10 and ramp[-1] > 245 and (np.diff(ramp) >= 0).all()  # dark (low) on the left


def test_scan_margins_keep_the_picture_whole_and_the_strip_shows_the_sequence():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (120, 160, 3), dtype=np.uint8)
    grid = (3, 4)
    sheet = render.scan_margins(image, grid)
    np.testing.assert_array_equal(sheet[30:, 64:], render.draw_grid(image, grid))  # no number on a patch
    strip = render.token_strip(image, grid, [("CLS", True), ("register 1", False)], 640)
    cell = 66  # 8 cells of at most 66 px: CLS, reg1, p0..p3, "...", p11
    x0 = 4 + 2 * (cell + 6)  # the third cell: patch 0
    p0 = strip[24 + 4 : 24 + cell - 20, x0 + 4 : x0 + cell - 4].reshape(-1, 3).mean(0)
    expected = cv2.resize(image[:40, :40], (cell, cell), interpolation=cv2.INTER_AREA)[4:-20, 4:-4].reshape(-1, 3)
    np.testing.assert_allclose(p0, expected.mean(0), atol=2)

    def red_text(strip: np.ndarray) -> int:  # the "no pos" line under the cells
        return int((np.abs(strip[24 + cell + 26 :].astype(int) - (150, 0, 0)).sum(-1) < 60).sum())

    assert red_text(strip) > 0 and red_text(render.token_strip(image, grid, [("CLS", True)], 640)) == 0


def test_which_prefix_tokens_get_a_position_embedding(family):
    name, model = family
    expected = {"vit": (True,), "deit": (True, True), "dinov2_registers": (True, False, False, False, False)}
    assert model.prefix_with_position == expected[name]
