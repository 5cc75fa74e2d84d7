"""The Q·K view: which 2-D map keeps attention order, and how fast the browser's view answers.
`python -m benchmarks.qk [--part maps|browser|both]` from the repository.

maps: on the embedded model and the bundled photos, the fraction of each query's 10 most-attended keys that are
among its 10 nearest keys in the map (`vitviz.qk.top_key_recall`), for the browser's PCA, UMAP (umap-learn,
random_state=0) and t-SNE (scikit-learn, random_state=0) of the normalised [q; k], and PCA without the
normalisation; with each method's time per map.
browser: 5 photos of 448 × 448 px (5 × 1025 tokens, 10,250 points) in one map in Debian's Chromium: a hover's time
from the real pointer event's timeStamp to the frame after it and the handlers' work, and a head or layer switch
(normalisation, PCA and drawing of 10,250 points).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import cv2
import numpy as np

import vitviz
from tests.support import qk_page
from vitviz import explorer, qk

SAMPLE_PHOTOS, SAMPLE_LAYERS, TOP = ("chelsea", "coffee"), (0, 5, 11), 10


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def maps_part(model: vitviz.VitModel, longest: int, photos: tuple[str, ...], tsne: bool) -> None:
    import umap  # umap-learn: a benchmark dependency (requirements-test.txt), not the app's
    from sklearn.manifold import TSNE

    methods = {
        "PCA, normalised (the browser's)": lambda x: qk.pca2(x),
        "UMAP, normalised": lambda x: umap.UMAP(n_components=2, random_state=0, n_jobs=1).fit_transform(x),
        "t-SNE, normalised": lambda x: TSNE(2, random_state=0, init="pca").fit_transform(x),
    }
    if not tsne:
        del methods["t-SNE, normalised"]
    scores, times, chance = {name: [] for name in [*methods, "PCA, raw q and k"]}, {name: [] for name in methods}, []
    print(f"maps: photos {photos} at {longest} px, layers {SAMPLE_LAYERS}, every head; top {TOP}; {load()}")
    for name in photos:
        a = vitviz.analyze(model, vitviz.example(name), longest=longest)
        for layer in SAMPLE_LAYERS:
            d = explorer.layer_data(a, layer)
            for head in range(model.num_heads):
                q, k = (x.astype(np.float64) for x in qk.head_vectors(d.q, d.k, model.num_heads, head))
                w, n, nq = qk.attention(q, k, qk_scale(model)), qk.normalise(q, k), len(q)
                x = np.vstack([n.q, n.k])
                for method, project in methods.items():
                    t0 = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        xy = project(x)
                    times[method].append(time.perf_counter() - t0)
                    scores[method].append(qk.top_key_recall(w, xy[:nq], xy[nq:], TOP))
                raw = qk.pca2(np.vstack([q, k]))
                scores["PCA, raw q and k"].append(qk.top_key_recall(w, raw[:nq], raw[nq:], TOP))
                chance.append(TOP / len(k))
        print(f"  {name}: {a.num_tokens} tokens, {load()}")
    print(f"| map | top-{TOP} keys among the {TOP} nearest, mean (min–max) | time per map, median |")
    print("|---|---|---|")
    for method, values in scores.items():
        v = np.array(values)
        spent = f"{np.median(times[method]) * 1000:.0f} ms" if method in times else "as PCA"
        print(f"| {method} | {v.mean():.3f} ({v.min():.3f}–{v.max():.3f}) | {spent} |")
    print(f"| chance ({TOP} keys at random) | {np.mean(chance):.3f} | |")
    print(f"{len(chance)} maps; {load()}")


def qk_scale(model: vitviz.VitModel) -> float:
    return vitviz.inside.head_geometry(model)[1]


def square_photos(count: int) -> list[np.ndarray]:
    """The bundled photos squeezed to 448 × 448 (a grid of 32 × 32), and mirrored ones after them."""
    base = [
        cv2.resize(vitviz.load_image(vitviz.example(n)), (448, 448), interpolation=cv2.INTER_AREA)
        for n in vitviz.EXAMPLES
    ]
    return (base + [img[:, ::-1].copy() for img in base])[:count]


def browser_part(model: vitviz.VitModel, photos: int, hovers: int) -> None:
    from playwright.sync_api import sync_playwright

    metas, layers = [], {}
    for i, image in enumerate(square_photos(photos)):
        meta, data = qk_page.photo(vitviz.analyze(model, image, longest=448), f"photo{i}")
        metas.append(meta)
        layers |= data
    with sync_playwright() as pw:
        browser, page = qk_page.open_page(pw, layers, size=(1400, 1000))
        for meta in metas:
            qk_page.show(page, meta)
        page.evaluate("() => window.vitviz.qk.photos('all')")
        switches = []
        for layer in range(model.num_layers):  # a new layer and head each time: nothing kept from before
            r = page.evaluate("([l, h]) => window.vitviz.qk.show(l, h)", [layer, (layer + 1) % model.num_heads])
            assert not r["cached"]
            switches.append(r["ms"])
        points = page.evaluate("() => window.vitviz.qk.state().points")
        page.evaluate("() => window.vitviz.qk.photos('one')")
        alone = [
            page.evaluate("([l, h]) => window.vitviz.qk.show(l, h)", [layer, (layer + 2) % model.num_heads])
            for layer in range(model.num_layers)
        ]
        alone = [r["ms"] for r in alone if not r["cached"]]  # the atlas may have made some of them already
        page.evaluate("() => window.vitviz.qk.photos('all')")
        page.wait_for_timeout(1000)  # the atlas drawn
        rng = np.random.default_rng(0)
        chosen = rng.choice(points, hovers, replace=False)
        n = metas[0]["tokens"]
        places = page.evaluate(
            """([chosen, n, photos]) => chosen.map((i) => {
                 const q = i < n * photos, j = q ? i : i - n * photos;
                 return window.vitviz.qk.pointAt(Math.floor(j / n), q ? 'query' : 'key', j % n); })""",
            [chosen.tolist(), n, photos],
        )
        page.evaluate("() => { const s = window.vitviz.qk.state(); return s.latencies.length; }")
        before = len(page.evaluate("() => window.vitviz.qk.state().latencies"))
        for p in places:
            page.mouse.move(p["x"], p["y"])
            page.wait_for_timeout(20)  # a hand moves at 50 events a second or fewer
        state = page.evaluate("() => window.vitviz.qk.state()")
        browser.close()
    lat, work = np.array(state["latencies"][before:]), np.array(state["handlerMs"][before:])
    print(f"browser: {photos} photos of 448 × 448 px, {points} points in one map (Chromium, 1400x1000); {load()}")
    print(
        f"  hover, real pointer event's timeStamp -> the frame after it: p50 {np.median(lat):.1f} ms, "
        f"p95 {np.percentile(lat, 95):.1f} ms, max {lat.max():.1f} ms ({len(lat)} hovers)"
    )
    print(
        f"  hover, the handlers' work (nearest point, its top keys, the overlay and the photos drawn): "
        f"p50 {np.median(work):.2f} ms, p95 {np.percentile(work, 95):.2f} ms, max {work.max():.2f} ms"
    )
    recall = np.array(state["recallMs"])
    print(
        f"  after a switch, the map's top-10 recall and each query's log-sum-exp (for a key's hover) over the "
        f"{photos} photos ({n} tokens each, in tasks of 32 queries), in all: "
        f"p50 {np.median(recall):.0f} ms, max {recall.max():.0f} ms"
    )
    s = np.array(switches)
    print(
        f"  head or layer switch (normalisation, PCA, {points} points drawn): p50 {np.median(s):.0f} ms, "
        f"p95 {np.percentile(s, 95):.0f} ms, max {s.max():.0f} ms ({len(s)} switches); {load()}"
    )
    s = np.array(alone)
    print(
        f"  the same switch on one photo ({2 * n} points): p50 {np.median(s):.0f} ms, "
        f"p95 {np.percentile(s, 95):.0f} ms, max {s.max():.0f} ms ({len(s)} not made before)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["maps", "browser", "both"], default="both")
    parser.add_argument("--longest", type=int, default=224, help="the maps part's input size (UMAP and t-SNE cost)")
    parser.add_argument("--sample", nargs="+", default=list(SAMPLE_PHOTOS), choices=vitviz.EXAMPLES, help="photos")
    parser.add_argument("--no-tsne", action="store_true", help="leave t-SNE out of the maps part (seconds a map)")
    parser.add_argument("--photos", type=int, default=5)
    parser.add_argument("--hovers", type=int, default=300)
    args = parser.parse_args()
    model = vitviz.load_model(device="cpu")
    if args.part in ("maps", "both"):
        maps_part(model, args.longest, tuple(args.sample), not args.no_tsne)
    if args.part in ("browser", "both"):
        browser_part(model, args.photos, args.hovers)


if __name__ == "__main__":
    main()
