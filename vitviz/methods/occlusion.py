"""Occlusion (Zeiler and Fergus 2014): the output's drop when one patch is hidden, one patch at a time (Captum)."""

from __future__ import annotations

from . import BASELINE, Job, Method


def occlusion(job: Job) -> tuple:
    from captum.attr import Occlusion

    p = job.model.patch_size
    attr = Occlusion(job.score).attribute(
        job.x,
        sliding_window_shapes=(3, p, p),
        strides=(3, p, p),
        baselines=job.absent(),
        perturbations_per_eval=job.batch,
    )
    return attr[0, 0, ::p, ::p].detach().cpu().numpy(), None  # one value per patch: the drop when hidden


METHOD = Method(
    "occlusion",
    "Occlusion (one patch at a time)",
    signed=True,
    map=occlusion,
    options=(BASELINE,),
    calls=lambda options, grid, batch: -(-grid[0] * grid[1] // batch) + 1,
    order=5,
)
