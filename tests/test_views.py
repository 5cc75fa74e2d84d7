"""The views' pictures and where a click on them lands."""

from __future__ import annotations

import itertools
import re

import cv2
import numpy as np
import pytest
import torch
from conftest import FAMILIES, random_image

import vitviz
from vitviz import maps, plots, render, sentences
from vitviz.derived import Derived
from vitviz.outputs import Output
from vitviz.views.attention import ALL_HEADS, SHEET_TILE, WEIGHT, WEIGHT_VALUE, attention_sheet, attention_view
from vitviz.views.attributions import ATTRIBUTION_SIDE, attribution_inputs, attribution_pictures
from vitviz.views.common import CLIPPED, display, patch_at_display, scaled_overlay
from vitviz.views.depth import decoder_stage_views, depth_view
from vitviz.views.heads import heads_views
from vitviz.views.inside import INSIDE_SIDE, inside_views, patch_at_inside
from vitviz.views.live import LIVE_DISPLAY, LIVE_LAYERS, live_views
from vitviz.views.output import output_view
from vitviz.views.positions import POS_MAP_SIDE, pos_embed_map, position_at
from vitviz.views.rollout import rollout_truth_note, rollout_view
from vitviz.views.tokens import tokens_view


@pytest.fixture(scope="module")
def wide() -> Derived:
    """A non-square grid (5 x 9) with 5 prefix tokens: rows and columns cannot be swapped unseen. As the app's views
    get an analysis: with what is derived from it kept (`Derived`)."""
    image = (random_image(40, 72, seed=8) // 2 + 64).astype(np.uint8)  # no saturated colour: none is the marker's
    return Derived(vitviz.analyze(FAMILIES["dinov2_registers"](), image, longest=72))


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
    for picture in inside_views(wide, 1, 2, patch)[:3]:
        assert patch_at_inside(wide, *marker_centre(picture)) == patch


def test_a_click_on_the_attention_picker_picks_the_patch_drawn_there(wide):
    gh, gw = wide.grid
    for patch in (0, gw - 1, (gh - 1) * gw, gh * gw - 1, 2 * gw + 3):
        picker = attention_view(wide, 1, None, patch)[1]
        assert patch_at_display(wide, *marker_centre(picker)) == patch


# ---- sentences parsed back and held against the numbers they describe


def bold_numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\*\*([-\d.]+)(?: px| nats|%)\*\*", text)]


@pytest.fixture(scope="module")
def coffee_224(embedded, coffee) -> Derived:
    """The embedded model: its heads differ (a tiny random model's heads all look alike)."""
    return Derived(vitviz.analyze(embedded, coffee, longest=224))


@pytest.mark.parametrize("head", [None, 2, ALL_HEADS])
def test_the_attention_note_gives_the_selected_heads_own_numbers(coffee_224, wide, head):
    distances = coffee_224.layer_statistics(3)[0]
    assert abs(distances[2] - distances.mean()) > 5  # the layer's mean would not pass for head 2's own
    for a, layer, patch, prefix in (
        (coffee_224, 3, 40, "CLS, not on the map, takes"),
        (wide, 1, 7, "CLS and 4 registers, not on the map, take"),
    ):
        check_attention_note(a, layer, head, patch, prefix)


def check_attention_note(wide, layer, head, patch, prefix):
    text = sentences.attention_note(wide, layer, head, patch)
    share, distance, entropy = bold_numbers(text)
    distances, entropies = wide.layer_statistics(layer)
    row = wide.layer_attention(layer)[:, wide.n_prefix + patch].astype(np.float32)
    pick = slice(head, head + 1) if isinstance(head, int) else slice(None)
    assert share == pytest.approx(100 * row[pick, : wide.n_prefix].sum(-1).mean(), abs=0.05)
    assert distance == pytest.approx(distances[pick].mean(), abs=0.5)
    assert entropy == pytest.approx(entropies[pick].mean(), abs=0.005)
    assert (f"head 2 of layer {layer}" in text) == (head == 2)
    assert prefix in text


def test_the_rollout_note_names_the_brightest_patch_by_its_row_and_column(wide):
    """On a 5 x 9 grid a row and a column read from the wrong side cannot both be right."""
    values = wide.rollout("mean")
    text = sentences.rollout_note(wide, values)
    row, col, patch = (int(x) for x in re.search(r"row (\d+), column (\d+) \(patch (\d+)\)", text).groups())
    assert patch == int(values.argmax()) and (row, col) == divmod(patch, wide.grid[1])
    share = float(re.search(r"gets \*\*([\d.]+)%\*\* of all", text).group(1))
    assert share == pytest.approx(100 * values.max() / values.sum(), abs=0.05)
    tail = float(re.search(r"([\d.]+) times the level that only 1 in 100 patches exceeds", text).group(1))
    assert tail == pytest.approx(values.max() / np.percentile(values, 99), abs=0.05)
    norms = wide.token_norms()
    norm = float(re.search(r"([\d.]+) times as long as the median patch's", text).group(1))
    assert norm == pytest.approx(norms.flat[patch] / np.median(norms), abs=0.005)


@pytest.fixture(scope="module")
def vit() -> vitviz.Analysis:
    image = (random_image(48, 40, seed=9) // 2 + 64).astype(np.uint8)
    return vitviz.analyze(FAMILIES["vit"](), image, longest=48)


@pytest.mark.parametrize("which", ["wide", "vit"])
def test_the_lessons_head_steps_draw_the_head_they_name_and_say_what_depth_shows(which, request):
    from vitviz import lesson

    a = request.getfixturevalue(which)
    d = a.mean_attention_distance
    for step in (lesson.local_head, lesson.global_head):
        title, picture, text = step(a, "inferno", 0.6, "log")
        layer, head = (int(x) for x in re.search(r"\*\*layer (\d+), head (\d+)\*\*", text).groups())
        centre = (a.grid[0] // 2) * a.grid[1] + a.grid[1] // 2
        np.testing.assert_array_equal(picture, attention_view(a, layer, head, centre, "inferno", 0.6)[0])
        best = d.argmin() if step is lesson.local_head else d[d.shape[0] * 2 // 3 :].argmax()
        chosen = np.unravel_index(int(best), d.shape if step is lesson.local_head else d[d.shape[0] * 2 // 3 :].shape)
        expected = (int(chosen[0]) + (0 if step is lesson.local_head else d.shape[0] * 2 // 3), int(chosen[1]))
        assert (layer, head) == expected, step.__name__
    deep = d[d.shape[0] * 2 // 3 :].mean()
    assert f"the last third of the layers looks {deep:.0f} px away on average, layer 0 {d[0].mean():.0f} px" in text
    grows = lesson.distance_trend(a).direction == "grows"  # its test is tests/test_lesson.py's
    assert grows == ("As the ViT paper found, later layers look farther" in text)
    assert title == ("A global head" if grows else "The farthest-looking late head")


@pytest.mark.parametrize("which, where", [("vit", "on itself"), ("wide", "on the prefix tokens (CLS and 4 registers)")])
def test_the_readout_step_says_where_cls_keeps_its_attention(which, where, request):
    from vitviz import lesson

    a = request.getfixturevalue(which)
    text = lesson.readout(a, "inferno", 0.6, "log")[2]
    assert "The CLS token is the *readout token*" in text
    share = float(re.search(r"the readout keeps (\d+)% of its attention " + re.escape(where), text).group(1))
    last = a.layer_attention(a.num_layers - 1)
    assert share == pytest.approx(100 * last[:, 0, : a.n_prefix].astype(np.float32).sum(-1).mean(), abs=0.6)


@pytest.mark.parametrize("name", ["siglip", "deit"])
def test_the_readout_sentences_name_the_models_own_readout(name):
    """SigLIP's probe and its top share, read back from the text and compared with the pool's weights; DeiT's two
    readout tokens; neither lesson claims a CLS readout, and the tokens view says the same."""
    from vitviz import lesson

    a = vitviz.analyze(FAMILIES[name](), random_image(48, 64, seed=12), longest=64)
    text = lesson.readout(a, "inferno", 0.6, "log")[2]
    tokens = tokens_view(a)[1]
    assert "readout token*" not in text + tokens
    if name == "siglip":
        assert "attention-pooling probe" in text and "no prefix token" in tokens and "no CLS token" in tokens
        top = float(re.search(r"largest share on one patch is (\d+\.\d)%", text).group(1))
        assert top == pytest.approx(100 * a.pool_attention.mean(0).max(), abs=0.06)
        note = sentences.attention_note(a, 1, None, "readout")
        assert "no prefix token" in note and "the same whatever layer" in note
    else:
        assert "2 tokens, CLS and distillation" in text and "logits are averaged" in tokens
        assert "the readout keeps" in text


@pytest.mark.parametrize("shape", [(30, 2000), (2000, 30)])
def test_every_view_draws_an_extreme_panorama(shape):
    """A 2000 x 30 photo is a 1 x N grid, drawn 10 px tall: each view draws it, colour scales included."""
    from vitviz import lesson

    a = vitviz.analyze(FAMILIES["dinov2_registers"](), random_image(*shape, seed=10), longest=256)
    assert 1 in a.grid
    pictures = [
        attention_view(a, 1, None, "cls")[0],
        attention_view(a, 1, ALL_HEADS, "cls")[0],
        rollout_view(a, "mean", 0.0)[0],
        tokens_view(a)[0],
        *inside_views(a, 1, 0, 0)[:3],
        heads_views(a)[2],
        *(step(a, "inferno", 0.6, "log")[1] for step in lesson.STEPS[:-1]),
    ]
    for picture in pictures:
        assert picture.ndim == 3 and min(picture.shape[:2]) >= 1 and picture.dtype == np.uint8


def test_positions_say_when_the_table_is_interpolated_and_from_which_grid(wide):
    g0, g1 = wide.model.native_grid
    text = sentences.positions_note(wide)
    assert f"interpolated from {g0} rows × {g1} columns to 5 rows × 9 columns" in text and (g0, g1) != (5, 9)
    native = vitviz.analyze(wide.model, random_image(g0 * 8, g1 * 8, seed=11), longest=max(g0, g1) * 8)
    assert native.grid == (g0, g1) and "used as it is" in sentences.positions_note(native)


def test_a_photo_enlarged_more_than_four_times_is_said_to_be(wide):
    small = vitviz.analyze(wide.model, random_image(14, 25, seed=12), longest=256)
    note = sentences.upscale_note(small)
    factor = max(small.pixel_values.shape[2] / 14, small.pixel_values.shape[3] / 25)
    assert factor > 4 and f"your 14 px high × 25 px wide photo is enlarged {factor:.0f}×" in note
    assert sentences.upscale_note(wide) == ""  # 72 px wide, read at 72


def test_the_live_view_overlays_each_map_of_the_frame_it_analysed(embedded, coffee):
    """A camera frame's three overlays (attention, rollout, the dense head) each show that frame's own map: the
    overlay's difference from the bare frame follows the map, so a map of another frame would not fit."""
    from vitviz.capture import analyze_frame

    a = analyze_frame(embedded, coffee)
    maps = [a.attention_map(11, None, "readout"), a.rollout("mean"), a.dense_map()]
    pictures = live_views(a, 11, None, LIVE_LAYERS, "gray", 1.0, "min-max")
    assert len(pictures) == 3 and all(p is not None for p in pictures)
    for values, picture in zip(maps, pictures, strict=True):
        fh, fw = render.fit(a.image, LIVE_DISPLAY).shape[:2]
        shown = picture[:fh, :fw]  # the frame, top left; its colour scale is under it
        small = cv2.resize(values.astype(np.float32), (shown.shape[1], shown.shape[0]), interpolation=cv2.INTER_AREA)
        grey = shown.mean(-1)
        assert np.corrcoef(grey.ravel(), small.ravel())[0, 1] > 0.8
    base = render.fit(a.image, LIVE_DISPLAY)
    want = scaled_overlay(base, maps[2], "gray", 1.0, "min-max", False, None, None, "below")
    assert np.array_equal(pictures[2], want)


# ---- each picture is the map it names, drawn with the controls it was given (the colours, the outlines, the
# colour scale's place); the reference pictures are built here from render's own tested parts

GREY = np.full((50, 90, 3), 128, np.uint8)  # a 5 x 9 grid of 10 px patches; "gray" draws no cyan and no green


def pixels_of(picture: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    return (picture == np.array(colour, np.uint8)).all(axis=-1)


def inside_box(mask: np.ndarray, box: tuple[int, int, int, int]) -> bool:
    x0, y0, x1, y1 = box
    return bool(mask.any()) and not np.delete(np.delete(mask, np.s_[y0:y1], 0), np.s_[x0:x1], 1).any()


def test_an_overlay_outlines_exactly_the_patches_above_its_clip_and_the_flagged_ones():
    values = np.ones((5, 9), np.float32)
    values.flat[7], values.flat[23], values.flat[30] = 5.0, 2.0, 1.5  # above the clip; at it; flagged
    flagged = np.zeros((5, 9), bool)
    flagged.flat[30] = True
    args = (GREY, values, "gray", 0.6, "min-max", True)
    out = scaled_overlay(*args, (5, 9), (0.0, 2.0), None, flagged)
    cyan, green = pixels_of(out, CLIPPED), pixels_of(out, (0, 255, 0))
    assert inside_box(cyan, render.patch_box((5, 9), (50, 90), 7))  # 2.0 is the clip: at it is not above it
    assert inside_box(green, render.patch_box((5, 9), (50, 90), 30))
    assert not pixels_of(scaled_overlay(*args, None, (0.0, 2.0), None, flagged), CLIPPED).any()
    assert not pixels_of(scaled_overlay(*args, None, (0.0, 2.0), None), (0, 255, 0)).any()


@pytest.mark.parametrize("nearest", [True, False])
def test_an_overlay_colours_its_values_on_the_limits_given_with_its_colour_scale_where_asked(nearest):
    values = np.random.default_rng(0).uniform(1, 2, (5, 9)).astype(np.float32)
    bare = scaled_overlay(GREY, values, "magma", 0.7, "min-max", nearest, (5, 9), (0.0, 10.0), None)
    assert np.array_equal(bare, render.overlay(GREY, values, "magma", 0.7, 0.0, 10.0, nearest=nearest))
    _, lo, hi, _ = maps.colour_scale(values, "robust")
    bare = scaled_overlay(GREY, values, "magma", 0.7, "robust", nearest, colorbar=None)
    right = scaled_overlay(GREY, values, "magma", 0.7, "robust", nearest)  # beside it, by default
    below = scaled_overlay(GREY, values, "magma", 0.7, "robust", nearest, colorbar="below")
    assert np.array_equal(right, render.with_colorbar(bare, "magma", lo, hi, "robust"))
    assert np.array_equal(below, render.with_colorbar_below(bare, "magma", lo, hi, "robust"))


def test_a_pictures_display_is_made_once_per_analysis_the_server_holds(wide):
    assert display(wide) is display(wide) and display(wide).shape[:2] == (356, 640)
    np.testing.assert_array_equal(display(wide.analysis), display(wide))  # a record's: made anew


@pytest.mark.parametrize("head", [2, None])
@pytest.mark.parametrize("measure", [WEIGHT, WEIGHT_VALUE])
def test_the_attention_view_draws_the_chosen_heads_map_of_the_chosen_measure(wide, head, measure):
    one = wide.attention_map if measure == WEIGHT else wide.contribution_map
    values, quantity = (
        (one(1, head, 7) * 100, "% of the query's attention")
        if measure == WEIGHT
        else (one(1, head, 7), "weight x value norm")
    )
    want = scaled_overlay(display(wide), values, "inferno", 0.6, "log", True, wide.grid, query=7, quantity=quantity)
    assert np.array_equal(attention_view(wide, 1, head, 7, scale="log", measure=measure)[0], want)


def test_the_attention_views_all_heads_is_the_sheet_of_every_head_with_the_controls_given(wide):
    heads = list(range(wide.model.num_heads))
    got = attention_view(wide, 1, ALL_HEADS, 7, "magma", 0.5, False, "min-max", WEIGHT_VALUE)[0]
    assert np.array_equal(
        got, attention_sheet(wide, 1, heads, 7, "magma", 0.5, False, "min-max", "weight × value norm")
    )
    shared = attention_view(wide, 1, ALL_HEADS, "readout")[0]
    assert np.array_equal(shared, attention_sheet(wide, 1, heads, "readout", "inferno", 0.6, True, "log"))
    with pytest.raises(ValueError, match="measure must be 'weight' or 'weight × value norm', got 'value'"):
        attention_view(wide, 1, None, 7, measure="value")


@pytest.mark.parametrize(
    "n, columns, cols, measure",
    [
        (6, 0, 3, "weight"),
        (7, 0, 4, "weight × value norm"),
        (17, 0, 4, "weight"),
        (7, 1, 1, "weight"),
        (5, 2, 2, "weight"),
    ],
)
@pytest.mark.parametrize("shared", [True, False])
def test_the_sheet_tiles_each_head_then_their_mean_labelled_in_rows_of_three_or_four(
    wide, n, columns, cols, measure, shared
):
    """A sheet of n - 1 heads (repeated where the model has fewer) and the mean: up to 6 tiles in rows of 3,
    more in rows of 4, or in the columns asked (a phone's one, with the projector's labels); on one colour
    scale under the sheet, or each tile on its own."""
    heads = [h % wide.model.num_heads for h in range(n - 1)]
    one = wide.attention_map if measure == WEIGHT else wide.contribution_map
    values = [one(1, h, 7) for h in heads] + [one(1, None, 7)]
    if measure == WEIGHT:  # in % of the query's attention, the bar says
        values, quantity = [v * 100 for v in values], "% of the query's attention"
    else:
        quantity = "weight x value norm"
    _, lo, hi, _ = maps.colour_scale(np.stack(values), "robust")
    small = render.fit(display(wide), SHEET_TILE)
    limits, bar = ((lo, hi), None) if shared else (None, "right")
    tiles = [scaled_overlay(small, v, "viridis", 0.4, "robust", True, wide.grid, limits, bar, query=7) for v in values]
    with render.large_labels(columns == 1):  # a phone's single column: labels at the projector's size
        want = render.tile(tiles, [f"head {h}" for h in heads] + ["mean of heads"], cols)
        want = render.with_colorbar_below(want, "viridis", lo, hi, "robust", quantity) if shared else want
    got = attention_sheet(wide, 1, heads, 7, "viridis", 0.4, shared, "robust", measure, columns)
    assert np.array_equal(got, want)
    if columns:
        assert got.shape[1] == max(cols * (small.shape[1] + 6) - 6, render.MIN_BAR_BELOW) or not shared
        with pytest.raises(ValueError, match="columns must be 0"):
            attention_sheet(wide, 1, heads, 7, columns=-1)


def test_the_sheets_defaults_are_the_readouts_weights_on_one_scale(wide):
    heads = [0, 1, 2]
    want = attention_sheet(wide, 1, heads, "readout", "inferno", 0.6, True, maps.DEFAULT_SCALE, WEIGHT)
    assert np.array_equal(attention_sheet(wide, 1, heads), want)


def test_the_rollout_view_draws_the_fusion_and_discard_chosen_with_its_sentence(wide):
    values = wide.rollout("max", 0.5)
    picture, note = rollout_view(wide, "max", 0.5, "magma", scale="robust")  # robust: the clip is outlined
    shares, named = values / values.sum() * 100, "% of the flow to the readout"  # the note's unit, named on the bar
    want = scaled_overlay(display(wide), shares, "magma", 0.6, "robust", False, wide.grid, quantity=named)
    assert np.array_equal(picture, want) and pixels_of(picture, CLIPPED).any()
    assert note == sentences.rollout_note(wide, values, wide.output)


def test_the_position_map_colours_a_signed_similarity_diverging_from_zero_and_marks_the_chosen():
    """A cosine of -1 is the scale's blue end, 0 its near-white centre, 1 its red end, and 0.5 halfway from white
    to red, whatever the app's colormap, and 0 stays white on a map with no negative cosine (the scale is fixed
    and centred, not stretched to the map); the colour scale beside it runs from -1 to 1, white in the middle."""
    model = FAMILIES["vit"]()
    g0, g1 = model.native_grid
    sim = np.random.default_rng(1).uniform(-1, 1, (g0, g1, g0, g1)).astype(np.float32)
    sim[2, 1, 0, 0], sim[2, 1, 3, 3], sim[2, 1, 1, 2], sim[2, 1, 0, 3] = -1.0, 0.0, 1.0, 0.5
    picture = pos_embed_map(model, sim, 2, 1)
    assert position_at(model, *marker_centre(picture)) == (2, 1)
    blue, white, red = (33, 102, 172), (247, 247, 247), (178, 24, 43)  # ColorBrewer RdBu's, by hand
    halfway = tuple(round(w + (r - w) * 0.5) for w, r in zip(white, red, strict=True))
    cell = POS_MAP_SIDE / g0

    def at(r: int, c: int) -> tuple[int, ...]:
        return tuple(int(v) for v in picture[int((r + 0.5) * cell), int((c + 0.5) * cell)])

    assert (at(0, 0), at(3, 3), at(1, 2), at(0, 3)) == (blue, white, red, halfway)
    sim[0, 3] = np.abs(sim[0, 3])  # a position alike or unrelated to every other: 0 is still white, not blue
    sim[0, 3, 2, 2] = 0.0
    assert tuple(pos_embed_map(model, sim, 0, 3)[int(2.5 * cell), int(2.5 * cell)]) == white
    colours = render.colorize(sim[2, 1], "diverging", -1.0, 1.0)
    assert all(at(r, c) == tuple(colours[r, c]) for r in range(g0) for c in range(g1) if (r, c) != (2, 1))
    side = POS_MAP_SIDE
    bar = render.with_colorbar(
        np.zeros((side, side, 3), np.uint8), "diverging", -1.0, 1.0, quantity="cosine similarity"
    )
    assert np.array_equal(picture[:, side:], bar[:, side:])
    column = picture[:, side + 10]  # through the ramp: red at its top, blue at its foot, above the scale's words
    ramp = column[: int(np.argmax((column == 255).all(1)))]
    assert tuple(ramp[0]) == red and tuple(ramp[-1]) == blue
    assert np.abs(ramp[len(ramp) // 2].astype(int) - white).max() <= 3


def test_a_click_on_the_position_map_picks_the_position_under_it_clamped_to_the_table():
    model = type("M", (), {"native_grid": (3, 5)})()  # a table of 3 rows and 5 columns, drawn 480 px square
    side = POS_MAP_SIDE
    assert position_at(model, 0, 0) == (0, 0)
    assert position_at(model, side - 1, side - 1) == (2, 4)
    assert position_at(model, side / 5 * 3 + 1, side / 3 + 1) == (1, 3)
    assert position_at(model, side * 2, side * 2) == (2, 4)
    assert position_at(model, 100, 100) == (0, 1)  # 100 px: within row 0 (160 px), in column 1 (96 px)


def test_the_heads_view_draws_the_norms_with_their_outliers_boxed_and_the_pca_beside_the_photo(wide):
    distance, entropy, outliers, pca, note = heads_views(wide, "magma", "robust")
    norms, base = wide.token_norms(), display(wide)
    flagged = maps.high_norm_tokens(norms)
    want = scaled_overlay(
        base, norms, "magma", 0.65, "robust", True, wide.grid, flagged=flagged, quantity="output token norm"
    )
    assert np.array_equal(outliers, want) and pixels_of(outliers, CLIPPED).any()
    gap = np.full((base.shape[0], 8, 3), 255, np.uint8)
    assert np.array_equal(pca, np.concatenate([base, gap, render.upsample_rgb(wide.pca_rgb(), base.shape[:2])], axis=1))
    assert pca.dtype == np.uint8
    assert distance.to_json() == plots.attention_distance(wide.mean_attention_distance, 8).to_json()
    assert entropy.layout.title.text.replace("<br>", " ").startswith(
        "Attention entropy (low = focused, high = spread out)"
    )
    assert entropy.data[0].colorbar.title.text == "nats" and np.allclose(entropy.data[0].z, wide.attention_entropy)
    assert note.startswith(f"The largest output-token norm is {norms.max() / np.median(norms):.2f}× the median. ")


APART = " (at least 2× the median norm, boxed green): this model's"


@pytest.mark.parametrize(
    "outliers, says",
    [
        (0, "**No token stands apart**: this model shows no"),
        (1, "**1 token stands apart**" + APART),
        (2, "**2 tokens stand apart**" + APART),
    ],
)
def test_the_heads_views_sentence_counts_the_tokens_that_stand_apart(wide, outliers, says):
    import copy

    a = copy.copy(wide)
    norms = np.ones(wide.grid, np.float32)
    norms.flat[:outliers] = 5.0
    a.token_norms = lambda: norms
    boxed, note = heads_views(a)[2:5:2]
    green = pixels_of(boxed, (0, 255, 0))
    assert green.any() == (outliers > 0)
    if outliers:
        x0, y0, _, _ = render.patch_box(a.grid, boxed.shape[:2], 0)
        assert green[y0 : y0 + 3, x0 : x0 + 3].any()  # patch 0's box
    assert says in note and f"is {5.0 if outliers else 1.0:.2f}× the median" in note
    assert note.endswith("(Darcet et al. 2023), used as scratch space." if outliers else "on this image.")


def test_the_output_view_gives_the_top_classes_and_the_dense_heads_map(coffee_224):
    import transformers as tf
    from conftest import TINY

    cfg = tf.ViTConfig(**TINY, num_labels=8, id2label={i: f"class {i}" for i in range(8)})
    tiny = vitviz.analyze(vitviz.wrap(tf.ViTForImageClassification(cfg), "eight"), random_image(32, 32), longest=32)
    probs = torch.softmax(torch.from_numpy(tiny.logits), 0).numpy()
    best = {f"class {i}": float(probs[i]) for i in np.argsort(-probs)[:5]}  # five of the eight
    assert output_view(tiny)[:2] == (best, None)
    said = output_view(tiny)[2]
    assert said == "The classes come from this analysis' own forward, on its 32 px high × 32 px wide input."
    top, picture, note = output_view(coffee_224)
    want = scaled_overlay(
        display(coffee_224),
        coffee_224.dense_map(),
        "inferno",
        0.6,
        maps.DEFAULT_SCALE,
        False,
        quantity="dense map: 0 background, 1 salient",
    )
    assert top == {} and np.array_equal(picture, want)


def test_inside_a_head_draws_its_scores_shifted_to_zero_its_weights_and_values_and_names_its_keys(wide):
    d, u, n = wide.inside_head(1, 2, 7), wide.layer_updates(1), wide.n_prefix
    scores, weights, values, strips, bars, note = inside_views(wide, 1, 2, 7, "magma", scale="min-max")
    base = render.fit(display(wide), INSIDE_SIDE)
    for picture, v, quantity in (
        (weights, d.weights * 100, "% of the query's attention"),
        (values, d.contributions, "weight x value norm"),
    ):
        want = scaled_overlay(
            base,
            v[n:].reshape(wide.grid),
            "magma",
            0.6,
            "min-max",
            True,
            wide.grid,
            colorbar="below",
            query=7,
            quantity=quantity,
        )
        assert np.array_equal(picture, want)
    shifted = (d.scores[n:] - d.scores.max()).reshape(wide.grid)  # softmax ignores the shift: 0 is the top key
    low = float(shifted.min())
    want = render.mark_patch(render.overlay(base, shifted, "magma", 0.6, low, 0.0), wide.grid, 7)
    words = "score minus the top score (0: the top key)"
    assert np.array_equal(scores, render.with_colorbar_below(want, "magma", low, 0.0, "", words))
    top = [int(j) for j in np.argsort(-d.weights)[:3]]
    keys = ([0] + [j for j in top if j != 0])[:4]  # CLS, then the three keys weighted most
    names = [sentences.token_name(wide, j).split(" (")[0] for j in keys]
    assert list(strips.data[0].y) == ["q · patch 7", *(f"k · {t}" for t in names)]
    assert list(strips.data[1].y) == [f"v · {t}" for t in names]
    assert np.allclose(strips.data[0].z, np.stack([d.q, *(d.k[j] for j in keys)]))
    assert np.allclose(strips.data[1].z, np.stack([d.v[j] for j in keys]))
    assert [t.colorbar.title.text for t in strips.data] == ["q, k", "v"]
    assert strips.layout.title.text.startswith(f"q, k, v of head 2 (d = {d.q.size})")
    q = d.query
    assert np.allclose(bars.data[0].y, d.head_shares) and list(bars.data[0].marker.color).index("#d62728") == 2
    assert list(bars.data[1].x) == ["‖x‖", "attention", "MLP"]
    assert np.allclose(bars.data[1].y, [u.residual[q], u.attention[q], u.mlp[q]])
    assert np.allclose(bars.data[2].y, [u.residual.mean(), u.attention.mean(), u.mlp.mean()])
    assert "Layer 1: sizes" in bars.to_json() and note == sentences.inside_note(wide, d, u)


def test_the_live_view_draws_only_what_is_shown_with_the_controls_given(wide):
    base = render.fit(wide.image, LIVE_DISPLAY)
    attention, rollout, dense = live_views(wide, 1, 2, ("attention", "rollout"), "magma", 0.5, "robust")
    want = scaled_overlay(
        base, wide.attention_map(1, 2, "readout"), "magma", 0.5, "robust", True, wide.grid, None, "below"
    )
    assert np.array_equal(attention, want)
    want = scaled_overlay(base, wide.rollout("mean"), "magma", 0.5, "robust", False, None, None, "below")
    assert np.array_equal(rollout, want)
    assert dense is None and live_views(wide, 1, None, ("rollout",))[0] is None
    want = scaled_overlay(
        base, wide.attention_map(1, None, "readout"), "inferno", 0.6, maps.DEFAULT_SCALE, True, wide.grid, None, "below"
    )
    assert np.array_equal(live_views(wide, 1, None, ("attention",))[0], want)
    with pytest.raises(
        ValueError, match=r"the live view draws \('attention', 'rollout', 'dense head'\), not \['depth'\]"
    ):
        live_views(wide, 1, None, ("depth", "rollout"))


def test_the_depth_view_draws_the_depth_bright_near_and_each_decoder_map_with_its_row_of_the_table():
    from conftest import tiny_dpt

    from vitviz.depth import wrap_depth

    r = vitviz.estimate_depth(wrap_depth(tiny_dpt(), "tiny-dpt"), random_image(48, 80, seed=3), longest=112)
    base, picture = depth_view(r)
    assert np.array_equal(base, render.fit(r.encoder.image))
    lo, hi = float(r.depth.min()), float(r.depth.max())
    want = render.overlay(base, render.fit(r.depth, max(base.shape[:2])), "magma", 1.0, lo, hi, nearest=False)
    assert np.array_equal(picture, render.with_colorbar(want, "magma", lo, hi))
    pictures, table = decoder_stage_views(r, side=120)
    lines = table.splitlines()
    assert lines[:2] == ["| map | made from | cells (rows × columns) | channels | 1 cell = |", "|---|---|---|---|---|"]
    assert len(pictures) == len(r.stages) == len(lines) - 2 > 0
    for (drawn, caption), s, line in zip(pictures, r.stages, lines[2:], strict=True):
        c, h, w = s.shape
        assert (
            caption == f"{s.name} · {h}×{w}"
            and line == f"| **{s.name}** | {s.detail} | {h}×{w} | {c} | {s.scale:.3g} px |"
        )
        assert drawn.shape[:2] == (max(1, round(h * 120 / max(h, w))), max(1, round(w * 120 / max(h, w))))
        assert np.array_equal(drawn, render.upsample_rgb(s.picture, drawn.shape[:2]))  # one flat square per cell
    assert max(decoder_stage_views(r)[0][0][0].shape[:2]) == 240


def an_attribution(method: str, values: np.ndarray, grid: tuple[int, int]) -> vitviz.Attribution:
    return vitviz.Attribution(method, values.astype(np.float32), values, None, "t", 0.0, grid, 0.0)


@pytest.mark.parametrize("method, signed", [("integrated_gradients", True), ("occlusion", True), ("grad_cam", False)])
def test_the_attributions_view_draws_signed_maps_around_zero_and_the_others_on_the_colour_scale(wide, method, signed):
    rng = np.random.default_rng(2)
    r = an_attribution(method, rng.normal(size=(400, 720)), wide.grid)
    rel = an_attribution("relevancy", rng.uniform(size=(20, 36)), wide.grid)
    inputs = attribution_inputs(wide, r, rel)
    base = render.fit(display(wide), ATTRIBUTION_SIDE)
    assert np.array_equal(inputs[0], base) and inputs[1] is signed
    assert np.array_equal(inputs[2], render.fit(r.map, max(base.shape[:2])))  # larger than shown: area-averaged
    assert np.array_equal(inputs[3], wide.rollout("mean", 0.0)) and inputs[4] is rel.map  # smaller: kept as it is
    roll = rng.uniform(size=wide.grid)
    assert attribution_inputs(wide, r, None, roll)[3:] == (roll, None)
    got = attribution_pictures(inputs, "magma", 0.5, "robust")

    def unsigned(values: np.ndarray, quantity: str) -> np.ndarray:
        return scaled_overlay(base, values, "magma", 0.5, "robust", False, colorbar="below", quantity=quantity)

    limit = float(np.percentile(np.abs(inputs[2]), 99.5))  # Captum's own clip of a signed map
    signed_map = render.overlay(base, inputs[2], "diverging", 0.5, -limit, limit, nearest=False)
    said = "red pushes the output up, blue down"
    want = (
        render.with_colorbar_below(signed_map, "diverging", -limit, limit, "signed", said)
        if signed
        else unsigned(inputs[2], "how much it drives the output")
    )
    flow = inputs[3] / inputs[3].sum() * 100  # the rollout in % of the flow to the output, as its note says
    wants = [want, unsigned(flow, "% of the flow to the output"), unsigned(inputs[4], "relevance to the output")]
    tall = max(w.shape[0] for w in wants)  # abreast, padded to one height with white
    for picture, w in zip(got, wants, strict=True):
        assert (
            picture.shape[0] == tall
            and np.array_equal(picture[: w.shape[0]], w)
            and (picture[w.shape[0] :] == 255).all()
        )
    assert attribution_pictures(inputs[:4] + (None,))[2] is None
    defaults = attribution_pictures(inputs)
    assert all(
        np.array_equal(x, y)
        for x, y in zip(defaults, attribution_pictures(inputs, "inferno", 0.6, maps.DEFAULT_SCALE), strict=True)
    )


@pytest.mark.parametrize("peak, limit", [(0.0, 1.0), (3.0, 3.0)])
def test_a_signed_map_almost_all_zero_is_scaled_by_its_largest_value_or_one(wide, peak, limit):
    values = np.zeros((20, 36), np.float32)
    values[0, 0] = -peak  # one pixel in 720: the 99.5th percentile of the magnitudes is 0
    inputs = attribution_inputs(wide, an_attribution("occlusion", values, wide.grid), None)
    base = inputs[0]
    want = render.overlay(base, values, "diverging", 0.6, -limit, limit, nearest=False)
    said = "red pushes the output up, blue down"
    assert np.array_equal(
        attribution_pictures(inputs)[0],
        render.with_colorbar_below(want, "diverging", -limit, limit, "signed", said),
    )


@pytest.mark.parametrize("name", ["siglip_vision", "vit", "deit", "dinov2_registers"])
def test_the_tokens_sentence_counts_the_patches_and_names_the_prefix_tokens(name):
    a = vitviz.analyze(FAMILIES[name](), random_image(40, 72, seed=4), longest=72)
    (gh, gw), m = a.grid, a.model
    text = tokens_view(a)[1]
    assert (
        f"**{gh} rows × {gw} columns = {gh * gw} patch tokens** of 8×8 pixels (the model sees the image at "
        "40 px high × 72 px wide)" in text
    )
    plus = {
        0: " and no prefix token",
        1: ", **plus 1 prefix token: CLS**",
        2: ", **plus 2 prefix tokens: CLS, distillation**",
    }.get(m.n_prefix, f", **plus 5 prefix tokens: {', '.join(m.prefix_tokens)}**")
    assert f"{plus} → {m.n_prefix + gh * gw} tokens in all. " in text
    order = f"so patch p*i* sits at position #*i*+{m.n_prefix} (the strip under the picture). "
    assert (order in text) == (m.n_prefix > 0) and "picture). None" not in text
    after = f"In the sequence the prefix tokens come first, {order}" if m.n_prefix else ""
    assert f"top: the column). {after}{sentences.readout_phrase(a)} Each patch token" in text
    assert text.endswith("learned *position embedding* added (+ pos), so the model knows where the patch came from.")


# ---- each sentence whole, its numbers computed here from the analysis


def uniform_part(a: vitviz.Analysis, entropy: float) -> str:
    n = a.n_prefix + a.grid[0] * a.grid[1]
    return f"against {np.log(n):.2f} for perfectly uniform attention ({entropy / np.log(n):.0%})."


@pytest.mark.parametrize("head", [None, 2])
def test_the_attention_note_reads_as_written_with_the_layers_or_the_heads_numbers(wide, head):
    rows = wide.layer_attention(1)[:, wide.n_prefix + 7].astype(np.float64)  # [H,N]: patch 7's row in layer 1
    distances, entropies = wide.layer_statistics(1)
    pick = [head] if head is not None else list(range(4))
    share = rows[pick, :5].sum(-1).mean()
    d, e = distances[pick].mean(), entropies[pick].mean()
    who = "head 2 of layer 1 looks" if head is not None else "layer 1's 4 heads look"
    mean = "" if head is not None else " (the mean over the heads)"
    assert sentences.attention_note(wide, 1, head, 7) == (
        f"The map shows the patches only: CLS and 4 registers, not on the map, take **{share:.1%}** of this query's "
        f"attention{mean}. Over all queries, {who} **{d:.0f} px** away on average (mean attention distance), with "
        f"entropy **{e:.2f} nats** (how spread out the attention is, in natural-log units: 0 if one key took it "
        "all) " + uniform_part(wide, e)
    )


def test_the_attention_note_of_a_model_without_prefix_tokens_says_its_probe_is_the_same_at_every_layer():
    a = vitviz.analyze(FAMILIES["siglip_vision"](), random_image(40, 72, seed=5), longest=72)
    e = a.layer_statistics(0)[1].mean()
    note = sentences.attention_note(a, 0, None, "readout")
    assert note.startswith(
        "This model has no prefix token: the map holds all of this query's attention (the mean over the heads). "
        "The probe attends once, after the last layer: its map is the same whatever layer is picked. Over all queries"
    )
    assert note.endswith(uniform_part(a, e)) and sentences.prefix_phrase(a) == "no prefix token"
    assert sentences.readout_phrase(a) == (
        "SigLIP has no CLS token: its readout is an *attention-pooling probe*, a learned query that attends over all "
        "45 patch tokens once, after the last layer, and whose output summarises the image."
    )
    assert "The probe" not in sentences.attention_note(a, 0, None, 3)  # a patch's own row changes with the layer


def test_one_prefix_token_takes_and_one_register_is_one_register(wide):
    import transformers as tf
    from conftest import TINY

    vit = vitviz.analyze(FAMILIES["vit"](), random_image(32, 32), longest=32)
    assert "The map shows the patches only: CLS, not on the map, takes **" in sentences.attention_note(vit, 0, 1, 3)
    for registers in (1, 2):
        cfg = tf.Dinov2WithRegistersConfig(**TINY, num_register_tokens=registers)
        a = vitviz.analyze(vitviz.wrap(tf.Dinov2WithRegistersModel(cfg), "r"), random_image(32, 32), longest=32)
        assert sentences.prefix_phrase(a) == f"CLS and {registers} register{'s' * (registers > 1)}"
    assert sentences.prefix_phrase(vit) == "CLS" and sentences.prefix_phrase(wide) == "CLS and 4 registers"


def test_the_positions_note_reads_as_written(wide):
    note = sentences.positions_note(wide)
    assert note == (
        "This model's table holds 4 rows × 4 columns of positions (for inputs 32 px high × 32 px wide). Your photo "
        "is read as 5 rows × 9 columns of patches, so the table is interpolated from 4 rows × 4 columns to 5 rows × 9 "
        "columns before it is added to the patch tokens; the squares here are the positions it learned."
    )
    model = FAMILIES["vit"]()
    model.native_grid = (2, 4)  # a table 2 rows by 4 columns: its input is 32 px wide and 16 tall
    assert sentences.positions_note(vitviz.analyze(model, random_image(16, 32), longest=32)).startswith(
        "This model's table holds 2 rows × 4 columns of positions (for inputs 16 px high × 32 px wide). Your photo is "
        "read as 2 rows × 4 columns of patches: the table is used as it is."
    )


@pytest.mark.parametrize("side, says", [(8, True), (9, False)])  # 32 px from 8: 4x, from 9: 3.6x
def test_a_photo_enlarged_more_than_four_times_is_said_to_be_and_four_times_is_not(wide, side, says):
    a = vitviz.analyze(wide.model, random_image(side, side, seed=13), longest=32)  # 32 px: 4x, or 3.6x
    note = sentences.upscale_note(a, limit=3.9)
    assert (note != "") == says and sentences.upscale_note(a) == ""
    if says:
        assert note == (
            " · **your 8 px high × 8 px wide photo is enlarged 4× to fill the input**: the model sees "
            "blurred pixels, and each patch covers less than one pixel of the original"
        )
    exact = vitviz.analyze(wide.model, random_image(8, 8, seed=13), longest=32)
    assert sentences.upscale_note(exact, limit=4.0) == ""  # exactly 4x is not more than 4x


def test_the_legend_names_each_mark_in_one_line():
    assert sentences.legend("query", "clip") == (
        "Marks: **magenta square with a black border**: the query patch; **thin cyan outline**: a patch above the "
        "colour scale's top (its 99th-percentile clip), so brighter than the bar shows."
    )


def test_the_rollout_note_of_a_dense_model_says_which_output_the_map_follows(coffee_224):
    """Toward the dense head's output: its patches; toward the readout: the CLS token, which that output does not
    read. Each note quotes its own map's brightest share, and neither compares a rollout with the dense map."""
    output = rollout_view(coffee_224, "mean", 0.0)[1]
    readout = rollout_view(coffee_224, "mean", 0.0, toward=Output("readout"))[1]
    assert output.startswith("Rollout toward the output: it starts from the patch tokens that the dense head reads")
    assert readout.startswith(
        "Rollout toward the readout, the CLS token: DINOv2's image summary, which this model's "
        "output (its dense head) does not read: it follows attention back"
    )
    # the CLS choice never implies that the default shows what the output uses
    assert "Neither this rollout nor the one toward the output shows what the output uses" in readout
    assert "not what the output uses" not in readout
    for note, values in ((output, coffee_224.rollout()), (readout, coffee_224.rollout(toward=Output("readout")))):
        assert f"gets **{values.max() / values.sum():.1%}** of all" in note and "scores that patch" not in note


def test_inside_a_heads_strips_show_cls_then_the_three_keys_weighted_most_each_once(wide):
    """Where CLS is among the three keys weighted most it is shown once, and register 1 is shown as any key is."""
    cases = {}
    for head in range(wide.model.num_heads):
        for q in range(45):
            top = [int(j) for j in np.argsort(-wide.inside_head(1, head, q).weights)[:3]]
            if 0 in top:
                cases.setdefault("CLS in the top 3", (head, q, top))
            elif 1 in top:
                cases.setdefault("register 1 in the top 3", (head, q, top))
    assert len(cases) == 2
    for head, q, top in cases.values():
        keys = [0] + [j for j in top if j != 0]
        strips = inside_views(wide, 1, head, q)[3]
        assert list(strips.data[1].y) == [f"v · {sentences.token_name(wide, j).split(' (')[0]}" for j in keys]


def test_an_overlays_colour_scale_goes_right_below_or_nowhere():
    with pytest.raises(ValueError, match="colorbar must be 'right', 'below' or None, got 'left'"):
        scaled_overlay(GREY, np.ones((5, 9)), "gray", 0.5, "min-max", True, colorbar="left")


def test_the_default_limit_of_enlargement_is_four_times(wide):
    five = vitviz.analyze(wide.model, random_image(8, 8, seed=13), longest=40)
    assert "your 8 px high × 8 px wide photo is enlarged 5× to fill the input" in sentences.upscale_note(five)


def test_a_token_is_named_by_its_prefix_name_or_its_patch_row_and_column(wide):
    assert [sentences.token_name(wide, i) for i in (0, 2)] == [wide.model.prefix_tokens[0], wide.model.prefix_tokens[2]]
    assert sentences.token_name(wide, 5 + 12) == "patch 12 (row 1, column 3)"  # 9 patches a row


@pytest.mark.parametrize("artifact", [False, True])
def test_the_rollout_note_on_a_map_with_one_bright_patch_gives_its_tail_and_whether_it_is_an_artifact(wide, artifact):
    import copy

    a = copy.copy(wide)
    values = np.ones(wide.grid, np.float32)
    values.flat[12] = 10.0
    norms = np.ones(wide.grid, np.float32)
    norms.flat[12] = 5.0 if artifact else 1.5
    a.token_norms = lambda: norms
    tail = 10.0 / np.percentile(values, 99)
    kind = "an artifact token" if artifact else "no artifact token (its norm is ordinary)"
    assert sentences.rollout_note(a, values) == (
        f"Rollout toward the readout, the CLS token, which this model's output reads: it follows attention back from "
        f"there through all 3 layers. The brightest patch, row 1, column 3 (patch 12), gets **{10 / 54:.1%}** of all "
        f"that the patches pass to the readout (the colour scale is in the same %): {tail:.1f} times the level that "
        f"only 1 in 100 patches exceeds. Its output vector is {norms.flat[12]:.2f} times as long as the median "
        f"patch's: {kind}."
    )


def no_minus_zero(x: float) -> str:
    """x to 2 decimals, with "-0.00" read as "0.00": the sentences' rule, written again here."""
    said = f"{x:.2f}"
    return "0.00" if said == "-0.00" else said


FIXED = [  # (x, digits, what the browser's toFixed-based vitvizFixed prints)
    (-0.001, 2, "0.00"),
    (-0.004999, 2, "0.00"),
    (-0.005, 2, "-0.01"),  # -0.005000000000000000104
    (0.125, 2, "0.13"),  # exact: a half, away from zero
    (-0.125, 2, "-0.13"),
    (2.675, 2, "2.67"),  # 2.67499999999999982236431605997495353221893310546875
    (-0.0, 2, "0.00"),
    (-0.4, 0, "0"),
    (1234.5, 0, "1235"),
    (0.5, 1, "0.5"),
    (-12.3456, 3, "-12.346"),
    (-1e-4, 2, "0.00"),
    (7, 2, "7.00"),
]


def test_numbers_print_as_the_browser_prints_them_and_never_minus_zero():
    """sentences.fixed against the strings JavaScript's toFixed gives (halves away from zero on the exact binary
    value: 0.125 is exact, 2.675 is 2.67499...), with a value that rounds to zero printed as 0."""
    for x, digits, want in FIXED:
        assert sentences.fixed(x, digits) == want, (x, digits)
    rng = np.random.default_rng(3)
    for x in rng.normal(0, 0.01, 200):
        assert sentences.fixed(x) == no_minus_zero(x)


@pytest.mark.parametrize("name", ["dinov2_registers", "vit"])
def test_inside_notes_five_steps_read_as_written_with_this_heads_numbers(name):
    """Over every layer, head and every other query, each step's words and numbers are this head's, in both forms of
    the sentences that depend on them (the top contribution is or is not the top weight; the head gives the most or
    not)."""
    a = vitviz.analyze(FAMILIES[name](), random_image(40, 72, seed=8), longest=72)
    seen = set()
    for layer, head, query in itertools.product(range(3), range(4), range(0, 45, 2)):
        d, u = a.inside_head(layer, head, query), a.layer_updates(layer)
        steps = sentences.inside_note(a, d, u).split("\n\n")
        assert steps[0] == r"$$\mathrm{Attention}(Q,K,V)=\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d}}\right)V$$"
        row, col = divmod(query, 9)
        assert steps[1].endswith(f"(4 heads × 8 = 32). The query is **patch {query} (row {row}, column {col})**.")
        prefix = " · ".join(
            f"{t}: score {no_minus_zero(d.scores[i])}, weight {d.weights[i]:.2g}"
            for i, t in enumerate(a.model.prefix_tokens)
        )
        assert "-0.00" not in steps[2]  # a score just under 0 reads 0.00, as the browser prints it
        assert (
            steps[2].endswith(f"Prefix tokens, not pictured: {prefix}.")
            and f"for each of the {a.n_prefix + 45} keys" in steps[2]
        )
        assert f"as if **{d.effective_keys:.1f}** of the {a.n_prefix + 45} keys shared them equally" in steps[3]
        big, most, best = (int(np.argmax(x)) for x in (d.weights, d.contributions, d.head_shares))
        assert f"The largest weight is **{d.weights[big]:.3f}**, on {sentences.token_name(a, big)};" in steps[3]
        same = (
            "the key with the largest weight"
            if most == big
            else f"not the key with the largest weight ({sentences.token_name(a, big)})"
        )
        assert steps[4].endswith(f"comes from {sentences.token_name(a, most)}, {same}.")
        leader = "the most of any head" if best == head else f"head {best} gives the most, {d.head_shares[best]:.0%}"
        assert f"gives **{d.head_shares[head]:.0%}** of the heads' summed contributions ({leader})." in steps[5]
        scale = " Both updates pass through DINOv2's learned *LayerScale* first." if name != "vit" else ""
        q = a.n_prefix + query
        assert steps[5].endswith(
            f"$\\mathrm{{MLP}}(\\mathrm{{LN}}(y))$.{scale} For this token $\\lVert x \\rVert = {u.residual[q]:.1f}$, "
            f"the attention update is {u.attention[q]:.1f} and the MLP update {u.mlp[q]:.1f}."
        )
        seen |= {most == big, f"leader {best == head}"}
    assert seen == {True, False, "leader True", "leader False"}


def every_picture(a: vitviz.Analysis) -> list[np.ndarray]:
    """Every picture with labels that the app draws from one analysis."""
    from vitviz import lesson
    from vitviz.attributions import attribute

    model, layer = a.model, a.model.num_layers - 1
    saliency = attribute(model, a.image, "saliency", longest=max(a.pixel_values.shape[2:]))
    sim, g = model.pos_embed_similarity(), model.native_grid[0]
    return [
        tokens_view(a)[0],
        attention_view(a, layer, None, "cls")[0],
        attention_view(a, layer, ALL_HEADS, "cls")[0],
        rollout_view(a, "mean", 0.0)[0],
        pos_embed_map(model, sim, g // 2, g - 1),
        heads_views(a)[2],
        *inside_views(a, layer, 0, 0)[:3],
        *attribution_pictures(attribution_inputs(a, saliency, saliency)),
        *(p for p in live_views(a, layer, None, LIVE_LAYERS) if p is not None),
        *(step(a, "inferno", 0.6, "log")[1] for step in lesson.STEPS),
    ]


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("shape", [(40, 72), (72, 40), (30, 2000)])
def test_every_label_is_drawn_whole_inside_its_picture_and_large_in_the_projector_mode(monkeypatch, shape, large):
    """Each label of each picture lies whole inside the canvas it is written on (none cut at an edge), and in
    the projector mode each is written at render.LARGE_FONT or larger: digits render.LARGE_LABEL_PX tall."""
    a = vitviz.analyze(FAMILIES["dinov2_registers"](), random_image(*shape, seed=3), longest=256)
    written, put = [], cv2.putText

    def spy(img, s, org, face, scale, colour, thickness=1, line=cv2.LINE_8):
        written.append((s, org, scale, thickness, img.shape[:2]))
        return put(img, s, org, face, scale, colour, thickness, line)

    monkeypatch.setattr(cv2, "putText", spy)
    with render.large_labels(large):
        every_picture(a)
    assert len(written) > 100
    for s, (x, y), scale, thickness, (h, w) in written:
        (tw, th), below = cv2.getTextSize(s, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
        assert x >= 0 and x + tw <= w + 1 and y - th >= -1 and y + below <= h + 1, (s, (x, y), scale, (h, w))
        assert not large or (scale, thickness) >= render.LARGE_FONT, (s, scale)


def test_the_projector_modes_font_inks_digits_large_label_px_tall():
    canvas = np.zeros((80, 400), np.uint8)
    cv2.putText(
        canvas,
        "0123456789",
        (5, 60),
        cv2.FONT_HERSHEY_SIMPLEX,
        *render.LARGE_FONT[:1],
        255,
        render.LARGE_FONT[1],
        cv2.LINE_AA,
    )
    rows = np.flatnonzero((canvas > 100).any(axis=1))
    assert rows[-1] - rows[0] + 1 >= render.LARGE_LABEL_PX


def test_a_map_and_its_check_explain_the_forward_that_the_tab_draws_or_name_the_other(coffee_224):
    """The Output tab's map is the dense head on the very forward that the tab draws (transformers' own final
    tokens, decoded here), and its note names that forward's input; the Rollout tab starts from that map's patch
    means; its faithfulness check, which runs on the 224 x 224 input, names that other forward beside the tab's, and
    says so only where the two differ."""
    from vitviz.attributions import attribution_size

    a = coffee_224
    (gh, gw), (h, w) = a.grid, a.pixel_values.shape[2:]
    assert (h, w) == (154, 224)  # not the dense head's home 224 x 224
    with torch.no_grad():
        last = a.model.net(pixel_values=torch.from_numpy(a.pixel_values)).last_hidden_state  # after its final norm
        patches = last[:, a.n_prefix :].reshape(1, gh, gw, -1).permute(0, 3, 1, 2)
        own = a.model.dense_head(patches, (h, w))[0, 0].double().numpy()
    _, picture, note = output_view(a)
    np.testing.assert_allclose(a.dense_map(), own, atol=1e-4)
    size = sentences.pixel_words(h, w)
    assert f"the final tokens of this analysis' own forward, the {size} input that every tab draws" in note
    assert f"Here its pixels run from {sentences.fixed(own.min())} to {sentences.fixed(own.max())}. " in note
    start, _ = a.rollout_start("mean")
    means = own.reshape(gh, h // gh, gw, w // gw).mean((1, 3)).ravel()
    np.testing.assert_allclose(start[a.n_prefix :], means / means.sum(), rtol=1e-4)
    size = attribution_size(a.model, *a.image.shape[:2])
    where = sentences.check_forward(0.0, size, (h, w), a.output.name(a.model))
    assert size == (224, 224) and "one forward of the 224 px high × 224 px wide input, where it hides patches" in where
    assert "another forward than the picture above's, which is the 154 px high × 224 px wide analysis." in where
    same = sentences.check_forward(0.5, (224, 224), (224, 224), a.output.name(a.model))
    assert "the forward of the picture above." in same and "another" not in same and "weakest 50%" in same


def test_the_dense_note_says_how_sure_the_reading_is_for_a_spread_map_and_a_flat_one(coffee_224):
    """A map that spans at least DENSE_SPAN quotes the close agreement with the head's home input; a flatter one the
    weaker agreement and what to read in it."""
    spread = np.linspace(0.02, 0.97, 154 * 224).reshape(154, 224)
    flat = 0.4 + spread * (sentences.DENSE_SPAN - 0.01)
    wide, narrow = sentences.dense_note(coffee_224, spread), sentences.dense_note(coffee_224, flat)
    n, low, high, _ = sentences.DENSE_HOME["spread"]
    assert f"On the {n} of 20 photos" in wide and f"{sentences.fixed(low)} to {sentences.fixed(high)}" in wide
    assert "nearly flat" not in wide and "closely" in wide
    n, low, high, _ = sentences.DENSE_HOME["flat"]
    assert "That is nearly flat" in narrow and f"on the {n} of 20 photos" in narrow and "closely" not in narrow
    assert f"{sentences.fixed(low)} to {sentences.fixed(high)}" in narrow and "read its brightest parts" in narrow


def test_the_rollout_tab_says_how_alike_the_two_starts_are_and_how_each_follows_the_output(coffee_224):
    """The numbers of the Rollout tab's sentence, by scipy's Spearman on the rollouts toward the output and toward
    CLS and the dense map's patch means; the words follow the thresholds; a model that reads its readout says so."""
    from scipy.stats import spearmanr

    a = coffee_224
    (gh, gw), (h, w) = a.grid, a.pixel_values.shape[2:]
    own = a.dense_map().reshape(gh, h // gh, gw, w // gw).mean((1, 3)).ravel()
    for fusion, discard in (("mean", 0.0), ("max", 0.5)):
        out, cls = a.rollout(fusion, discard).ravel(), a.rollout(fusion, discard, Output("readout")).ravel()
        both = spearmanr(out, cls).statistic
        said = rollout_truth_note(a, fusion, discard)
        assert f"rank correlation **{sentences.fixed(both, 3)}**" in said
        assert f"are **{sentences.fixed(spearmanr(out, own).statistic)}** (toward the output)" in said
        assert f"and **{sentences.fixed(spearmanr(cls, own).statistic)}** (toward the CLS token)" in said
        assert ("where information pools, not what one output uses" in said) == (both >= sentences.ALIKE)
        assert ("the start still changes the map" in said) == (both < sentences.ALIKE)
        assert f"median rank correlation of {sentences.fixed(sentences.ROLLOUT_ROWS)}" in said
    words = [sentences.rollout_truth(12, "the CLS token", b, 0.1, 0.2) for b in (0.95, 0.7, 0.2)]
    assert "rank the patches alike:" in words[0] and "partly alike:" in words[1] and "differently:" in words[2]
    classifier = vitviz.analyze(FAMILIES["vit"](), random_image(32, 32), longest=32)
    said = rollout_truth_note(classifier, "mean", 0.0)
    assert "This model's output reads the CLS token, where rollout toward it starts." in said
