"""Where a benchmark's threads spend their time, for a machine without py-spy (a lent GPU machine carries no
tools): `with Stacks() as stacks: ...`, then `stacks.report()`. A sampler thread reads every other thread's
Python stack each `every_s` (`sys._current_frames`) and counts, per kind of thread (its name without its
number), the functions on the stack (cumulative) and the line at its top (self). A thread waiting in C (a lock,
a sleep, a CUDA call) counts at the Python line that called it."""

from __future__ import annotations

import re
import sys
import threading
from collections import Counter
from pathlib import Path

ROOT = f"{Path(__file__).resolve().parents[1]}/"  # the repository's folder, left out of its files' names


def _where(frame) -> str:
    code = frame.f_code
    path = re.sub(r".*/(site-packages|python3\.\d+)/", "", code.co_filename).removeprefix(ROOT)
    return f"{path}:{code.co_name}"


class Stacks:
    def __init__(self, every_s: float = 0.02) -> None:
        self.every_s = every_s
        self.samples: Counter[str] = Counter()
        self.cumulative: Counter[tuple[str, str]] = Counter()
        self.top: Counter[tuple[str, str]] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stacks", daemon=True)

    def __enter__(self) -> Stacks:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            names = {t.ident: re.sub(r"-\d+", "", t.name) for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                kind = names.get(ident, "?")
                if ident == threading.get_ident() or kind == "MainThread":
                    continue
                self.samples[kind] += 1
                self.top[kind, f"{_where(frame)}:{frame.f_lineno}"] += 1
                seen = set()
                while frame is not None:
                    if not frame.f_code.co_filename.endswith("threading.py"):
                        seen.add(_where(frame))
                    frame = frame.f_back
                self.cumulative.update((kind, where) for where in seen)

    def report(self, rows: int = 25) -> None:
        """Prints, per kind of thread, the share of its samples in each function (cumulative) and at each line
        (self), largest first."""
        for kind, n in self.samples.most_common():
            print(f"thread kind {kind!r}: {n} samples, every {self.every_s * 1000:.0f} ms")
            for title, counts in (("cumulative", self.cumulative), ("self (top line)", self.top)):
                print(f"  {title}:")
                mine = Counter({where: c for (k, where), c in counts.items() if k == kind})
                for where, c in mine.most_common(rows):
                    print(f"    {100 * c / n:5.1f} %  {where}")
