"""SmoothGrad (Smilkov et al. 2017) of Input × Gradient: its map averaged over copies of the input with Gaussian
noise added (Captum's NoiseTunnel), which evens out the gradient's pixel-to-pixel jitter."""

from __future__ import annotations

from dataclasses import replace

from . import NOISE, SAMPLES, Job, Method

COPIES = replace(SAMPLES, label="SmoothGrad: noisy copies", default=8, low=1, slider=(1, 16, 1))


def smoothgrad(job: Job) -> tuple:
    from captum.attr import InputXGradient, NoiseTunnel

    x = job.x.clone().requires_grad_()
    o = job.options
    attr = NoiseTunnel(InputXGradient(job.score)).attribute(
        x, nt_type="smoothgrad", nt_samples=o["nt_samples"], nt_samples_batch_size=1, stdevs=o["nt_stdev"]
    )
    return attr.detach().cpu().numpy(), None


METHOD = Method(
    "smoothgrad",
    "SmoothGrad (Input × Gradient over noisy copies)",
    signed=True,
    map=smoothgrad,
    options=(COPIES, NOISE),
    calls=lambda options, grid, batch: options["nt_samples"],
    order=9,
    offered=False,
)
