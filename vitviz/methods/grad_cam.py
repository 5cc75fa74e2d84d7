"""Grad-CAM (Selvaraju et al. 2017) on one block's input tokens, seen as a [D,gh,gw] map (Captum's LayerGradCam)."""

from __future__ import annotations

import torch
from torch import nn

from . import BLOCK, Job, Method


class _TokenGrid(nn.Module):
    """An identity that Grad-CAM hooks: it sees a block's patch tokens as a [B,D,gh,gw] map."""

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        return grid


def grad_cam(job: Job) -> tuple:
    from captum.attr import LayerGradCam

    model, grid, layer = job.model, job.grid, job.options["layer"]
    n_layers = len(model.blocks)
    layer = n_layers - 1 if layer is None else int(layer)
    if not 0 <= layer < n_layers:
        raise ValueError(f"Grad-CAM layer must be in [0, {n_layers}), got {layer}")
    view = _TokenGrid()
    k = model.n_prefix

    def as_grid(_module, args, kwargs):
        # Grad-CAM reads the tokens *entering* the block (as pytorch-grad-cam reads blocks[-1].norm1):
        # a block's output patch tokens no longer reach the readout token of the last layer.
        tokens = args[0] if args else kwargs["hidden_states"]
        # The grid comes from the input's pixels (h/p, w/p), never from sqrt(N).
        patches = view(tokens[:, k:].transpose(1, 2).reshape(len(tokens), -1, *grid))
        merged = torch.cat([tokens[:, :k], patches.flatten(2).transpose(1, 2)], 1)
        if args:
            return (merged, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": merged}

    hook = model.blocks[layer].register_forward_pre_hook(as_grid, with_kwargs=True)
    try:
        cam = LayerGradCam(job.score, view).attribute(job.x, relu_attributions=True)
    finally:
        hook.remove()
    return cam[0, 0].detach().cpu().numpy(), None


METHOD = Method("grad_cam", "Grad-CAM on one block", signed=False, map=grad_cam, options=(BLOCK,), order=4)
