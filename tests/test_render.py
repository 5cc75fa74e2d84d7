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


def dark(region: np.ndarray) -> bool:
    """Whether black text was drawn in `region` (an RGB crop of a white background)."""
    return bool((region.max(axis=-1) < 100).any())


def test_fit_sets_the_longest_side_and_keeps_the_aspect():
    for h, w, longest in ((300, 451, 640), (451, 300, 200), (10, 10, 640), (3, 900, 100)):
        out = render.fit(np.full((h, w, 3), 7, np.uint8), longest)
        assert max(out.shape[:2]) == longest and out.shape[2] == 3
        assert abs(out.shape[1] / out.shape[0] - w / h) <= max(w / h, h / w) / min(out.shape[:2])
        assert (out == 7).all()  # a flat image stays flat, shrunk or enlarged
    assert render.fit(np.zeros((1, 500, 3), np.uint8), 50).shape == (1, 50, 3)  # never 0 pixels


def test_the_vertical_colorbar_runs_from_the_top_value_down_with_its_numbers_and_scale():
    height = 300
    for scale in ("", "clip p99"):
        bar = render.colorbar(height, "viridis", 0.0, 1.0, scale=scale)
        foot = 34 if scale else 0
        assert bar.shape == (height, 150, 3)
        ramp = render.colorize(np.linspace(1, 0, height - foot, dtype=np.float32)[:, None], "viridis", 0, 1)
        np.testing.assert_array_equal(bar[: height - foot, 4:20], np.repeat(ramp, 16, axis=1))
        assert (bar[: height - foot, :4] == 255).all() and (bar[: height - foot, 20:24] == 255).all()  # white beside
        for y in (16, (height - foot) // 2, height - foot - 12):  # the top, middle and bottom numbers
            assert dark(bar[y - 12 : y + 12, 24:]), (scale, y)
        if scale:  # its name in the foot, under the ramp's end
            assert dark(bar[height - 30 :, :]) and (bar[height - 30 :, 4:20] != bar[height - foot - 1, 4:20]).any()
    np.testing.assert_array_equal(render.with_colorbar(np.zeros((300, 40, 3), np.uint8), "viridis", 0, 1)[:, :40], 0)


def test_the_colorbar_below_runs_left_to_right_with_low_middle_high_and_the_scale_name():
    image = np.zeros((50, 400, 3), np.uint8)
    for scale, foot in (("", 60), ("robust", 92)):
        out = render.with_colorbar_below(image, "gray", 0.0, 1.0, scale)
        assert out.shape == (50 + foot, 400, 3)
        np.testing.assert_array_equal(out[:50], image)
        bar = out[50:]
        ramp = bar[6:24, 6:394, 0].astype(int)
        assert (ramp == ramp[0]).all() and ramp[0, 0] == 0 and ramp[0, -1] == 255 and (np.diff(ramp[0]) >= 0).all()
        left, middle, right = bar[30:58, :130], bar[30:58, 150:250], bar[30:58, 270:]
        assert dark(left) and dark(middle) and dark(right)  # "0.000", "0.500", "1.000"
        if scale:  # its name, centred under the numbers
            assert dark(bar[62:, 120:280]) and not dark(bar[62:, :100])


def test_mark_patch_outlines_exactly_that_patch_in_the_query_colour():
    image = np.full((60, 90, 3), 100, np.uint8)
    out = render.mark_patch(image, (2, 3), 4)  # row 1, column 1: x 30..60, y 30..60
    assert tuple(out[31, 45]) == render.QUERY and tuple(out[45, 31]) == render.QUERY
    assert tuple(out[58, 45]) == render.QUERY and tuple(out[45, 58]) == render.QUERY
    assert (out[33:57, 33:57] == 100).all()  # the patch itself stays visible
    assert (out[:27] == 100).all() and (out[:, :27] == 100).all() and (out[:, 63:] == 100).all()
    assert (image == 100).all()  # a copy is drawn on


def test_draw_grid_draws_lines_between_patches_only():
    image = np.zeros((60, 90, 3), np.uint8)
    out = render.draw_grid(image, (2, 3))
    assert out[30, 10].min() > 100 and out[10, 30].min() > 100 and out[10, 60].min() > 100
    assert (out[:28, :28] == 0).all() and (out[32:58, 62:88] == 0).all()  # inside patches: untouched
    assert (out[0, :28] == 0).all() and (out[:28, 0] == 0).all()  # no line along the border
    assert (image == 0).all()


def test_tile_puts_each_image_in_its_cell_under_its_caption():
    images = [np.full((20, 30, 3), 40 * (i + 1), np.uint8) for i in range(5)]
    sheet = render.tile(images, [f"h{i}" for i in range(5)], cols=3, pad=6)
    assert sheet.shape == (2 * (20 + 32 + 6), 3 * 36 - 6, 3)
    for i, img in enumerate(images):
        r, c = divmod(i, 3)
        y, x = r * 58, c * 36
        np.testing.assert_array_equal(sheet[y + 32 : y + 52, x : x + 30], img)
        assert dark(sheet[y : y + 32, x : x + 30])  # its caption above it
    assert (sheet[58:, 72:] == 255).all()  # no sixth image: white


def test_mark_boxes_outlines_the_masked_patches_only():
    image = np.zeros((40, 60, 3), np.uint8)
    mask = np.array([[True, False, False], [False, False, True]])
    out = render.mark_boxes(image, (2, 3), mask)
    assert tuple(out[0, 10]) == (0, 255, 0) and tuple(out[39, 50]) == (0, 255, 0)
    assert (out[:, 22:38] == 0).all()  # the middle column has no box
    assert (out[5:15, 5:15] == 0).all()  # inside a box: untouched


def test_upsample_rgb_gives_flat_squares_of_the_patch_colours():
    rgb = np.array([[[0.0, 0.5, 1.0], [1.2, -0.1, 0.25]]])
    out = render.upsample_rgb(rgb, (20, 40))
    assert out.shape == (20, 40, 3) and out.dtype == np.uint8
    assert (out[:, :20] == [0, 128, 255]).all() and (out[:, 20:] == [255, 0, 64]).all()  # clipped, rounded


def test_draw_box_scales_the_box_to_the_picture():
    out = render.draw_box(np.zeros((100, 100, 3), np.uint8), (10, 20, 60, 80), 0.5)
    assert tuple(out[10, 15]) == (0, 255, 255) and tuple(out[40, 5]) == (0, 255, 255)  # (5,10)-(30,40)
    assert (out[15:35, 9:26] == 0).all() and (out[50:] == 0).all()


def test_the_layer_head_table_colours_each_cell_by_its_value_with_labels():
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    img = render.layer_head_grid(values, "gray", cell=44)
    colours = render.colorize(values, "gray")
    for i in range(3):
        for h in range(4):
            y, x = 34 + i * 44 + 3, 96 + h * 88 + 3  # a corner of the cell, away from its number
            np.testing.assert_array_equal(img[y, x], colours[i, h])
            number = img[34 + i * 44 + 10 : 34 + i * 44 + 34, 96 + h * 88 + 18 : 96 + h * 88 + 60].astype(int)
            contrast = (number - colours[i, h]).mean(axis=-1)  # black on light cells, white on dark ones
            assert (contrast < -100).any() if values[i, h] > 6.6 else (contrast > 100).any(), (i, h)
        assert dark(img[34 + i * 44 : 34 + (i + 1) * 44, :96])  # "layer i"
    assert dark(img[:34, 96:]) and img.shape[0] == 34 + 3 * 44


def test_patch_at_takes_the_first_pixel_and_refuses_the_edge_past_the_last():
    grid, size = (2, 3), (40, 60)
    assert render.patch_at(grid, size, 0, 0) == 0 and render.patch_at(grid, size, 59.9, 39.9) == 5
    assert render.patch_at(grid, size, 60, 10) is None and render.patch_at(grid, size, 10, 40) is None
    assert render.patch_at(grid, size, -0.1, 10) is None and render.patch_at(grid, size, 10, -0.1) is None


def test_colorbar_numbers_switch_notation_at_their_bounds():
    assert render._fmt(1.0) == "1.000" and render._fmt(0.0) == "0.000"
    assert render._fmt(1e-3) == "0.001" and render._fmt(9.99e-4) == "1.0e-3"
    assert render._fmt(9999.0) == "9999" and render._fmt(1e4) == "1.0e4"
    assert render._fmt(10.0) == "10" and render._fmt(9.5) == "9.500" and render._fmt(10.5) == "10.5"


def test_fit_averages_when_it_shrinks_and_interpolates_when_it_enlarges():
    board = np.indices((8, 8)).sum(axis=0) % 2 * 255
    board = np.repeat(board[..., None], 3, axis=2).astype(np.uint8)
    np.testing.assert_array_equal(render.fit(board, 4), 128)  # each 2x2 block averaged (area)
    big = render.fit(board, 12)  # x1.5: cubic, so values between black and white appear
    assert ((big > 20) & (big < 235)).any()
    assert render.fit(np.zeros((500, 1, 3), np.uint8), 50).shape == (50, 1, 3)  # never 0 pixels wide
