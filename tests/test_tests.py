"""The tests themselves: they observe vitviz through its public API, never through a private attribute."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CALLS_WITH_A_NAME = {"getattr", "setattr", "hasattr", "delattr"}  # and monkeypatch's setattr, delattr


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def vitviz_private_names(package: Path = ROOT / "vitviz") -> set[str]:
    """Every private name that vitviz defines: functions, classes, module globals, class fields and the attributes
    its methods set on `self`."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for part in ast.walk(target):
                        if isinstance(part, ast.Name):
                            names.add(part.id)
                        elif isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name):
                            names.add(part.attr) if part.value.id == "self" else None
    return {n for n in names if _private(n)}


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def private_reads(source: str, private: set[str]) -> list[tuple[int, str]]:
    """(line, what) for each place in `source` that reads or writes a private vitviz name: `obj._name` (unless obj
    is a module other than vitviz's, imported as such: numpy's, pytest's, Gradio's), getattr(obj, "_name") and its
    kin, monkeypatch.setattr(obj, "_name", ...), obj.__dict__["_name"], vars(obj)["_name"], "_name" in vars(obj),
    and `from vitviz... import _name`."""
    tree = ast.parse(source)
    foreign = set()  # names bound to modules or objects imported from outside vitviz
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            foreign |= {(a.asname or a.name).split(".")[0] for a in node.names if not a.name.startswith("vitviz")}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith("vitviz"):
                found += [(node.lineno, f"import {a.name}") for a in node.names if a.name in private]
            elif module != "conftest" and node.level == 0:
                foreign |= {a.asname or a.name for a in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in private and _root(node.value) not in foreign:
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in CALLS_WITH_A_NAME and len(node.args) >= 2 and _root(node.args[0]) not in foreign:
                arg = node.args[1]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value in private:
                    found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, (ast.Subscript, ast.Compare)):
            keys = [node.slice] if isinstance(node, ast.Subscript) else [node.left]
            for key in keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value in private:
                    found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_test_reads_a_private_attribute_of_a_vitviz_object():
    private = vitviz_private_names()
    assert {"_rollouts", "_thresholds", "_items", "_digests", "_threads", "_roll"} <= private
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line, what in private_reads(path.read_text(), private)
    ]
    assert found == [], "tests read private attributes; give the class a public counter or result:\n" + "\n".join(found)


def test_the_check_finds_each_kind_of_read_and_leaves_other_libraries_alone():
    private = {"_rollouts", "_items", "_fmt"}
    source = """
import numpy as np
import pytest
from gradio import processing_utils
from vitviz.render import _fmt
from vitviz import render
a._rollouts.clear()
cache._items.pop(1)
render._fmt(2)
getattr(a, "_rollouts")
monkeypatch.setattr(a, "_items", {})
assert "_rollouts" in vars(a)
x = a.__dict__["_rollouts"]
np._rollouts
processing_utils._items
pytest.approx(1)._items
a.__class__
a.rollouts
"""
    lines = sorted({line for line, _ in private_reads(source, private)})
    assert lines == [5, 7, 8, 9, 10, 11, 12, 13]


def test_a_test_not_marked_app_cannot_start_a_server():
    """conftest's guard: Gradio's launch and the app as a process refuse to start for a test not marked `app`."""
    import conftest
    import pytest
    from support import harness

    class Item:
        nodeid = "tests/test_x.py::test_x"

        def __init__(self, marked: bool) -> None:
            self.marked = marked

        def get_closest_marker(self, name: str):
            return object() if self.marked and name == "app" else None

    class Blocks:
        def launch(self) -> str:
            return "served"

    conftest.guard_launch(Blocks)
    conftest.guard_launch(Blocks)  # once, never wrapped twice
    running = conftest.RUNNING[0]
    try:
        conftest.RUNNING[0] = Item(marked=False)
        with pytest.raises(RuntimeError, match="test_x starts a Gradio server: mark it @pytest.mark.app"):
            Blocks().launch()
        with pytest.raises(RuntimeError, match="starts the app as a process"), harness.running_app():
            pass
        conftest.RUNNING[0] = Item(marked=True)
        assert Blocks().launch() == "served"
    finally:
        conftest.RUNNING[0] = running


@pytest.mark.slow  # it collects the whole suite: 13 s on 2 cores
def test_the_quick_tier_collects_no_test_that_serves_the_app():
    import subprocess
    import sys

    files = ["tests/test_ui.py", "tests/test_serve.py", "tests/test_cli.py", "tests/test_qk.py"]
    quick = "not slow and not browser and not package"
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", quick, *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = [line for line in ran.stdout.splitlines() if "::" in line]
    assert collected, ran.stdout + ran.stderr
    served = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "app", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    apps = {line for line in served.stdout.splitlines() if "::" in line}
    assert "tests/test_ui.py::test_api_is_typed_and_named" in apps
    assert "tests/test_cli.py::test_serve_says_it_is_loading_before_it_loads" in apps
    assert not apps & set(collected)


def test_the_size_report_lists_the_longest_modules_and_functions_first(tmp_path):
    """Module sizes are reported (`python -m tools.sizes`), not held to a line count, which squeezed code to fit."""
    from tools import sizes

    package = tmp_path / "vitviz"
    package.mkdir()
    (package / "short.py").write_text("def a():\n    return 1\n")
    (package / "long.py").write_text("def b():\n" + "    x = 1\n" * 30 + "    return x\n\n\ndef c():\n    return 2\n")
    (package / "page.js").write_text("let a;\n" * 12)
    assert [name for _, name in sizes.modules(tmp_path)] == ["vitviz/long.py", "vitviz/page.js", "vitviz/short.py"]
    assert sizes.functions(tmp_path)[0] == (32, "vitviz/long.py:b")
    text = sizes.report(2, tmp_path)
    modules_part = text.split("the longest functions:")[0]
    assert modules_part.index("vitviz/long.py") < modules_part.index("vitviz/page.js")
    assert "vitviz/short.py" not in modules_part  # two rows asked
