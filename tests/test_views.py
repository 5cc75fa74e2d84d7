"""The views' pictures and where a click on them lands."""

from __future__ import annotations

import re

import cv2
import numpy as np
import pytest
from conftest import FAMILIES, random_image

import vitviz
from vitviz import render, sentences, views


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


# ---- sentences parsed back and held against the numbers they describe


def bold_numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\*\*([-\d.]+)(?: px| nats|%)\*\*", text)]


@pytest.fixture(scope="module")
def coffee_224(embedded, coffee) -> vitviz.Analysis:
    """The embedded model: its heads differ (a tiny random model's heads all look alike)."""
    return vitviz.analyze(embedded, coffee, longest=224)


@pytest.mark.parametrize("head", [None, 2, views.ALL_HEADS])
def test_the_attention_note_gives_the_selected_heads_own_numbers(coffee_224, wide, head):
    distances = coffee_224.layer_statistics(3)[0]
    assert abs(distances[2] - distances.mean()) > 5  # the layer's mean would not pass for head 2's own
    for a, layer, patch, prefix in ((coffee_224, 3, 40, "CLS, not on the map, takes"),
                                    (wide, 1, 7, "CLS and 4 registers, not on the map, take")):  # fmt: skip
        check_attention_note(a, layer, head, patch, prefix)


def check_attention_note(wide, layer, head, patch, prefix):
    text = sentences.attention_note(wide, layer, head, patch)
    share, distance, entropy = bold_numbers(text)
    distances, entropies = wide.layer_statistics(layer)
    row = wide.attentions[layer, :, wide.n_prefix + patch].astype(np.float32)
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
    share = float(re.search(r"gets ([\d.]+)% of all", text).group(1))
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
        np.testing.assert_array_equal(picture, views.attention_view(a, layer, head, centre, "inferno", 0.6)[0])
        best = d.argmin() if step is lesson.local_head else d[d.shape[0] * 2 // 3 :].argmax()
        chosen = np.unravel_index(int(best), d.shape if step is lesson.local_head else d[d.shape[0] * 2 // 3 :].shape)
        expected = (int(chosen[0]) + (0 if step is lesson.local_head else d.shape[0] * 2 // 3), int(chosen[1]))
        assert (layer, head) == expected, step.__name__
    deep = d[d.shape[0] * 2 // 3 :].mean()
    farther = "the last third of the layers looks farther than layer 0" in text
    assert farther == (deep > d[0].mean()) and (farther or "does not look farther" in text)


@pytest.mark.parametrize("which, where", [("vit", "on itself"), ("wide", "on the prefix tokens (CLS and 4 registers)")])
def test_the_readout_step_says_where_cls_keeps_its_attention(which, where, request):
    from vitviz import lesson

    a = request.getfixturevalue(which)
    text = lesson.readout(a, "inferno", 0.6, "log")[2]
    assert "The CLS token is the *readout token*" in text
    share = float(re.search(r"the readout keeps (\d+)% of its attention " + re.escape(where), text).group(1))
    assert share == pytest.approx(100 * a.attentions[-1, :, 0, : a.n_prefix].astype(np.float32).sum(-1).mean(), abs=0.6)


@pytest.mark.parametrize("name", ["siglip", "deit"])
def test_the_readout_sentences_name_the_models_own_readout(name):
    """SigLIP's probe and its top share, read back from the text and compared with the pool's weights; DeiT's two
    readout tokens; neither lesson claims a CLS readout, and the tokens view says the same."""
    from vitviz import lesson

    a = vitviz.analyze(FAMILIES[name](), random_image(48, 64, seed=12), longest=64)
    text = lesson.readout(a, "inferno", 0.6, "log")[2]
    tokens = views.tokens_view(a)[1]
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
        views.attention_view(a, 1, None, "cls")[0],
        views.attention_view(a, 1, views.ALL_HEADS, "cls")[0],
        views.rollout_view(a, "mean", 0.0)[0],
        views.tokens_view(a)[0],
        *views.inside_views(a, 1, 0, 0)[:3],
        views.heads_views(a)[2],
        *(step(a, "inferno", 0.6, "log")[1] for step in lesson.STEPS[:-1]),
    ]
    for picture in pictures:
        assert picture.ndim == 3 and min(picture.shape[:2]) >= 1 and picture.dtype == np.uint8


def test_positions_say_when_the_table_is_interpolated_and_from_which_grid(wide):
    g0, g1 = wide.model.native_grid
    text = sentences.positions_note(wide)
    assert f"interpolated from {g0}×{g1} to 5×9" in text and (g0, g1) != (5, 9)
    native = vitviz.analyze(wide.model, random_image(g0 * 8, g1 * 8, seed=11), longest=max(g0, g1) * 8)
    assert native.grid == (g0, g1) and "used as it is" in sentences.positions_note(native)


def test_a_photo_enlarged_more_than_four_times_is_said_to_be(wide):
    small = vitviz.analyze(wide.model, random_image(14, 25, seed=12), longest=256)
    note = sentences.upscale_note(small)
    factor = max(small.pixel_values.shape[2] / 14, small.pixel_values.shape[3] / 25)
    assert factor > 4 and f"your 25×14 photo is enlarged {factor:.0f}×" in note
    assert sentences.upscale_note(wide) == ""  # 72 px wide, read at 72


def test_the_live_view_overlays_each_map_of_the_frame_it_analysed(embedded, coffee):
    """A camera frame's three overlays (attention, rollout, the dense head) each show that frame's own map: the
    overlay's difference from the bare frame follows the map, so a map of another frame would not fit."""
    from vitviz.analysis import analyze_frame

    a = analyze_frame(embedded, coffee)
    maps = [a.attention_map(11, None, "readout"), a.rollout("mean"), a.dense_map()]
    pictures = views.live_views(a, 11, None, views.LIVE_LAYERS, "gray", 1.0, "min-max")
    assert len(pictures) == 3 and all(p is not None for p in pictures)
    for values, picture in zip(maps, pictures, strict=True):
        fh, fw = render.fit(a.image, views.LIVE_DISPLAY).shape[:2]
        shown = picture[:fh, :fw]  # the frame, top left; its colour scale is beside it
        small = cv2.resize(values.astype(np.float32), (shown.shape[1], shown.shape[0]), interpolation=cv2.INTER_AREA)
        grey = shown.mean(-1)
        assert np.corrcoef(grey.ravel(), small.ravel())[0, 1] > 0.8
