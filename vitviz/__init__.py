"""vitviz: see inside a Vision Transformer.

import vitviz
model = vitviz.load_model()          # embedded offline DINOv2 ViT-S/14
a = vitviz.analyze(model, "cat.jpg")
a.attention_map(layer=11, head=None, query="cls")   # [gh,gw]
a.rollout(head_fusion="mean", discard_ratio=0.0)    # [gh,gw]

dm = vitviz.load_depth_model("Intel/dpt-hybrid-midas")   # or a local folder
r = vitviz.estimate_depth(dm, "cat.jpg")            # r.depth [H,W], r.stages, r.encoder
r = vitviz.attribute(model, "cat.jpg", method="integrated_gradients")   # r.map [H,W], r.delta
"""

from .analysis import Analysis, analyze
from .attribute import METHODS, Attribution, attribute
from .depth import DecoderStage, DepthResult, estimate_depth
from .models import (
    CATALOGUE,
    DEFAULT_DEPTH_MODEL,
    DEFAULT_MODEL,
    DEPTH_CATALOGUE,
    DepthModel,
    ModelUnavailableError,
    VitModel,
    load_depth_model,
    load_model,
    wrap,
    wrap_depth,
)
from .preprocess import load_image

__all__ = [
    "CATALOGUE",
    "METHODS",
    "Attribution",
    "attribute",
    "DEFAULT_DEPTH_MODEL",
    "DEFAULT_MODEL",
    "DEPTH_CATALOGUE",
    "Analysis",
    "DecoderStage",
    "DepthModel",
    "DepthResult",
    "ModelUnavailableError",
    "VitModel",
    "analyze",
    "estimate_depth",
    "load_depth_model",
    "load_image",
    "load_model",
    "wrap",
    "wrap_depth",
]
