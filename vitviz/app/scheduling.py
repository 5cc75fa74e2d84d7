"""Who goes first on a shared CPU or GPU: the priorities between requests and background work, each kind of work's
concurrency slots, the threads' CPU nice values and the micro-batcher that new images may share a forward in."""

from __future__ import annotations

import threading
from contextlib import contextmanager

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
