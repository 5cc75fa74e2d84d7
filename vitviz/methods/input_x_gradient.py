"""Input × Gradient (Shrikumar et al. 2016): each input value times the output's gradient there (Captum)."""

from __future__ import annotations

from . import Job, Method


def input_x_gradient(job: Job) -> tuple:
    from captum.attr import InputXGradient

    x = job.x.clone().requires_grad_()
    return InputXGradient(job.score).attribute(x).detach().cpu().numpy(), None


METHOD = Method("input_x_gradient", "Input × Gradient", signed=True, map=input_x_gradient, order=3)
