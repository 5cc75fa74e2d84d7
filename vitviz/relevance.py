"""Attribution from attention and its gradients: transformer relevancy (Chefer et al. 2021) and LeGrad
(Bousselham et al. 2024). Each takes the model input and the target as a function of it (see
`attributions.target_function`), and returns one value per patch."""

from __future__ import annotations

import numpy as np
import torch

from .models import VitModel


def relevancy(model: VitModel, x: torch.Tensor, score_fn) -> np.ndarray:
    """Chefer et al. (2021), generic attention explainability: [gh,gw] relevance of each patch.

    R starts as the identity; for each layer in forward order, R <- R + mean_h(clamp(dA * A, 0)) @ R,
    where dA is the gradient of the target with respect to that layer's attention A. The answer
    is the row of R for the tokens the output reads, over the patch tokens: the readout token's row
    (the mean of the readout tokens' rows) for a class or the readout norm; for an attention-pool readout
    (SigLIP), the pool's own relevance row mean_h(clamp(dA * A, 0)) for its probe, times R (the probe has
    no residual path of its own over the tokens); for the dense head, which reads the patch tokens, the
    sum of their rows (those inside the box, weighted by how much of each patch it covers).
    """
    out = model.forward(x, attentions="all", grad=True)
    attentions = tuple(out.attentions) + ((out.pool_attention,) if model.pool is not None else ())
    grads = torch.autograd.grad(score_fn.reading.of_output(out).sum(), attentions)
    n = attentions[0].shape[-1]
    r = torch.eye(n, dtype=torch.float32, device=x.device)
    for layer, a in enumerate(out.attentions):
        cam = (grads[layer][0].float() * a[0].float()).clamp(min=0).mean(0)
        r = r + cam @ r
    if model.pool is not None and score_fn.output.reads_readout:
        rows = (grads[-1][0].float() * attentions[-1][0].float()).clamp(min=0).mean(0)[0]  # [H,1,N] -> [N]
    else:
        rows = score_fn.reading.token_weights(n)
    return (rows @ r)[model.n_prefix :].reshape(score_fn.grid).detach().cpu().numpy()


def legrad(model: VitModel, x: torch.Tensor, score_fn) -> np.ndarray:
    """LeGrad (Bousselham et al. 2024): [gh,gw] relevance of each patch.

    For each layer l, s_l is the target read from that layer's tokens through the model's own output head
    (after the final norm: a layer lens), and E_l = mean over heads h and query rows i of ReLU(ds_l / dA_l[h,i,:]),
    one value per key, where A_l [H,N,N] is layer l's attention. The map is the patch keys' E_l averaged over
    the layers. (The paper then scales the map to [0,1]; vitviz's drawing scales every map itself.)
    """
    out = model.forward(x, attentions="all", grad=True)
    per_layer = []
    for layer, a in enumerate(out.attentions):  # each gradient walks only its own layer's part of the graph
        (g,) = torch.autograd.grad(score_fn.reading.of_tokens(out.hidden_states[layer + 1]).sum(), a)
        per_layer.append(g[0].float().clamp(min=0).mean((0, 1)))
    return torch.stack(per_layer).mean(0)[model.n_prefix :].reshape(score_fn.grid).detach().cpu().numpy()
