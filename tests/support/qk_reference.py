"""The Q·K view's references for the tests: float64 attention, PCA maps, top keys, and what a map sorts by, by
least squares and Python's words; the checks of a page's sentence and recall against them. Not shipped."""

from __future__ import annotations

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


POSITION = ("row", "column")


def listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def ranged(symbol: str, values: list[float]) -> str:
    lo, hi = f"{min(values):.2f}", f"{max(values):.2f}"
    return f"{symbol} = {lo}" if lo == hi else f"{symbol} {lo}–{hi}"


def linked_groups(named: list[str], r: dict[tuple[str, str], float]) -> list[list[str]]:
    """The groups of `named` that links (r[a, b] >= 0.8) chain together, by a search from each feature in turn."""
    seen, groups = set(), []
    for start in named:
        if start in seen:
            continue
        group, todo = [], [start]
        while todo:
            f = todo.pop()
            if f not in seen:
                seen.add(f)
                group.append(f)
                todo += [g for g in named if g not in seen and r[f, g] >= 0.8]
        groups.append(sorted(group, key=named.index))
    return [g for g in groups if len(g) > 1]


def check_sentence(s: qk.SortsBy, features: dict[str, np.ndarray]) -> None:
    """The sentence's words and numbers from the record's R and the features [M] themselves, by the rule written
    again here: every feature within 0.1 of the best R, best first, with their range of R; the best of the other
    kind after "more than"; and each group of them that |r| >= 0.8 over the patches (np.corrcoef) chains together,
    said to be entangled, with the |r| of its links."""
    text, r = s.sentence(), s.r
    assert text.startswith(f"Head {s.head} of layer {s.layer} "), text
    pos, col = max(POSITION, key=lambda f: r[f]), max(("brightness", "red", "green", "blue"), key=lambda f: r[f])
    best = max(r.values())
    if best < 0.3:
        hardly = f"{qk.WORDS[pos]} (R = {r[pos]:.2f}) or {qk.WORDS[col]} (R = {r[col]:.2f})"
        assert text.endswith(f"sorts by neither position nor colour: its map hardly follows {hardly}."), text
        return
    named = sorted((f for f in r if r[f] > best - 0.1), key=lambda f: -r[f])
    words = [qk.WORDS[f] for f in named]
    near = f"{words[0]} (R = {r[named[0]]:.2f})"
    if len(named) > 1:
        near = f"{listed(words)} ({ranged('R', [r[f] for f in named])}, each within 0.1 of the best)"
    kinds = {f in POSITION for f in named}
    if kinds == {True, False}:
        assert f"sorts by position and colour alike: its map follows {near}." in text, text
    else:
        other = col if kinds == {True} else pos
        verdict = "position" if kinds == {True} else "colour"
        assert f"sorts by {verdict}: its map follows {near} more than {qk.WORDS[other]} (R = {r[other]:.2f})." in text
    corr = np.atleast_2d(np.nan_to_num(np.corrcoef(np.stack([features[f] for f in named]).astype(float))))
    absolute = {(a, b): abs(corr[i, j]) for i, a in enumerate(named) for j, b in enumerate(named)}
    groups = linked_groups(named, absolute)
    assert text.count(" are entangled (") == len(groups), text
    for group in groups:
        links = [absolute[a, b] for i, a in enumerate(group) for b in group[i + 1 :] if absolute[a, b] >= 0.8]
        pairs = f" for {len(links)} pairs" if len(links) > 1 else ""
        said = f"{listed([qk.WORDS[f] for f in group])} are entangled ({ranged('|r|', links)}{pairs}, at least 0.8)"
        assert said in text, (said, text)


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
    """The qk.HOVER_KEYS keys a query gives the most weight (its row), or the queries that give a key the most
    weight (the key's column: each query's weight, softmax over that query's own row), in float64."""
    w = weights64(a, layer, head)
    return [int(j) for j in np.argsort(-(w[token] if of_query else w[:, token]), kind="stable")[: qk.HOVER_KEYS]]


def map_sorts(
    analyses: list[vitviz.Analysis], xy: np.ndarray, layer: int, head: int
) -> tuple[qk.SortsBy, dict[str, np.ndarray]]:
    """What a map [2·ΣN, 2] of several photos sorts by: R of each patch feature over every patch point of every
    photo, by least squares (r_lstsq), in Python's words; and those features [M], every photo's patches twice."""
    total, points, features, o = sum(a.num_tokens for a in analyses), [], {}, 0
    for a in analyses:
        n, p = a.num_tokens, a.n_prefix
        points += [xy[o + p : o + n], xy[total + o + p : total + o + n]]
        for name, v in qk.patch_features(a.grid, qk.patch_colours(a)).items():
            features.setdefault(name, []).extend([v, v])
        o += n
    both = np.vstack(points)
    joined = {f: np.concatenate(v).astype(float) for f, v in features.items()}
    r = {f: r_lstsq(both, v) for f, v in joined.items()}
    return qk.SortsBy(layer, head, r, qk.feature_correlations(joined)), joined


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
    want, features = map_sorts(analyses, xy, layer, head)
    for name, r in want.r.items():
        assert said["r"][name] == pytest.approx(r, abs=1e-9), name
    check_sentence(want, features)
    assert said["sentence"] == want.sentence() and said["text"].startswith(want.sentence())
    assert f"This map: {which}." in said["text"], said["text"]
    recall = page.evaluate("() => window.vitviz.qk.recall()")
    assert recall == pytest.approx(
        map_recall(analyses, xy, layer, head), abs=2.01 / (10 * sum(a.num_tokens for a in analyses))
    )
