"""A tab's wiring (`TabSteps`) and the step that selects it: what lets a new analysis draw the shown tab alone
(`source.Context.route`) while a hidden tab catches up when it is selected."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import gradio as gr

from .internals import take


def called_as_gradio_calls(fn: Callable, values: Sequence, request: gr.Request):
    """fn's answer to `values`, called as Gradio calls a listener: the request and a progress tracker in the places
    that its signature names them, the values in the others."""
    values, args = list(values), []
    for name, param in inspect.signature(fn).parameters.items():
        if name == "request":
            args.append(request)
        elif name == "progress":
            args.append(param.default)
        elif param.kind is inspect.Parameter.VAR_POSITIONAL:
            args, values = [*args, *values], []
        elif values:
            args.append(values.pop(0))
    return fn(*args)


@dataclass
class TabSteps:
    """What a tab's views follow: the analysis that the tab was last shown with (`fitted`: its change fits and
    redraws them), a count of the display settings' changes made while it was shown (`restyled`), what its
    selection runs where the analysis changed meanwhile (`fits`: (fn, inputs, outputs)), and what follows its
    selection (`follow`: (fn, inputs, outputs, listener arguments), the views' draws)."""

    tab: gr.Tab
    fitted: gr.State
    restyled: gr.State
    fits: list = field(default_factory=list)
    follow: list = field(default_factory=list)


def wire_selection(t: TabSteps, key: gr.State, shown: gr.State, image: gr.File) -> None:
    """The tab's selection: one step, not queued, sets `shown` and, where the analysis changed since the tab
    was shown, `fitted`, with what each of its fits gives (the views' controls fitted to the analysis, stale
    results cleared); its views' draws follow it. Gradio's page (6.31) fires no State's change from an answer
    that was not queued, so nothing runs twice; and it sends an event's own listeners one after another, each
    once the one before has its answer, but those that follow a step all at once."""
    inputs = [c for _, fit_in, _ in t.fits for c in fit_in]
    outputs = [c for _, _, fit_out in t.fits for c in fit_out]

    def choose(current, fitted_key, photo, *values):
        *values, request = values
        if current == fitted_key or not photo:  # no photo (cleared): fitted when one comes
            return (t.tab.id, gr.skip(), *(gr.skip() for _ in outputs))
        given = []
        for fn, fit_in, fit_out in t.fits:
            args, values = values[: len(fit_in)], values[len(fit_in) :]
            made = called_as_gradio_calls(fn, args, request)
            given += [made] if len(fit_out) == 1 else list(made or ())
        return (t.tab.id, current, *given)

    take(choose, ["key", "fitted", "image", *(f"fit_{i}" for i in range(len(inputs)))], progress=False)
    selected = t.tab.select(choose, [key, t.fitted, image, *inputs], [shown, t.fitted, *outputs],
                            api_visibility="private", show_progress="hidden", queue=False)  # fmt: skip
    for fn, fn_in, fn_out, kwargs in t.follow:
        selected.then(fn, fn_in, fn_out, **kwargs)
