"""The process-level helpers: a thread's CPU priority."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import torch

from vitviz import memory


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's nice value is Linux's")
def test_a_lower_priority_is_the_calling_threads_and_the_threads_it_starts_then():
    """nice 19 for the thread that asks and for the threads it starts afterwards (torch's OpenMP team for the ops
    it runs among them), and no other thread's changes (the process' own nice value: `nice -n 10 pytest`)."""
    before, own = set(os.listdir("/proc/self/task")), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = {}

    def background():
        seen["set"] = memory.lower_priority(19)
        seen["self"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        child = threading.Thread(target=lambda: seen.update(child=os.getpriority(os.PRIO_PROCESS, 0)))
        child.start()
        child.join()
        x = torch.randn(512, 512)
        (x @ x).sum()  # a parallel op: its team's threads start here
        seen["team"] = torch.get_num_threads()  # this thread's (1 where a test set one thread for new ones)
        mine = str(threading.get_native_id())
        # read while this thread lives: its team may end with it (the listing raced that end: 2 runs in 3 failed)
        seen["started"] = {t: nice(int(t)) for t in set(os.listdir("/proc/self/task")) - before - {mine}}

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    team, started = seen.pop("team"), seen.pop("started")
    assert seen == {"set": True, "self": 19, "child": 19}
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own
    if team > 1:
        assert 19 in started.values(), started


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's nice value is Linux's")
def test_a_lower_priority_never_asks_for_a_higher_one():
    """A thread already at nice 15 asked for 10 stays at 15: it is asked for a priority no higher than it has (a
    user may not raise one back; root may, and must not either)."""
    seen = {}

    def background():
        seen["start"] = memory.lower_priority(15)
        seen["again"] = memory.lower_priority(10)
        seen["now"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    thread = threading.Thread(target=background)
    thread.start()
    thread.join()
    assert seen == {"start": True, "again": True, "now": max(15, os.getpriority(os.PRIO_PROCESS, 0))}


def nice(thread_id: int) -> int | None:
    """A thread's nice value; None for a thread that has ended since it was listed (another test's)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, thread_id)
    except ProcessLookupError:
        return None
