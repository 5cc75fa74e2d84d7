"""Faithfulness: deletion and insertion curves, checked by masking patches by hand and running transformers."""

from __future__ import annotations

import re

import cv2
import numpy as np
import pytest
import torch
from conftest import random_image, reference_outputs, tiny_dinov2, tiny_vit

from vitviz.attributions import METHODS
from vitviz.deletion import Faithfulness, RandomBand, band_note, faithfulness
from vitviz.outputs import Output
from vitviz.preprocess import prepare_input


def blurred_by_hand(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The replacement, made here: the image at the input size, blurred with a Gaussian of sigma = side / 16."""
    h, w = size
    small = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
    return cv2.GaussianBlur(small, (0, 0), sigmaX=max(h, w) / 16)


def curve_by_hand(model, x, base, order, counts, grid, target, insert=False) -> np.ndarray:
    """The target after replacing (or, inserting, keeping) the first `count` patches of `order`, for each count."""
    p, gw = model.patch_size, grid[1]
    values = []
    own = None if target is not None else reference_outputs(model, x).pooler_output[0]  # the readout's direction
    for count in counts:
        img = (base if insert else x).copy()
        for i in order[:count]:
            r, c = divmod(int(i), gw)
            img[:, :, r * p : (r + 1) * p, c * p : (c + 1) * p] = (x if insert else base)[
                :, :, r * p : (r + 1) * p, c * p : (c + 1) * p
            ]
        out = reference_outputs(model, img)
        values.append(float(out.logits[0, target] if target is not None else out.pooler_output[0] @ own / own.norm()))
    return np.array(values)


@pytest.mark.parametrize(("tiny", "target"), [(tiny_vit, 2), (tiny_dinov2, None)])
def test_curves_equal_patches_masked_by_hand(tiny, target):
    """ViT: its native 4x4 grid and a class logit; DINOv2: a 5x7 grid (56 px wide) and the readout vector along the
    unmasked photo's."""
    model, image = tiny(), random_image(40, 56, seed=11)
    size = (32, 32) if model.fixed_size else (40, 56)
    grid = (size[0] // 8, size[1] // 8)
    n = grid[0] * grid[1]
    scores = np.random.default_rng(1).normal(size=grid).astype(np.float32)
    f = faithfulness(
        model,
        image,
        scores=scores,
        steps=4,
        random_orders=3,
        target=target,
        batch=5,
        longest=None if model.fixed_size else 56,
    )
    x = prepare_input(image, size, 8, model.mean, model.std)
    base = prepare_input(blurred_by_hand(image, size), size, 8, model.mean, model.std)
    np.testing.assert_array_equal(f.order, np.argsort(-scores.ravel(), kind="stable"))
    assert f.order[0] == scores.argmax() and f.grid == grid
    counts = np.rint(np.linspace(0, n, 5)).astype(int)
    np.testing.assert_allclose(f.fractions, counts / n)
    by_hand = curve_by_hand(model, x, base, f.order, counts, grid, target)
    np.testing.assert_allclose(f.deletion, by_hand, rtol=1e-5, atol=1e-5)
    by_hand = curve_by_hand(model, x, base, f.order, counts, grid, target, insert=True)
    np.testing.assert_allclose(f.insertion, by_hand, rtol=1e-5, atol=1e-5)
    for o, curve in zip(f.random_order, f.random, strict=True):
        assert sorted(o) == list(range(n))
        np.testing.assert_allclose(curve, curve_by_hand(model, x, base, o, counts, grid, target), rtol=1e-5, atol=1e-5)
    assert len({tuple(o) for o in f.random_order}) == 3
    assert f.deletion_auc == pytest.approx(np.trapezoid(f.deletion, f.fractions))
    assert f.target == ("the logit of class 2" if target is not None else "the readout vector")


def test_mean_colour_replacement_is_zero_after_normalisation():
    model, image = tiny_vit(), random_image(32, 32, seed=12)
    f = faithfulness(
        model, image, scores=np.arange(16.0).reshape(4, 4), steps=2, random_orders=1, target=0, replacement="mean"
    )
    assert f.deletion[-1] == pytest.approx(
        float(reference_outputs(model, np.zeros((1, 3, 32, 32), np.float32)).logits[0, 0]), abs=1e-5
    )
    np.testing.assert_array_equal(f.order[:3], [15, 14, 13])


def test_the_verdict_and_the_sentence_follow_the_areas():
    """On a tiny classifier's own 50 random orders: a map between the lowest and the second lowest of their areas is
    faithful (below 49 of 50, p = 2/51); between the second and the third it is not (p = 3/51), nor anywhere in the
    middle; the same, mirrored, for worse than random."""
    model, image = tiny_vit(), random_image(32, 32, seed=13)
    f = faithfulness(model, image, scores=np.ones((4, 4)), steps=4, target=1)
    areas = np.sort(f.random_aucs)
    assert len(areas) == 50 and len(set(areas)) == 50
    cases = (
        ((areas[0] + areas[1]) / 2, "faithful", "faster than 49 of 50 random orders", 2 / 51),
        ((areas[1] + areas[2]) / 2, "no better than chance", "faster than 48 of 50 random orders", 3 / 51),
        (areas[0] - 1, "faithful", "faster than 50 of 50 random orders", 1 / 51),
        ((areas[24] + areas[25]) / 2, "no better than chance", "faster than 25 of 50", 26 / 51),
        ((areas[-1] + areas[-2]) / 2, "worse than random", "higher than 49 of 50 random orders", 2 / 51),
        ((areas[-2] + areas[-3]) / 2, "no better than chance", "more slowly than 48", 3 / 51),
    )
    for auc, verdict, rank, p in cases:
        f.deletion = f.deletion - f.deletion_auc + auc  # a flat shift moves the area by exactly that much
        said = f.sentence()
        assert f.verdict == verdict and f": {verdict}" in said and rank in said, said
        assert f"p = {p:.2g}" in said and min(f.p_faithful, f.p_worse) == pytest.approx(p)
        assert (": faithful" in said) == (verdict == "faithful")
        assert ("not a reliable guide" in said) == (verdict != "faithful")
        gap, spread = auc - areas.mean(), np.std(areas, ddof=1)
        assert f"{abs(gap):.2g} {'below' if gap < 0 else 'above'} the random orders' mean of {areas.mean():.4g}" in said
        assert f"their standard deviation {spread:.2g}" in said


def made(random_areas, area: float, steps: int = 1) -> Faithfulness:
    """A check whose random orders have the deletion areas `random_areas` and whose map has `area`: flat curves, whose
    area is their value, at steps + 1 points."""
    k, fractions = len(random_areas), np.linspace(0, 1, steps + 1)
    curves = np.repeat(np.asarray(random_areas, np.float64)[:, None], steps + 1, 1)
    band = RandomBand(
        Output("class", 0), "blur", (4, 4), 0, fractions, np.tile(np.arange(16), (k, 1)), curves, "an input", 0.0
    )
    flat = np.full(steps + 1, area)
    return Faithfulness(
        "saliency", "the logit of class 0", "blur", (4, 4), fractions, flat, flat, band, np.arange(16), 0.0, 0.0
    )


def test_a_claim_needs_p_at_most_the_level_and_a_tie_counts_against_it():
    """50 random areas 0.50, 0.51, ... 0.99: a map that ties the lowest is below 49 (p = 2/51, faithful); one that
    ties the second lowest is below 48 (p = 3/51 > 0.05): no claim, so close to the threshold."""
    areas = 0.5 + 0.01 * np.arange(50)
    for area, verdict, below in (
        (0.5, "faithful", 49),
        (0.51, "no better than chance", 48),
        (0.4, "faithful", 50),
        (0.99, "worse than random", 0),
        (0.98, "no better than chance", 1),
    ):
        f = made(areas, area)
        assert f.verdict == verdict and f.below == below, (area, f.verdict, f.below)
    assert made(areas, 0.51).p_faithful == pytest.approx(3 / 51) and made(areas, 0.5).p_faithful == pytest.approx(
        2 / 51
    )


def test_too_few_random_orders_make_no_claim_and_say_why():
    f = made([0.6, 0.7, 0.8, 0.9, 1.0], 0.1)  # below all 5, but p = 1/6
    said = f.sentence()
    assert f.verdict == "no better than chance" and ": faithful" not in said
    assert "with 5 random orders p cannot go below 0.17: a verdict needs at least 19" in said
    assert "too few for any verdict" in band_note(f.band) and "at least 19" in band_note(f.band)
    assert "below at least 49 of the 50 for faithful" in band_note(made(np.arange(50.0), 0).band)


def test_the_sentence_explains_a_curve_that_rises_at_its_last_step():
    f = made(np.linspace(0.5, 1, 50), 0.2, steps=4)
    assert "last point" not in f.sentence()
    f.deletion = np.array([0.6, 0.4, 0.3, 0.2, 0.45])  # every patch hidden: the replacement alone
    said = f.sentence()
    assert "The curve's last point, every patch hidden, is a blur of the image alone, the same for every order" in said
    assert "there the output is 0.45, above its 0.2 at 75% hidden" in said
    assert "replacement is no absence to the model" in said


def test_several_maps_say_why_a_curve_rises_at_its_end_once():
    """A check of several maps gives each map its own last point, and the reason once, naming how many rise."""
    from vitviz.deletion import end_note

    flat, rising = made(np.linspace(0.5, 1, 50), 0.2, steps=4), made(np.linspace(0.5, 1, 50), 0.2, steps=4)
    flat.deletion, rising.deletion = np.array([0.6, 0.4, 0.3, 0.2, 0.1]), np.array([0.6, 0.4, 0.3, 0.2, 0.45])
    assert end_note([flat]) is None and end_note([flat, flat]) is None
    note = end_note([flat, rising, rising])
    assert note.startswith("2 of these 3 curves rise at the last point") and "no absence to the model" in note
    assert end_note([rising]).startswith("Its curve rises")
    brief = rising.sentence(why_end=False)
    assert "there the output is 0.45, above its 0.2 at 75% hidden" in brief and "no absence" not in brief
    assert "last point" not in flat.sentence(why_end=False)


def test_one_band_of_random_orders_serves_every_map_of_an_output():
    """A band drawn once equals the one a check draws itself from the same seed; with it a map's curves cost only
    the map's own masked images, and every map is ranked against the very same orders."""
    from vitviz.deletion import passes, random_band

    model, image = tiny_vit(), random_image(32, 32, seed=17)
    sizes = []
    real = model.forward
    object.__setattr__(model, "forward", lambda x, **k: sizes.append(len(x)) or real(x, **k))
    band = random_band(model, image, steps=4, random_orders=20, seed=3, target=1)
    drawn = sum(sizes[1:])  # the first call reads the target
    a, b = np.arange(16.0).reshape(4, 4), np.random.default_rng(0).normal(size=(4, 4))
    sizes.clear()
    f = faithfulness(model, image, scores=a, steps=4, target=1, band=band)
    used = sum(sizes[1:])
    g = faithfulness(model, image, scores=b, steps=4, target=1, band=band)
    alone = faithfulness(model, image, scores=a, steps=4, target=1, random_orders=20, seed=3)
    assert f.band is band and g.band is band
    np.testing.assert_array_equal(alone.random_order, band.orders)
    np.testing.assert_allclose(alone.random, band.curves, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(alone.deletion, f.deletion, rtol=1e-5, atol=1e-6)
    assert used == 2 * 3 and drawn + 2 * used == passes(4, 20, maps=2)  # the band's ends serve the maps
    again = random_band(model, image, steps=4, random_orders=20, seed=3, target=1)
    np.testing.assert_array_equal(again.orders, band.orders)
    other = random_band(model, image, steps=4, random_orders=20, seed=4, target=1)
    assert not np.array_equal(other.orders, band.orders)


def test_a_band_of_another_input_output_or_curve_is_refused():
    from vitviz.deletion import random_band

    model, image = tiny_vit(), random_image(32, 32, seed=18)
    band = random_band(model, image, steps=2, random_orders=2, target=1)
    flat = np.ones((4, 4))
    for wrong, message in (
        (dict(image=random_image(32, 32, seed=19)), "drawn on another image"),
        (dict(target=2), "follow another output"),
        (dict(steps=4), "in 2 steps, not by blur in 4"),
        (dict(replacement="black"), "by blur in 2 steps, not by black"),
    ):
        arguments = dict(image=image, target=1, steps=2) | wrong
        with pytest.raises(ValueError, match=message):
            faithfulness(model, scores=flat, band=band, **arguments)


@pytest.mark.slow
def test_the_oracle_scores_best_and_a_shuffled_map_like_random(embedded, coffee):
    """The oracle: each patch hidden alone, sorted by the drop. A random permutation of it is a random order."""
    from vitviz.deletion import random_band

    drops = faithfulness(embedded, coffee, "occlusion", baseline="blurred", steps=1, random_orders=1)
    band = random_band(embedded, coffee, seed=1)
    oracle = faithfulness(embedded, coffee, scores=oracle_by_hand(embedded, coffee), band=band)
    shuffled = np.random.default_rng(7).permutation(oracle_by_hand(embedded, coffee).ravel()).reshape(16, 16)
    shuffle = faithfulness(embedded, coffee, scores=shuffled, band=band)
    np.testing.assert_array_equal(drops.order, oracle.order)  # occlusion with the same replacement is the oracle
    assert oracle.verdict == "faithful" and oracle.below == 50 and "faster than 50 of 50" in oracle.sentence()
    assert oracle.deletion_auc < shuffle.deletion_auc and oracle.insertion_auc > oracle.random_aucs.max()
    assert shuffle.verdict == "no better than chance" and ": faithful" not in shuffle.sentence()
    assert 3 <= shuffle.below <= 47, shuffle.below  # a shuffled map is one more random order


def test_a_curve_of_two_points_makes_no_claim_on_the_embedded_model(embedded, coffee):
    """With one step every order hides nothing, then everything: all areas tie, p = 1, and nothing is claimed."""
    f = faithfulness(embedded, coffee, scores=np.arange(256.0).reshape(16, 16), steps=1)
    assert len(set(f.random_aucs)) == 1 and f.p_faithful == 1 and f.p_worse == 1
    said = f.sentence()
    assert f.verdict == "no better than chance" and ": faithful" not in said and ": worse" not in said
    assert "faster than 0 of 50 random orders did and more slowly than 0" in said


_ORACLE: dict = {}


def oracle_by_hand(model, rgb) -> np.ndarray:
    """[16,16] the drop of the dense head's default output (its map weighted by the map on the photo) when each
    patch alone shows the blurred image."""
    if "drops" not in _ORACLE:
        x = prepare_input(rgb, (224, 224), 14, model.mean, model.std)
        base = prepare_input(blurred_by_hand(rgb, (224, 224)), (224, 224), 14, model.mean, model.std)
        inputs = np.repeat(x, 257, 0)
        for i in range(256):
            r, c = divmod(i, 16)
            inputs[i + 1, :, r * 14 : (r + 1) * 14, c * 14 : (c + 1) * 14] = base[
                0, :, r * 14 : (r + 1) * 14, c * 14 : (c + 1) * 14
            ]
        maps = []
        for chunk in np.array_split(inputs, 17):
            out = model.forward(torch.from_numpy(chunk))
            with torch.inference_mode():
                maps.append(model.dense_map(out.hidden_states[-1], (16, 16), (224, 224))[:, 0].double())
        maps = torch.cat(maps)
        values = ((maps * maps[0]).sum((1, 2)) / maps[0].sum()).numpy()
        _ORACLE["drops"] = (values[0] - values[1:]).reshape(16, 16)
    return _ORACLE["drops"]


def test_bad_arguments_name_the_problem():
    model, image = tiny_vit(), random_image(32, 32)
    with pytest.raises(ValueError, match="unknown replacement"):
        faithfulness(model, image, replacement="noise")
    with pytest.raises(ValueError, match="unknown attribution method"):
        faithfulness(model, image, method="lime")
    with pytest.raises(ValueError, match=r"one value per patch, \(4, 4\)"):
        faithfulness(model, image, scores=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="steps must be"):
        faithfulness(model, image, steps=0)


def test_the_apps_default_method_is_the_most_faithful_on_the_docs_table():
    """docs/benchmarks.md's deletion areas toward the dense head over the image (lower is more faithful), the
    column that every method has: the app opens on the lowest."""
    from pathlib import Path

    from vitviz.app.tabs.attributions import DEFAULT_METHOD

    text = (Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md").read_text()
    lines = text[text.index("## Faithfulness of the maps") :].splitlines()
    header = next(line for line in lines if line.startswith("| method |"))
    column = next(i for i, c in enumerate(header.strip("|").split("|")) if "over the image" in c)
    rows = lines[lines.index(header) + 2 :]
    rows = [[c.strip() for c in row.strip("|").split("|")] for row in rows[: rows.index("")]]
    areas = {row[0]: float(row[column].split("/")[0].strip().strip("*")) for row in rows if row[column]}
    assert set(areas) - {"random", "rollout"} == set(METHODS)  # every method of the app is in the column
    assert min(areas, key=areas.get) == DEFAULT_METHOD, areas


@pytest.mark.parametrize(("method", "options"), [("saliency", {}), ("rollout", {}), ("grad_cam", {"layer": 0})])
def test_a_named_method_is_scored_in_its_own_maps_order(method, options):
    """faithfulness(method=...) makes the map itself, on the target's input: its order is the map's own patch
    order (the attribution, or the rollout of an analysis of the same input), made independently here, and the
    map's half of the progress comes first."""
    from vitviz.attributions import attribute, input_analysis, patch_scores

    model, image = tiny_vit(), random_image(40, 56, seed=14)
    target = 4  # not the top class: the target must reach the map
    reported = []
    f = faithfulness(
        model,
        image,
        method,
        longest=56,
        target=target,
        steps=4,
        random_orders=1,
        batch=3,
        progress=reported.append,
        **options,
    )
    if method == "rollout":
        scores = input_analysis(model, image, 56).rollout()
    else:
        raw = attribute(model, image, method, target=target, longest=56, **options).raw
        scores = patch_scores(raw, model.patch_size)
        other = patch_scores(attribute(model, image, method, longest=56).raw, model.patch_size)
        assert not np.array_equal(np.argsort(-other.ravel()), np.argsort(-scores.ravel()))
    np.testing.assert_array_equal(f.order, np.argsort(-scores.ravel(), kind="stable"))
    assert f.grid == (5, 7) and f.method == method and f.target == f"the logit of class {target}"
    assert (
        reported == sorted(reported) and reported[-1] == pytest.approx(1.0) and 0 <= reported[0] <= max(reported) <= 1
    )
    assert len({r for r in reported if 0.5 < r < 1}) >= 3  # the curves report batch by batch
    if method != "rollout":  # an attribution's progress: its own calls fill the first half, the curves the rest
        assert 0.5 in [pytest.approx(r) for r in reported]
    assert 0 <= f.map_seconds < 60 and 0 < f.seconds < 60


def test_ties_keep_the_patches_in_scan_order():
    model, image = tiny_vit(), random_image(40, 56, seed=14)
    f = faithfulness(model, image, scores=np.ones((5, 7)), longest=56, target=0, steps=1, random_orders=1)
    np.testing.assert_array_equal(f.order, np.arange(35))


def test_the_defaults_are_ten_steps_fifty_seeded_random_orders_and_batches_of_sixteen():
    model, image = tiny_vit(), random_image(32, 32, seed=15)
    sizes = []
    real = model.forward
    object.__setattr__(model, "forward", lambda x, **k: sizes.append(len(x)) or real(x, **k))
    f = faithfulness(model, image, scores=np.arange(16.0).reshape(4, 4), target=0)
    np.testing.assert_allclose(f.fractions, np.rint(np.linspace(0, 1, 11) * 16) / 16)
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(f.random_order, np.stack([rng.permutation(16) for _ in range(50)]))
    assert f.random.shape == (50, 11) and f.replacement == "blur" and f.band.seed == 0
    assert max(sizes[1:]) == 16 and sum(sizes[1:]) <= 2 + 52 * 9  # the first call reads the target
    assert sum(sizes[1:]) <= __import__("vitviz.deletion", fromlist=["passes"]).passes()


def test_the_limits_are_inclusive_and_name_the_argument():
    model, image = tiny_vit(), random_image(32, 32, seed=16)
    flat = np.arange(16.0).reshape(4, 4)
    for edge in (
        dict(steps=1),
        dict(steps=100, random_orders=1),
        dict(random_orders=1, steps=1),
        dict(random_orders=1000, steps=1),
        dict(batch=1, steps=1, random_orders=1),
        dict(batch=256, steps=1, random_orders=1),
    ):
        faithfulness(model, image, scores=flat, target=0, **edge)
    for bad, message in (
        (dict(steps=101), "steps must be between 1 and 100, got 101"),
        (dict(random_orders=0), "random_orders must be between 1 and 1000, got 0"),
        (dict(random_orders=1001), "random_orders must be between 1 and 1000, got 1001"),
        (dict(batch=0), "batch must be between 1 and 256, got 0"),
        (dict(batch=257), "batch must be between 1 and 256, got 257"),
        (dict(replacement="noise"), "use one of blur, mean, black"),
        (dict(method="lime"), "use one of integrated_gradients, saliency"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            faithfulness(model, image, scores=None if "method" in bad else flat, target=0, **bad)


def test_a_box_or_a_text_is_the_target_the_curves_follow(embedded, coffee):
    """The curves start at the attribution's own score: the dense head's map inside the box, or the image-text
    logit; and the output is named so."""
    from conftest import tiny_siglip
    from test_attributions import word_tokenizer

    from vitviz.attributions import attribute, patch_scores

    box = (100, 50, 300, 200)
    f = faithfulness(embedded, coffee, "saliency", box=box, steps=1, random_orders=1)
    r = attribute(embedded, coffee, "saliency", box=box)
    assert f.deletion[0] == pytest.approx(r.score, rel=1e-4)
    np.testing.assert_array_equal(f.order, np.argsort(-patch_scores(r.raw, 14).ravel(), kind="stable"))
    assert f.target == "the dense map inside the box" and f.output == Output("dense", box=box)
    whole = faithfulness(embedded, coffee, scores=np.ones((16, 16)), steps=1, random_orders=1)
    assert whole.target == "the dense map on what it marks" and whole.deletion[0] != pytest.approx(f.deletion[0])
    model, image = tiny_siglip(), random_image(40, 56, seed=3)
    model.tokenizer = word_tokenizer()
    for text, name in (([0, 5, 2], "the similarity with the text"), ("a dog", 'the similarity with "a dog"')):
        f = faithfulness(model, image, "saliency", longest=56, text=text, steps=2, random_orders=1)
        r = attribute(model, image, "saliency", longest=56, text=text)
        assert f.deletion[0] == pytest.approx(r.score, rel=1e-4, abs=1e-6) and f.target == name
        np.testing.assert_array_equal(f.order, np.argsort(-patch_scores(r.raw, 8).ravel(), kind="stable"))
    plain = faithfulness(tiny_dinov2(), image, scores=np.ones((5, 7)), longest=56, steps=1, random_orders=1)
    assert plain.target == "the readout vector"


def test_the_sentence_says_when_hiding_the_top_patches_raises_the_output():
    model, image = tiny_vit(), random_image(32, 32, seed=13)
    f = faithfulness(model, image, scores=np.ones((4, 4)), steps=4, random_orders=2, target=1, replacement="black")
    f.deletion = np.array([0.2, 0.1, 0.5, 0.6, 0.9])  # hidden patches raise it on average: 0.525 > 0.2
    said = f.sentence()
    assert "replaced by black" in said and "hiding them raises it on average, from 0.2 to 0.525" in said
    f.deletion = np.array([0.5, 0.2, 0.9, 0.8, 0.1])  # the mean after the start, 0.5, equals the start: no claim
    assert "raises it" not in f.sentence()
    f.deletion = np.array([0.3, 0.4, 0.2, 0.25, 0.2])  # 0.2625 < 0.3, though the first step rises
    assert "raises it" not in f.sentence() and "replaced by black" in f.sentence()


def test_over_images_averages_each_methods_own_curves_and_names_the_skipped(tmp_path):
    from vitviz.deletion import passes
    from vitviz.deletion_table import over_images, table

    model = tiny_vit()
    files = [tmp_path / "a.png", tmp_path / "broken.jpg", tmp_path / "b.png"]
    cv2.imwrite(str(files[0]), random_image(32, 32, seed=1))
    files[1].write_bytes(b"not a jpeg")
    cv2.imwrite(str(files[2]), random_image(32, 32, seed=2))
    skipped, options = [], dict(steps=2, random_orders=2, target=1)
    reasons, bands = [], {}
    rows = over_images(
        model,
        files,
        ["saliency", "rollout"],
        bands=bands,
        on_skip=lambda p, e: skipped.append(p) or reasons.append(e),
        **options,
    )
    assert skipped == [files[1]] and list(bands) == [files[0], files[2]]  # one band an image, for both methods
    assert bands[files[0]].curves.shape == (2, 3)
    assert isinstance(reasons[0], ValueError) and str(reasons[0])
    for row in rows:
        each = [faithfulness(model, cv2.imread(str(f))[..., ::-1], row.method, **options) for f in (files[0], files[2])]
        assert row.images == 2 and row.faithful == sum(r.verdict == "faithful" for r in each)
        assert row.deletion_auc == pytest.approx(np.mean([r.deletion_auc for r in each]))
        assert row.insertion_auc == pytest.approx(np.mean([r.insertion_auc for r in each]))
        assert row.random_auc == pytest.approx(np.mean([r.random_auc for r in each]))
        assert row.map_seconds >= 0 and row.curve_seconds > 0
    lines = table(rows).splitlines()
    assert lines[0].split() == "method deletion AUC insertion AUC random AUC faithful s/map s/curves".split()
    assert set(lines[1]) == {"-"}
    best = min(rows, key=lambda r: r.deletion_auc)
    assert lines[2].split()[:2] == [best.method, f"{best.deletion_auc:.4f}"] and f"{best.faithful}/2" in lines[2]
    with pytest.raises(ValueError, match="^no readable image$"):
        over_images(model, [files[1]], ["saliency"], **options)
    assert passes(3, 2) == 4 * 2 + 2 and passes() == 52 * 9 + 2 and passes(maps=3) == 56 * 9 + 2
