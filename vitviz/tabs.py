"""The app's tabs, in order: their numbers and titles are defined here once, and every label, sentence and test
that names a tab asks this module."""

from __future__ import annotations

TITLES = {
    "tokens": "Tokens",
    "attention": "Attention",
    "inside": "Inside a head",
    "qk": "Queries & keys",
    "rollout": "Rollout",
    "positions": "Positions",
    "heads": "Heads",
    "output": "Output",
    "depth": "Depth",
    "attributions": "Attributions",
    "live": "Live",
    "lesson": "Lesson",
}
ORDER = tuple(TITLES)


def number(tab: str) -> int:
    """The tab's number, from 1."""
    return ORDER.index(tab) + 1


def label(tab: str) -> str:
    """What the tab bar shows, e.g. "3 · Inside a head"."""
    return f"{number(tab)} · {TITLES[tab]}"
