"""The Q·K view's UMAP map, made by the server (GET /vitviz/qk/umap) over the same photos as the PCA map: the
route's errors, and in a browser the map of two photos against umap-learn's, with its own sentence and recall."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import FAMILIES, random_image
from starlette.requests import Request
from support import qk_page
from support.harness import browser_or_skip
from support.qk_reference import check_map_words, page_map

import vitviz
from vitviz import explorer, qk
from vitviz.app.tabs.qk import umap_response


def test_the_umap_route_names_what_is_wrong_before_any_work():
    """A photo the server no longer keeps, too many photos, photos of two models: each a 4xx that says so."""
    one = vitviz.analyze(FAMILIES["vit"](), random_image(40, 56, seed=1), longest=56)
    other = vitviz.analyze(FAMILIES["deit"](), random_image(40, 56, seed=1), longest=56)
    server = SimpleNamespace(cache={("s", "one"): one, ("s", "other"): other}, holds_page_token=lambda s, t: True)

    def ask(query: str):
        r = umap_response(server, Request({"type": "http", "query_string": query.encode(), "headers": []}))
        return r.status_code, r.body.decode()

    assert ask("session=s&key=gone&layer=0&head=0") == (
        404,
        "a photo's analysis is no longer kept: pick the photo again",
    )
    assert ask("session=s" + "&key=one" * 6 + "&layer=0&head=0") == (400, "at most 5 photos in one map, got 6")
    assert ask("session=s&key=one&key=other&layer=0&head=0") == (400, "the photos of one map must come from one model")
    assert ask("session=s&key=one&layer=9&head=0")[0] == 400 and ask("session=s&layer=0&head=0")[0] == 400


@pytest.mark.slow
@pytest.mark.browser
def test_umap_of_the_last_photos_is_one_map_of_them_all_with_its_own_sentence_and_recall():
    """Two photos, 'your last photos' and UMAP: the server's map (the app's route) equals umap-learn's with seed 0 on
    both photos' queries and keys normalised together, and the sentence and the recall speak of it."""
    sync_api = browser_or_skip()
    umap = pytest.importorskip("umap")
    model = FAMILIES["vit"]()
    first, second = (vitviz.analyze(model, random_image(40, 56, seed=s), longest=56) for s in (11, 12))
    (m1, l1), (m2, l2) = qk_page.photo(first, "one"), qk_page.photo(second, "two")
    with sync_api.sync_playwright() as pw:
        browser, page = qk_page.open_page(pw, {**l1, **l2}, analyses={"one": first, "two": second})
        qk_page.show(page, m1)
        qk_page.show(page, m2)
        page.evaluate("() => window.vitviz.qk.photos('all')")
        page.evaluate("() => window.vitviz.qk.method('umap')")
        page.evaluate("() => window.vitviz.qk.show(1, 2)")
        got, c = page_map(page)
        assert c["method"] == "umap" and [p["key"] for p in c["photos"]] == ["two", "one"]
        parts = [explorer.layer_data(a, 1) for a in (second, first)]
        qs, ks = zip(*(qk.head_vectors(d.q, d.k, model.num_heads, 2) for d in parts), strict=True)
        n = qk.normalise(np.vstack(qs).astype(np.float64), np.vstack(ks).astype(np.float64))
        want = umap.UMAP(n_components=2, random_state=0, n_jobs=1).fit_transform(np.vstack([n.q, n.k]))
        np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max())
        check_map_words(page, [second, first], got, 1, 2, "UMAP of your last 2 photos")
        assert "UMAP" in page.locator(".qk-cap").inner_text()
        assert page.evaluate("() => window.errors") == []
        browser.close()
