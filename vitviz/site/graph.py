"""The embedded model as one ONNX graph for the browser: the forward and every per-layer array the views need.

The site runs this graph with ONNX Runtime Web and computes nothing else heavy in JavaScript: a [N,N] product per
head and layer is cheap in the runtime's threaded SIMD kernels and slow in plain JavaScript (4.8 G multiply-adds
at 448 px). The graph takes the normalised input [1,3,H,W] (any H and W that are multiples of the patch) and the
patch centres' pixel distances [P,P], and returns, for one image:

    tokens [N,D]                   the final tokens, after the last LayerNorm (`Analysis.tokens`)
    last [N,D]                     the last layer's output before that norm (the token norms)
    q, k [L,N,H*dh]                every layer's queries and keys, heads side by side (the Explorer's layers)
    value_norms [L,H,N]            ||W_O,h v_hj|| (`maps.value_norms`)
    mean, max, min [L,N,N]         the heads fused from the float16-rounded weights, as `Analysis.fused` fuses them:
                                   the mean in float32, max and min in float16 (each one of the weights, exactly)
    distance, entropy [L,H]        `maps.score_statistics` of each layer's float32 scores
    dense [1,1,H,W]                the dense head's map on this forward's own tokens (`models.VitModel.dense_map`)

Weights are stored as float16 and computed in float32 (`export`): the shipped weights are float16 already, so
nothing is lost, and the file is half the size. The value norms' Gram matrices stay float32: rounded to float16
they missed Python's norms by 2.4e-4, against 6e-6.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from ..models import VitModel

OUTPUTS = ("tokens", "last", "q", "k", "value_norms", "mean", "max", "min", "distance", "entropy", "dense")
OPSET = 17


class SiteGraph(nn.Module):
    """The embedded model's forward written out layer by layer from its own modules (`VitModel.layer_parts`), so
    that each layer's q, k and weights are outputs of the very computation that makes the next layer's input."""

    def __init__(self, model: VitModel) -> None:
        super().__init__()
        if model.dense_head is None or model.readout.pool or model.fixed_size:
            raise ValueError(f"the site runs the embedded model only, not {model.name}")
        self.model = model
        self.heads = model.num_heads
        self.prefix = model.n_prefix
        self.dense_head = model.dense_head
        parts = [model.layer_parts(i) for i in range(model.num_layers)]
        self.parts = parts
        self.scale = self._scale(parts[0])
        # per head the Gram matrix W_O,hᵀ W_O,h [H,dh,dh]: ||W_O,h v||² = vᵀ G v, as maps.value_norms computes it
        grams = []
        for p in parts:
            wo = p.o.weight.detach().float()
            wh = wo.reshape(wo.shape[0], self.heads, -1).permute(1, 0, 2)  # [H,D,dh]
            grams.append(wh.transpose(1, 2) @ wh)
        self.register_buffer("grams", torch.stack(grams))  # [L,H,dh,dh]
        self.net = model.net  # registered, so that the export sees every weight as a parameter

    def _scale(self, p) -> float:
        dh = p.q.weight.shape[0] // self.heads
        return 1.0 / math.sqrt(dh)

    def forward(self, pixel_values: torch.Tensor, distances: torch.Tensor):
        m = self.model
        x = m.embed(pixel_values)[0]  # [N,D]
        n = x.shape[0]
        h, w = pixel_values.shape[2], pixel_values.shape[3]
        grid = (h // m.patch_size, w // m.patch_size)
        qs, ks, norms, fused, distance, entropy = [], [], [], {"mean": [], "max": [], "min": []}, [], []
        for i, p in enumerate(self.parts):
            u = p.norm1(x)
            q, k, v = p.q(u), p.k(u), p.v(u)  # [N,H*dh]
            qh, kh, vh = (t.reshape(n, self.heads, -1).transpose(0, 1) for t in (q, k, v))  # [H,N,dh]
            scores = (qh @ kh.transpose(1, 2)) * self.scale  # [H,N,N]
            log_weights = torch.log_softmax(scores, dim=-1)
            weights = log_weights.exp()
            entropy.append(-(log_weights * weights).sum(-1).mean(-1))
            a = weights[:, self.prefix :, self.prefix :]
            distance.append(((a * distances).sum(-1) / a.sum(-1)).mean(-1))
            rounded = weights.half().float()  # the float16 weights that a capture keeps and rollout fuses
            fused["mean"].append(rounded.mean(0))
            fused["max"].append(rounded.amax(0).half())
            fused["min"].append(rounded.amin(0).half())
            norms.append(torch.sqrt(torch.clamp(((vh @ self.grams[i]) * vh).sum(-1), min=0)))
            context = (weights @ vh).transpose(0, 1).reshape(n, -1)
            y = x + p.scale1(p.o(context))
            x = y + p.scale2(p.mlp(p.norm2(y)))
            qs.append(q)
            ks.append(k)
        last = x
        tokens = m.final_norm(last)
        patches = tokens[self.prefix :].reshape(1, grid[0], grid[1], -1).permute(0, 3, 1, 2)
        dense = self.dense_head(patches, (h, w))
        return (
            tokens,
            last,
            torch.stack(qs),
            torch.stack(ks),
            torch.stack(norms),
            torch.stack(fused["mean"]),
            torch.stack(fused["max"]),
            torch.stack(fused["min"]),
            torch.stack(distance),
            torch.stack(entropy),
            dense,
        )


class _AsFloat32(nn.Module):
    """A parametrisation: the weight is stored as float16 and computed with as float32 (a Cast in the graph)."""

    def forward(self, stored: torch.Tensor) -> torch.Tensor:
        return stored.float()


def _store_as_float16(module: nn.Module) -> None:
    """Every float32 parameter of `module` stored as float16, read as float32: the exported file keeps the
    float16 initializers and a Cast after each (the export must not fold them back into float32 constants)."""
    from torch.nn.utils import parametrize

    for sub in list(module.modules()):
        for name, param in list(sub.named_parameters(recurse=False)):
            if param.dtype == torch.float32 and param.dim() >= 1 and param.numel() > 64:
                parametrize.register_parametrization(sub, name, _AsFloat32(), unsafe=True)
                getattr(sub.parametrizations, name).original.data = param.data.half()


def export(path: str | Path) -> Path:
    """Write the embedded model's `SiteGraph` to `path` as ONNX (opset 17, dynamic height and width), its weights
    float16. A model of its own is loaded, on the CPU: its parameters are rewritten for the export."""
    from ..models import load_model

    path = Path(path)
    model = load_model(device="cpu")
    graph = SiteGraph(model).eval()
    _store_as_float16(graph)
    patch = model.patch_size
    example = torch.zeros(1, 3, 2 * patch, 3 * patch)
    distances = torch.zeros(6, 6)
    with torch.no_grad():
        torch.onnx.export(
            graph,
            (example, distances),
            str(path),
            input_names=["pixel_values", "distances"],
            output_names=list(OUTPUTS),
            dynamic_axes={"pixel_values": {2: "height", 3: "width"}, "distances": {0: "patches", 1: "patches_"}},
            opset_version=OPSET,
            do_constant_folding=False,
            dynamo=False,
        )
    return path
