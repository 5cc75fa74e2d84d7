"""The families vitviz reads: one `Family` record each, the only place that knows transformers' module names.

ViT, DeiT, DINO, DINOv2, DINOv2 with registers, DPT's ViT, CLIP and SigLIP. `VitModel` (models.py) answers from
its record the questions the rest of vitviz asks; nothing else branches on the family. Adding a family is one
record here and a tiny model in the tests' fixtures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class LayerParts:
    """One pre-norm transformer layer as the texts write it:
    y = x + scale1(attention(norm1(x))), then out = y + scale2(mlp(norm2(y))).

    q, k, v, o: the attention's projections (heads side by side, head_dim wide each), whatever the family
    calls them (o_proj in ViT, out_proj in CLIP and SigLIP). scale1/scale2 are DINOv2's LayerScale, or
    identities where the family has none.
    """

    norm1: nn.Module
    attention: nn.Module
    scale1: nn.Module
    norm2: nn.Module
    mlp: nn.Module
    scale2: nn.Module
    q: nn.Linear
    k: nn.Linear
    v: nn.Linear
    o: nn.Linear

    @property
    def layer_scale(self) -> bool:
        return not isinstance(self.scale1, nn.Identity)


@dataclass(frozen=True)
class Readout:
    """Where the model's output reads its tokens.

    tokens: the token indices whose final vectors (after the last norm) the output reads, averaged where
    there are several (DeiT's distilled classifier averages the logits of its CLS and distillation heads,
    which is the same as one linear head on their mean). pool: an attention-pooling probe after the last
    layer (SigLIP): a learned query that attends over every token, so the readout has no token of its own.
    name: how the UI's sentences call it.
    """

    tokens: tuple[int, ...] = (0,)
    pool: bool = False
    name: str = "the CLS token"

    def start(self, n: int, pool_attention: np.ndarray | None = None) -> np.ndarray:
        """[N] float32 weights over the tokens: the row that rollout and relevancy follow back through the
        layers. Readout tokens share 1 equally; a pool gives its (head-fused) attention, `pool_attention` [N]."""
        if self.pool:
            if pool_attention is None:
                raise ValueError("an attention-pool readout needs the probe's attention")
            row = np.asarray(pool_attention, np.float32)
            return row / row.sum()
        row = np.zeros(n, np.float32)
        row[list(self.tokens)] = 1.0 / len(self.tokens)
        return row


CLS_READOUT = Readout()


def _vit_parts(b: nn.Module) -> LayerParts:
    a = b.attention
    if not hasattr(a, "q_proj"):  # DPT's own ViT keeps transformers 4's module layout
        raise ValueError("this model's layers are not in the q_proj/k_proj/v_proj/o_proj layout")
    if hasattr(b, "norm1"):  # DINOv2 (with registers): LayerScale after both sub-layers
        return LayerParts(
            b.norm1, a, b.layer_scale1, b.norm2, b.mlp, b.layer_scale2, a.q_proj, a.k_proj, a.v_proj, a.o_proj
        )
    return LayerParts(
        b.layernorm_before,
        a,
        nn.Identity(),
        b.layernorm_after,
        b.mlp,
        nn.Identity(),
        a.q_proj,
        a.k_proj,
        a.v_proj,
        a.o_proj,
    )


def _clip_parts(b: nn.Module) -> LayerParts:
    a = b.self_attn
    return LayerParts(
        b.layer_norm1, a, nn.Identity(), b.layer_norm2, b.mlp, nn.Identity(), a.q_proj, a.k_proj, a.v_proj, a.out_proj
    )


@dataclass(frozen=True)
class Family:
    """Every fact vitviz needs about one family of transformers models, in one record (as timm's
    `pretrained_cfg`): the only place that knows transformers' module names. Adding a family is one record
    here and a tiny model in the tests' fixtures.

    name: for sentences. encoder(net): the vision transformer (embeddings, blocks, final norm). runner(net):
    the module a pixel forward calls (the classifier where there is one, the vision tower of a CLIP or
    SigLIP model with a text tower). blocks/final_norm/position_table(encoder): the layers, the norm after the
    last one and the learned position table [T,D] (T = the prefix tokens that carry a position, then the
    patches). parts(block): one layer's modules. prefix(net) and readout(net): the tokens before the patches
    and where the output reads. fixed_size: trained at one size, so other sizes interpolate the position
    table.
    """

    name: str
    prefix: Callable[[nn.Module], tuple[str, ...]]
    readout: Callable[[nn.Module], Readout]
    encoder: Callable[[nn.Module], nn.Module]
    blocks: Callable[[nn.Module], nn.ModuleList]
    parts: Callable[[nn.Module], LayerParts]
    final_norm: Callable[[nn.Module], nn.Module]
    position_table: Callable[[nn.Module], torch.Tensor]
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    fixed_size: bool = True
    runner: Callable[[nn.Module], nn.Module] = lambda net: net
    pool: Callable[[nn.Module], nn.Module | None] = lambda encoder: None
    # where transformers' own output holds the readout vector (what `vitviz check` compares with): ViT's, DeiT's
    # and DINOv2's CLS token in last_hidden_state, which is after the final norm (their pooler_output, where
    # there is one, is a separate learned layer); CLIP's and SigLIP's pooler_output
    readout_in_output: Callable = lambda out: out.last_hidden_state[:, 0]
    # the classifier head of each readout token, their logits averaged (DeiT distilled: two); () without one
    heads: Callable[[nn.Module], tuple[nn.Module, ...]] = lambda net: ()
    # a model with a text tower (a full CLIP or SigLIP): the image-text logit as transformers' logits_per_image,
    # [B] from the readout vector [B,D] and one text's features [1,E]; and how a text is padded (SigLIP was
    # trained on texts padded to 64 tokens)
    similarity: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    text_padding: bool | str = False


def _base(net: nn.Module) -> nn.Module:
    return getattr(net, net.base_model_prefix, net)


def _tower(net: nn.Module) -> nn.Module:
    return getattr(net, "vision_model", net)  # CLIPModel/SiglipModel hold a CLIPVisionModel/SiglipVisionModel


def _deit_readout(net: nn.Module) -> Readout:
    if hasattr(net, "distillation_classifier"):
        return Readout((0, 1), name="the CLS and distillation tokens (their two classifiers' logits are averaged)")
    return CLS_READOUT


def _classifiers(net: nn.Module) -> tuple[nn.Module, ...]:
    if hasattr(net, "distillation_classifier"):
        return net.cls_classifier, net.distillation_classifier
    return (net.classifier,) if hasattr(net, "classifier") else ()


_VIT = dict(
    encoder=_base,
    heads=_classifiers,
    # transformers 5 keeps ViT's and DeiT's blocks at `.layers`, DINOv2's at `.encoder.layer`
    blocks=lambda enc: enc.layers if hasattr(enc, "layers") else enc.encoder.layer,
    parts=_vit_parts,
    final_norm=lambda enc: enc.layernorm,
    position_table=lambda enc: enc.embeddings.position_embeddings[0],
)


def _similarity(net: nn.Module, image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
    """CLIP's and SigLIP's logits_per_image: the scaled cosine of the image's and the text's embeddings (CLIP
    projects the image's readout vector first; SigLIP adds a learned bias)."""
    if hasattr(net, "visual_projection"):
        image = net.visual_projection(image)
    cosine = nn.functional.normalize(image, dim=-1) @ nn.functional.normalize(text, dim=-1).T
    bias = getattr(net, "logit_bias", None)
    return cosine[:, 0] * net.logit_scale.exp() + (0 if bias is None else bias)


_CLIP = dict(
    similarity=_similarity,
    readout_in_output=lambda out: out.pooler_output,
    encoder=_tower,
    runner=_tower,
    blocks=lambda enc: enc.encoder.layers,
    parts=_clip_parts,
    final_norm=lambda enc: enc.post_layernorm,
    position_table=lambda enc: enc.embeddings.position_embedding.weight,
)
_REGISTERS = "register"
_CLIP_MEAN, _CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
_SIGLIP_POOL = Readout((), pool=True, name="the attention-pooling probe (a learned query after the last layer)")

FAMILIES: dict[str, Family] = {
    "vit": Family("ViT", lambda net: ("CLS",), lambda net: CLS_READOUT, **_VIT),
    "deit": Family("DeiT", lambda net: ("CLS", "distillation"), _deit_readout, **_VIT),
    "dinov2": Family("DINOv2", lambda net: ("CLS",), lambda net: CLS_READOUT, fixed_size=False, **_VIT),
    "dinov2_with_registers": Family(
        "DINOv2 with registers",
        lambda net: ("CLS",) + tuple(f"{_REGISTERS} {i + 1}" for i in range(net.config.num_register_tokens)),
        lambda net: CLS_READOUT,
        fixed_size=False,
        **_VIT,
    ),
    "dpt": Family("DPT's ViT", lambda net: ("CLS",), lambda net: CLS_READOUT, **_VIT),  # the ViT inside a DPT
    "clip": Family(
        "CLIP",
        lambda net: ("CLS",),
        lambda net: CLS_READOUT,
        mean=_CLIP_MEAN,
        std=_CLIP_STD,
        **_CLIP,
    ),
    "siglip": Family(
        "SigLIP",
        lambda net: (),
        lambda net: _SIGLIP_POOL,
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        pool=lambda enc: getattr(enc, "head", None),
        text_padding="max_length",
        **_CLIP,
    ),
}
FAMILIES["clip_vision_model"] = FAMILIES["clip"]
FAMILIES["siglip_vision_model"] = FAMILIES["siglip"]


def family_of(net: nn.Module) -> Family:
    """The family record of a transformers model, or a ValueError naming what vitviz reads."""
    family = FAMILIES.get(net.config.model_type)
    if family is None:
        names = sorted({f.name for f in FAMILIES.values()})
        raise ValueError(f"unsupported model type {net.config.model_type!r}: vitviz reads {', '.join(names)}")
    return family
