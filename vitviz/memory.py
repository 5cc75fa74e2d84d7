"""Keep a long-running server's memory near what it holds, not what it once held.

glibc keeps freed memory: its mmap threshold rises after large frees, so later large arrays land on
the heap, and freed heap pages stay in the process, far above what the cache holds (docs/benchmarks.md).
A fixed threshold of 32 MiB (glibc's largest) sends an analysis' large arrays (attention: 150 MB at
448 px; its smaller ones stay on the heap) to mmap, which returns them to the system when freed, while a
forward pass's per-layer temporaries (25 MB at 448 px) reuse the heap: a lower threshold makes each of
them a fresh mapping to fault in, and slows the forward. Few arenas and an explicit trim after evictions
do the rest. No-ops off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import threading
from pathlib import Path

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


def _libc():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_LIBC = _libc()


def tune_malloc(mmap_threshold: int = 32 << 20, arenas: int = 2) -> bool:
    """Large blocks (>= mmap_threshold bytes) go to mmap and back to the system when freed; few arenas.
    Call once, early, before worker threads start. Returns whether glibc took the settings."""
    if _LIBC is None:
        return False
    ok = _LIBC.mallopt(_M_MMAP_THRESHOLD, mmap_threshold) == 1
    ok &= _LIBC.mallopt(_M_TRIM_THRESHOLD, 64 << 20) == 1
    return bool(ok & (_LIBC.mallopt(_M_ARENA_MAX, arenas) == 1))


def trim() -> None:
    """After a cache eviction: free what only reference cycles still hold, and give the heap back.

    Arrays caught in a cycle (a traceback, a closure) wait for Python's full collection, which object
    counts, not bytes, trigger: under load RSS rose 2.5 GiB a round until something ran one.
    """
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def lower_priority(nice: int = 19) -> bool:
    """Give the calling thread a lower CPU priority (Linux: a nice value, a per-thread attribute; 19 is the
    lowest), and with it the threads it starts from now on, which inherit it: torch's OpenMP team for the ops it
    runs. A thread already at `nice` or lower keeps its own (a server started with `nice -n 15` may not raise a
    thread's priority back to 10). False where the system refuses."""
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, max(nice, os.getpriority(os.PRIO_PROCESS, thread)))
    except (AttributeError, OSError):  # not Linux, or not allowed
        return False
    return True


def rss_bytes(pid: int | str = "self") -> int:
    """Resident set size of a process, from /proc (0 where there is no /proc)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
