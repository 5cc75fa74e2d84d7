"""NumPy's BLAS and LAPACK on one thread, for a server whose cores its requests share.

OpenBLAS's threads spin while they wait for work. Where more threads want the cores than there are (a class's
forwards, draws and background warm on 2 cores), a multithreaded call waits for its spinning partners: the Heads
view's PCA (an eigendecomposition of 384 x 384) took 0.7 to 6 s under such a load, and 0.09 to 0.14 s on one
thread (docs/benchmarks.md). torch's forward keeps its own threads: this changes NumPy's alone.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

# OpenBLAS's setter under the names it is built with: NumPy's wheels (scipy-openblas, 64-bit integers), and plain
SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads")
GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads")


def _openblas_libraries() -> list[str]:
    """The paths of the OpenBLAS libraries loaded in this process (Linux: from /proc/self/maps)."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return []
    paths = {line.split()[-1] for line in maps.read_text().splitlines() if "openblas" in line.rsplit("/", 1)[-1]}
    return sorted(p for p in paths if p.startswith("/"))


def _call(path: str, names: tuple[str, ...], *args: int) -> int | None:
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            return fn(*args)
    return None


def threads() -> list[int]:
    """How many threads each loaded OpenBLAS uses now."""
    return [n for p in _openblas_libraries() if (n := _call(p, GETTERS)) is not None]


def one_thread() -> bool:
    """Run NumPy's loaded OpenBLAS on one thread from now on. Call once, early, in a server's main; a library
    import never calls it. Returns whether an OpenBLAS took the setting (False where none is loaded)."""
    paths = _openblas_libraries()
    for path in paths:
        _call(path, SETTERS, 1)
    return bool(paths) and all(n == 1 for n in threads())
