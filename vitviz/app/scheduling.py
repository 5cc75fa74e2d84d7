"""Who goes first on a shared CPU or GPU: the priorities between requests and background work, each kind of work's
concurrency slots, the threads' CPU nice values, the micro-batcher that new images may share a forward in, and the
heavy runs' rates and queue that say how long the next one waits."""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from contextlib import contextmanager

import torch

from ..batching import Batcher
from ..models import resolve_device


class Priority:
    """Work that someone waits for goes first: background work pauses between its steps while one runs."""

    def __init__(self) -> None:
        self._running = 0
        self._ended = 0
        self._changed = threading.Condition()

    @contextmanager
    def interactive(self):
        with self._changed:
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._ended += 1
                self._changed.notify_all()

    @property
    def running(self) -> int:
        """How many `interactive()` sections are under way."""
        return self._running

    @property
    def ended(self) -> int:
        """How many `interactive()` sections have ended since it was made (the janitor trims after them)."""
        return self._ended

    def wait_for_interactive(self, timeout: float = 60.0) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._running == 0, timeout)


# CPU priorities (nice values, per thread): a redraw that someone waits for (0) before a new image's forward, and
# the forward before the background warm (docs/benchmarks.md, a class of 30).
FORWARD_NICE, WARM_NICE = 10, 19
BATCH_MAX = 8  # the most new images that go through the model as one batch (see `batcher`)
BATCH_MS_ON_GPU = 2.0  # how long a new image waits for others to join it, where "auto" batches


def batcher(batch_ms: str, device: str) -> Batcher | None:
    """The micro-batcher that VITVIZ_BATCH_MS asks for: "off"; "auto", which batches on a GPU and not on a CPU,
    where a batch is no faster than its images one by one (docs/benchmarks.md); or a window in milliseconds."""
    if batch_ms == "auto":
        batch_ms = str(BATCH_MS_ON_GPU) if resolve_device(device).type == "cuda" else "off"
    if batch_ms == "off":
        return None
    try:
        window = float(batch_ms)
    except ValueError:
        raise ValueError(f"VITVIZ_BATCH_MS must be 'auto', 'off' or milliseconds, got {batch_ms!r}") from None
    return Batcher(window / 1000, BATCH_MAX)


# Each kind of work has its own concurrency slots: a new image's forward pass never waits behind
# minutes of attributions or depth, and cheap redraws never wait behind either.
SLOTS = {"forward": 2, "draw": 4, "heavy": 1}


def slots(kind: str, server=None) -> dict:
    """The event-listener arguments that put an event in one group of concurrency slots. A server that batches
    new images lets as many forwards in as a batch holds: they wait in its batch, not in Gradio's queue."""
    batching = kind == "forward" and server is not None and server.batcher is not None
    return {"concurrency_id": kind, "concurrency_limit": BATCH_MAX if batching else SLOTS[kind]}


def queue_full(waiting: int, ahead: int, eta_s: float | None) -> str:
    """What a request that a full queue refuses is told (`internals.say_when_full`), the place and the wait first (a
    toast shows the start of it): where it would have stood in its line, and when it would have been answered, by
    the average time of the requests answered so far."""
    place = f"Too busy: yours would be number {ahead + 1} in line"
    full = f"{waiting} requests wait, the most this server queues"
    if eta_s is None:
        return f"{place}; {full}. None of its kind has been answered yet, so there is no estimate: try again soon."
    minutes, seconds = divmod(round(eta_s), 60)
    wait = f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
    return (
        f"{place}, answered in about {wait}; {full}. Try again in {wait}. (The wait is a rough estimate, from the "
        f"average time of the requests answered so far.)"
    )


KINDS = ("forward", "gradient")  # images through the model forward only, and forward then backward


class HeavyRuns:
    """This server's heavy runs, as its buttons' times read them: each kind's recent rates (seconds per image at
    224×224, the median of the last RECENT runs that ended well, or until one has, a probe of one image through
    the model timed here) and the runs under way with their progress, so that a button says how long its run takes
    here now, after what the runs ahead of it have left. No rate is a constant."""

    RECENT = 5

    def __init__(self) -> None:
        self._rates = {kind: deque(maxlen=self.RECENT) for kind in KINDS}
        self._probed: dict[str, float] = {}
        self._running: dict[tuple, tuple[float, float]] = {}  # run -> (its start, its fraction done)
        self._lock = threading.Lock()

    def rate(self, kind: str, model) -> float:
        """Seconds per image of `kind` here: the recent runs' median, or the probe of `model` until a run ends."""
        with self._lock:
            recent = list(self._rates[kind])
        return statistics.median(recent) if recent else self._probe(kind, model)

    def runs(self, kind: str) -> int:
        """How many recent runs the rate of `kind` rests on (0: the probe)."""
        with self._lock:
            return len(self._rates[kind])

    def measured(self, kind: str, seconds_per_image: float) -> None:
        with self._lock:
            self._rates[kind].append(seconds_per_image)

    def _probe(self, kind: str, model) -> float:
        """One 224×224 image through `model`, forward only or forward and backward (a gradient to the input only,
        so the weights' own gradients stay empty), timed once per kind."""
        if kind not in self._probed:
            x = torch.zeros(1, 3, 224, 224, device=model.device, requires_grad=kind == "gradient")
            with model.lock:
                start = time.perf_counter()
                if kind == "gradient":
                    out = model.forward(x, attentions=lambda layer, weights: None, grad=True)
                    torch.autograd.grad(out.hidden_states[-1].float().sum(), x)
                else:
                    model.forward(x, attentions=lambda layer, weights: None)
                self._probed[kind] = time.perf_counter() - start
        return self._probed[kind]

    def begin(self, run: tuple) -> None:
        with self._lock:
            self._running[run] = (time.perf_counter(), 0.0)

    def progress(self, run: tuple, fraction: float) -> float | None:
        """Record a run's progress; the seconds it has left at its pace so far (None before any)."""
        with self._lock:
            start, _ = self._running.get(run, (time.perf_counter(), 0.0))
            self._running[run] = (start, fraction)
        elapsed = time.perf_counter() - start
        return elapsed * (1 - fraction) / fraction if fraction > 0 else None

    def end(self, run: tuple) -> None:
        with self._lock:
            self._running.pop(run, None)

    def ahead(self) -> tuple[int, float]:
        """The runs under way and the seconds they have left at their own pace so far (a run not yet begun to
        report counts the time it has run, a guess of the same again)."""
        now = time.perf_counter()
        with self._lock:
            running = list(self._running.values())
        left = [(now - start) * ((1 - f) / f if f > 0 else 1.0) for start, f in running]
        return len(left), sum(left)
