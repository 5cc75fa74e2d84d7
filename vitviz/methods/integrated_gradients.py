"""Integrated Gradients (Sundararajan et al. 2017), optionally smoothed by SmoothGrad's NoiseTunnel (Captum)."""

from __future__ import annotations

from . import BASELINE, NOISE, SAMPLES, STEPS, Job, Method


def integrated_gradients(job: Job) -> tuple:
    from captum.attr import IntegratedGradients, NoiseTunnel

    o = job.options
    ig = IntegratedGradients(job.score)
    options = dict(
        baselines=job.absent(), n_steps=o["n_steps"], internal_batch_size=job.batch, return_convergence_delta=True
    )
    if o["nt_samples"] > 0:
        attr, delta = NoiseTunnel(ig).attribute(
            job.x,
            nt_type="smoothgrad",
            nt_samples=o["nt_samples"],
            nt_samples_batch_size=1,
            stdevs=o["nt_stdev"],
            **options,
        )
        return attr.detach().cpu().numpy(), float(delta.abs().max())
    attr, delta = ig.attribute(job.x, **options)
    return attr.detach().cpu().numpy(), float(delta[0])


def calls(options: dict, grid: tuple[int, int], batch: int) -> int:
    """The path's steps in batches, for each noisy copy, and the path's two ends for each (the delta)."""
    copies = max(1, options["nt_samples"])
    return -(-options["n_steps"] * copies // batch) + 2 * copies


METHOD = Method(
    "integrated_gradients",
    "Integrated Gradients",
    signed=True,
    map=integrated_gradients,
    options=(BASELINE, STEPS, SAMPLES, NOISE),
    calls=calls,
    order=1,
)
