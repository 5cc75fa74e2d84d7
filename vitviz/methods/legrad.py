"""LeGrad (Bousselham et al. 2024): the output read at every layer, its gradient on that attention (`relevance.py`)."""

from __future__ import annotations

from ..relevance import legrad
from . import Method

METHOD = Method(
    "legrad",
    "LeGrad (Bousselham et al. 2024)",
    signed=False,
    map=lambda job: (legrad(job.model, job.x, job.score), None),
    order=7,
)
