"""Heavy runs of one session (attributions, their checks, the rollout's faithfulness): a budget of passes through
the model, a progress callback that Stop ends at the next batch, and Stop itself."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

import gradio as gr

from ..analysis import Analysis
from ..attributions import attribution_size
from .server import Server, session_of

# Images through the model (forward and backward), counted at 224x224, that one request may cost: the UI's
# maximum settings would hold a CPU for many times longer than a class waits (docs/benchmarks.md).
BUDGET = int(os.environ.get("VITVIZ_ATTRIBUTION_BUDGET", 600))


class Stopped(gr.Error):
    """What a heavy run raises at its next batch once it is stopped. The page says so already ("Stopped."), so it
    is no user's error: every `user_errors` lets it through, and a view that it ends (`Context.view`) keeps what it
    showed, with no error on its pictures."""

    def __init__(self, message: str):
        super().__init__(message, print_exception=False)


def cost(a: Analysis, passes_at_grid) -> float:
    """Images through the model, counted at 224×224, of work on `a`'s attribution input. passes_at_grid: the
    attribution grid (gh, gw) -> images through the model."""
    h, w = attribution_size(a.model, *a.image.shape[:2])
    p = a.model.patch_size
    return passes_at_grid((h // p, w // p)) * h * w / 224**2


def within_budget(a: Analysis, passes_at_grid, what: str) -> None:
    """Refuse work that would send more images through the model (counted at 224×224) than BUDGET."""
    cost_224 = cost(a, passes_at_grid)
    if cost_224 > BUDGET:
        raise ValueError(
            f"{what} needs {cost_224:.0f} passes through the model (at 224×224), over this server's limit of {BUDGET} "
            "(VITVIZ_ATTRIBUTION_BUDGET): lower the steps or the samples"
        )


def expected(server: Server, a: Analysis, **passes_at_grid) -> str:
    """What a button says of its run before it is pressed ("about 20 s"), from the images it sends through the
    model by kind (forward=..., gradient=...: forward and backward; each a grid -> images) at this server's recent
    rate of each kind (`HeavyRuns`), after what the heavy runs under way have left: they hold the one heavy slot."""
    seconds = sum(cost(a, passes) * server.heavy.rate(kind, a.model) for kind, passes in passes_at_grid.items())
    count, left = server.heavy.ahead()
    said = f"about {_duration(seconds + left)}"
    if count:
        said += f", after {count} run{'s' * (count > 1)} under way"
    return said


def _duration(seconds: float) -> str:
    return f"{max(seconds, 1):.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


@contextmanager
def stoppable(
    server: Server,
    request: gr.Request,
    name: str,
    desc: str,
    progress,
    tab: str = "attributions",
    work: tuple[str, float] | None = None,
):
    """A progress callback for one heavy run of this session in `tab`, which ends the run at its next batch when
    that tab's Stop is pressed (or the image changes, or the page closes), and lets other users' new images
    through between batches. Each tab stops its own run: the Rollout tab's Stop leaves an attribution running.
    work: (kind, images through the model at 224×224): a run that ends well adds its rate to the server's recent
    rates of that kind, which the buttons' expected times read; its progress, while it runs, tells them what it has
    left."""
    key = (session_of(request), tab)
    stopped = server.stopped[key] = threading.Event()  # this run's; Stop sets the latest one
    run = (key, stopped)
    server.heavy.begin(run)
    start = time.perf_counter()

    def report(fraction: float) -> None:
        if stopped.is_set():
            raise Stopped(f"{name} stopped at {fraction:.0%}")
        left = server.heavy.progress(run, fraction)
        progress(fraction, desc=desc if left is None else f"{desc}: about {_duration(left)} left at this pace")
        server.priority.wait_for_interactive()

    try:
        yield report
        if work is not None and work[1] > 0:
            server.heavy.measured(work[0], (time.perf_counter() - start) / work[1])
    finally:
        server.heavy.end(run)
        server.freed.set()  # its gradients' memory goes back to the system within seconds, not at the next eviction
        if server.stopped.get(key) is stopped:  # a session keeps no event once its run is over
            del server.stopped[key]


def stop_run(server: Server, request: gr.Request, tab: str = "attributions") -> bool:
    """Stop this session's heavy run in `tab` (made under `stoppable`) at its next batch; False when none runs."""
    stopped = server.stopped.pop((session_of(request), tab), None)
    if stopped is not None:
        stopped.set()
    return stopped is not None
