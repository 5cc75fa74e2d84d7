"""The embedded model as ONNX graphs for the browser: the forward, and each layer's weights summarised.

The site runs these graphs with ONNX Runtime Web and computes nothing else heavy in JavaScript: a [N,N] product per
head and layer is cheap in the runtime's threaded SIMD kernels and slow in plain JavaScript (4.8 G multiply-adds
at 448 px). `SiteGraph` (model.onnx) takes the normalised input [1,3,H,W] (any H and W that are multiples of the
patch) and returns, for one image:

    tokens [N,D]                   the final tokens, after the last LayerNorm (`Analysis.tokens`)
    last [N,D]                     the last layer's output before that norm (the token norms)
    q, k [L,N,H*dh]                every layer's queries and keys, heads side by side (the Explorer's layers)
    value_norms [L,H,N]            ||W_O,h v_hj|| (`maps.value_norms`)

`DenseGraph` (dense.onnx) takes the final patch tokens as a map [1,D,gh,gw] and returns the dense head's map on them,
dense [1,1,H,W] (`models.VitModel.dense_map`): the output of this very forward, made when a view needs it.

`LayerGraph` (layer.onnx) takes one layer's q and k and the patch centres' pixel distances [P,P], and returns what
the views need of its [H,N,N] weights:

    mean, max, min [N,N]           the heads fused from the float16-rounded weights, as `Analysis.fused` fuses them:
                                   the mean in float32, max and min in float16 (each one of the weights, exactly)
    distance, entropy [H]          `maps.score_statistics` of the layer's float32 scores

Three graphs, not one: the first view waits for the forward alone; and kept to the end of one forward, every
layer's [N,N] outputs fragmented the runtime's memory (1.7 GB for a 448 px square against 0.47 GB without them),
while the page asks for a layer's summary only when a view needs it. Weights are stored as float16 and computed in
float32 (`export`): the shipped weights are float16 already, so nothing is lost, and the file is half the size. The
value norms' Gram matrices stay float32: rounded to float16 they missed Python's norms by 2.4e-4, against 6e-6.
The position table's bicubic Resize is rewritten as two matrix products (`separable_resize`): the runtime's cubic
kernel took 4–10 % of the forward on a [1,384,37,37] table.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper
from torch import nn

from ..models import VitModel

OUTPUTS = ("tokens", "last", "q", "k", "value_norms")
LAYER_OUTPUTS = ("mean", "max", "min", "distance", "entropy")
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

    def forward(self, pixel_values: torch.Tensor):
        m = self.model
        x = m.embed(pixel_values)[0]  # [N,D]
        n = x.shape[0]
        qs, ks, norms = [], [], []
        for i, p in enumerate(self.parts):
            u = p.norm1(x)
            q, k, v = p.q(u), p.k(u), p.v(u)  # [N,H*dh]
            qh, kh, vh = (t.reshape(n, self.heads, -1).transpose(0, 1) for t in (q, k, v))  # [H,N,dh]
            weights = torch.softmax((qh @ kh.transpose(1, 2)) * self.scale, dim=-1)  # [H,N,N]
            norms.append(torch.sqrt(torch.clamp(((vh @ self.grams[i]) * vh).sum(-1), min=0)))
            context = (weights @ vh).transpose(0, 1).reshape(n, -1)
            y = x + p.scale1(p.o(context))
            x = y + p.scale2(p.mlp(p.norm2(y)))
            qs.append(q)
            ks.append(k)
        return m.final_norm(x), x, torch.stack(qs), torch.stack(ks), torch.stack(norms)


class DenseGraph(nn.Module):
    """The dense head on the final patch tokens [1,D,gh,gw]: its map [1,1,gh·p,gw·p] at the input's size."""

    def __init__(self, model: VitModel) -> None:
        super().__init__()
        self.dense_head, self.patch = model.dense_head, model.patch_size

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        return self.dense_head(patches, (patches.shape[2] * self.patch, patches.shape[3] * self.patch))


class LayerGraph(nn.Module):
    """One layer's weights from its q and k [N,H*dh], summarised for the views: fused heads and statistics."""

    def __init__(self, heads: int, scale: float, prefix: int) -> None:
        super().__init__()
        self.heads, self.scale, self.prefix = heads, scale, prefix

    def forward(self, q: torch.Tensor, k: torch.Tensor, distances: torch.Tensor):
        n = q.shape[0]
        qh, kh = (t.reshape(n, self.heads, -1).transpose(0, 1) for t in (q, k))  # [H,N,dh]
        log_weights = torch.log_softmax((qh @ kh.transpose(1, 2)) * self.scale, dim=-1)
        weights = log_weights.exp()
        entropy = -(log_weights * weights).sum(-1).mean(-1)
        a = weights[:, self.prefix :, self.prefix :]
        distance = ((a * distances).sum(-1) / a.sum(-1)).mean(-1)
        rounded = weights.half().float()  # the float16 weights that a capture keeps and rollout fuses
        return rounded.mean(0), rounded.amax(0).half(), rounded.amin(0).half(), distance, entropy


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


def forward(model: VitModel, pixel_values: np.ndarray) -> dict[str, np.ndarray]:
    """`SiteGraph`'s outputs by name, computed by torch on the normalised input [1,3,H,W]: what model.onnx gives
    the browser for that input (the site's precomputed example, shown while the model loads)."""
    with torch.no_grad():
        out = SiteGraph(model).eval()(torch.from_numpy(pixel_values))
    return {name: t.numpy() for name, t in zip(OUTPUTS, out, strict=True)}


def separable_resize(graph_proto: onnx.GraphProto, side: int) -> None:
    """Rewrite the graph's one Resize (the position table [1,D,side,side] to the grid, DINOv2's bicubic
    interpolation) in place as rows @ table @ colsᵀ: the same Resize, with the same attributes, makes the
    interpolation matrices rows [1,1,gh,side] and cols [1,1,gw,side] from the identity, so the weights are the
    runtime's own, and the runtime's slow per-channel cubic kernel runs on a side×side matrix, twice."""
    resizes = [n for n in graph_proto.node if n.op_type == "Resize"]
    if len(resizes) != 1:
        raise ValueError(f"the export has {len(resizes)} Resize nodes, not the position table's one")
    resize = resizes[0]
    table, sizes, name = resize.input[0], resize.input[3], resize.name
    constants = {
        "eye": np.eye(side, dtype=np.float32)[None, None],
        "ones": np.array([1, 1], np.int64),
        "side": np.array([side], np.int64),
        **{f"at{i}": np.array([i], np.int64) for i in (2, 3, 4)},
    }
    graph_proto.initializer.extend(numpy_helper.from_array(v, f"{name}/{k}") for k, v in constants.items())
    c = {k: f"{name}/{k}" for k in (*constants, "h", "w", "sizes_h", "sizes_w", "rows", "cols", "cols_t", "xw")}
    attributes = {a.name: helper.get_attribute_value(a) for a in resize.attribute}
    nodes = [
        helper.make_node("Slice", [sizes, c["at2"], c["at3"]], [c["h"]]),
        helper.make_node("Slice", [sizes, c["at3"], c["at4"]], [c["w"]]),
        helper.make_node("Concat", [c["ones"], c["h"], c["side"]], [c["sizes_h"]], axis=0),
        helper.make_node("Concat", [c["ones"], c["w"], c["side"]], [c["sizes_w"]], axis=0),
        helper.make_node("Resize", [c["eye"], "", "", c["sizes_h"]], [c["rows"]], **attributes),
        helper.make_node("Resize", [c["eye"], "", "", c["sizes_w"]], [c["cols"]], **attributes),
        helper.make_node("Transpose", [c["cols"]], [c["cols_t"]], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", [table, c["cols_t"]], [c["xw"]]),  # [1,D,side,gw]
        helper.make_node("MatMul", [c["rows"], c["xw"]], [resize.output[0]]),  # [1,D,gh,gw]
    ]
    at = list(graph_proto.node).index(resize)
    graph_proto.node.remove(resize)
    for i, node in enumerate(nodes):
        graph_proto.node.insert(at + i, node)


def export(folder: str | Path) -> tuple[Path, Path, Path]:
    """Write the embedded model's `SiteGraph`, `LayerGraph` and `DenseGraph` to `folder` as model.onnx, layer.onnx
    and dense.onnx (opset 17, dynamic height and width), the weights float16. A model of its own is loaded, on the
    CPU: its parameters are rewritten for the export."""
    from ..models import load_model

    folder = Path(folder)
    model = load_model(device="cpu")
    graph = SiteGraph(model).eval()
    _store_as_float16(graph)
    patch = model.patch_size
    dynamic = {"pixel_values": {2: "height", 3: "width"}}
    options = dict(opset_version=OPSET, do_constant_folding=False, dynamo=False)
    with torch.no_grad():
        example = torch.zeros(1, 3, 2 * patch, 3 * patch)
        names = dict(input_names=["pixel_values"], output_names=list(OUTPUTS), dynamic_axes=dynamic)
        torch.onnx.export(graph, (example,), str(folder / "model.onnx"), **names, **options)
        exported = onnx.load(str(folder / "model.onnx"))
        separable_resize(exported.graph, model.native_grid[0])
        onnx.save(exported, str(folder / "model.onnx"))
        layer = LayerGraph(graph.heads, graph.scale, graph.prefix).eval()
        width = graph.parts[0].q.weight.shape[0]  # H*dh
        tokens = torch.zeros(7, width), torch.zeros(7, width), torch.zeros(6, 6)
        axes = {"q": {0: "tokens"}, "k": {0: "tokens"}, "distances": {0: "patches", 1: "patches_"}}
        names = dict(input_names=["q", "k", "distances"], output_names=list(LAYER_OUTPUTS), dynamic_axes=axes)
        torch.onnx.export(layer, tokens, str(folder / "layer.onnx"), **names, **options)
        dense = DenseGraph(model).eval()
        _store_as_float16(dense)
        axes = {"patches": {2: "rows", 3: "columns"}}
        names = dict(input_names=["patches"], output_names=["dense"], dynamic_axes=axes)
        patches = torch.zeros(1, graph.parts[0].q.weight.shape[1], 2, 3)
        torch.onnx.export(dense, (patches,), str(folder / "dense.onnx"), **names, **options)
    return folder / "model.onnx", folder / "layer.onnx", folder / "dense.onnx"
