"""vitviz.blas: NumPy's OpenBLAS set to one thread, in a process of its own (the setting is the process's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """import json, numpy
from vitviz import blas
before = blas.threads()
took = blas.one_thread()
print(json.dumps([before, took, blas.threads()]))"""


def test_one_thread_sets_numpys_openblas_to_one_thread_from_two():
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}  # two to start from, whatever this machine's cores
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    before, took, after = json.loads(out.stdout)
    assert before == [2] and took and after == [1]


def test_the_app_sets_one_thread_in_its_main_before_it_serves():
    import inspect

    from vitviz import app

    source = inspect.getsource(app.main)
    assert source.index("blas.one_thread()") < source.index("demo.launch(")
