"""Overlays are faithful to patches, clicks map to the right patch, colour scales are honest."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

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
    assert render.bar_number(2723656.0) == "2.7e6" and render.bar_number(3.8e21) == "3.8e21"
    assert render.bar_number(0.0312) == "0.031" and render.bar_number(42.0) == "42"
    assert render.bar_number(2.4e-4) == "2.4e-4"


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
    p0 = strip[24 + 4 : 24 + cell - 24, x0 + 4 : x0 + cell - 4].reshape(-1, 3).mean(0)  # above its name's band
    expected = cv2.resize(image[:40, :40], (cell, cell), interpolation=cv2.INTER_AREA)[4:-24, 4:-4].reshape(-1, 3)
    np.testing.assert_allclose(p0, expected.mean(0), atol=2)

    def red_text(strip: np.ndarray) -> int:  # the "no pos" line under the cells
        return int((np.abs(strip[24 + cell + 26 :].astype(int) - (150, 0, 0)).sum(-1) < 60).sum())

    assert red_text(strip) > 0 and red_text(render.token_strip(image, grid, [("CLS", True)], 640)) == 0


def test_which_prefix_tokens_get_a_position_embedding(family):
    name, model = family
    expected = {"deit": (True, True), "dinov2_registers": (True, False, False, False, False)}
    expected |= {"siglip": (), "siglip_vision": ()} | {
        n: (True,) for n in ("vit", "dino", "dinov2", "clip", "clip_vision")
    }
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
            assert dark(bar[62:, 150:250]) and not dark(bar[62:, :40]) and not dark(bar[62:, 360:])


def test_mark_patch_outlines_exactly_that_patch_in_the_query_colour():
    image = np.full((60, 90, 3), 100, np.uint8)
    out = render.mark_patch(image, (2, 3), 4)  # row 1, column 1: x 30..60, y 30..60
    assert tuple(out[31, 45]) == render.QUERY and tuple(out[45, 31]) == render.QUERY
    assert tuple(out[58, 45]) == render.QUERY and tuple(out[45, 58]) == render.QUERY
    assert (out[35:55, 35:55] == 100).all()  # the patch itself stays visible
    assert (out[:25] == 100).all() and (out[:, :25] == 100).all() and (out[:, 64:] == 100).all()
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
    assert render.bar_number(1.0) == "1.000" and render.bar_number(0.0) == "0.000"
    assert render.bar_number(1e-3) == "0.001" and render.bar_number(9.99e-4) == "1.0e-3"
    assert render.bar_number(9999.0) == "9999" and render.bar_number(1e4) == "1.0e4"
    assert render.bar_number(10.0) == "10" and render.bar_number(9.5) == "9.500" and render.bar_number(10.5) == "10.5"


def test_fit_averages_when_it_shrinks_and_interpolates_when_it_enlarges():
    board = np.indices((8, 8)).sum(axis=0) % 2 * 255
    board = np.repeat(board[..., None], 3, axis=2).astype(np.uint8)
    np.testing.assert_array_equal(render.fit(board, 4), 128)  # each 2x2 block averaged (area)
    big = render.fit(board, 12)  # x1.5: cubic, so values between black and white appear
    assert ((big > 20) & (big < 235)).any()
    assert render.fit(np.zeros((500, 1, 3), np.uint8), 50).shape == (50, 1, 3)  # never 0 pixels wide


def ink(img: np.ndarray, x0: int, y0: int, x1: int, y1: int, colour=(0, 0, 0), tol: int = 100):
    """(left, top, right, bottom) of the pixels near `colour` in the region, in picture coordinates, or None."""
    region = img[y0:y1, x0:x1].astype(int)
    ys, xs = np.nonzero(np.abs(region - colour).max(axis=-1) < tol)
    return None if len(xs) == 0 else (x0 + xs.min(), y0 + ys.min(), x0 + xs.max(), y0 + ys.max())


def test_text_is_anti_aliased_ink_of_its_colour_on_its_baseline():
    """Digits (no descenders) end on the baseline, start at x, are about 20 px tall per unit of scale (the
    Hershey font's digits), reach their exact colour in the strokes' middle and have grey, anti-aliased edges."""
    for colour, scale, thickness in (((0, 0, 0), 0.6, 1), ((0, 110, 0), 1.0, 2)):
        img = np.full((60, 120, 3), 255, np.uint8)
        render.text(img, "180", (10, 40), scale, colour, thickness)
        left, top, right, bottom = ink(img, 0, 0, 120, 60, colour, tol=60)
        width = render.text_width("180", scale, thickness)
        assert abs(left - 10) <= 2 + thickness and abs(bottom - 40) <= thickness, (left, bottom)
        assert abs((bottom - top + 1) - 20 * scale) <= thickness and width - 6 <= right - left + 1 <= width
        pixels = img.reshape(-1, 3)
        assert (pixels == colour).all(axis=1).any()  # the exact colour, not a neighbour of it
        assert ((pixels.min(axis=1) > colour[0] + 30) & (pixels.min(axis=1) < 225)).any()  # grey edges
    img = np.full((30, 30, 3), 255, np.uint8)
    render.text(img, "8", (5, 20), 0.5)
    assert (img.reshape(-1, 3) == (0, 0, 0)).all(axis=1).any()  # black by default


def test_colorbar_numbers_are_large_and_each_at_its_height():
    """The three numbers stand right of the ramp, at least 14 px tall (readable on a projector), each
    centred on its height (top, middle, bottom of the ramp); the scale's name sits in the foot."""
    height = 400
    bar = render.colorbar(height, "gray", 0.0, 1.0, scale="clip p99")
    ramp = height - 34
    for frac, y in ((1.0, 16), (0.5, (ramp - 1) // 2), (0.0, ramp - 12)):
        left, top, right, bottom = ink(bar, 22, max(0, y - 20), 150, y + 20)
        assert left >= 24 and right < 150 and 14 <= bottom - top + 1 <= 24, (frac, top, bottom)
        assert abs((top + bottom) / 2 - y) <= 3, (frac, top, bottom, y)
    left, top, right, bottom = ink(bar, 0, ramp, 150, height)
    assert top >= ramp + 4 and bottom < height - 4 and left <= 4 and 12 <= bottom - top + 1 <= 24


def test_the_colorbar_below_puts_its_numbers_at_the_ends_and_middle_and_the_name_centred():
    width = 400
    out = render.with_colorbar_below(np.zeros((10, width, 3), np.uint8), "gray", 0.0, 1.0, "robust")[10:]
    boxes = [ink(out, x0, 26, x1, 62) for x0, x1 in ((0, 140), (140, 260), (260, width))]
    (l0, t0, r0, b0), (l1, _, r1, _), (l2, _, r2, _) = boxes
    assert abs(l0 - 6) <= 4 and abs(r2 - (width - 7)) <= 4 and abs((l1 + r1) / 2 - width / 2) <= 3
    assert 14 <= b0 - t0 + 1 <= 24 and abs(b0 - 52) <= 2  # on its baseline, under the ramp
    left, top, right, bottom = ink(out, 0, 64, width, out.shape[0])
    assert abs((left + right) / 2 - width / 2) <= 3 and 64 < top and bottom < out.shape[0]  # "clip p99"


def test_tile_captions_sit_at_the_top_left_of_their_cell():
    images = [np.full((40, 120, 3), 255, np.uint8) for _ in range(2)]
    sheet = render.tile(images, ["head 0", "head 1"], cols=2, pad=6)
    for c in range(2):
        left, top, right, bottom = ink(sheet, c * 126, 0, c * 126 + 120, 32)
        assert abs(left - (c * 126 + 2)) <= 3 and abs(bottom - 24) <= 2 and 14 <= bottom - top + 1 <= 24


def test_the_layer_head_table_labels_its_rows_and_columns_and_centres_its_numbers():
    values = np.array([[1.0, 2.0], [30.0, 40.0]], np.float32)
    img = render.layer_head_grid(values, "gray", cell=44)
    for h in range(2):
        left, top, right, bottom = ink(img, 96 + h * 88, 0, 96 + (h + 1) * 88, 34)
        assert abs(left - (96 + h * 88 + 10)) <= 3 and abs(bottom - 24) <= 2 and bottom - top + 1 >= 10
    for i in range(2):
        y = 34 + i * 44 + 22 + 8  # the baseline, 8 px under the row's middle
        left, top, right, bottom = ink(img, 0, 34 + i * 44, 96, 34 + (i + 1) * 44)
        assert abs(left - 6) <= 3 and abs(bottom - y) <= 2 and right < 96
        for h in range(2):
            colour = (0, 0, 0) if values[i, h] > values.min() + 0.6 * np.ptp(values) else (255, 255, 255)
            x0 = 96 + h * 88
            left, top, right, bottom = ink(img, x0, 34 + i * 44, x0 + 88, 34 + (i + 1) * 44, colour, tol=40)
            assert abs(left - (x0 + 22)) <= 3 and abs(bottom - y) <= 2, (i, h)


def test_scan_margin_numbers_stand_over_their_column_and_beside_their_row():
    image = np.zeros((120, 160, 3), np.uint8)
    sheet = render.scan_margins(image, (3, 4))  # 40 px columns and rows; margins: 64 left, 30 on top
    for c in range(4):
        centre = 64 + (c + 0.5) * 40
        left, top, right, bottom = ink(sheet, int(centre) - 20, 0, int(centre) + 20, 30)
        assert abs((left + right) / 2 - centre) <= 2 and abs(bottom - 21) <= 2 and bottom - top + 1 >= 10, c
    for r in range(3):
        middle = 30 + (r + 0.5) * 40
        left, top, right, bottom = ink(sheet, 0, int(middle) - 20, 64, int(middle) + 20)
        assert abs(left - 4) <= 3 and abs(bottom - (middle + 7)) <= 2 and right < 64, r  # "0", "4", "8"


def test_the_token_strip_labels_each_cell_inside_it_and_its_position_and_embedding_below():
    image = np.full((40, 60, 3), 128, np.uint8)
    strip = render.token_strip(image, (2, 3), [("CLS", True), ("register 0", False)], 640)
    cell = 66
    title = ink(strip, 0, 0, 640, 24, (60, 60, 60), tol=40)
    assert title[0] <= 6 and title[3] <= 20
    for k, (label, pos) in enumerate([("CLS", "+ pos"), ("reg0", "no pos"), ("p0", "+ pos")]):
        x = 4 + k * (cell + 6)
        white = ink(strip, x, 24, x + cell, 24 + cell, (255, 255, 255), tol=10)
        assert white is not None and white[0] >= x + 2 and white[3] <= 24 + cell - 4, label  # inside, at the bottom
        number = ink(strip, x, 24 + cell, x + cell + 6, 24 + cell + 26)
        assert abs(number[0] - (x + 3)) <= 3 and abs(number[3] - (24 + cell + 20)) <= 2, label
        colour = (0, 110, 0) if pos == "+ pos" else (150, 0, 0)
        below = ink(strip, x, 24 + cell + 26, x + cell + 6, strip.shape[0], colour, tol=40)
        assert abs(below[0] - (x + 3)) <= 3 and abs(below[3] - (24 + cell + 44)) <= 3, label
    dots = ink(strip, 4 + 6 * (cell + 6), 24, 4 + 7 * (cell + 6), 24 + cell)  # the 7th cell: "..."
    assert dots is not None and abs(dots[0] - (4 + 6 * (cell + 6) + cell // 4)) <= 3


def test_colormaps_end_at_their_own_colours_in_rgb_order():
    """Inferno runs from black to pale yellow (RGB, not OpenCV's BGR); the diverging map is blue, white and
    red at its ends and centre and linear between; values outside the scale are clipped to its ends."""
    ends = render.colorize(np.array([[0.0, 1.0]], np.float32), "inferno").astype(int)
    assert ends[0, 0].max() < 10 and ends[0, 1][0] > 240 and ends[0, 1][2] < 180  # yellow: red high, blue low
    values = np.array([[-9.0, -2.0, -1.0, 0.0, 1.0, 2.0, 9.0]], np.float32)
    rgb = render.colorize(values, "diverging", -2.0, 2.0)[0].astype(float)
    blue, white, red = np.array([33, 102, 172]), np.array([247, 247, 247]), np.array([178, 24, 43])
    np.testing.assert_array_equal(rgb[[0, 1, 3, 5, 6]], [blue, blue, white, red, red])
    np.testing.assert_allclose(rgb[2], (blue + white) / 2, atol=0.51)
    np.testing.assert_allclose(rgb[4], (red + white) / 2, atol=0.51)
    assert render.colorize(values, "diverging", -2.0, 2.0).dtype == np.uint8
    gray = render.colorize(np.array([[0.5, 1.0, 3.0]], np.float32), "gray", 0.0, 2.0)[0, :, 0]
    np.testing.assert_array_equal(gray, [64, 128, 255])  # the given low end, not the data's; clipped above


def test_overlay_blends_by_alpha_on_the_given_scale_nearest_by_default():
    image = np.full((20, 40, 3), 200, np.uint8)
    values = np.array([[0.0, 4.0]], np.float32)
    out = render.overlay(image, values, "gray", alpha=0.25, vmin=0.0, vmax=8.0).astype(int)
    np.testing.assert_allclose(out[:, :20], 150, atol=1)  # 0.25 * 0 + 0.75 * 200
    np.testing.assert_allclose(out[:, 20:], 0.25 * 128 + 150, atol=1)  # 4 is the middle of 0..8
    np.testing.assert_array_equal(render.overlay(image, values), render.overlay(image, values, "inferno", 0.6))
    smooth = render.overlay(image, values, "gray", 1.0, nearest=False)[0, :, 0].astype(int)
    assert len(np.unique(smooth)) > 2 and len(np.unique(render.overlay(image, values, "gray", 1.0)[0, :, 0])) == 2


def width_of(img: np.ndarray, x0: int, y0: int, x1: int, y1: int) -> int:
    box = ink(img, x0, y0, x1, y1)
    return 0 if box is None else box[2] - box[0] + 1


def test_colorbar_numbers_and_scale_names_say_the_right_thing():
    """Which number is written, told by its width (each expected string's own ink width, give or take the
    font's side bearings): the top, middle and bottom of 0..100, and of a log scale, 10 to the power of the
    bar's ends; and the scale's display name."""

    def inked(s: str, scale: float) -> int:  # the string's ink width, drawn by OpenCV itself
        img = np.full((60, 400, 3), 255, np.uint8)
        cv2.putText(img, s, (5, 40), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 2, cv2.LINE_AA)
        return width_of(img, 0, 0, 400, 60)

    for scale, (lo, hi), expected in (
        ("", (0.0, 100.0), ("100", "50", "0.000")),
        ("log", (-3.0, 0.0), ("1.000", "0.032", "0.001")),  # 10 to the power of 0, -1.5 and -3
    ):
        bar = render.colorbar(300, "gray", lo, hi, scale=scale)
        ramp = 300 - (34 if scale else 0)
        for s, y in zip(expected, (16, (ramp - 1) // 2, ramp - 12), strict=True):
            assert width_of(bar, 22, max(0, y - 14), 150, y + 14) == inked(s, 0.85), (scale, s)
        below = render.with_colorbar_below(np.zeros((4, 400, 3), np.uint8), "gray", lo, hi, scale)[4:]
        for s, (x0, x1) in zip(expected[::-1], ((0, 140), (140, 260), (260, 400)), strict=True):
            assert width_of(below, x0, 26, x1, 60) == inked(s, 0.8), (scale, s)
    for scale, name in (
        ("robust", "linear, top 1% clipped"),
        ("log", "log scale"),
        ("min-max", "linear, lowest to highest"),
    ):
        named = render.with_colorbar(np.zeros((200, 10, 3), np.uint8), "gray", 0, 1, scale)[:, 10:]
        lines = render.bar_names(scale, "", render.BAR_LINE)  # a vertical bar wraps its words
        assert " ".join(lines) == name
        for i, line in enumerate(lines):
            y = 200 - 10 - (len(lines) - 1 - i) * 28
            assert width_of(named, 0, y - 20, 150, y + 6) == inked(line, 0.75), (scale, line)
        below = render.with_colorbar_below(np.zeros((4, 400, 3), np.uint8), "gray", 0, 1, scale)[4:]
        assert width_of(below, 0, 62, 400, 92) == inked(name, 0.75), scale
    log_bar = render.with_colorbar(np.zeros((300, 10, 3), np.uint8), "gray", -3.0, 0.0, "log")[:, 10:]
    assert width_of(log_bar, 22, 2, 150, 30) == inked("1.000", 0.85)  # the key, not its name, picks 10**v


def test_the_query_outline_has_a_black_edge_outside_its_colour():
    image = np.full((60, 90, 3), 255, np.uint8)
    out = render.mark_patch(image, (2, 3), 4)  # x 30..60, y 30..60
    for y, x in ((26, 45), (45, 26), (34, 45), (45, 34), (55, 45), (45, 55)):  # both sides of the magenta line
        assert tuple(out[y, x]) == (0, 0, 0), (y, x)
    for y, x in ((28, 45), (32, 45), (45, 28), (45, 32)):  # 4 px of colour: seen from the back of a class
        assert tuple(out[y, x]) == render.QUERY, (y, x)
    assert tuple(out[36, 45]) == (255, 255, 255)  # inside: the patch


def test_grid_lines_run_the_whole_picture():
    out = render.draw_grid(np.zeros((40, 60, 3), np.uint8), (2, 3))
    assert out[20, [0, 59]].min() > 100 and out[[0, 39], 20].min() > 100 and out[[0, 39], 40].min() > 100


def test_tile_refuses_labels_that_do_not_match_the_images():
    with pytest.raises(ValueError):
        render.tile([np.zeros((4, 4, 3), np.uint8)] * 2, ["only one"], cols=2)


def test_the_layer_head_table_picks_black_or_white_numbers_from_the_values_own_range():
    values = np.array([[10.0, 15.9, 16.0, 16.1, 20.0]], np.float32)  # 60 % of 10..20 is 16
    img = render.layer_head_grid(values, "viridis", cell=44)  # no cell is near black or white
    for h, black in enumerate((False, False, False, True, True)):
        x0 = 96 + h * 88
        assert (ink(img, x0 + 18, 34, x0 + 70, 78, (0, 0, 0), tol=40) is not None) == black, h
        assert (ink(img, x0 + 18, 34, x0 + 70, 78, (255, 255, 255), tol=40) is not None) != black, h


def test_scan_margins_thin_their_labels_on_a_dense_grid_and_write_each_rows_first_index():
    sheet = render.scan_margins(np.zeros((100, 320, 3), np.uint8), (10, 32))  # 10 px columns and rows
    top = sheet[:30, 64:].min(axis=(0, 2)) < 128
    starts = np.flatnonzero(top[1:] & ~top[:-1]) + 1  # where each column number's ink begins
    centres = [64 + (c + 0.5) * 10 for c in range(0, 32, 3)]  # every third column: 26 px apart at least
    assert len(starts) >= len(centres) and all(abs(np.min(np.abs(starts + 64 - c))) < 14 for c in centres)
    assert len([s for s in starts if s > 2]) <= 11 + 6  # multi-digit numbers may split, never a label a column
    for r, label in ((0, "0"), (3, "96"), (6, "192"), (9, "288")):  # every third row: 22 px apart at least
        middle = 30 + r * 10 + 5
        img = np.full((40, 100, 3), 255, np.uint8)
        render.text(img, label, (4, 25), 0.55)
        assert width_of(sheet, 0, middle - 8, 64, middle + 10) == width_of(img, 0, 0, 100, 40), label


def test_the_token_strip_names_each_token_and_colours_the_prefix():
    image = np.full((40, 60, 3), 128, np.uint8)
    strip = render.token_strip(image, (2, 3), [("CLS", True), ("register 0", False)], 640)
    cell = 66

    def inked(s: str, thickness: int = 1) -> int:
        img = np.full((40, 200, 3), 255, np.uint8)
        render.text(img, s, (4, 25), 0.5, thickness=thickness)
        return width_of(img, 0, 0, 200, 40)

    np.testing.assert_array_equal(strip[24 + 2, 4 + 2], (255, 170, 60))  # a prefix token's cell

    def white(s: str) -> int:  # the width of the white strokes, on black
        img = np.zeros((40, 200, 3), np.uint8)
        render.text(img, s, (4, 25), 0.5, (255, 255, 255))
        return ink(img, 0, 0, 200, 40, (255, 255, 255), tol=10)[2] - ink(img, 0, 0, 200, 40, (255, 255, 255), 10)[0]

    for k, (label, number) in enumerate([("CLS", "#0"), ("reg0", "#1"), ("p0", "#2"), ("p1", "#3")]):
        x = 4 + k * (cell + 6)
        name = ink(strip, x + 1, 24 + cell - 24, x + cell - 1, 24 + cell - 1, (255, 255, 255), tol=10)
        assert name is not None and abs(name[2] - name[0] - white(label)) <= 2, label
        assert abs(width_of(strip, x, 24 + cell + 4, x + cell + 6, 24 + cell + 26) - inked(number)) <= 2, number
    last = 4 + 7 * (cell + 6)  # the last patch, p5, at position #7
    assert abs(width_of(strip, last, 24 + cell + 4, last + cell + 6, 24 + cell + 26) - inked("#7")) <= 2


def test_a_pale_patchs_name_reads_white_on_dark():
    """On a white patch the name's white strokes stand on dark ground: the cell's lowest rows, around the
    strokes, are at most a third as bright as the patch."""
    strip = render.token_strip(np.full((40, 60, 3), 250, np.uint8), (2, 3), [("CLS", True)], 640)
    cell, x = 66, 4 + 66 + 6  # the first patch, p0
    below = strip[24 + cell - 23 : 24 + cell - 1, x + 1 : x + cell - 1].astype(int).sum(axis=-1) // 3
    assert np.median(below) <= 250 // 3 and below.max() >= 250  # dark ground, white strokes
    assert strip[24 + 4, x + 4].min() == 250  # the patch above the name as it is


def hershey(img: np.ndarray, s: str, org: tuple[int, int], scale: float, colour=(0, 0, 0), thickness: int = 1):
    """OpenCV's own anti-aliased Hershey text, the reference for where a label must be drawn."""
    cv2.putText(img, s, org, cv2.FONT_HERSHEY_SIMPLEX, scale, colour, thickness, cv2.LINE_AA)


@pytest.mark.parametrize(
    ("width", "patches_shown", "cell", "title"),
    [
        (392, 2, 58, ("the token sequence: #position in it, and the position", "embedding added")),  # wrapped
        (592, 4, 66, None),  # as many cells as fit, at most 9 and 66 px
        (800, 5, 66, None),
        (1400, 5, 66, None),
    ],
)
def test_the_token_strip_is_laid_out_to_the_pixel(width, patches_shown, cell, title):
    """Every cell, outline and label where the layout puts it: cells `cell` px square with 6 px gaps from
    (4, 24); the prefix tokens (orange), the first patches, "...", then the last patch (its pixels area-
    resized); in each cell its name, white on a black outline, 3 px from the left and 6 px above the bottom, on
    the cell's lowest 23 rows darkened to 80/256;
    below it "#position" at +20 px and "+ pos" (green) or "no pos" (red) at +44 px. A title wider than the strip
    wraps into lines 22 px apart, and the cells move down as much."""
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (42, 56, 3), dtype=np.uint8)  # 3x4 patches of 14 px
    prefix = [("CLS", True), ("register 0", False)]
    strip = render.token_strip(image, (3, 4), prefix, width)
    lines = title or ("the token sequence: #position in it, and the position embedding added",)
    down = 22 * (len(lines) - 1)
    assert strip.shape == (down + cell + 78, width, 3)
    expected = np.full_like(strip, 255)
    for n, line in enumerate(lines):
        hershey(expected, line, (4, 16 + 22 * n), 0.5, (60, 60, 60))
    cells = [("CLS", 0, True, None), ("reg0", 1, False, None)]
    cells += [(f"p{i}", 2 + i, True, i) for i in range(patches_shown)] + [("...", None, None, None)]
    cells += [("p11", 13, True, 11)]
    for k, (name, position, has_pos, patch) in enumerate(cells):
        x, y = 4 + k * (cell + 6), 24 + down
        if name == "...":
            hershey(expected, "...", (x + cell // 4, y + cell // 2 + 6), 0.8, thickness=2)
            continue
        r, c = divmod(patch, 4) if patch is not None else (0, 0)
        expected[y : y + cell, x : x + cell] = (
            (255, 170, 60)
            if patch is None
            else cv2.resize(
                image[r * 14 : r * 14 + 14, c * 14 : c * 14 + 14], (cell, cell), interpolation=cv2.INTER_AREA
            )
        )
        cv2.rectangle(expected, (x, y), (x + cell - 1, y + cell - 1), (0, 0, 0), 1)
        band = expected[y + cell - 24 : y + cell - 1, x + 1 : x + cell - 1]  # under the name: 80/256 as bright
        band[:] = band.astype(int) * 80 // 256
        hershey(expected, name, (x + 3, y + cell - 6), 0.5, thickness=3)
        hershey(expected, name, (x + 3, y + cell - 6), 0.5, (255, 255, 255))
        hershey(expected, f"#{position}", (x + 3, y + cell + 20), 0.5)
        hershey(
            expected,
            *(
                ("+ pos", (x + 3, y + cell + 44), 0.5, (0, 110, 0))
                if has_pos
                else ("no pos", (x + 3, y + cell + 44), 0.5, (150, 0, 0))
            ),
        )
    np.testing.assert_array_equal(strip, expected)


@pytest.mark.parametrize(("height", "scale"), [(300, "robust"), (301, ""), (120, "log")])
def test_the_colorbar_is_laid_out_to_the_pixel(height, scale):
    """A 16 px ramp from the top colour down at x 4..20, under it what the bar shows and the scale's name, a line
    every 28 px up from 10 px above the bottom, and the top, middle and bottom values (bold, 9 px under their ramp
    height, kept 16 px from the top and 12 px above the words); a log bar writes 10 to the power of its ends."""
    quantity = "% of the flow to the output" if scale == "log" else ""
    bar = render.colorbar(height, "viridis", -1.0, 2.0, scale=scale, quantity=quantity)
    names = ["% of the flow", "to the output", "log scale"] if quantity else render.bar_names(scale, "", 14)
    ramp_h = height - (len(names) * 28 + 6 if names else 0)
    expected = np.full((height, 150, 3), 255, np.uint8)
    expected[:ramp_h, 4:20] = render.colorize(
        np.linspace(1, 0, ramp_h, dtype=np.float32)[:, None].repeat(16, 1), "viridis", 0, 1
    )
    for i, name in enumerate(names):
        hershey(expected, name, (2, height - 10 - (len(names) - 1 - i) * 28), 0.75, thickness=2)
    for v, y in ((-1.0, ramp_h - 1), (0.5, (ramp_h - 1) / 2), (2.0, 0)):
        y = min(max(int(y), 16), ramp_h - 12)
        hershey(expected, render.bar_number(10**v if scale == "log" else v), (24, y + 9), 0.85, thickness=2)
    np.testing.assert_array_equal(bar, expected)


@pytest.mark.parametrize(
    ("width", "scale", "limits"),
    [
        (400, "robust", (0.0, 1.0)),
        (313, "log", (-3.0, 0.0)),
        (61, "", (-2.5e6, 2.5e6)),  # numbers wider than the picture: as far left as the right edge allows, no middle
        (72, "signed", (0.0, 1.0)),  # "1.000" (67 px) would start at -1: kept 2 px in; a name of its own
    ],
)
def test_the_colorbar_below_is_laid_out_to_the_pixel(width, scale, limits):
    """An 18 px ramp 6 px in from each side, the low value left-aligned at 6, the middle one centred and the
    high one right-aligned at width - 6, all kept 2 px inside the picture, and the scale's name centred."""
    image = np.random.default_rng(1).integers(0, 256, (5, width, 3), dtype=np.uint8)
    out = render.with_colorbar_below(image, "inferno", *limits, scale)
    expected = np.full((5 + (92 if scale else 60), width, 3), 255, np.uint8)
    expected[:5] = image
    expected[5 + 6 : 5 + 24, 6 : width - 6] = render.colorize(
        np.linspace(0, 1, width - 12, dtype=np.float32)[None].repeat(18, 0), "inferno", 0, 1
    )
    placed = {}
    for v, anchor in ((limits[0], "left"), (sum(limits) / 2, "centre"), (limits[1], "right")):
        s = render.bar_number(10**v if scale == "log" else v)
        w = cv2.getTextSize(s, cv2.FONT_HERSHEY_SIMPLEX, 0.8, 2)[0][0]
        x = {"left": 6, "centre": width / 2 - w / 2, "right": width - 6 - w}[anchor]
        placed[anchor] = s, int(min(max(x, 2), width - w - 2)), w  # inside, or as far left as the right edge allows
    (_, left, left_w), (_, centre, centre_w), (_, right, _) = placed.values()
    if centre < left + left_w + 8 or centre + centre_w + 8 > right:  # the middle one would touch another
        del placed["centre"]
    assert ("centre" in placed) == (width > 200)
    for s, x, _ in placed.values():
        hershey(expected, s, (x, 5 + 52), 0.8, thickness=2)
    if scale:
        name = render.SCALE_NAMES.get(scale, scale)
        w = cv2.getTextSize(name, cv2.FONT_HERSHEY_SIMPLEX, 0.75, 2)[0][0]
        hershey(expected, name, ((width - w) // 2, 5 + 84), 0.75, thickness=2)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("n", [1, 5])
def test_a_tiled_sheet_is_laid_out_to_the_pixel(n):
    """Each picture under a 32 px caption (bold, 2 px in, baseline at 24), 6 px apart, row by row."""
    rng = np.random.default_rng(n)
    images = [rng.integers(0, 256, (30, 40, 3), dtype=np.uint8) for _ in range(n)]
    labels = [f"head {i}" for i in range(n)]
    sheet = render.tile(images, labels, cols=3)
    expected = np.full((-(-n // 3) * (30 + 32 + 6), 3 * (40 + 6) - 6, 3), 255, np.uint8)  # 3 columns always
    for i, (img, label) in enumerate(zip(images, labels, strict=True)):
        y, x = i // 3 * 68, i % 3 * 46
        hershey(expected, label, (x + 2, y + 24), 0.8, thickness=2)
        expected[y + 32 : y + 62, x : x + 40] = img
    np.testing.assert_array_equal(sheet, expected)


def test_the_layer_head_table_is_laid_out_to_the_pixel():
    """Cells 88x44 from (96, 34), nearest; "head h" above each column, "layer i" at x 6, each value 22 px into
    its cell, black on the cells in the top 40 % of the range, white on the others; a colorbar at the right.
    The range here is under 1, so a floor on it would change which cells count as light."""
    values = np.array([[0.1, 0.2], [0.3, 0.5], [0.45, 0.4]])
    table = render.layer_head_grid(values, "viridis")
    expected = np.full((34 + 3 * 44, 96 + 2 * 88, 3), 255, np.uint8)
    colours = render.colorize(values.astype(np.float32), "viridis")
    for i in range(3):
        for h in range(2):
            expected[34 + i * 44 : 34 + (i + 1) * 44, 96 + h * 88 : 96 + (h + 1) * 88] = colours[i, h]
    for h in range(2):
        hershey(expected, f"head {h}", (96 + h * 88 + 10, 24), 0.6)
    for i in range(3):
        y = 34 + i * 44 + 22 + 8
        hershey(expected, f"layer {i}", (6, y), 0.6)
        for h in range(2):
            light = (values[i, h] - 0.1) / 0.4 > 0.6
            hershey(expected, f"{values[i, h]:.0f}", (96 + h * 88 + 22, y), 0.6, (0, 0, 0) if light else (255,) * 3)
    np.testing.assert_array_equal(table[:, : 96 + 176], expected)
    np.testing.assert_array_equal(table[:, 96 + 176 :], render.colorbar(table.shape[0], "viridis", 0.1, 0.5))


def test_scan_margins_are_laid_out_to_the_pixel():
    """Column numbers centred 9 px above the picture and every row's first index at x 4, 7 px below the
    row's middle; labels thinned only when patches are under 26 px wide or 22 px tall (here exactly so)."""
    image = np.random.default_rng(3).integers(0, 256, (44, 260, 3), dtype=np.uint8)  # 2x10 patches of 22x26
    sheet = render.scan_margins(image, (2, 10))
    expected = np.full((44 + 30, 260 + 64, 3), 255, np.uint8)
    expected[30:, 64:] = render.draw_grid(image, (2, 10))
    for c in range(10):
        w = cv2.getTextSize(str(c), cv2.FONT_HERSHEY_SIMPLEX, 0.55, 1)[0][0]
        hershey(expected, str(c), (64 + 13 + 26 * c - w // 2, 21), 0.55)
    for r in range(2):
        hershey(expected, str(10 * r), (4, 30 + 11 + 22 * r + 7), 0.55)
    np.testing.assert_array_equal(sheet, expected)


def test_outlines_are_drawn_to_the_pixel():
    """Clipped or flagged patches: a 2 px outline inside the patch's box; the query: 4 px of colour on an 8 px
    black edge; a box in original pixels: 3 px, scaled."""
    image = np.random.default_rng(4).integers(0, 256, (60, 90, 3), dtype=np.uint8)
    mask = np.array([[True, False, False], [False, False, True]])
    expected = image.copy()
    for x0, y0 in ((0, 0), (60, 30)):
        cv2.rectangle(expected, (x0, y0), (x0 + 29, y0 + 29), (1, 2, 3), 2)
    np.testing.assert_array_equal(render.mark_boxes(image, (2, 3), mask, (1, 2, 3)), expected)
    expected = image.copy()
    cv2.rectangle(expected, (30, 30), (59, 59), (0, 0, 0), 8)
    cv2.rectangle(expected, (30, 30), (59, 59), (255, 0, 255), 4)
    np.testing.assert_array_equal(render.mark_patch(image, (2, 3), 4), expected)
    expected = image.copy()
    cv2.rectangle(expected, (5, 10), (40, 50), (0, 255, 255), 3)
    np.testing.assert_array_equal(render.draw_box(image, (10, 20, 80, 100), 0.5), expected)


def test_fit_averages_areas_to_shrink_and_cubic_to_enlarge():
    image = np.random.default_rng(6).integers(0, 256, (40, 30, 3), dtype=np.uint8)
    for longest, how in ((20, cv2.INTER_AREA), (60, cv2.INTER_CUBIC), (50, cv2.INTER_CUBIC), (40, cv2.INTER_CUBIC)):
        size = (round(30 * longest / 40), longest)
        np.testing.assert_array_equal(render.fit(image, longest), cv2.resize(image, size, interpolation=how))


def test_colorize_refuses_unknown_maps_and_spans_small_ranges():
    with pytest.raises(ValueError, match="unknown colormap 'jet2'.*inferno"):
        render.colorize(np.zeros((2, 2)), "jet2")
    small = render.colorize(np.array([[0.0, 0.25, 0.5]]), "gray")  # a range under 1 still spans the map
    np.testing.assert_array_equal(small[0, :, 0], [0, 128, 255])
    base = np.zeros((2, 2, 3), np.uint8)
    shown = render.overlay(base, np.array([[0.0, 1.0], [2.0, 3.0]]), "gray", 1.0, vmin=1.0, vmax=3.0)
    np.testing.assert_array_equal(shown[..., 0], [[0, 0], [128, 255]])  # below vmin: clipped to the low end
