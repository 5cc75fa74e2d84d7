"""The longest modules and functions of the package, as a report, not a rule: `python -m tools.sizes [--most N]`.

A module near the top is a question (is it one room with one purpose?), never a reason to inline a helper or pack
lines. Python's functions are measured from their `def` to their last line (ast); JavaScript counts files only."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(root: Path = ROOT) -> list[tuple[int, str]]:
    """(lines, path) of every .py and .js file of the package, longest first."""
    files = [*(root / "vitviz").rglob("*.py"), *(root / "vitviz").rglob("*.js")]
    sized = [(len(p.read_text().splitlines()), p.relative_to(root).as_posix()) for p in files if p.is_file()]
    return sorted(sized, reverse=True)


def functions(root: Path = ROOT) -> list[tuple[int, str]]:
    """(lines, path:name) of every Python function and method of the package, longest first."""
    found = []
    for path in (root / "vitviz").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(root).as_posix()}:{node.name}"))
    return sorted(found, reverse=True)


def report(most: int = 10, root: Path = ROOT) -> str:
    rows = ["the longest modules:", *(f"  {n:5d}  {name}" for n, name in modules(root)[:most])]
    rows += ["the longest functions:", *(f"  {n:5d}  {name}" for n, name in functions(root)[:most])]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--most", type=int, default=10)
    print(report(parser.parse_args(argv).most))


if __name__ == "__main__":
    main()
