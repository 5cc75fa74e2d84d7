"""Attention rollout (Abnar and Zuidema 2020) toward the output explained, on the attributions' own input: the map
shown beside every attribution, and checked as they are."""

from __future__ import annotations

from ..capture import capture
from . import Job, Method


def rollout(job: Job) -> tuple:
    x = job.x.detach().cpu().numpy()
    a = capture(job.model, job.rgb, x, job.model.forward(job.x.detach().cpu(), attentions="none"))
    return a.rollout(toward=job.output), None


METHOD = Method("rollout", "Attention rollout", signed=False, map=rollout, order=8, offered=False)
