"""The app's tabs, in order: one `Tab` record each, the table of contents that everything listing the tabs reads
(the layout, the README's tour, the API table's check, the first-screen test and the screenshots tool)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FirstScreen:
    """What a tab's first screen shows whole, after choosing the tab: its controls and its main pictures (CSS
    selectors in the app's page), and `ready`, a JavaScript predicate that is true once the pictures are drawn
    (None: they are drawn when the tab's images have loaded)."""

    controls: tuple[str, ...] = ()
    pictures: tuple[str, ...] = ()
    ready: str | None = None


@dataclass(frozen=True)
class Tab:
    """One tab: its id (the app module `vitviz/app/tabs/<id>.py`, its drawing's `vitviz/views/<id>.py` where it has
    one, and the page's tab id), the title its bar shows, the HTTP API's endpoints its handlers expose, and its first
    screen, or why no first-screen test can measure it (`exempt`, naming the test that does instead)."""

    id: str
    title: str
    endpoints: tuple[str, ...] = ()
    first_screen: FirstScreen | None = None
    exempt: str | None = None


TABS = (
    Tab("tokens", "Tokens", ("tokens",), FirstScreen(pictures=("#tokens img",))),
    Tab(
        "attention",
        "Attention",
        ("explorer", "attention"),
        FirstScreen(
            ("#explorer .vx-bar",),
            ("#explorer .vx-big-canvas",),
            "() => window.vitviz?.explorer?.state().loaded.length > 0",
        ),
    ),
    Tab(
        "inside",
        "Inside a head",
        ("inside_head",),
        FirstScreen(
            ("#inside-explorer .vx-bar",),
            ("#inside-explorer .vx-big-canvas",),
            "() => window.vitviz?.inside?.state().loaded.length > 0",
        ),
    ),
    Tab(
        "qk",
        "Queries & keys",
        ("qk",),
        # the map's top canvas, the pointer's, over the one its points are drawn on and of the same size
        FirstScreen(("#qk .qk-bar",), ("#qk .qk-over",), "() => window.vitviz?.qk?.state().points > 0"),
    ),
    Tab(
        "rollout",
        "Rollout",
        ("rollout", "rollout_faithfulness"),
        FirstScreen(("#rollout-fusion", "#rollout-toward"), ("#rollout img",)),
    ),
    Tab(
        "positions",
        "Positions",
        ("position_embeddings", "position_map"),
        FirstScreen(("#pos-row", "#pos-col"), ("#pos-large img",)),
    ),
    Tab(
        "heads",
        "Heads",
        ("heads",),
        FirstScreen(
            pictures=("#heads-charts .js-plotly-plot",),
            ready="() => document.querySelector('#heads-charts .main-svg') && document.querySelector('#norms img')",
        ),
    ),
    Tab(
        "output",
        "Output",
        ("output", "lens"),
        FirstScreen(pictures=("#dense img",), ready="() => document.querySelector('#dense img')"),
    ),
    Tab(
        "depth",
        "Depth",
        ("depth", "depth_attention"),
        FirstScreen(("#depth-note", "#depth-model", "#depth-tab button.primary")),  # offline: no map to draw
    ),
    Tab(
        "attributions",
        "Attributions",
        ("attribute", "faithfulness", "sanity"),
        FirstScreen(("#method", "#attributions-tab button.primary"), ("#attribution img",)),
    ),
    Tab(
        "live",
        "Live",
        exempt="it needs a camera: test_browser's live projector test plays a fake one and measures its first screen",
    ),
    Tab(
        "lesson",
        "Lesson",
        ("lesson",),
        FirstScreen(("#lesson-title", "#lesson-back", "#lesson-step", "#lesson-next"), ("#lesson-picture img",)),
    ),
    Tab(
        "whatif",
        "What if",
        ("ablate", "importance"),
        FirstScreen(("#whatif-target", "#whatif-run"), ("#whatif-tiles img",)),
    ),
)
BY_ID = {tab.id: tab for tab in TABS}
ORDER = tuple(BY_ID)


def number(tab: str) -> int:
    """The tab's number, from 1."""
    return ORDER.index(tab) + 1


def label(tab: str) -> str:
    """What the tab bar shows, e.g. "3 · Inside a head"."""
    return f"{number(tab)} · {BY_ID[tab].title}"
