"""The forward hooks by which `VitModel.forward` keeps what one forward pass makes: each layer's attention weights,
an attention-pool's per-head weights, and the norms of each layer's updates."""

from __future__ import annotations

import torch
from torch import nn


def keep_weights(into: dict, layer: int, mode, _module: nn.Module, _args, out) -> None:
    """Forward hook on a layer's attention. mode "keep": the weights for the batch's first image, into one
    float16 tensor [L,H,N,N] that the first layer allocates; "all": every image's, as they are; a function:
    called with (layer, weights)."""
    w = out[1]
    if callable(mode):
        mode(layer, w)
    elif mode == "all":
        into["layers"][layer] = w
    else:
        if "all" not in into:
            into["all"] = torch.empty((len(into["layers"]), *w.shape[1:]), dtype=torch.float16, device=w.device)
        into["all"][layer].copy_(w[0])


def per_head(_module: nn.Module, args, kwargs):
    """Forward pre-hook on an attention-pool's nn.MultiheadAttention: return its weights per head, not averaged."""
    return args, {**kwargs, "need_weights": True, "average_attn_weights": False}


def keep_pool(into: dict, grad: bool, module: nn.MultiheadAttention, args, kwargs, out):
    """Forward hook on an attention-pool's nn.MultiheadAttention (batch first): keep its weights [B,H,1,N].

    With `grad`, its output is recomputed from those very weights, out_proj(weights · v): PyTorch returns a
    view of the weights that its output does not depend on, so autograd would give them no gradient
    (relevancy needs it). The recomputation is the same arithmetic as PyTorch's."""
    weights = out[1]
    into["pool"] = weights
    if not grad:
        return None
    value = args[2] if len(args) > 2 else kwargs["value"]
    (b, s, e), h = value.shape, module.num_heads
    bias = None if module.in_proj_bias is None else module.in_proj_bias[2 * e :]
    v = nn.functional.linear(value, module.in_proj_weight[2 * e :], bias).view(b, s, h, e // h).transpose(1, 2)
    mixed = (weights @ v).transpose(1, 2).reshape(b, weights.shape[2], e)
    return module.out_proj(mixed), weights


def record_norm(into: list, scale: nn.Module, _module: nn.Module, _args, out) -> None:
    """Forward hook: the norm of each token's update, [B,N] float32, for every image of the batch."""
    update = out[0] if isinstance(out, tuple) else out
    into.append(torch.linalg.vector_norm(scale(update).float(), dim=-1))
