"""What one forward pass tells about one image (`Analysis`): captured once (see `capture`), then read many times.
What is derived from it and kept for speed (rollouts, thresholds, statistics) is `derived.Derived`'s."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from . import inside, maps
from .derived import Derived
from .models import VitModel
from .outputs import Output, default_output, dense_weights, patch_weights


@dataclass(eq=False)
class Analysis(Derived):
    """Everything one forward pass tells about one image.

    image: the decoded RGB uint8 [H,W,3] original. pixel_values: the exact model input
    [1,3,h,w] float32. N = n_prefix + gh*gw tokens.
    hidden_states: [L+1,N,D] float32 (embeddings, then each layer's output). Every layer's attention weights
    [H,N,N] are recomputed from them when asked (`layer_attention`) rather than kept: at 448 px they are 151 MB,
    the hidden states 20 MB. Rollouts are kept (a few kB each), not
    the fused heads they are made from (50 MB a fusion at 448 px): the app's forward makes the slider's from its
    own weights (`analyze(..., roll=True)`, `ForwardFusions`); elsewhere the first request for a fusion, or the
    background warm, makes them and lets the fused heads go. Fused heads kept by `fused` (a ratio off the
    slider) and the last layer's projections are kept until a cache needs the memory (`shed`).
    kept_attentions: [L,H,N,N] float16, only for a model whose layers vitviz cannot open (a DPT's encoder), else
    None.
    update_norms: [L,2,N] float32 norms of each layer's attention and MLP updates, kept by the forward
    (None where the forward did not, e.g. a depth model's encoder).
    tokens: [N,D] float32, the final tokens after the last LayerNorm.
    logits: [C] float32 for classifiers, else None.
    pool_attention: [H,N] float32, an attention-pool readout's probe attention over the tokens (SigLIP), else None.
    """

    model: VitModel = field(repr=False)
    image: np.ndarray = field(repr=False)
    pixel_values: np.ndarray = field(repr=False)
    kept_attentions: np.ndarray | None = field(repr=False)
    hidden_states: np.ndarray = field(repr=False)
    tokens: np.ndarray = field(repr=False)
    logits: np.ndarray | None = field(repr=False)
    update_norms: np.ndarray | None = field(default=None, repr=False)
    pool_attention: np.ndarray | None = field(default=None, repr=False)
    _fused: dict = field(default_factory=dict, repr=False)
    _warm_rows: dict = field(default_factory=dict, repr=False)  # {fusion: {layer: [N,N]}}, the warm's sweep
    _thresholds: dict = field(default_factory=dict, repr=False)
    # {(fusion, percent discarded): [gh,gw]} toward the model's own output; {(start, fusion, percent): ...} toward
    # another (see `_key`), kept
    _rollouts: dict = field(default_factory=dict, repr=False)
    _warm_thresholds: dict = field(default_factory=dict, repr=False)  # {fusion: {layer: [100]}}, the same
    _layer_stats: dict = field(default_factory=dict, repr=False)
    _fusion_locks: dict = field(default_factory=lambda: {f: threading.RLock() for f in maps.HEAD_FUSIONS}, repr=False)
    _projections: inside.LayerProjections | None = field(default=None, repr=False)
    _updates: dict = field(default_factory=dict, repr=False)
    _dense: list = field(default_factory=list, repr=False)  # [] until made, then [the map or None]
    # arrays that drawings make once per analysis (the image at display size): counted in nbytes, freed with it
    drawn: dict = field(default_factory=dict, repr=False)

    @property
    def grid(self) -> tuple[int, int]:
        """(gh, gw) = input pixels / patch size: never sqrt(N)."""
        p = self.model.patch_size
        return self.pixel_values.shape[2] // p, self.pixel_values.shape[3] // p

    @property
    def n_prefix(self) -> int:
        return self.model.n_prefix

    @property
    def num_tokens(self) -> int:
        return self.hidden_states.shape[1]

    @property
    def num_layers(self) -> int:
        return len(self.hidden_states) - 1

    @property
    def nbytes(self) -> int:
        """Memory held by this analysis, lazily filled caches included."""
        arrays = (self.image, self.pixel_values, self.hidden_states, self.tokens)
        kept = (self.kept_attentions, self.update_norms, self.pool_attention)
        drawn = sum(a.nbytes for a in list(self.drawn.values()))
        rolled = sum(r.nbytes for r in list(self._rollouts.values()))
        held = sum(a.nbytes for a in arrays) + sum(a.nbytes for a in kept if a is not None)
        return held + drawn + rolled + self.shed_bytes

    def query_index(self, query: str | int) -> int:
        """A query as one token index: 'readout' where the readout is one token, 'cls' where the model has a
        CLS token, or a patch index (row-major over the grid)."""
        readout = self.model.readout
        if query == "readout" and len(readout.tokens) == 1:
            return readout.tokens[0]
        if query == "readout":
            raise ValueError(f"{self.model.name} reads out from {readout.name}, which is not one token: pick a patch")
        if query == "cls" and self.model.has_cls:
            return 0
        if query == "cls":
            raise ValueError(f"{self.model.name} has no CLS token: use 'readout' ({readout.name}) or a patch index")
        patches = self.grid[0] * self.grid[1]
        if not isinstance(query, (int, np.integer)) or not 0 <= query < patches:
            raise ValueError(f"query must be 'readout', 'cls' or a patch index in [0, {patches}), got {query!r}")
        return self.n_prefix + int(query)

    def query_rows(self, layer: int, query: str | int) -> np.ndarray:
        """[H,N] float32 the attention of `query` over all tokens in `layer`, per head. The 'readout' of several
        tokens is their rows' mean; an attention-pool's is the probe's attention, the same for every layer:
        the probe attends once, after the last layer."""
        self._check_layer_head(layer, None)
        readout = self.model.readout
        if query == "readout" and readout.pool:
            return self.pool_attention.astype(np.float32)
        tokens = list(readout.tokens) if query == "readout" and len(readout.tokens) > 1 else [self.query_index(query)]
        if self.kept_attentions is not None:
            rows = self.kept_attentions[layer][:, tokens]
        else:
            p = self.projections(layer)
            rows = np.stack([p.weights(t) for t in tokens], axis=1)  # float32, as the Explorer's in the browser
        return rows.astype(np.float32).mean(1)

    def layer_attention(self, layer: int) -> np.ndarray:
        """[H,N,N] float16 every token's attention in every head of `layer`, recomputed from the tokens that enter
        it (or kept, see the class)."""
        self._check_layer_head(layer, None)
        if self.kept_attentions is not None:
            return self.kept_attentions[layer]
        return inside.attention_weights(self.model, self.hidden_states[layer], layer)

    @property
    def attentions(self) -> np.ndarray:
        """[L,H,N,N] float16 every layer's `layer_attention`, made anew at each call (151 MB at 448 px):
        for an export or a check, not for a view."""
        if self.kept_attentions is not None:
            return self.kept_attentions
        n = self.num_tokens
        out = np.empty((self.num_layers, self.model.num_heads, n, n), np.float16)
        for layer in range(self.num_layers):
            out[layer] = self.layer_attention(layer)
        return out

    def _check_layer_head(self, layer: int, head: int | None) -> None:
        num_layers, num_heads = self.num_layers, self.model.num_heads
        if not 0 <= layer < num_layers:
            raise ValueError(f"layer must be in [0, {num_layers}), got {layer}")
        if head is not None and not 0 <= head < num_heads:
            raise ValueError(f"head must be None or in [0, {num_heads}), got {head}")

    def attention_map(self, layer: int, head: int | None = None, query: str | int = "readout") -> np.ndarray:
        """[gh,gw] attention of `query` over the patches in `layer` (head=None: mean of heads)."""
        self._check_layer_head(layer, head)
        return maps.attention_map(self.query_rows(layer, query), self.grid, self.n_prefix, head)

    def head_maps(self, layer: int, query: str | int = "readout") -> np.ndarray:
        """[H,gh,gw] the attention of `query` in every head of `layer`."""
        return self.query_rows(layer, query)[:, self.n_prefix :].reshape(-1, *self.grid)

    def projections(self, layer: int) -> inside.LayerProjections:
        """Queries, keys and values of `layer`, recomputed from its cached input tokens. Only the last
        layer asked for is kept: keeping every layer's would multiply the memory of an analysis."""
        self._check_layer_head(layer, None)
        p = self._projections
        if p is None or p.layer != layer:
            p = self._projections = inside.project(self.model, self.hidden_states[layer], layer)
        return p

    def inside_head(self, layer: int, head: int, query: str | int = "readout") -> inside.HeadInside:
        """Head `head` of `layer` for `query` (see `query_index`), step by step: q, k, v,
        scores, weights, contributions, output (see `inside.HeadInside`)."""
        self._check_layer_head(layer, head)
        if head is None:
            raise ValueError("head must be a head index: inside a head looks at one head")
        return inside.inside_head(self.projections(layer), int(head), self.query_index(query))

    def layer_updates(self, layer: int) -> inside.LayerUpdates:
        """Per-token norms [N] of the residual stream entering `layer`, its attention update and its MLP
        update (after LayerScale where the family has it)."""
        self._check_layer_head(layer, None)
        if self.update_norms is not None:
            residual = np.linalg.norm(self.hidden_states[layer], axis=-1)
            return inside.LayerUpdates(residual, *self.update_norms[layer])
        if layer not in self._updates:
            self._updates[layer] = inside.layer_updates(self.model, self.hidden_states[layer], layer)
        return self._updates[layer]

    def contribution_map(self, layer: int, head: int | None = None, query: str | int = "readout") -> np.ndarray:
        """[gh,gw] weight × value norm ||α_j W_O,h v_j|| of `query` over the patches (head=None: mean of
        heads): attention is not only a weight (Kobayashi et al. 2020)."""
        self._check_layer_head(layer, head)
        if query == "readout" and self.model.readout.pool:
            raise ValueError(f"{self.model.name}'s probe has values of its own: weight × value reads a token query")
        values = self.query_rows(layer, query) * self.projections(layer).value_norms
        rows = values if head is None else values[head : head + 1]
        return rows[:, self.n_prefix :].mean(axis=0).reshape(self.grid)

    @property
    def output(self) -> Output:
        """The output this model has (`outputs.default_output`): what its rollout follows unless told otherwise."""
        return default_output(self.model)

    def rollout_start(self, head_fusion: str = "mean", toward=None) -> tuple[np.ndarray, tuple[int, ...]]:
        """([N] the weights over the last layer's tokens where a rollout toward `toward` (an `Output`, or what
        `_start_of` makes of one) starts, summing to 1; the token columns that a discard never drops). Toward the
        readout: `readout_start`, its tokens kept. Toward a dense output: its patches, each weighted by the mean of
        its pixels' weights in the output (`outputs.dense_weights`: the photo's own map, a box, or the image)."""
        start = toward if isinstance(toward, str) else self._start_of(toward)
        if start == "readout":
            return self.readout_start(head_fusion), self.model.readout.tokens
        weights = dense_weights(start, self.dense_map(), self.image.shape[:2])
        row = np.zeros(self.num_tokens, np.float32)
        row[self.n_prefix :] = patch_weights(weights, self.grid).ravel()
        return row / row.sum(), ()

    def readout_start(self, head_fusion: str = "mean") -> np.ndarray:
        """[N] the readout's weights over the last layer's tokens, where rollout starts: the readout tokens
        share 1; an attention-pool gives its probe's attention, its heads fused as the layers' are, summing to 1."""
        n = self.num_tokens
        if self.pool_attention is None:
            return self.model.readout.start(n)
        return self.model.readout.start(n, maps.fuse_heads(self.pool_attention[None, :, None], head_fusion)[0, 0])

    def token_norms(self) -> np.ndarray:
        """[gh,gw] norms of the last layer's output tokens (before the final LayerNorm)."""
        return maps.token_norms(self.hidden_states[-1], self.grid, self.n_prefix)

    def pca_rgb(self) -> np.ndarray:
        """[gh,gw,3] first three principal components of the final patch tokens, in [0,1]."""
        return maps.pca_rgb(self.tokens, self.grid, self.n_prefix)

    def top_classes(self, k: int = 5) -> list[tuple[str, float]]:
        """[(label, probability)] for classifiers, best first; [] for other models."""
        if self.logits is None or self.model.labels is None:
            return []
        probs = torch.softmax(torch.from_numpy(self.logits), 0).numpy()
        best = np.argsort(-probs)[:k]
        return [(self.model.labels[i], float(probs[i])) for i in best]
