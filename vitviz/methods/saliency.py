"""Saliency (Simonyan et al. 2014): the gradient's magnitude at each input pixel (Captum)."""

from __future__ import annotations

from . import Job, Method


def saliency(job: Job) -> tuple:
    from captum.attr import Saliency

    x = job.x.clone().requires_grad_()
    return Saliency(job.score).attribute(x, abs=True).detach().cpu().numpy(), None


METHOD = Method("saliency", "Saliency (|gradient|)", signed=False, map=saliency, order=2)
