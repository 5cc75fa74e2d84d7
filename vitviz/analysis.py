"""What one forward pass tells about one image (`Analysis`): an immutable record, captured once (see `capture`),
whose methods compute and keep nothing. What is derived from it and kept for speed is `derived.Derived`'s."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from . import inside, maps
from .models import VitModel
from .outputs import Output, default_output, patch_weights


@dataclass(eq=False, frozen=True)
class Analysis:
    """Everything one forward pass tells about one image: a record, read by pure methods. The CLI and a notebook
    use it as it is; the app's server keeps what it derives (`derived.Derived`).

    image: the decoded RGB uint8 [H,W,3] original. pixel_values: the exact model input
    [1,3,h,w] float32. N = n_prefix + gh*gw tokens.
    hidden_states: [L+1,N,D] float32 (embeddings, then each layer's output). Every layer's attention weights
    [H,N,N] are recomputed from them when asked (`layer_attention`) rather than kept: at 448 px they are 151 MB,
    the hidden states 20 MB.
    kept_attentions: [L,H,N,N] float16, only for a model whose layers vitviz cannot open (a DPT's encoder), else
    None.
    update_norms: [L,2,N] float32 norms of each layer's attention and MLP updates, kept by the forward
    (None where the forward did not, e.g. a depth model's encoder).
    tokens: [N,D] float32, the final tokens after the last LayerNorm.
    logits: [C] float32 for classifiers, else None.
    pool_attention: [H,N] float32, an attention-pool readout's probe attention over the tokens (SigLIP), else None.
    captured_dense: (the dense head's map [h,w] on this forward's tokens, or None without a dense head) where the
    capture made it (the app's forward, a camera frame), else (): `dense_map` makes it when asked.
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
    captured_dense: tuple = field(default=(), repr=False)

    PERCENTS = [i / 100 for i in range(100)]  # the discard ratios of `percent_thresholds`: a slider's steps

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
        """Memory of the captured arrays: the record never grows."""
        arrays = (self.image, self.pixel_values, self.hidden_states, self.tokens)
        kept = (self.kept_attentions, self.update_norms, self.pool_attention, *self.captured_dense)
        return sum(a.nbytes for a in arrays) + sum(a.nbytes for a in kept if a is not None)

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
        if self.kept_attentions is None:
            return self.device_attention(layer).cpu().numpy()
        self._check_layer_head(layer, None)
        return self.kept_attentions[layer]

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
        """Queries, keys and values of `layer`, recomputed from its captured input tokens."""
        self._check_layer_head(layer, None)
        return inside.project(self.model, self.hidden_states[layer], layer)

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
        return inside.layer_updates(self.model, self.hidden_states[layer], layer)

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
        `start_of` makes of one) starts, summing to 1; the token columns that a discard never drops). Toward the
        readout: `readout_start`, its tokens kept. Toward a dense output: its patches, each weighted by the mean of
        its pixels' weights in the output (`DenseMap.weights`: the photo's own map, a box, or the image).
        `start_of`'s start is taken as it is."""
        start = toward if isinstance(toward, str) else self.start_of(toward)
        if start == "readout":
            return self.readout_start(head_fusion), self.model.readout.tokens
        weights = start.weights(self.dense_map(), self.image.shape[:2])
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

    def start_of(self, toward: Output | None) -> str | Output:
        """Where a rollout toward `toward` starts: "readout" (the readout's row) for an output that reads the
        readout, else the output itself (a dense output's patches)."""
        toward = self.output if toward is None else toward
        return "readout" if toward.reads_readout else toward

    def device_scores(self, layer: int) -> torch.Tensor:
        """[H,N,N] float32 scores of `layer` (q·k · scale, before the softmax), recomputed from the tokens that enter
        it, on the model's device, where fusions, thresholds, rollouts and statistics are made: on a GPU, many times
        faster than on the CPU beside it, and never through the host. A capture that kept its weights (a model
        whose layers cannot be opened) has none."""
        self._check_layer_head(layer, None)
        if self.kept_attentions is not None:
            raise ValueError("this capture kept its attention weights and has no scores: its layers cannot be opened")
        return inside.attention_scores(self.model, self.hidden_states[layer], layer)

    def device_attention(self, layer: int) -> torch.Tensor:
        """[H,N,N] `layer_attention` as a tensor on the model's device (see `device_scores`)."""
        self._check_layer_head(layer, None)
        if self.kept_attentions is not None:
            return torch.from_numpy(self.kept_attentions[layer]).to(self.model.device)
        return inside.attention_weights(self.device_scores(layer))

    def fused(self, head_fusion: str = "mean") -> torch.Tensor:
        """[L,N,N] head-fused attention of every layer (see `maps.fuse_heads`), made now."""
        layers = [maps.fuse_heads(self.device_attention(i)[None], head_fusion)[0] for i in range(self.num_layers)]
        return torch.stack(layers)

    def rollout(
        self, head_fusion: str = "mean", discard_ratio: float = 0.0, toward: Output | None = None
    ) -> np.ndarray:
        """[gh,gw] attention rollout toward `toward` (default: the model's own output, `output`): the row of
        Â_L ... Â_1 that starts from the tokens the output reads, weighted as it reads them (`rollout_start`), over
        the patches. Toward an output that reads the readout (a class, a text, the readout vector), the readout's
        row; toward the dense head's, its patches' rows weighted by its map (or its box)."""
        first, keep = self.rollout_start(head_fusion, toward)
        rolled = maps.rollout(self.fused(head_fusion), discard_ratio, None, first, keep)
        return rolled[self.n_prefix :].reshape(self.grid)

    def percent_thresholds(self, head_fusion: str = "mean", fused: torch.Tensor | None = None) -> torch.Tensor:
        """[L,100] the discard thresholds of `PERCENTS` (0 %, 1 %, ..., 99 %), counted from `fused`, the fusion's
        [L,N,N] fused heads, where the caller has them."""
        return maps.discard_thresholds(self.fused(head_fusion) if fused is None else fused, self.PERCENTS)

    def layer_statistics(self, layer: int, *, scores: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        """([H] mean attention distance in pixels, [H] entropy in nats) of one layer's attention: of the float32
        softmax of its scores (`scores`, [H,N,N] on any device, where the caller has them; else `device_scores`), or
        of its kept weights where the capture kept them."""
        if scores is None and self.kept_attentions is not None:
            one = self.device_attention(layer)[None]
            distance = maps.mean_attention_distance(one, self.grid, self.model.patch_size, self.n_prefix)[0]
            return distance, maps.attention_entropy(one)[0]
        scores = self.device_scores(layer) if scores is None else scores
        return maps.score_statistics(scores, self.grid, self.model.patch_size, self.n_prefix)

    @property
    def mean_attention_distance(self) -> np.ndarray:
        """[L,H] mean attention distance in input pixels."""
        return np.stack([self.layer_statistics(layer)[0] for layer in range(self.num_layers)])

    @property
    def attention_entropy(self) -> np.ndarray:
        """[L,H] mean attention-row entropy in nats."""
        return np.stack([self.layer_statistics(layer)[1] for layer in range(self.num_layers)])

    def dense_map(self) -> np.ndarray | None:
        """[h,w] the embedded model's dense head's map (saliency) at this input's size, in [0,1]; None without one.
        The captured one, or the head on this forward's own final tokens: the output of the forward that every view
        of the analysis draws, never one of another forward (`VitModel.dense_map_of` is the head at its home input,
        which docs/benchmarks.md compares with this)."""
        if self.captured_dense:
            return self.captured_dense[0]
        if self.model.dense_head is None:
            return None
        with torch.inference_mode():
            last = torch.from_numpy(self.hidden_states[-1][None]).to(self.model.device)
            made = self.model.dense_map(last, self.grid, tuple(self.pixel_values.shape[2:]))
        return made[0, 0].float().cpu().numpy()

    def drawing(self, name: str, make):
        """What a drawing makes of this analysis once (`make()`, e.g. the image at display size): made anew here,
        kept by `derived.Derived.drawing`."""
        return make()

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
