"""The guided lesson: every step is drawn on the analysis it is given, and says this analysis' numbers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import ASSETS, FAMILIES, random_image

import vitviz
from vitviz import lesson


@pytest.fixture(scope="module")
def chelsea(embedded):
    return vitviz.analyze(embedded, ASSETS / "chelsea.jpg")


def test_every_step_has_a_picture_that_differs_from_the_last(chelsea):
    previous = None
    for step in range(1, len(lesson.STEPS) + 1):
        title, picture, text = lesson.lesson_step(chelsea, step)
        assert title and picture.dtype == np.uint8 and picture.ndim == 3 and min(picture.shape[:2]) > 100
        assert 3 <= text.count(". ") + 1 <= 8, (step, text)  # a few sentences, not a page
        assert previous is None or previous.shape != picture.shape or np.abs(previous - picture.astype(int)).mean() > 1
        previous = picture.astype(int)


def test_the_steps_numbers_are_this_analysis_own(chelsea):
    d = chelsea.mean_attention_distance
    text = lesson.lesson_step(chelsea, 1)[2]
    assert "21 × 32 = 672 patches" in text and "673 tokens" in text
    layer, head = np.unravel_index(np.argmin(d), d.shape)
    text = lesson.lesson_step(chelsea, 3)[2]
    assert f"layer {layer}, head {head}" in text
    assert re.search(r"look (\d+) px away", text).group(1) == f"{d[layer, head]:.0f}"
    text = lesson.lesson_step(chelsea, 4)[2]
    found = re.search(r"layer (\d+), head (\d+)\*\*: (\d+) px", text)
    deep = d.shape[0] * 2 // 3
    layer, head = int(found.group(1)), int(found.group(2))
    assert layer >= deep and d[layer, head] == d[deep:].max() and found.group(3) == f"{d[deep:].max():.0f}"
    text = lesson.lesson_step(chelsea, 7)[2]
    cls = chelsea.inside_head(chelsea.model.num_layers - 1, 0, "cls")
    assert f"largest weight is {cls.weights.max():.3f}" in text


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_gets_every_step_and_the_inside_step_names_its_query(name):
    """Classifiers and encoders without a dense head, with one readout token, two or an attention-pool: the
    inside step's query is the readout token where there is one, else the centre patch, and its largest
    weight is that query's own."""
    a = vitviz.analyze(FAMILIES[name](), random_image(32, 40), longest=40)
    pictures = [lesson.lesson_step(a, s)[1] for s in range(1, len(lesson.STEPS) + 1)]
    assert all(p.dtype == np.uint8 and p.ndim == 3 for p in pictures)
    assert "PCA" in lesson.lesson_step(a, 8)[2]
    text = lesson.lesson_step(a, 7)[2]
    query = "readout" if len(a.model.readout.tokens) == 1 else (a.grid[0] // 2) * a.grid[1] + a.grid[1] // 2
    d = a.inside_head(a.model.num_layers - 1, 0, query)
    assert f"the query {vitviz.sentences.token_name(a, d.query)} in layer" in text
    assert f"largest weight is {d.weights.max():.3f}" in text


@pytest.mark.parametrize("step", [0, 9, -1])
def test_a_step_out_of_range_says_which_are_allowed(chelsea, step):
    with pytest.raises(ValueError, match=r"step must be in \[1, 8\]"):
        lesson.lesson_step(chelsea, step)


def test_with_a_depth_model_the_last_step_shows_its_depth_map(chelsea, tmp_path):
    from conftest import tiny_dpt

    tiny_dpt().save_pretrained(tmp_path)
    depth = vitviz.estimate_depth(vitviz.load_depth_model(str(tmp_path), device="cpu"), ASSETS / "chelsea.jpg")
    title, picture, text = lesson.lesson_step(chelsea, 8, depth=depth)
    np.testing.assert_array_equal(picture, vitviz.views.depth_view(depth, "magma")[1])
    reassembled = [s for s in depth.stages if s.kind == "reassemble"]
    assert len(reassembled) == 4 and f"{reassembled[0].shape[1]}×{reassembled[0].shape[2]}" in text
    assert "bright = near" in text and not np.array_equal(lesson.lesson_step(chelsea, 8)[1], picture)
