"""What one forward pass tells about one image (`Analysis`): captured once (see `capture`), then read many times, with
what is recomputed from it and kept."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch

from . import inside, maps
from .models import VitModel
from .outputs import Output, default_output, dense_weights, patch_weights


@dataclass(eq=False)
class Analysis:
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

    @property
    def shed_bytes(self) -> int:
        """Memory that `shed` would free."""
        return self._sheddable(keep_mean=False)

    def _sheddable(self, keep_mean: bool) -> int:
        kept = ("mean",) if keep_mean else ()
        tensors = [t for f, t in list(self._fused.items()) if f not in kept]  # a request may add one meanwhile
        tensors += [t for f, rows in list(self._warm_rows.items()) if f not in kept for t in list(rows.values())]
        projections = self._projections  # read once: another thread may shed it
        tensors_bytes = sum(t.numel() * t.element_size() for t in tensors)
        return tensors_bytes + (projections.nbytes if projections is not None else 0)

    def shed(self, keep_mean: bool = False) -> int:
        """Drop what is recomputed from the hidden states when next asked (the fused heads: 50 MB a fusion at 448
        px, and a layer's projections), but the mean fusion, the rollout's default, with `keep_mean`; the
        thresholds and statistics made from them stay. Returns the bytes freed."""
        freed = self._sheddable(keep_mean)
        for held in (self._fused, self._warm_rows):
            for fusion in [f for f in list(held) if not (keep_mean and f == "mean")]:  # list(): a request may add one
                held.pop(fusion, None)
        self._projections = None
        return freed

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

    def fused(self, head_fusion: str = "mean") -> torch.Tensor:
        """[L,N,N] head-fused attention (see `maps.fuse_heads`), computed once per fusion and kept until `shed`:
        from the layers that the warm's sweep fused already, and the others recomputed. One lock per fusion: a
        request for one never waits while the background fills another."""
        fused = self._fused.get(head_fusion)
        if fused is not None:
            return fused
        with self._fusion_locks.get(head_fusion, nullcontext()):  # fuse_heads refuses other names
            if head_fusion not in self._fused:
                self._fused[head_fusion] = self._fused_layers(head_fusion)
                self._warm_rows.pop(head_fusion, None)
            return self._fused[head_fusion]

    def _fused_layers(self, head_fusion: str, recompute: bool = True) -> torch.Tensor | None:
        """[L,N,N] the fused heads, made now where they are not kept (and not kept by this); None where a layer
        would be recomputed and `recompute` is False."""
        fused = self._fused.get(head_fusion)
        if fused is not None:
            return fused
        swept = dict(self._warm_rows.get(head_fusion, {}))  # a snapshot: a shed may take them meanwhile
        layers = [swept.get(i) for i in range(self.num_layers)]
        if not recompute and any(t is None for t in layers):
            return None
        for i in (i for i, t in enumerate(layers) if t is None):
            layers[i] = maps.fuse_heads(self._on_device(self.layer_attention(i))[None], head_fusion)[0]
        return torch.stack(layers)

    def _on_device(self, weights: np.ndarray) -> torch.Tensor:
        """A layer's weights as a tensor on the model's device, where its fusions, thresholds and rollouts are
        made: on a GPU, many times faster than on the CPU beside it."""
        return torch.from_numpy(weights).to(self.model.device)

    @property
    def output(self) -> Output:
        """The output this model has (`outputs.default_output`): what its rollout follows unless told otherwise."""
        return default_output(self.model)

    def _start_of(self, toward: Output | None) -> str | Output:
        """Where a rollout toward `toward` starts: "readout" (the readout's row) for an output that reads the
        readout, else the output itself (a dense output's patches)."""
        toward = self.output if toward is None else toward
        return "readout" if toward.reads_readout else toward

    def _key(self, head_fusion: str, percent: int, start: str | Output) -> tuple:
        own = start == self._start_of(None)
        return (head_fusion, percent) if own else (start, head_fusion, percent)

    def rollout(
        self, head_fusion: str = "mean", discard_ratio: float = 0.0, toward: Output | None = None
    ) -> np.ndarray:
        """[gh,gw] attention rollout toward `toward` (default: the model's own output, `output`): the row of
        Â_L ... Â_1 that starts from the tokens the output reads, weighted as it reads them (`rollout_start`), over
        the patches. Toward an output that reads the readout (a class, a text, the readout vector), the readout's
        row; toward the dense head's, its patches' rows weighted by its map (or its box).

        A whole percent discarded is kept. The first request for one of `ROLLOUT_PERCENTS` (the rollout tab's
        slider) makes all of them at once from the same fused heads, which are then let go: a rollout is 4 kB at
        448 px, the fused heads that make it 50 MB and a recomputation of every layer. Any other ratio (the API, a
        notebook's sweep) is made from fused heads that are kept (`fused`) until a cache sheds them."""
        start = self._start_of(toward)
        percent = round(discard_ratio * 100) if 0 <= discard_ratio < 1 else None  # NaN and others: refused below
        whole = percent is not None and percent < 100 and abs(percent - discard_ratio * 100) < 1e-9
        if whole and (percent > 0 or discard_ratio == 0):  # not 1e-12, which discards each layer's least
            key = self._key(head_fusion, percent, start)
            if key not in self._rollouts:
                with self._fusion_locks.get(head_fusion, nullcontext()):
                    if key not in self._rollouts:
                        self._roll(head_fusion, [percent], start=start)
            return self._rollouts[key].copy()
        first, keep = self.rollout_start(head_fusion, start)
        rolled = maps.rollout(self.fused(head_fusion), discard_ratio, None, first, keep)
        return rolled[self.n_prefix :].reshape(self.grid)

    ROLLOUT_PERCENTS = tuple(range(0, 100, 5))  # the rollout tab's discard slider: 0 %, 5 %, ..., 95 %

    def _roll(self, head_fusion: str, percents: list[int], background: bool = False, start=None) -> None:
        """Keep the rollouts from `start` (see `_start_of`; default: the model's own output's) that discard
        `percents` and every one of `ROLLOUT_PERCENTS` not kept yet, made from one stack of fused heads: the kept
        one for a percent off the slider (a sweep reuses it), else one made and let go. A request holds the
        fusion's lock meanwhile. The background takes it only to store, and only rolls layers that its sweep
        fused: where a request or a cache took them meanwhile, it leaves the rest to the next request. The same
        rollouts made twice at once are the same."""
        start = self._start_of(None) if start is None else start
        todo = dict.fromkeys([*percents, *self.ROLLOUT_PERCENTS])
        todo = [p for p in todo if self._key(head_fusion, p, start) not in self._rollouts]
        if not todo:
            return
        if background or set(percents) <= set(self.ROLLOUT_PERCENTS):
            fused = self._fused_layers(head_fusion, recompute=not background)
            if fused is None:
                return
        else:
            fused = self.fused(head_fusion)
        thresholds = self.percent_thresholds(head_fusion, fused)
        thresholds = thresholds.index_select(1, maps.indices(tuple(todo), thresholds.device))
        first, keep = self.rollout_start(head_fusion, start)
        rows = maps.rollouts(fused, [p / 100 for p in todo], thresholds, first, keep)
        self.keep_rollouts(head_fusion, todo, rows, start)

    def keep_rollouts(
        self, head_fusion: str, percents: list[int], rows: np.ndarray, start=None, thresholds=None
    ) -> None:
        """Keep the rollouts [R,N] from `start` (default: the model's own output's) that discard `percents`, as
        maps over the patches: copies, not views of a batch's rows; and the fusion's [L,100] discard `thresholds`
        where given (a batch's forward made both)."""
        start = self._start_of(None) if start is None else start
        if thresholds is not None:
            self._thresholds[head_fusion] = thresholds.clone()
        patches = rows[:, self.n_prefix :].reshape(len(rows), *self.grid)
        made = {self._key(head_fusion, p, start): m.copy() for p, m in zip(percents, patches, strict=True)}
        self._rollouts.update(made)
        if self._rolled(head_fusion):
            self._warm_rows.pop(head_fusion, None)  # its rollouts are made: the rows are not needed again

    def _rolled(self, head_fusion: str) -> bool:
        """Whether every rollout of the slider toward the model's own output is kept for this fusion."""
        return all((head_fusion, p) in self._rollouts for p in self.ROLLOUT_PERCENTS)

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

    PERCENTS = [i / 100 for i in range(100)]

    def percent_thresholds(self, head_fusion: str = "mean", fused: torch.Tensor | None = None) -> torch.Tensor:
        """[L,100] the discard thresholds of 0 %, 1 %, ..., 99 % (a slider's steps), counted once per fusion (from
        `fused`, its fused heads, where the caller has them)."""
        with self._fusion_locks.get(head_fusion, nullcontext()):  # the warm and a request may ask at once
            if head_fusion not in self._thresholds:
                swept = self._warm_thresholds.pop(head_fusion, {})
                if len(swept) == self.num_layers:  # each layer's, from the warm's sweep
                    self._thresholds[head_fusion] = torch.stack([swept[i] for i in range(self.num_layers)])
                else:
                    fused = self._fused_layers(head_fusion) if fused is None else fused
                    self._thresholds[head_fusion] = maps.discard_thresholds(fused, self.PERCENTS)
            return self._thresholds[head_fusion]

    def warm(self) -> None:
        """Compute now what other views read first (see `warm_step`)."""
        step = 0
        while self.warm_step(step):
            step += 1

    def warm_step(self, step: int) -> bool:
        """One step of filling what other views read first: 0, the dense head, a forward at 224 (the output view,
        and the rollout's note); 1 to L, each layer's attention recomputed once for its statistics (the attention
        view's numbers, and all of them the heads view), its heads fused by mean, max and min, with their discard
        thresholds; then for each fusion, the rollouts of the tab's slider made from the swept layers, which are
        then let go. False when there is no such step. The app runs them one by one in the background, between
        requests, so that no control's first touch computes them."""
        layers = self.num_layers
        if step == 0:
            self.dense_map()
        elif step <= layers:
            self._sweep(step - 1)
        elif step - layers <= len(maps.HEAD_FUSIONS):
            fusion = maps.HEAD_FUSIONS[step - layers - 1]
            try:
                if len(self._warm_rows.get(fusion, ())) == layers:  # under no lock: a request never waits for it
                    self._roll(fusion, [], background=True)
                elif len(self._warm_thresholds.get(fusion, ())) == layers:  # a cache shed the rows: a request
                    self.percent_thresholds(fusion)  # makes the rollouts; the thresholds are gathered now
            finally:
                self._warm_rows.pop(fusion, None)
        else:
            return False
        return True

    def _sweep(self, layer: int) -> None:
        """The warm's step for one layer: its attention recomputed once gives its statistics, and its heads fused
        each way with their discard thresholds; the fused layers are held until the fusion's rollouts are made.
        It takes a fusion's lock only to store them: a request never waits for the background's work."""
        attention = self._on_device(self.layer_attention(layer))
        self.layer_statistics(layer, attention)
        for fusion in maps.HEAD_FUSIONS:
            if self._rolled(fusion):
                continue  # a request made them already
            fused = self._fused.get(fusion)
            row = maps.fuse_heads(attention[None], fusion) if fused is None else fused[layer : layer + 1]
            thresholds = None if fusion in self._thresholds else maps.discard_thresholds(row, self.PERCENTS)[0]
            with self._fusion_locks[fusion]:
                if thresholds is not None and fusion not in self._thresholds:
                    self._warm_thresholds.setdefault(fusion, {})[layer] = thresholds
                if fused is None and not self._rolled(fusion):  # a request may have made them meanwhile
                    self._warm_rows.setdefault(fusion, {})[layer] = row[0]

    def layer_statistics(
        self, layer: int, attention: np.ndarray | torch.Tensor | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """([H] mean attention distance in pixels, [H] entropy in nats) of one layer, computed once (from
        `attention`, its [H,N,N] weights on any device, where the caller has them)."""
        if layer not in self._layer_stats:
            one = (self.layer_attention(layer) if attention is None else attention)[None]
            distance = maps.mean_attention_distance(one, self.grid, self.model.patch_size, self.n_prefix)[0]
            self._layer_stats[layer] = distance, maps.attention_entropy(one)[0]
        return self._layer_stats[layer]

    @property
    def mean_attention_distance(self) -> np.ndarray:
        """[L,H] mean attention distance in input pixels."""
        return np.stack([self.layer_statistics(layer)[0] for layer in range(self.num_layers)])

    @property
    def attention_entropy(self) -> np.ndarray:
        """[L,H] mean attention-row entropy in nats."""
        return np.stack([self.layer_statistics(layer)[1] for layer in range(self.num_layers)])

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

    def dense_map(self) -> np.ndarray | None:
        """[h,w] the embedded model's dense head's map (saliency), in [0,1]; None without one. Made once."""
        if not self._dense:
            self._dense[:] = [self.model.dense_map_of(self.image, tuple(self.pixel_values.shape[2:]))]
        return self._dense[0]

    def keep_dense_map(self, dense_map: np.ndarray | None) -> None:
        """Keep the dense head's map [h,w] (None: no dense head) made by a forward of a batch that held this image."""
        self._dense[:] = [dense_map]

    def held(self) -> Held:
        """What this analysis derived and keeps now (see `Held`)."""
        projections = self._projections
        return Held(
            rollouts=frozenset(self._rollouts),
            rollout_bytes=sum(r.nbytes for r in list(self._rollouts.values())),
            fused=frozenset(self._fused),
            thresholds=frozenset(self._thresholds),
            warm_rows={f: len(rows) for f, rows in list(self._warm_rows.items())},
            warm_thresholds={f: len(t) for f, t in list(self._warm_thresholds.items())},
            statistics=frozenset(self._layer_stats),
            projections=None if projections is None else projections.layer,
            dense_map=bool(self._dense),
        )

    def forget(self, rollouts: bool = False, thresholds: bool = False, statistics: bool = False) -> None:
        """Drop derived results that are made again when next asked: the kept rollouts, the discard thresholds
        (with the warm's per-layer ones), the layers' statistics. As an analysis that never had them behaves."""
        if rollouts:
            self._rollouts.clear()
        if thresholds:
            self._thresholds.clear()
            self._warm_thresholds.clear()
        if statistics:
            self._layer_stats.clear()


@dataclass(frozen=True)
class Held:
    """What an analysis keeps of what it derived, for a cache's accounting and for tests.

    rollouts: the keys of its kept rollouts ((fusion, percent) toward its own output, (start, fusion, percent)
    toward another); rollout_bytes: their memory. fused: the fusions whose [L,N,N] fused heads are kept.
    thresholds: the fusions whose [L,100] discard thresholds are kept. warm_rows, warm_thresholds: {fusion: layers}
    the background warm swept and holds until it rolls. statistics: the layers whose statistics are kept.
    projections: the layer whose projections are kept, or None. dense_map: whether the dense head's map is made.
    """

    rollouts: frozenset
    rollout_bytes: int
    fused: frozenset
    thresholds: frozenset
    warm_rows: dict
    warm_thresholds: dict
    statistics: frozenset
    projections: int | None
    dense_map: bool
