"""The Q·K view's references for the tests: float64 attention, PCA maps, top keys, and what a map sorts by, by
least squares and Python's words; the checks of a page's sentence and recall against them. Not shipped."""

from __future__ import annotations

import re

import numpy as np
import pytest

import vitviz
from vitviz import explorer, qk


def rows64(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    s = q @ k.T * scale
    w = np.exp(s - s.max(1, keepdims=True))
    return w / w.sum(1, keepdims=True)


def r_lstsq(xy: np.ndarray, f: np.ndarray) -> float:
    design = np.column_stack([np.ones(len(xy)), xy])
    fit = design @ np.linalg.lstsq(design, f, rcond=None)[0]
    return float(np.corrcoef(fit, f)[0, 1]) if f.std() > 0 else 0.0


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


def reference_map(analyses: list[vitviz.Analysis], layer: int, head: int) -> np.ndarray:
    """[2·ΣN, 2]: every photo's queries, then every photo's keys, normalised together and on one float64 PCA."""
    parts = [explorer.layer_data(a, layer) for a in analyses]
    heads = analyses[0].model.num_heads
    qs, ks = zip(
        *(qk.head_vectors(d.q.astype(np.float64), d.k.astype(np.float64), heads, head) for d in parts), strict=True
    )
    q2, k2 = qk.joint_map(np.vstack(qs), np.vstack(ks))
    return np.vstack([q2, k2])


def page_map(page) -> tuple[np.ndarray, dict]:
    c = page.evaluate("() => window.vitviz.qk.coords()")
    return np.array(c["xy"]).reshape(-1, 2), c


def weights64(a: vitviz.Analysis, layer: int, head: int) -> np.ndarray:
    """[N,N] softmax(q·k·scale) of one head in float64, from the layer's queries and keys."""
    d = explorer.layer_data(a, layer)
    q, k = (x.astype(np.float64) for x in qk.head_vectors(d.q, d.k, a.model.num_heads, head))
    return rows64(q, k, vitviz.inside.head_geometry(a.model)[1])


def top_keys(a: vitviz.Analysis, layer: int, head: int, token: int, of_query: bool = True) -> list[int]:
    """The TOP keys a query gives the most weight (its row), or the queries that give a key the most weight (the
    key's column: each query's weight, softmax over that query's own row), in float64."""
    w = weights64(a, layer, head)
    return [int(j) for j in np.argsort(-(w[token] if of_query else w[:, token]), kind="stable")[:5]]


def map_sorts(analyses: list[vitviz.Analysis], xy: np.ndarray, layer: int, head: int) -> qk.SortsBy:
    """What a map [2·ΣN, 2] of several photos sorts by: R of each patch feature over every patch point of every
    photo, by least squares (r_lstsq), in Python's words."""
    total, points, features, o = sum(a.num_tokens for a in analyses), [], {}, 0
    for a in analyses:
        n, p = a.num_tokens, a.n_prefix
        points += [xy[o + p : o + n], xy[total + o + p : total + o + n]]
        for name, v in qk.patch_features(a.grid, qk.patch_colours(a)).items():
            features.setdefault(name, []).extend([v, v])
        o += n
    both = np.vstack(points)
    return qk.SortsBy(layer, head, {f: r_lstsq(both, np.concatenate(v).astype(float)) for f, v in features.items()})


def map_recall(analyses: list[vitviz.Analysis], xy: np.ndarray, layer: int, head: int) -> float:
    """Each query's top 10 keys of its own photo among its 10 nearest keys of that photo, over every photo."""
    total, hits, o = sum(a.num_tokens for a in analyses), 0.0, 0
    for a in analyses:
        n = a.num_tokens
        hits += n * qk.top_key_recall(weights64(a, layer, head), xy[o : o + n], xy[total + o : total + o + n], 10)
        o += n
    return hits / total


def check_map_words(page, analyses: list[vitviz.Analysis], xy: np.ndarray, layer: int, head: int, which: str) -> None:
    """The sentence under the map speaks of the map shown (its Rs from its own coordinates, Python's words) and says
    which map it is; the recall figure is that map's too."""
    said = page.wait_for_function("() => window.vitviz.qk.recall() !== null && window.vitviz.qk.sorts()").json_value()
    want = map_sorts(analyses, xy, layer, head)
    for name, r in want.r.items():
        assert said["r"][name] == pytest.approx(r, abs=1e-9), name
    check_sentence(want)
    assert said["sentence"] == want.sentence() and said["text"].startswith(want.sentence())
    assert f"This map: {which}." in said["text"], said["text"]
    recall = page.evaluate("() => window.vitviz.qk.recall()")
    assert recall == pytest.approx(
        map_recall(analyses, xy, layer, head), abs=2.01 / (10 * sum(a.num_tokens for a in analyses))
    )
