"""The code's shape, where a linter has no rule for it: the browser's lines and the functions' parameters."""

from __future__ import annotations

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
