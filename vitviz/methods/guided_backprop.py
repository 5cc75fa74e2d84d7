"""Guided Backprop (Springenberg et al. 2015): the output's gradient at each input pixel, with the negative gradient
stopped at every ReLU on its way back (Captum's GuidedBackprop, which hooks the model's ReLU modules, so it takes
the output as a module: `Job.module`). A ViT whose MLPs use GELU has no ReLU for it to hook: there its map is the
plain gradient, which is why the Attributions tab does not list it."""

from __future__ import annotations

import warnings

from . import Job, Method


def guided_backprop(job: Job) -> tuple:
    from captum.attr import GuidedBackprop

    x = job.x.clone().requires_grad_()
    with warnings.catch_warnings():  # Captum says each time that it hooks the ReLUs and removes the hooks after
        warnings.filterwarnings("ignore", "Setting backward hooks on ReLU activations")
        attr = GuidedBackprop(job.module).attribute(x)
    return attr.detach().cpu().numpy(), None


METHOD = Method(
    "guided_backprop",
    "Guided Backprop (negative gradients stopped at ReLUs)",
    signed=True,
    map=guided_backprop,
    order=10,
    offered=False,
    repeats="the gradient",
)
