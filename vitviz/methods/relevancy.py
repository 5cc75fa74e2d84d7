"""Transformer relevancy (Chefer et al. 2021): each layer's attention weighed by its gradient (`relevance.py`)."""

from __future__ import annotations

from ..relevance import relevancy
from . import Method

METHOD = Method(
    "relevancy",
    "Transformer relevancy (Chefer et al. 2021)",
    signed=False,
    map=lambda job: (relevancy(job.model, job.x, job.score), None),
    order=6,
)
