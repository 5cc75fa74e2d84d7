"""vitviz: see inside a Vision Transformer.

import vitviz
model = vitviz.load_model()          # embedded offline DINOv2 ViT-S/14
a = vitviz.analyze(model, "cat.jpg")
a.attention_map(layer=11, head=None, query="cls")   # [gh,gw]
a.rollout(head_fusion="mean", discard_ratio=0.0)    # [gh,gw]
"""

from .analysis import Analysis, analyze
from .models import CATALOGUE, DEFAULT_MODEL, ModelUnavailableError, VitModel, load_model, wrap
from .preprocess import load_image

__all__ = [
    "CATALOGUE",
    "DEFAULT_MODEL",
    "Analysis",
    "ModelUnavailableError",
    "VitModel",
    "analyze",
    "load_image",
    "load_model",
    "wrap",
]
