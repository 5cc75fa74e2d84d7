"""Inside one head: the attention sub-layer recomputed for one layer from the cached hidden states.

Notation as the lecture writes it: x the tokens entering the layer [N,D]; u = LN(x); for head h,
q = u W_Q,h, k = u W_K,h, v = u W_V,h (each dh wide); scores q·k_j/sqrt(dh); weights
α = softmax(scores); head output Σ_j α_j v_j. The heads' outputs, side by side, go through the
output projection W_O; the layer then adds it to x (pre-norm) and adds the MLP's update the same way.
Only the requested layer is recomputed, never the whole model.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from . import maps
from .models import VitModel


@dataclass(eq=False)
class LayerProjections:
    """Keys and values of every head of one layer: k, v [N,H*dh] float32 (heads side by side), and what
    makes a query: u = LN(x) [N,D] and the query projection wq [H*dh,D], bq [H*dh]. value_norms [H,N]
    = ||W_O,h v_hj||; wo [D,H*dh] the output projection's weight. Queries are made one token at a time:
    a view asks for one query, and all N of them would cost as much as the keys."""

    layer: int
    heads: int
    scale: float
    u: np.ndarray
    wq: np.ndarray
    bq: np.ndarray
    k: np.ndarray
    v: np.ndarray
    wo: np.ndarray
    weights_shared: bool = False  # wq, bq and wo are the model's own parameters (float32 on a CPU), not copies

    @functools.cached_property
    def value_norms(self) -> np.ndarray:
        """[H,N] made when first asked: a view of the weights alone never needs them."""
        return maps.value_norms(self.v, self.wo, self.heads)

    @property
    def head_width(self) -> int:
        return self.k.shape[1] // self.heads

    @property
    def nbytes(self) -> int:
        """The bytes these projections hold of their own: the model's weights are not theirs to count."""
        weights = () if self.weights_shared else (self.wq, self.bq, self.wo)
        made = [self.__dict__["value_norms"]] if "value_norms" in self.__dict__ else []
        return sum(a.nbytes for a in (self.u, self.k, self.v, *made, *weights))

    def query(self, query: int) -> np.ndarray:
        """[H*dh] the query vectors of token `query`, heads side by side."""
        return self.u[query] @ self.wq.T + self.bq

    def head(self, which: str, h: int) -> np.ndarray:
        """[N,dh] head h's slice of k or v."""
        dh = self.head_width
        return getattr(self, which)[:, h * dh : (h + 1) * dh]

    def weights(self, query: int) -> np.ndarray:
        """[H,N] softmax(q·k_j/sqrt(dh)) of token `query` in every head."""
        dh, n = self.head_width, self.k.shape[0]
        q = self.query(query).reshape(self.heads, dh)
        k = self.k.reshape(n, self.heads, dh)
        return maps.softmax(np.einsum("hd,nhd->hn", q, k) * np.float32(self.scale))

    def head_outputs(self, query: int) -> np.ndarray:
        """[H,D] each head's Σ_j α_j v_j passed through its slice of W_O (no bias)."""
        dh, n = self.head_width, self.k.shape[0]
        out = np.einsum("hn,nhd->hd", self.weights(query), self.v.reshape(n, self.heads, dh))
        wo = self.wo.reshape(self.wo.shape[0], self.heads, dh)
        return np.einsum("hd,Dhd->hD", out, wo)


@dataclass(eq=False)
class HeadInside:
    """One head's attention for one query token, step by step. N tokens, prefix tokens first.

    q [dh]; k, v [N,dh]; scores [N] = q·k_j · scale before softmax, scale = 1/sqrt(dh);
    weights [N] = softmax(scores), the captured attention row; contributions [N] = ||α_j W_O,h v_j||
    (Kobayashi et al. 2020); output [dh] = Σ_j α_j v_j; head_shares [H] = each head's share of
    Σ_h ||W_O,h out_h|| for this query.
    """

    layer: int
    head: int
    query: int
    scale: float
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray
    weights: np.ndarray
    contributions: np.ndarray
    output: np.ndarray
    head_shares: np.ndarray

    @property
    def head_width(self) -> int:
        return len(self.q)

    @property
    def effective_keys(self) -> float:
        return maps.effective_keys(self.weights)

    @property
    def top_share(self) -> float:
        """The share of the weight held by the top 1 % of keys."""
        return maps.top_share(self.weights, 0.01)


@dataclass(eq=False)
class LayerUpdates:
    """Per-token norms [N] in one pre-norm layer: ||x|| entering it, ||scale1(Attn(LN(x)))|| the
    attention update, ||scale2(MLP(LN(y)))|| the MLP update, with y = x + the attention update."""

    residual: np.ndarray
    attention: np.ndarray
    mlp: np.ndarray


def _run(model: VitModel, x: np.ndarray, fn):
    """fn(x as [1,N,D] on the model's device and dtype) under inference mode, back as float32 numpy."""
    p = next(model.net.parameters())
    with torch.inference_mode():
        out = fn(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(p.device, p.dtype)[None])
    return [t.detach().float().cpu().numpy() for t in out]


def project(model: VitModel, x: np.ndarray, layer: int) -> LayerProjections:
    """Queries, keys and values of layer `layer` from the tokens x [N,D] that enter it."""
    parts = model.layer_parts(layer)

    def kv(t):
        u, wq = parts.norm1(t), parts.q.weight
        bq = parts.q.bias if parts.q.bias is not None else wq.new_zeros(len(wq))  # qkv_bias=False
        return u[0], wq, bq, parts.k(u)[0], parts.v(u)[0], parts.o.weight

    u, wq, bq, k, v, wo = _run(model, x, kv)
    heads = model.num_heads
    scale = head_geometry(model)[1]
    p = next(model.net.parameters())
    shared = p.device.type == "cpu" and p.dtype == torch.float32  # `_run`'s float() and cpu() then copy nothing
    return LayerProjections(layer, heads, scale, u, wq, bq, k, v, wo, shared)


def attention_scores(model: VitModel, x: np.ndarray, layer: int) -> torch.Tensor:
    """[H,N,N] float32 q·k_j · scale of every token in every head of layer `layer` (before the softmax), from the
    tokens x [N,D] that enter it. On the model's device: fusions, thresholds, rollouts and the heads' statistics are
    made there, and a GPU's copy back to the host would wait for its queue."""
    parts = model.layer_parts(layer)
    heads, scale = model.num_heads, head_geometry(model)[1]
    p = next(model.net.parameters())
    with torch.inference_mode():
        u = parts.norm1(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(p.device, p.dtype))
        q, k = (proj(u).view(len(u), heads, -1).transpose(0, 1) for proj in (parts.q, parts.k))
        return (q @ k.transpose(1, 2)).float().mul_(scale)  # in place on the product (or its float32 copy)


def attention_weights(scores: torch.Tensor) -> torch.Tensor:
    """[H,N,N] float16 softmax of `attention_scores`: the weights the forward made, rounded as a capture of them
    is (by torch, on the device: numpy's float16 cast is slower, docs/benchmarks.md)."""
    with torch.inference_mode():
        return torch.softmax(scores, dim=-1).half()


def head_geometry(model: VitModel) -> tuple[int, float]:
    """(dh, scale): each head's width and the factor of its scores, 1/sqrt(dh) unless the module says."""
    parts = model.layer_parts(0)
    dh = parts.q.weight.shape[0] // model.num_heads
    return int(dh), float(getattr(parts.attention, "scaling", dh**-0.5))


def inside_head(p: LayerProjections, head: int, query: int) -> HeadInside:
    """Head `head`'s attention for token index `query`, from the layer's projections."""
    dh = p.head_width
    q, k, v = p.query(query)[head * dh : (head + 1) * dh], p.head("k", head), p.head("v", head)
    scores = maps.scaled_scores(q, k, p.scale)
    weights = maps.softmax(scores)
    outputs = np.linalg.norm(p.head_outputs(query), axis=-1)
    return HeadInside(
        layer=p.layer,
        head=head,
        query=query,
        scale=p.scale,
        q=q,
        k=k,
        v=v,
        scores=scores,
        weights=weights,
        contributions=weights * p.value_norms[head],
        output=weights @ v,
        head_shares=(outputs / outputs.sum()).astype(np.float32),
    )


def layer_updates(model: VitModel, x: np.ndarray, layer: int) -> LayerUpdates:
    """The residual stream and the two updates of layer `layer`, per token, from x [N,D]."""
    parts = model.layer_parts(layer)

    def updates(t):
        attention = parts.scale1(parts.attention(parts.norm1(t))[0])
        mlp = parts.scale2(parts.mlp(parts.norm2(t + attention)))
        return [torch.linalg.vector_norm(a[0].float(), dim=-1) for a in (t, attention, mlp)]

    residual, attention, mlp = _run(model, x, updates)
    return LayerUpdates(residual, attention, mlp)
