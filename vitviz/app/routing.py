"""A tab's wiring (`TabSteps`) and the steps that route to it, all in the page: a new analysis and a display
setting reach the shown tab's views alone (`wire_routes`), and a hidden tab catches up when it is selected.

Why in the page: a routing step on the server cost an upload one more round trip between the analysis and its
first view (docs/benchmarks.md). A State lives on the server, where the page cannot read or set it, so what
the page routes by is kept in hidden components: the analysis key as the page saw it, the shown tab, and each
tab's `fitted` key and `restyled` count."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import gradio as gr
from gradio.events import Dependency

NOTHING = "() => []"  # a step in the page: no request; what follows it with `.then` is sent all at once


@dataclass
class TabSteps:
    """What a tab's views follow: the analysis that the tab was last shown with (`fitted`, whose change fits and
    redraws them: `on_fitted`) and a count of the display settings' changes made while it was shown, or of its
    selections (`restyled`, whose change redraws them: `on_restyled`). Each change has one step in the page, and
    every view follows it with `.then`: Gradio's page (6.31) sends an event's own listeners one after another,
    each once the one before has its answer, but those that follow a step all at once."""

    tab: gr.Tab
    fitted: gr.Textbox
    restyled: gr.Number
    on_fitted: Dependency = field(init=False)
    on_restyled: Dependency = field(init=False)

    @classmethod
    def made_in(cls, tab: gr.Tab) -> TabSteps:
        with tab:
            steps = cls(tab, gr.Textbox("", visible=False), gr.Number(0, visible=False))
        hidden = dict(api_visibility="private", queue=False, show_progress="hidden")
        steps.on_fitted = steps.fitted.change(None, js=NOTHING, **hidden)
        steps.on_restyled = steps.restyled.change(None, js=NOTHING, **hidden)
        return steps


def wire_routes(tabs: Sequence[TabSteps], seen: gr.Textbox, shown: gr.Textbox, image: gr.File, display) -> None:
    """Route in the page: a new analysis key (`seen`) sets the shown tab's `fitted`; a display setting's change
    (`display`: Context.on_display) counts the shown tab's `restyled`; selecting a tab sets `shown` and, where the
    analysis changed since the tab was shown and a photo is in, its `fitted`, else counts its `restyled`. A
    component set to the value it holds fires no change, so the other tabs' views send nothing."""
    ids = json.dumps([t.tab.id for t in tabs])
    page = dict(api_visibility="private", queue=False, show_progress="hidden")
    fitted, restyled = [t.fitted for t in tabs], [t.restyled for t in tabs]
    seen.change(
        None,
        [shown, seen, *fitted],
        fitted,  # "": the photo was cleared
        js=f"(shown, key, ...fitted) => {ids}.map((id, i) => id === shown && key ? key : fitted[i])",
        **page,
    )
    display(
        None,
        [shown, *restyled],
        restyled,
        js=f"(shown, ...counts) => {ids}.map((id, i) => counts[i] + (id === shown))",
        **page,
    )
    for t in tabs:  # no key yet (the page's first tab, as it appears) or no photo: nothing to draw
        select = f"(key, fitted, count, photo) => [{json.dumps(t.tab.id)}, "
        select += "...(!key || !photo ? [fitted, count] : key !== fitted ? [key, count] : [fitted, count + 1])]"
        t.tab.select(None, [seen, t.fitted, t.restyled, image], [shown, t.fitted, t.restyled], js=select, **page)
