"""A bounded LRU of analyses (and depth results), so that many users uploading images cannot exhaust memory."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Protocol


class Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


def shed(item: Sized, keep_mean: bool) -> int:
    """Free what `item` can recompute (see `Analysis.shed`); 0 for an item that cannot."""
    method = getattr(item, "shed", None)
    return method(keep_mean) if method is not None else 0


class AnalysisCache:
    """LRU over analyses with a total memory cap and a per-session entry cap.

    Keys are (session, ...) tuples. Over the cap, the oldest entries first shed what they recompute without a
    forward (an analysis's max and min fused heads, then its mean ones); only then are the oldest evicted. An
    evicted analysis is simply recomputed (one forward) the next time its session asks for it. The newest entry
    is always kept whole.
    """

    def __init__(self, max_bytes: int, per_session: int = 2) -> None:
        self.max_bytes = max_bytes
        self.per_session = per_session
        self._items: OrderedDict[tuple, Sized] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> Sized | None:
        with self._lock:
            a = self._items.get(key)
            if a is not None:
                self._items.move_to_end(key)
            return a

    def put(self, key: tuple, analysis: Sized) -> int:
        """Keep `analysis` under `key`; returns how many older entries were evicted or shed for it."""
        with self._lock:
            self._items[key] = analysis
            self._items.move_to_end(key)
            return self._evict(key[0])

    def _evict(self, session: Hashable) -> int:
        before = len(self._items)
        mine = [k for k in self._items if k[0] == session]
        for k in mine[: max(0, len(mine) - self.per_session)]:
            del self._items[k]
        return before - len(self._items) + self._fit()

    def _fit(self) -> int:
        """Shed, then evict, the oldest until the total is under the cap; returns how many entries were."""
        # Lazily filled caches (fused heads, views) grow entries, so sizes are read now.
        total, before, touched = self.nbytes, len(self._items), 0
        newest = next(reversed(self._items.values()), None)
        older = {id(a): a for a in self._items.values() if a is not newest}.values()  # a shared one once
        for keep_mean in (True, False):
            for item in list(older):
                if total <= self.max_bytes:
                    return touched
                freed = shed(item, keep_mean)
                total, touched = total - freed, touched + (freed > 0)
        while len(self._items) > 1 and self.nbytes > self.max_bytes:
            self._items.popitem(last=False)
        return touched + before - len(self._items)

    def enforce_cap(self) -> int:
        """Shed, then evict, the oldest entries until the total is under the cap again, after entries grew in
        place (a background warm fills fused heads into analyses already cached); returns how many were."""
        with self._lock:
            return self._fit()

    def find(self, rest: tuple) -> Sized | None:
        """The newest entry of any session whose key is (session, *rest): another user's analysis of the same
        photo, model and size, which every session may share (the same bytes give the same analysis)."""
        with self._lock:
            return next((a for k, a in reversed(self._items.items()) if k[1:] == rest), None)

    def drop(self, key: tuple) -> Sized | None:
        """Let the entry under `key` go (as an eviction would); returns it, or None where there was none."""
        with self._lock:
            return self._items.pop(key, None)

    def items(self) -> list[tuple[tuple, Sized]]:
        """(key, entry) pairs, oldest first: a snapshot, which entries added or evicted meanwhile leave as it is."""
        with self._lock:
            return list(self._items.items())

    def holds(self, item: Sized) -> bool:
        """Whether `item` itself (not an equal one) is still cached."""
        with self._lock:
            return any(a is item for a in self._items.values())

    @property
    def nbytes(self) -> int:
        """The bytes of the entries, each counted once however many sessions share it."""
        return sum(a.nbytes for a in {id(a): a for a in self._items.values()}.values())

    def __len__(self) -> int:
        return len(self._items)
