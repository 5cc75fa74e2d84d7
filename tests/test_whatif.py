"""The What-if tab (vitviz/app/tabs/whatif.py): its endpoints against `vitviz.ablate` and `vitviz.importance` directly,
its head tiles and its sentences against their numbers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from app_server import running_app
from conftest import ASSETS
from gradio_client import handle_file

import vitviz
from vitviz import render, whatif_words
from vitviz.app.tabs.whatif import Target, chosen, parsed_indices
from vitviz.head_importance import importance

PHOTO = str(ASSETS / "chelsea.jpg")


@pytest.fixture(scope="module")
def client():
    gradio_client = pytest.importorskip("gradio_client")
    with running_app() as url:
        yield gradio_client.Client(url, verbose=False, ssl_verify=False)


@pytest.fixture(scope="module")
def model(embedded):
    return embedded


def percent(text: str) -> float:
    return float(re.search(r"by ([\d.]+) %", text).group(1))


def test_ablate_endpoint_says_vitviz_ablates_numbers(client, model):
    """A head switched off through the API: the sentence quotes the very numbers `vitviz.ablate` gives."""
    out = client.predict(
        handle_file(PHOTO),
        "dinov2-small",
        "224",
        "head",
        9,
        3,
        "zero",
        "",
        "keys",
        "",
        "inferno",
        0.6,
        "log",
        False,
        api_name="/ablate",
    )
    off, said = out[0], out[1]
    w = vitviz.ablate(model, PHOTO, heads=[(9, 3)], longest=224)
    assert off == "**Switched off:** layer 9, head 3, zeroed."
    assert said == whatif_words.ablation_words(w)
    assert f"from {w.before:.3g} to {w.after:.3g}" in said
    assert percent(said) == pytest.approx(abs(w.relative) * 100, abs=0.06)
    before, after = (vitviz.load_image(p) for p in (out[4], out[5]))
    assert before.shape == after.shape and not np.array_equal(before, after)


def test_ablate_endpoint_hides_clicked_patches_and_names_bad_ones(client, model):
    out = client.predict(
        handle_file(PHOTO),
        "dinov2-small",
        "224",
        "patches",
        11,
        0,
        "zero",
        "0, 1, 2",
        "blur",
        "",
        "inferno",
        0.6,
        "log",
        False,
        api_name="/ablate",
    )
    w = vitviz.ablate(model, PHOTO, patches=[0, 1, 2], patch_mode="blur", longest=224)
    assert out[0] == "**Switched off:** 3 patches blurred."
    assert out[1] == whatif_words.ablation_words(w)
    with pytest.raises(Exception, match="patch 9999 out of range"):
        client.predict(
            handle_file(PHOTO),
            "dinov2-small",
            "224",
            "patches",
            11,
            0,
            "zero",
            "9999",
            "keys",
            "",
            "inferno",
            0.6,
            "log",
            False,
            api_name="/ablate",
        )


def test_importance_endpoint_is_vitviz_importance(client, model):
    """The grid's sentence names the head `vitviz.importance` ranks first, with its change."""
    _tiles, note = client.predict(handle_file(PHOTO), "dinov2-small", "224", "zero", False, api_name="/importance")
    grid = importance(model, PHOTO, longest=224)
    layer, head, change = grid.ranked()[0]
    assert note.startswith(whatif_words.importance_words(grid, model))
    assert f"layer {layer}'s head {head} alone" in note
    assert f"from {grid.before:.3g} to {grid.before + change:.3g}" in note


def test_the_importance_sentence_quotes_its_numbers(model):
    grid = importance(model, PHOTO, longest=112)
    said = whatif_words.importance_words(grid, model)
    (layer, head, change), (layer2, head2, _) = grid.ranked()[:2]
    verb = "raises" if change > 0 else "lowers"
    assert f"layer {layer}'s head {head} alone {verb}" in said and f"layer {layer2}'s head {head2}" in said
    share = float(re.search(r": [+−]([\d.]+) %", said).group(1))
    assert share == pytest.approx(abs(change / grid.before) * 100, rel=0.05, abs=0.006)
    assert "of the 72 heads" in said


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("layers, heads", [(12, 6), (2, 3)])
def test_a_click_on_a_head_tile_names_that_tile(layers, heads, large):
    """In either labels' mode (the projector's tiles hold its large numbers, 26 px of ink or more), every tile's
    middle names its head, and the corners off the tiles name none."""
    from support.harness import tallest_label

    with render.large_labels(large):
        values = np.arange(layers * heads, dtype=float).reshape(layers, heads) - 3
        img = render.head_tiles(layers, heads, values)
        left, top, width, height, _ = render.tile_geometry()
        for layer in range(layers):
            for head in range(heads):
                x, y = left + head * width + width // 2, top + layer * height + height // 2
                assert render.head_tile_at(layers, heads, x, y) == (layer, head)
        assert render.head_tile_at(layers, heads, 3, 3) is None
        assert render.head_tile_at(layers, heads, img.shape[1] - 1, img.shape[0] - 1) is None
    assert (tallest_label(img) >= render.LARGE_LABEL_PX - 1) == large
    assert (left, top, width, height) != (render.TILE_LEFT, render.TILE_TOP, render.TILE_W, render.TILE_H) or not large


def test_the_controls_become_ablate_s_keywords_and_bad_ones_are_named():
    assert chosen(Target("layer", 4, 2, "mean")) == {"heads": [(4, None)], "mode": "mean"}
    assert chosen(Target("mlp", 4, 2)) == {"mlp": [4]}
    assert chosen(Target("patches", 0, 0, patches="3, 1", patch_mode="blur")) == {
        "patches": [3, 1],
        "patch_mode": "blur",
    }
    assert chosen(Target("layers", 0, 0, layers="5 3,4")) == {"layers": [5, 3, 4]}
    assert parsed_indices(" 3,17  40 ") == [3, 17, 40]
    with pytest.raises(ValueError, match="patches .* are whole numbers"):
        parsed_indices("3, x")
    with pytest.raises(ValueError, match=r"layers \(numbers from 0\) are whole numbers separated by commas, got '-1'"):
        chosen(Target("layers", 0, 0, layers="-1"))
    with pytest.raises(ValueError, match="no layer chosen"):
        chosen(Target("layers", 0, 0))
    with pytest.raises(ValueError, match="no patch chosen"):
        chosen(Target("patches", 0, 0))
    with pytest.raises(ValueError, match="must be one of"):
        chosen(Target("neurons", 0, 0))


def test_ablate_endpoint_skips_a_set_of_layers_as_vitviz_ablate_does(client, model):
    """The layers box: every layer named skipped whole, said and measured as `vitviz.ablate(layers=...)`; a layer
    off the model is named."""
    where = (handle_file(PHOTO), "dinov2-small", "224", "layers", 11, 0, "zero", "", "keys")
    display = ("inferno", 0.6, "log", False)
    out = client.predict(*where, "4, 2", *display, api_name="/ablate")
    w = vitviz.ablate(model, PHOTO, layers=[2, 4], longest=224)
    assert out[0] == "**Switched off:** layer 2 skipped; layer 4 skipped."
    assert out[1] == whatif_words.ablation_words(w) and "Skipping layer 2 and layer 4" in out[1]
    assert f"from {w.before:.3g} to {w.after:.3g}" in out[1]
    with pytest.raises(Exception, match="layer 12 out of range: dinov2-small has 12 layers"):
        client.predict(*where, "3, 12", *display, api_name="/ablate")


def test_the_output_with_a_head_off_is_drawn_on_one_scale_with_the_output_as_it_is(model, monkeypatch):
    """Side by side, a colour means one value in both dense maps: both are drawn with the limits of one colour
    scale made from the two maps together."""
    from vitviz.maps import DEFAULT_SCALE, colour_scale
    from vitviz.views import output, whatif

    limits, draw = [], output.scaled_overlay
    monkeypatch.setattr(output, "scaled_overlay", lambda *a, **k: limits.append(k["limits"]) or draw(*a, **k))
    w = vitviz.ablate(model, vitviz.example("chelsea"), heads=[(9, 3)], longest=224)
    whatif.whatif_views(w, views=("output",))
    both = np.concatenate([w.baseline.dense_map().ravel(), w.dense_map().ravel()])
    _, low, high, _ = colour_scale(both, DEFAULT_SCALE)
    assert limits == [(low, high), (low, high)]
