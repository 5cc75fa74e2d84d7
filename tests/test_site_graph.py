"""`vitviz.site.graph.separable_resize`: the position table's Resize as two matrix products, against torch's bicubic
interpolation in float64 and against the Resize it replaces."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from vitviz.site.graph import separable_resize

SIDE = 37


def resize_model() -> onnx.ModelProto:
    node = helper.make_node(
        "Resize",
        ["table", "", "", "sizes"],
        ["out"],
        name="resize",
        mode="cubic",
        cubic_coeff_a=-0.75,
        coordinate_transformation_mode="half_pixel",
        nearest_mode="floor",
    )
    inputs = [
        helper.make_tensor_value_info("table", TensorProto.FLOAT, [1, 8, SIDE, SIDE]),
        helper.make_tensor_value_info("sizes", TensorProto.INT64, [4]),
    ]
    out = [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)]
    graph = helper.make_graph([node], "g", inputs, out)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("grid", [(11, 16), (21, 32), (32, 21), (SIDE, SIDE), (64, 48)])
def test_the_rewritten_resize_is_torchs_bicubic_interpolation(grid):
    ort = pytest.importorskip("onnxruntime")
    direct = resize_model()
    rewritten = resize_model()
    separable_resize(rewritten.graph, SIDE)
    assert [n.op_type for n in rewritten.graph.node].count("MatMul") == 2
    table = np.random.default_rng(0).standard_normal((1, 8, SIDE, SIDE)).astype(np.float32)
    feeds = {"table": table, "sizes": np.array([1, 8, *grid], np.int64)}
    got = ort.InferenceSession(rewritten.SerializeToString()).run(None, feeds)[0]
    before = ort.InferenceSession(direct.SerializeToString()).run(None, feeds)[0]
    ref = torch.nn.functional.interpolate(torch.from_numpy(table).double(), size=grid, mode="bicubic").numpy()
    assert got.shape == (1, 8, *grid)
    np.testing.assert_allclose(got, ref, atol=2e-5)
    np.testing.assert_allclose(got, before, atol=2e-6)


def test_a_graph_without_the_one_resize_is_refused():
    model = resize_model()
    model.graph.node.append(model.graph.node[0])
    with pytest.raises(ValueError, match="2 Resize nodes"):
        separable_resize(model.graph, SIDE)
