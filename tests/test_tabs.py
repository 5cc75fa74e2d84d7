"""The tabs' numbers and titles, and the README's account of them."""

from __future__ import annotations

import re
from pathlib import Path

from vitviz import tabs


def test_the_readme_names_every_tab_as_the_tab_bar_does_in_its_order():
    """The README's tour opens each tab's paragraph with its label ("**3 · Inside a head.**"): a tab added or moved
    renumbers the others there too."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    headings = re.findall(r"^\*\*(\d+ · [^.:*]+)[.:]", readme, flags=re.MULTILINE)
    assert headings == [tabs.label(t) for t in tabs.ORDER]
