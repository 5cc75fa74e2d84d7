"""What a head matches on: one head's queries and keys in one 2-D map (AttentionViz's joint embedding).

Yeh et al., "AttentionViz: A Global View of Transformer Attention", IEEE VIS 2023, section 4.1: queries and keys
share one scatter, so that a query lands near the keys it attends to. Two changes leave every attention row
unchanged and make distance follow attention: the keys are translated so that their centroid is the queries'
(q·(k + t) adds q·t to a whole row, which softmax ignores), and queries are scaled by c and keys by 1/c (q·k
unchanged) so that both have the same mean norm. The 2-D map is a PCA of the normalised [q; k]: the measurement
in docs/benchmarks.md kept it over UMAP and t-SNE (see benchmarks/qk.py).

Shapes: N tokens (prefix tokens first), P = N - prefix patches, dh one head's width.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np

from . import explorer
from .analysis import Analysis
from .sentences import fixed
from .trend import standardised

# The view's modules, after the Explorer's engine (vitvizLayer, the sources) and before a boot file
# The view's scripts: the map's projection, the scores, what a map sorts by, drawing, words, maps, painting, the
# pointer, the page, the test handle, the view
VIEW = (
    "qkproject.js",
    "qkscores.js",
    "qksorts.js",
    "qkdraw.js",
    "qktext.js",
    "qkmap.js",
    "qkpaint.js",
    "qkpointer.js",
    "qkpage.js",
    "qkhandle.js",
    "qk.js",
)

BISECTIONS = 40  # of log(c²): the bracket below is 2·ln(1e4) wide, so c is exact to ~1e-11 relative
POSITION, COLOUR = ("row", "column"), ("brightness", "red", "green", "blue")
WORDS = {
    "row": "the patch's row",
    "column": "the patch's column",
    "brightness": "its brightness",
    "red": "how red it is",
    "green": "how green it is",
    "blue": "how blue it is",
}
FEATURES = POSITION + COLOUR
# Below WEAK a map follows neither; it follows every feature within MARGIN of its best R (of both kinds: both alike);
# two features it follows that correlate over the patches at |r| >= ENTANGLED are entangled: it cannot tell them apart
WEAK, MARGIN, ENTANGLED = 0.3, 0.1, 0.8
# The sentence's parts: Python's and the browser's (which fills them for the map it shows) are these
TEMPLATES = {
    "neither": "{who} sorts by neither position nor colour: its map hardly follows {pos} or {col}.",
    "position": "{who} sorts by position: its map follows {named} more than {other}.",
    "colour": "{who} sorts by colour: its map follows {named} more than {other}.",
    "both": "{who} sorts by position and colour alike: its map follows {named}.",
    "near": "{names} ({span}, each within {margin} of the best)",
    "entangled": " Over the patches, {names} are entangled ({span}{pairs}, at least {level}): the map cannot tell "
    "them apart.",
    "pairs": " for {count} pairs",
}
UMAP_INSTALL = 'pip install "vitviz[umap]"'  # the extra that brings umap-learn (pyproject.toml)
# The view's limits, which the browser gets in the meta (`settings`):
MAX_PHOTOS = 5  # the photos one map holds, the page's last ones (the app's UMAP route takes no more)
HOVER_KEYS = 5  # the keys a hovered query lights up, or the queries a hovered key
RECALL_TOP = 10  # the top keys whose recall the view reports (`top_key_recall`)


def head_vectors(q: np.ndarray, k: np.ndarray, heads: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    """(q, k) [N,dh] of head `head`, from a layer's q, k [N,H*dh] with the heads side by side (as shipped)."""
    if not 0 <= head < heads:
        raise ValueError(f"head must be in [0, {heads}), got {head}")
    dh = q.shape[1] // heads
    return q[:, head * dh : (head + 1) * dh], k[:, head * dh : (head + 1) * dh]


@dataclass(frozen=True)
class Normalised:
    """q' = c·q [Nq,dh] and k' = (k - mean k)/c + c·mean q [Nk,dh]: mean k' = mean q', mean ||q'|| = mean ||k'||."""

    q: np.ndarray
    k: np.ndarray
    c: float


def normalise(q: np.ndarray, k: np.ndarray) -> Normalised:
    """AttentionViz's normalisation of one head's queries [Nq,dh] and keys [Nk,dh], float64. Translating after
    the scaling makes both conditions exact at once: c is the root of mean ||(k - μk)/c² + μq|| = mean ||q||,
    found by bisection of log c² (the left side falls from +inf to ||μq|| <= mean ||q||)."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    if q.ndim != 2 or k.ndim != 2 or q.shape[1] != k.shape[1] or not len(q) or not len(k):
        raise ValueError(f"queries and keys must be [N,dh] of one width, got {q.shape} and {k.shape}")
    mq, mu_q, spread = np.linalg.norm(q, axis=1).mean(), q.mean(0), k - k.mean(0)

    def excess(log_s: float) -> float:
        return np.linalg.norm(spread / np.exp(log_s) + mu_q, axis=1).mean() - mq

    guess = np.log(max(np.linalg.norm(spread, axis=1).mean(), 1e-300) / max(mq, 1e-300))
    lo, hi = guess - np.log(1e4), guess + np.log(1e4)
    if not excess(lo) > 0 > excess(hi):
        raise ValueError("the queries or keys are all equal: no scale gives them the same mean norm")
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    c = float(np.exp(0.25 * (lo + hi)))
    return Normalised(q * c, spread / c + c * mu_q, c)


def pca2(x: np.ndarray) -> np.ndarray:
    """[M,2] the points x [M,d] on their first two principal axes, float64: the covariance's two leading
    eigenvectors, as the browser finds them (a d×d eigenproblem, quicker than an SVD of x: docs/benchmarks.md); each
    axis' sign makes its largest loading positive (the browser's rule too)."""
    x = np.asarray(x, np.float64)
    centred = x - x.mean(0)
    values, vectors = np.linalg.eigh(centred.T @ centred)
    axes = vectors[:, np.argsort(values)[::-1][:2]].T
    axes = axes * np.sign(axes[np.arange(len(axes)), np.abs(axes).argmax(1)])[:, None]
    return centred @ axes.T


def joint_map(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(queries [Nq,2], keys [Nk,2]): the PCA of the normalised [q; k] of one head."""
    n = normalise(q, k)
    xy = pca2(np.vstack([n.q, n.k]))
    return xy[: len(q)], xy[len(q) :]


def script(boot: str, engine: tuple[str, ...] = explorer.ENGINE) -> str:
    """The Explorer's engine (or the part of it named), the Q·K view and the boot file `boot`, as one script: the
    app runs the view alone, a notebook and a file with the Explorer."""
    return "\n".join((explorer.STATIC / name).read_text() for name in (*engine, *VIEW, boot))


def umap_available() -> bool:
    """Whether umap-learn is installed: the UMAP map is offered only then (PCA needs nothing)."""
    return importlib.util.find_spec("umap") is not None


def umap_map(q: np.ndarray, k: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(queries [Nq,2], keys [Nk,2]): UMAP of the normalised [q; k], umap-learn with random_state=seed (one thread:
    the same input gives the same map). Seconds a head where PCA takes milliseconds, for a map that keeps more of
    each query's top keys near it (docs/benchmarks.md)."""
    if not umap_available():
        raise ModuleNotFoundError(f"the UMAP map needs umap-learn: {UMAP_INSTALL}")
    import umap

    n = normalise(q, k)
    xy = umap.UMAP(n_components=2, random_state=seed, n_jobs=1).fit_transform(np.vstack([n.q, n.k]))
    return xy[: len(q)].astype(np.float64), xy[len(q) :].astype(np.float64)


def attention(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    """[Nq,Nk] softmax(q·k * scale) over the keys, float64."""
    s = np.asarray(q, np.float64) @ np.asarray(k, np.float64).T * scale
    w = np.exp(s - s.max(1, keepdims=True))
    return w / w.sum(1, keepdims=True)


def top_key_recall(weights: np.ndarray, q2: np.ndarray, k2: np.ndarray, top: int = RECALL_TOP) -> float:
    """How well a 2-D map keeps attention order: the fraction of each query's `top` keys by weight [Nq,Nk] that
    are among its `top` nearest keys in the map (q2 [Nq,2], k2 [Nk,2]), averaged over the queries. Chance is
    top / Nk."""
    if not 0 < top <= weights.shape[1]:
        raise ValueError(f"top must be in [1, {weights.shape[1]}], got {top}")
    by_weight = np.argpartition(-weights, top - 1, axis=1)[:, :top]
    distance = ((q2[:, None, :] - k2[None, :, :]) ** 2).sum(-1)
    nearest = np.argpartition(distance, top - 1, axis=1)[:, :top]
    hits = [len(np.intersect1d(a, b)) for a, b in zip(by_weight, nearest, strict=True)]
    return float(np.mean(hits) / top)


def patch_colours(a: Analysis) -> np.ndarray:
    """[P,3] each patch's mean RGB in [0, 1], from the model's own input (its mean and std undone)."""
    std, mean = (np.array(v, np.float64)[:, None, None] for v in (a.model.std, a.model.mean))
    x = a.pixel_values[0].astype(np.float64) * std + mean
    (gh, gw), p = a.grid, a.model.patch_size
    blocks = x[:, : gh * p, : gw * p].reshape(3, gh, p, gw, p).mean((2, 4))
    return np.clip(blocks.reshape(3, -1).T, 0.0, 1.0)


def multiple_r(xy: np.ndarray, feature: np.ndarray) -> float:
    """How far a feature [M] follows the map: the correlation of the feature with its least-squares fit on the
    2-D coordinates xy [M,2] (rotation-proof, unlike a correlation with one axis). 0 for a constant feature."""
    f = feature - feature.mean()
    x = xy - xy.mean(0)
    if not f.any():
        return 0.0
    cov = x.T @ x
    fit = x @ (np.linalg.pinv(cov) @ (x.T @ f))
    return float(np.sqrt(max(f @ fit, 0.0) / (f @ f)))


def and_list(words: list[str]) -> str:
    """Words as a sentence lists them: "a", "a and b", "a, b and c"."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def span(symbol: str, values: list[float]) -> str:
    """The values' range at two decimals: "R 0.87–0.92", or "R = 0.92" where both ends read alike."""
    lo, hi = fixed(min(values)), fixed(max(values))
    return f"{symbol} = {hi}" if lo == hi else f"{symbol} {lo}–{hi}"


@dataclass(frozen=True)
class SortsBy:
    """How far one head's map follows each patch feature (multiple correlations R in [0, 1], over the patches'
    queries and keys together), and how the features correlate with each other over the patches (`between`: r
    of each pair, keyed in FEATURES order)."""

    layer: int
    head: int
    r: dict[str, float]
    between: dict[tuple[str, str], float]

    @property
    def position(self) -> tuple[str, float]:
        return max(((f, self.r[f]) for f in POSITION), key=lambda x: x[1])

    @property
    def colour(self) -> tuple[str, float]:
        return max(((f, self.r[f]) for f in COLOUR), key=lambda x: x[1])

    @property
    def named(self) -> list[str]:
        """The features within MARGIN of the best R, best first (FEATURES' order among equals)."""
        best = max(self.r.values())
        return sorted((f for f in FEATURES if self.r[f] > best - MARGIN), key=lambda f: -self.r[f])

    @property
    def verdict(self) -> str:
        """ "position", "colour", "both" or "neither": the kinds of the features named (every R under WEAK:
        neither)."""
        if max(self.r.values()) < WEAK:
            return "neither"
        kinds = {"position" if f in POSITION else "colour" for f in self.named}
        return kinds.pop() if len(kinds) == 1 else "both"

    def correlation(self, a: str, b: str) -> float:
        """r of features a and b over the patches."""
        return self.between[(a, b) if FEATURES.index(a) < FEATURES.index(b) else (b, a)]

    def entangled(self) -> list[tuple[list[str], list[float]]]:
        """The named features linked by |r| >= ENTANGLED, in groups (each feature's group is every feature a chain
        of such links reaches), with the |r| of the links in each: [(features in named order, [|r|])]."""
        named = self.named
        links = [(a, b, abs(self.correlation(a, b))) for i, a in enumerate(named) for b in named[i + 1 :]]
        links = [link for link in links if link[2] >= ENTANGLED]
        group = {f: i for i, f in enumerate(named)}
        for a, b, _ in links:
            merged, into = group[b], group[a]
            group = {f: into if g == merged else g for f, g in group.items()}
        groups = [[f for f in named if group[f] == g] for g in dict.fromkeys(group[f] for f in named)]
        return [
            (members, [r for a, _, r in links if group[a] == group[members[0]]])
            for members in groups
            if len(members) > 1
        ]

    def said(self, feature: str) -> str:
        """One feature and its R: "how red it is (R = 0.92)"."""
        return f"{WORDS[feature]} (R = {fixed(self.r[feature])})"

    def sentence(self) -> str:
        """What the head sorts by, in words, from the numbers alone: every feature within MARGIN of the best, and
        which of them are entangled."""
        (pf, _), (cf, _) = self.position, self.colour
        who, verdict, named = f"Head {self.head} of layer {self.layer}", self.verdict, self.named
        if verdict == "neither":
            return TEMPLATES["neither"].format(who=who, pos=self.said(pf), col=self.said(cf))
        words = and_list([WORDS[f] for f in named])
        near = TEMPLATES["near"].format(names=words, span=span("R", [self.r[f] for f in named]), margin=MARGIN)
        other = self.said(cf if verdict == "position" else pf)
        said = TEMPLATES[verdict].format(who=who, named=self.said(named[0]) if len(named) == 1 else near, other=other)
        for members, links in self.entangled():
            pairs = TEMPLATES["pairs"].format(count=len(links)) if len(links) > 1 else ""
            names = and_list([WORDS[f] for f in members])
            said += TEMPLATES["entangled"].format(names=names, span=span("|r|", links), pairs=pairs, level=ENTANGLED)
        return said


def feature_correlations(features: dict[str, np.ndarray]) -> dict[tuple[str, str], float]:
    """r over the patches of every pair of features [P] (keyed in FEATURES order); 0 where one is constant."""
    unit = {f: standardised(v) for f, v in features.items()}
    return {(a, b): float(unit[a] @ unit[b]) for i, a in enumerate(FEATURES) for b in FEATURES[i + 1 :]}


def patch_features(grid: tuple[int, int], rgb: np.ndarray) -> dict[str, np.ndarray]:
    """Each patch's features [P] that a map may follow: its row, column, brightness and red, green, blue."""
    gh, gw = grid
    p = np.arange(gh * gw)
    return {
        "row": p // gw,
        "column": p % gw,
        "brightness": rgb.mean(1),
        "red": rgb[:, 0],
        "green": rgb[:, 1],
        "blue": rgb[:, 2],
    }


def sorts_by(
    q2: np.ndarray, k2: np.ndarray, grid: tuple[int, int], rgb: np.ndarray, prefix: int, layer: int, head: int
) -> SortsBy:
    """The map's correlations with the patches' row, column and colour: q2, k2 [N,2] the map of every token,
    grid (rows, columns), rgb [P,3] in [0, 1]."""
    gh, gw = grid
    if rgb.shape != (gh * gw, 3) or len(q2) != prefix + gh * gw:
        raise ValueError(f"a grid of {gh} rows × {gw} columns needs {gh * gw} colours and {prefix + gh * gw} tokens")
    xy = np.vstack([q2[prefix:], k2[prefix:]])
    features = patch_features(grid, rgb)
    r = {f: multiple_r(xy, np.tile(v.astype(np.float64), 2)) for f, v in features.items()}
    return SortsBy(layer, head, r, feature_correlations(features))


def layer_maps(a: Analysis, layer: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every head's (q2, k2) [N,2] map in `layer`."""
    d = explorer.layer_data(a, layer)
    return [joint_map(*head_vectors(d.q, d.k, a.model.num_heads, h)) for h in range(a.model.num_heads)]


def rule() -> dict:
    """The sentence's rule for the browser, which says what the map it shows sorts by: features, words, thresholds
    and templates, all Python's."""
    return {
        "position": list(POSITION),
        "colour": list(COLOUR),
        "words": WORDS,
        "weak": WEAK,
        "margin": MARGIN,
        "entangled": ENTANGLED,
        "templates": TEMPLATES,
    }


def settings(umap: bool) -> dict:
    """What the Q·K view takes from Python in every host (the app, a notebook, a file, the site): the colormap,
    whether the server makes UMAP maps, the sentence's rule and the view's limits."""
    return {
        "colormap": explorer.lut("viridis"),
        "umap": umap,
        "umapInstall": UMAP_INSTALL,
        "rule": rule(),
        "maxPhotos": MAX_PHOTOS,
        "hoverKeys": HOVER_KEYS,
        "recallTop": RECALL_TOP,
    }


def extras(a: Analysis, umap: bool) -> dict:
    """What the Q·K view needs beyond the Explorer's meta: its `settings`, each patch's mean colour [P*3] in [0, 1],
    and every layer's and head's correlations and sentence on this photo's PCA map (the atlas' captions)."""
    rgb = patch_colours(a)
    sorts = [
        [sorts_by(q2, k2, a.grid, rgb, a.n_prefix, layer, h) for h, (q2, k2) in enumerate(layer_maps(a, layer))]
        for layer in range(a.model.num_layers)
    ]
    return {
        **settings(umap),
        "rgb": rgb.reshape(-1).tolist(),
        "sorts": [[{"r": s.r, "verdict": s.verdict, "sentence": s.sentence()} for s in row] for row in sorts],
    }


def meta(a: Analysis) -> dict:
    """The app's meta for the Q·K view: the Explorer's sizes and photo, and `extras` (UMAP where umap-learn is)."""
    m = explorer.meta(a)
    keep = (
        "layers",
        "heads",
        "headWidth",
        "tokens",
        "grid",
        "patch",
        "prefix",
        "scale",
        "model",
        "photo",
        "photoSize",
        "headColours",
    )
    return {**{key: m[key] for key in keep}, **extras(a, umap_available())}
