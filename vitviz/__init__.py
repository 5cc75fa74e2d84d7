"""vitviz: see inside a Vision Transformer.

import vitviz
model = vitviz.load_model()          # embedded offline DINOv2 ViT-S/14
a = vitviz.analyze(model, vitviz.example("chelsea"))
a.attention_map(layer=11, head=None, query="readout")   # [gh,gw]
a.rollout(head_fusion="mean", discard_ratio=0.0)    # [gh,gw]
vitviz.show(a, "attention", layer=3)                # a PIL image, shown inline in a notebook

dm = vitviz.load_depth_model("Intel/dpt-hybrid-midas")   # or a local folder
r = vitviz.estimate_depth(dm, "photo.jpg")          # r.depth [H,W], r.stages, r.encoder
r = vitviz.attribute(model, "photo.jpg", method="integrated_gradients")   # r.map [H,W], r.delta
f = vitviz.faithfulness(model, "photo.jpg", method="integrated_gradients")  # f.deletion, f.sentence()
s = vitviz.sanity_check(model, "photo.jpg", method="saliency")   # s.correlation as layers turn random
lens = vitviz.layer_lens(model, "photo.jpg")    # every layer's tokens read by the output head
b = vitviz.ablate(model, "photo.jpg", heads=[(9, 3)])   # b.after against b.before, b.baseline side by side
g = vitviz.importance(model, "photo.jpg")       # g.change [layers, heads]: each head alone switched off

The names below are imported on first use, so that `vitviz --help` answers without loading torch.
"""

from __future__ import annotations

import importlib
from pathlib import Path

__version__ = "0.2.0"

_WHERE = {
    "Ablated": "ablation",
    "Ablation": "ablation",
    "ablate": "ablation",
    "Importance": "head_importance",
    "importance": "head_importance",
    "Analysis": "analysis",
    "analyze": "capture",
    "METHODS": "attributions",
    "Attribution": "attributions",
    "attribute": "attributions",
    "DecoderStage": "depth",
    "DepthResult": "depth",
    "estimate_depth": "depth",
    "Faithfulness": "deletion",
    "faithfulness": "deletion",
    "RandomBand": "deletion",
    "random_band": "deletion",
    "LayerLens": "lens",
    "Output": "outputs",
    "ClassLogit": "outputs",
    "TextLogit": "outputs",
    "DenseMap": "outputs",
    "ReadoutVector": "outputs",
    "layer_lens": "lens",
    "SanityCheck": "sanity",
    "sanity_check": "sanity",
    "CATALOGUE": "models",
    "DEFAULT_DEPTH_MODEL": "depth",
    "DEFAULT_MODEL": "models",
    "DEPTH_CATALOGUE": "depth",
    "DepthModel": "depth",
    "ModelUnavailableError": "hub",
    "VitModel": "models",
    "load_depth_model": "depth",
    "load_model": "models",
    "wrap": "models",
    "wrap_depth": "depth",
    "load_image": "preprocess",
    "show": "notebook",
    "export_html": "export",
    "explore": "widget",
}
__all__ = sorted([*_WHERE, "EXAMPLES", "example", "__version__"])
ASSETS = Path(__file__).resolve().parent / "assets"  # package data: the example photos travel in the wheel
EXAMPLES = ("chelsea", "coffee", "astronaut", "rocket")


def example(name: str = "chelsea") -> Path:
    """The path of a bundled example photo (see assets/README.md for their sources and licences)."""
    if name not in EXAMPLES:
        raise ValueError(f"unknown example {name!r}: use one of {EXAMPLES}")
    return ASSETS / f"{name}.jpg"


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'vitviz' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
