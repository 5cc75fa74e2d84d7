"""The code's shape, where a linter has no rule for it: the browser's lines and the functions' parameters."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROWSER_CODE = [*(ROOT / "vitviz" / "static").glob("*.js"), *(ROOT / "vitviz" / "site" / "page").glob("*.js")]


def test_no_line_of_the_browsers_code_is_over_120_characters():
    """Biome's formatter (biome.jsonc, in CI) wraps code at 120 but leaves a long string or comment as it is."""
    long = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in BROWSER_CODE
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if len(line) > 120
    ]
    assert BROWSER_CODE and long == []


# Functions that take more still, each waiting for its own change (#62), which another part of the code must make
# first: the list only shrinks.
WAITING = {
    # a method's options reach `attribute` through **options already; the output's arguments (target, box, text,
    # size) and the curves' (steps, replacement, random orders, seed, batch) are to become records
    "vitviz/deletion.py:faithfulness": "waits, with random_band, for an output's arguments to become one record",
    # the random orders take faithfulness' arguments for one output (its target, box, text, size): one record with it
    "vitviz/deletion.py:random_band": "waits, with faithfulness, for an output's arguments to become one record",
    # #63's keyword call (heads=, mode=, patches=, ...): its parts are an `Ablation` record already
    "vitviz/ablation.py:ablate": "waits to take its `Ablation` record as one argument beside the issue's keywords",
    # the Live tab's camera stream is wired by hand, not by `Context.view`, which makes the records
    "vitviz/app/tabs/live.py:frame": "waits for its stream to be wired by Context.view",
    # the display settings (cmap, alpha, scale) are to become one record
    "vitviz/views/common.py:scaled_overlay": "waits for the views' display settings to become one record",
}
MOST_PARAMETERS = 10


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> list[str]:
    """What a caller passes: every named parameter but a method's `self` or `cls`."""
    a = node.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg not in ("self", "cls")]


def crowded(package: Path = ROOT / "vitviz") -> dict[str, int]:
    """Every function (and lambda) of the package with more than MOST_PARAMETERS parameters, by file:name."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                count = len(parameters(node))
                if count > MOST_PARAMETERS:
                    found[f"{path.relative_to(package.parent)}:{getattr(node, 'name', 'lambda')}"] = count
    return found


def test_no_function_takes_more_than_ten_parameters():
    """A handler takes a settings record (`vitviz.app.context.Clicks`, `Progress`, or a record its draw declares);
    a function that needs more is a sign that a record is missing. The waiting list only shrinks: an entry that
    no longer takes more must go."""
    found = crowded()
    assert {name: n for name, n in found.items() if name not in WAITING} == {}
    assert set(WAITING) <= set(found), "take these off WAITING: " + ", ".join(set(WAITING) - set(found))


def test_the_parameter_count_sees_every_kind_of_parameter(tmp_path):
    (tmp_path / "vitviz").mkdir()
    (tmp_path / "vitviz" / "m.py").write_text(
        "def wide(a, b, /, c, d, *rest, e, f, g, h, i, j, k, **kw): pass\n"
        "class C:\n    def method(self, a, b, c, d, e, f, g, h, i, j): pass\n"
        "f = lambda a, b, c, d, e, f, g, h, i, j, k: 0\n"
    )
    assert crowded(tmp_path / "vitviz") == {"vitviz/m.py:wide": 11, "vitviz/m.py:lambda": 11}


# #62's rule for the browser's code: a module of at most MOST_LINES lines, with one purpose. Files still longer, each
# waiting for its own split: the list only shrinks (it is empty since qkmath.js became three modules).
MOST_LINES = 250
LONG_WAITING: dict[str, str] = {}


def test_no_module_of_the_browsers_code_is_over_250_lines():
    long = {
        path.relative_to(ROOT).as_posix(): n
        for path in BROWSER_CODE
        if (n := len(path.read_text().splitlines())) > MOST_LINES
    }
    assert {name: n for name, n in long.items() if name not in LONG_WAITING} == {}
    assert set(LONG_WAITING) <= set(long), "take these off LONG_WAITING: " + ", ".join(set(LONG_WAITING) - set(long))
