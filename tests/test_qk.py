"""The Q·K view: AttentionViz's normalisation, the joint PCA map, what a head sorts by, and the browser's view.

Every number is checked against an independent float64 computation: softmax rows of the raw q and k, an
eigendecomposition of the covariance, least squares by NumPy's own solver.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import FAMILIES, random_image

import vitviz
from vitviz import explorer, qk


def rows64(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    s = q @ k.T * scale
    w = np.exp(s - s.max(1, keepdims=True))
    return w / w.sum(1, keepdims=True)


def test_normalisation_leaves_every_attention_row_unchanged():
    """Keys translated to the queries' centroid, both at one mean norm: every row of softmax(q·k/sqrt(d)) is the
    same to 1e-6, on random heads far from normalised and on every head of a tiny model."""
    rng = np.random.default_rng(0)
    cases = [(rng.normal(3, 2, (50, 16)), rng.normal(-5, 0.1, (70, 16)) * 40) for _ in range(5)]
    a = vitviz.analyze(FAMILIES["vit"](), random_image(40, 56, seed=1), longest=56)
    d = explorer.layer_data(a, 1)
    cases += [tuple(x.astype(np.float64) for x in qk.head_vectors(d.q, d.k, 4, h)) for h in range(4)]
    for q, k in cases:
        scale = q.shape[1] ** -0.5
        n = qk.normalise(q, k)
        np.testing.assert_allclose(rows64(n.q, n.k, scale), rows64(q, k, scale), atol=1e-6, rtol=0)
        np.testing.assert_allclose(n.q.mean(0), n.k.mean(0), atol=1e-9 * np.abs(n.q).max())
        assert np.linalg.norm(n.q, axis=1).mean() == pytest.approx(np.linalg.norm(n.k, axis=1).mean(), rel=1e-9)
    q, k = cases[0]  # scaling both by their own factor (not c and 1/c) would change the rows: the test can tell
    wrong = rows64(q / np.linalg.norm(q, axis=1).mean(), k / np.linalg.norm(k, axis=1).mean(), 0.25)
    assert np.abs(wrong - rows64(q, k, 0.25)).max() > 1e-3
    with pytest.raises(ValueError, match="all equal"):
        qk.normalise(np.ones((4, 3)), np.ones((5, 3)))


def pca64(x: np.ndarray) -> np.ndarray:
    """The reference: the covariance's two leading eigenvectors (eigh), each axis' sign left as it comes."""
    c = x - x.mean(0)
    values, vectors = np.linalg.eigh(c.T @ c)
    return c @ vectors[:, np.argsort(values)[::-1][:2]]


def same_up_to_sign(got: np.ndarray, want: np.ndarray, atol: float) -> None:
    for axis in range(2):
        sign = np.sign(got[:, axis] @ want[:, axis])
        np.testing.assert_allclose(got[:, axis] * sign, want[:, axis], atol=atol)


def test_the_joint_map_is_the_float64_pca_of_the_normalised_queries_and_keys(embedded):
    a = vitviz.analyze(embedded, vitviz.example("coffee"), longest=224)
    d = explorer.layer_data(a, 4)
    q, k = (x.astype(np.float64) for x in qk.head_vectors(d.q, d.k, embedded.num_heads, 3))
    q2, k2 = qk.joint_map(q, k)
    n = qk.normalise(q, k)
    want = pca64(np.vstack([n.q, n.k]))
    same_up_to_sign(np.vstack([q2, k2]), want, atol=1e-8 * np.abs(want).max())
    axes = qk.pca2(np.vstack([n.q, n.k]))  # the sign rule: each axis' largest loading positive, as in the browser
    assert np.allclose(axes, np.vstack([q2, k2]))


def test_top_key_recall_counts_the_shared_keys():
    """Against sets built key by key: a map where each query sits on its top key scores 1 at top = 1."""
    rng = np.random.default_rng(2)
    w, q2, k2 = rng.random((30, 40)), rng.normal(size=(30, 2)), rng.normal(size=(40, 2))
    for top in (1, 5, 12):
        want = np.mean([
            len(set(np.argsort(-w[i])[:top]) & set(np.argsort(((k2 - q2[i]) ** 2).sum(1))[:top])) / top
            for i in range(30)
        ])  # fmt: skip
        assert qk.top_key_recall(w, q2, k2, top) == pytest.approx(want)
    assert qk.top_key_recall(w, k2[w.argmax(1)], k2, 1) == 1.0
    with pytest.raises(ValueError, match="top must be"):
        qk.top_key_recall(w, q2, k2, 0)


def r_lstsq(xy: np.ndarray, f: np.ndarray) -> float:
    design = np.column_stack([np.ones(len(xy)), xy])
    fit = design @ np.linalg.lstsq(design, f, rcond=None)[0]
    return float(np.corrcoef(fit, f)[0, 1]) if f.std() > 0 else 0.0


def test_what_a_head_sorts_by_is_the_maps_correlation_with_position_and_colour():
    """A map laid out by row and column sorts by position, one laid out by brightness by colour, one of noise by
    neither; each R equals least squares' and the sentence names the larger with its numbers."""
    rng = np.random.default_rng(3)
    gh, gw, prefix = 6, 8, 1
    rgb = rng.random((gh * gw, 3))
    p = np.arange(gh * gw)
    layouts = {
        "position": np.column_stack([p // gw, p % gw]).astype(float),
        "colour": np.column_stack([rgb.mean(1), rgb[:, 2] * 0.1]),
        "neither": rng.normal(size=(gh * gw, 2)),
        "position and colour alike": np.column_stack([p // gw, rgb.mean(1) * gh]),
    }
    for verdict, xy in layouts.items():
        tokens = np.vstack([[[9.0, 9.0]] * prefix, xy + rng.normal(scale=1e-3, size=xy.shape)])
        s = qk.sorts_by(tokens, tokens + 0.01, (gh, gw), rgb, prefix, 2, 1)
        both = np.vstack([tokens[prefix:], tokens[prefix:] + 0.01])
        features = {"row": p // gw, "column": p % gw, "brightness": rgb.mean(1), "red": rgb[:, 0],
                    "green": rgb[:, 1], "blue": rgb[:, 2]}  # fmt: skip
        for name, f in features.items():
            assert s.r[name] == pytest.approx(r_lstsq(both, np.tile(f, 2).astype(float)), abs=1e-9), name
        check_sentence(s)
        assert f"sorts by {verdict}" in s.sentence(), (verdict, s.sentence())
    with pytest.raises(ValueError, match="6 rows × 8 columns"):
        qk.sorts_by(np.zeros((10, 2)), np.zeros((10, 2)), (gh, gw), rgb, prefix, 0, 0)


def check_sentence(s: qk.SortsBy) -> None:
    """The sentence's words and numbers from the record's numbers, by the rule written again here."""
    text = s.sentence()
    pos = max(("row", "column"), key=lambda f: s.r[f])
    col = max(("brightness", "red", "green", "blue"), key=lambda f: s.r[f])
    p, c = s.r[pos], s.r[col]
    numbers = [float(x) for x in re.findall(r"R = ([0-9.]+)\)", text)]
    assert sorted(numbers) == sorted([round(p, 2), round(c, 2)]), text
    assert qk.WORDS[pos] in text and qk.WORDS[col] in text, text
    if max(p, c) < 0.3:
        assert "sorts by neither" in text
    elif p >= c + 0.1:
        assert "sorts by position:" in text
    elif c >= p + 0.1:
        assert "sorts by colour:" in text
    else:
        assert "alike" in text
    assert text.startswith(f"Head {s.head} of layer {s.layer} ")


def test_the_meta_says_for_every_head_what_it_sorts_by_from_its_numbers(embedded):
    a = vitviz.analyze(embedded, vitviz.example("chelsea"), longest=224)
    m = qk.meta(a)
    assert len(m["sorts"]) == embedded.num_layers and all(len(row) == embedded.num_heads for row in m["sorts"])
    maps = qk.layer_maps(a, 7)
    rgb = qk.patch_colours(a)
    for h, (q2, k2) in enumerate(maps):
        s = qk.sorts_by(q2, k2, a.grid, rgb, a.n_prefix, 7, h)
        assert m["sorts"][7][h]["sentence"] == s.sentence()
        check_sentence(s)
    verdicts = {re.search(r"sorts by (\w+)", cell["sentence"])[1] for row in m["sorts"] for cell in row}
    assert len(verdicts) >= 2  # the heads do not all read the same


def test_patch_colours_are_the_photos_own():
    """A photo of two flat colours, left and right: each patch's mean RGB is its half's colour."""
    image = np.zeros((56, 112, 3), np.uint8)
    image[:, :56] = (200, 30, 90)
    image[:, 56:] = (10, 250, 120)
    a = vitviz.analyze(FAMILIES["vit"](), image, longest=64)
    rgb = qk.patch_colours(a).reshape(*a.grid, 3)
    gw = a.grid[1]
    np.testing.assert_allclose(rgb[:, 0], np.broadcast_to(np.array([200, 30, 90]) / 255, rgb[:, 0].shape), atol=2e-3)
    np.testing.assert_allclose(rgb[:, gw - 1], np.broadcast_to(np.array([10, 250, 120]) / 255, rgb[:, 0].shape),
                               atol=2e-3)  # fmt: skip
