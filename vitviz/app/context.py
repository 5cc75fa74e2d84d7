"""The context the views draw from: the components every view reads, and `Context.view`, the wiring of one view.

Each view draws when its tab is shown and its inputs changed, and is otherwise left stale until its tab is
selected, so an upload draws one view, not all of them (`routing`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import gradio as gr
from gradio.events import Dependency

from .. import VitModel, tabs
from ..render import large_labels
from .heavy import Stopped
from .internals import take
from .routing import NOTHING, TabSteps, wire_routes
from .scheduling import slots
from .server import Server, user_errors

# A phone shows pictures at half their size or less: their labels are drawn large there, as in the projector mode.
PHONE = "window.innerWidth < 600"


@dataclass(frozen=True)
class Clicks:
    """Pictures (`picture(clickable=True)`) whose click sets some of a view's inputs and redraws it in the same
    answer, one round trip: locate(a, x, y) -> the values of the inputs `picked`, or None where the click picks
    nothing. Those inputs' triggers are then `.input` events, which a click's setting does not fire."""

    pictures: Sequence[gr.Image]
    locate: Callable
    picked: Sequence


@dataclass(frozen=True)
class Progress:
    """How a view's progress shows ("minimal", "full", "hidden"), and on which component (None: its first output
    shown, `internals.narrow_progress`)."""

    show: str = "minimal"
    on: gr.components.Component | None = None


def settings_records(draw: Callable) -> dict[str, type]:
    """A draw's parameters that are settings records, by name: each is annotated with a dataclass, takes as many of
    the view's inputs as it has fields, in their order, and the API names those inputs by its fields."""
    fn = inspect.unwrap(draw)
    records = {}
    for name, p in inspect.signature(fn).parameters.items():
        hint = fn.__globals__.get(p.annotation) if isinstance(p.annotation, str) else p.annotation
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            records[name] = hint
    return records


def input_names(own: Sequence[str], records: dict[str, type]) -> list[str]:
    """The inputs' names for a draw's own parameters `own`: a record's fields in place of the record."""
    names = []
    for name in own:
        names += [f.name for f in dataclasses.fields(records[name])] if name in records else [name]
    return names


def gathered(values: Sequence, own: Sequence[str], records: dict[str, type]) -> list:
    """The draw's arguments for its own parameters `own`, from one value per input: a record's fields gathered."""
    out, i = [], 0
    for name in own:
        if name in records:
            k = len(dataclasses.fields(records[name]))
            out.append(records[name](*values[i : i + k]))
            i += k
        else:
            out.append(values[i])
            i += 1
    return out


@dataclass
class Context:
    """The components every view reads, and the wiring that draws a view only when it is looked at."""

    demo: gr.Blocks
    server: Server
    model: VitModel  # the model at start-up, for the controls' initial ranges
    image: gr.File
    model_name: gr.Dropdown
    size: gr.Dropdown
    cmap: gr.Dropdown
    alpha: gr.Slider
    scale: gr.Radio  # the colour scale of every map: log (p1 to p99), robust (linear to p99) or min-max
    key: gr.State  # the analysis key of the session's image (None: no image)
    current_model: gr.State  # the loaded model's name; views resize their controls when it changes
    preview: gr.Image  # the user's image at display size
    large: gr.Checkbox  # the pictures' labels drawn large: the projector mode, or a phone (set in the browser)
    # the id of the selected tab, and the analysis key as the page saw it: what the page routes by (`routing`)
    shown: gr.Textbox = field(default_factory=lambda: gr.Textbox("tokens", visible=False))
    seen: gr.Textbox = field(default_factory=lambda: gr.Textbox("", visible=False))
    depth_model: str | None = None
    # a new photo (or none: a cleared upload), model or size: one step in the page that what must follow it follows
    changed: Dependency | None = None
    _display: Dependency | None = None
    _tabs: dict = field(default_factory=dict)  # each tab's `TabSteps`, by the tab's id
    _stops: list = field(default_factory=list)  # each heavy tab's (stop, note, runs): `stop_with_the_photo`

    @property
    def where(self) -> list:
        """The inputs that name an analysis: image, model and input size."""
        return [self.image, self.model_name, self.size]

    def on_display(self, fn: Callable, inputs: Sequence, outputs: Sequence, **kwargs) -> None:
        """Run fn when a display setting changes (colormap, opacity, colour scale, large labels), as its own
        request, the newest change last (`always_last`).

        Each setting's change runs one step in the browser, and each listener follows it with `.then`: no
        listener is on the settings' own events. Gradio's browser client (6.31), when a listener that waits for
        its running request (`always_last`) is done, fires the whole event again, not that listener alone: with
        fourteen listeners on the settings' events, each one that finished set the others off again, endlessly
        (13 requests a second and more from a phone, which sets the large labels as its first views draw)."""
        if self._display is None:
            settings = (self.cmap, self.alpha, self.scale, self.large)
            self._display = gr.on([c.change for c in settings], None, js=NOTHING, queue=False, api_visibility="private")
        self._display.then(fn, inputs, outputs, trigger_mode="always_last", **kwargs)

    def route(self) -> None:
        """Send a new analysis, and a display setting's change, to the shown tab's views alone, and let a hidden
        tab catch up when it is selected: steps in the page, no request (`routing.wire_routes`). Call once, after
        every view is wired.

        Every view's own listener on the analysis key sent a request, for hidden tabs too (answered with nothing):
        two dozen requests an upload, and Gradio's page (6.31) copies the props of every progress target at each
        of their loading statuses (docs/benchmarks.md)."""
        wire_routes(list(self._tabs.values()), self.seen, self.shown, self.image, self.on_display)
        self._wire_stops()

    def stop_with_the_photo(self, stop: Callable, note: gr.components.Component, runs: Sequence[Dependency]) -> None:
        """End a tab's heavy runs (`runs`) when the photo changes or is cleared, when the model or the size changes,
        and when the page closes: the page cancels them at once, which frees their slots in Gradio's queue, and
        stop(server, request) ends the one under way on the server at its next batch, its answer (a note, or
        gr.skip()) going to `note`. One request, not queued, stops every tab's runs (`route` wires it).

        Why not on the analysis key's change: a cleared upload leaves the key as it is (`NO_PHOTO`), and a new
        photo changes it only once its forward pass is done, seconds later on a busy server."""
        self._stops.append((stop, note, list(runs)))

    def _wire_stops(self) -> None:
        if not self._stops:
            return
        stops, notes = [stop for stop, _, _ in self._stops], [note for _, note, _ in self._stops]
        runs = [run for _, _, tab_runs in self._stops for run in tab_runs]
        server = self.server

        def stop_runs(request: gr.Request):
            said = tuple(stop(server, request) for stop in stops)
            return said if len(said) > 1 else said[0]

        def stop_quietly(request: gr.Request) -> None:  # the page closed: no one reads a note
            for stop in stops:
                stop(server, request)

        hidden = dict(queue=False, api_visibility="private", show_progress="hidden")
        self.changed.then(stop_runs, None, notes, cancels=runs, **hidden)
        self.demo.unload(stop_quietly)

    def on_new_analysis(self, tab: gr.Tab, fn: Callable, inputs: Sequence, outputs: Sequence, **kwargs) -> Dependency:
        """Run fn when the tab is shown with an analysis that it was not shown with (its `fitted` changes), before
        its views redraw; the listener is returned, for what follows. fn must be quick: its request is not
        queued."""
        return self._steps(tab).on_fitted.then(
            fn, inputs, outputs, **{**kwargs, "queue": False, "trigger_mode": "always_last"}
        )

    def _steps(self, tab: gr.Tab) -> TabSteps:
        """The tab's `TabSteps`, made with its first view."""
        if tab.id not in self._tabs:
            self._tabs[tab.id] = TabSteps.made_in(tab)
        return self._tabs[tab.id]

    def mirror_preview(self, image: gr.Image) -> None:
        """Show the user's image in another place too, copied in the browser (no request)."""
        self.preview.change(None, self.preview, image, js="(x) => x", api_visibility="private", queue=False)

    def view(
        self,
        tab: gr.Tab,
        draw: Callable,
        inputs: Sequence,
        outputs: Sequence,
        triggers: Sequence = (),
        api_name: str | None = None,
        concurrency_id: str = "draw",
        progress: Progress = Progress(),
        prepare: tuple[Callable, Sequence, Sequence] | None = None,
        clicks: Clicks | None = None,
    ) -> list[Dependency]:
        """Wire one view, and return the listeners that draw it (a heavy view's, for `stop_with_the_photo` to
        cancel). draw(*inputs, request) returns its outputs. A draw whose first parameter is `a` gets the session's
        analysis in place of the first three inputs (ctx.where: image, model and size), one with a
        `server` parameter gets the server, and a parameter annotated with a settings record (a dataclass) gets that
        record, made from as many inputs as it has fields (`settings_records`). Every draw runs in the projector
        mode's labels (`large_labels`) when it is on: its endpoint takes `large_text` last, which a draw with a
        `large_text` parameter gets too.

        `triggers` (its own controls' events) redraw it at once, as the endpoint `api_name`; a listener among them
        (a `Dependency`) redraws it when it is done, so that no event fires two requests (see `on_display`). A new
        analysis or a display setting redraws it if its tab is shown; otherwise selecting the tab draws it. Nothing
        is drawn twice for the same inputs. prepare: (fn, inputs, outputs) run on a new analysis before the view
        redraws, to fit its controls (layer range, heads, the query patch) to it. progress: how its progress shows.
        clicks: the pictures whose click picks some of its inputs (`Clicks`).
        """
        with tab:  # what the wiring adds belongs to the tab, not between the tabs
            drawn = gr.State(None)
            hidden = gr.Button(visible=False)
        n = len(outputs)
        outputs = list(outputs)
        params = inspect.signature(draw).parameters
        own = [name for name in params if name not in ("request", "progress", "server", "large_text")]
        takes_analysis = own[0] == "a"
        own = own[1:] if takes_analysis else own
        records = settings_records(draw)
        names = [*(["image", "model_name", "size"] if takes_analysis else []), *input_names(own, records)]
        inputs, names = [*inputs, self.large], [*names, "large_text"]
        extra = {"server": self.server} if "server" in params else {}
        server = self.server

        def call(args, request, progress):
            *args, large = args
            kwargs = {**extra, **({"progress": progress} if "progress" in params else {})}
            if "large_text" in params:
                kwargs["large_text"] = large
            with large_labels(large):
                if takes_analysis:
                    a = server.get_analysis(*args[:3], request)
                    return draw(a, *gathered(args[3:], own, records), request=request, **kwargs)
                return draw(*gathered(args, own, records), request=request, **kwargs)

        call.__name__ = draw.__name__
        call = user_errors(call)

        def drawn_now(key, args, request, progress) -> tuple:
            if not args[0]:  # no image: an empty view, not an error
                out = (None,) * n
            else:
                # a redraw takes milliseconds: the background warm waits for it
                with server.redraws.interactive() if concurrency_id == "draw" else nullcontext():
                    try:
                        out = call(args, request, progress)
                    except Stopped:  # the page says "Stopped."; the view stays as it was, and is drawn next time
                        return (gr.skip(),) * (n + 1)
            return (*(out if isinstance(out, tuple) else (out,)), (key, *args))

        def render(*values):  # key, *inputs, request, progress
            return drawn_now(values[0], values[1:-2], *values[-2:])

        def refresh(*values):  # key, last, *inputs, request, progress: drawn unless it was, for these inputs
            key, last, args = values[0], values[1], values[2:-2]
            if not args[0] or (key, *args) == last:  # no photo: the last one's pictures stay (`NO_PHOTO`)
                return (gr.skip(),) * (n + 1)
            return drawn_now(key, args, *values[-2:])

        take(render, ["key", *names])
        take(refresh, ["key", "last", *names])
        if clicks is not None:
            locate, picked = clicks.locate, clicks.picked
            at = [next(i for i, c in enumerate(inputs) if c is p) for p in picked]
            nothing = (gr.skip(),) * (len(picked) + n + 1)

            def clicked(_server, key, *values):  # the picked inputs' values, then the view's outputs
                *args, evt, request, progress = values
                if not args[0]:
                    return nothing
                with large_labels(args[-1]):  # read in the labels' mode its picture was drawn in (`large_text`)
                    chosen = locate(server.get_analysis(*args[:3], request), *evt.index)
                if chosen is None:
                    return nothing
                for i, value in zip(at, chosen, strict=True):
                    args[i] = value
                return (*chosen, *drawn_now(key, args, request, progress))

            take(clicked, ["server", "key", *names], select=True)
            for shown in clicks.pictures:
                server.on_click(shown, clicked, [self.key, *inputs], [*picked, *outputs, drawn])
        after = [t for t in triggers if isinstance(t, Dependency)]  # listeners the view's draw follows
        events = [t for t in triggers if not isinstance(t, Dependency)]
        drawing = dict(trigger_mode="always_last", show_progress=progress.show, **slots(concurrency_id))
        if progress.on is not None:  # else the first output shown (`internals.narrow_progress`)
            drawing["show_progress_on"] = [progress.on]
        draw_now = dict(fn=render, inputs=[self.key, *inputs], outputs=[*outputs, drawn], **drawing)
        draws = []
        if events or api_name:  # a view without controls gets its endpoint through a button nobody sees
            visibility = "public" if api_name else "private"
            draws.append(gr.on(events or [hidden.click], api_name=api_name, api_visibility=visibility, **draw_now))
        draws += [listener.then(api_visibility="private", **draw_now) for listener in after]
        redraw = dict(fn=refresh, inputs=[self.key, drawn, *inputs], outputs=[*outputs, drawn], **drawing)
        steps = self._steps(tab)
        if prepare is not None:  # fit the view's controls to the new analysis first (cheap: not queued)
            fn, prepare_in, prepare_out = prepare
            fitted = self.on_new_analysis(
                tab, fn, prepare_in, prepare_out, api_visibility="private", show_progress="hidden"
            )
        else:
            fitted = steps.on_fitted
        draws += [step.then(api_visibility="private", **redraw) for step in (fitted, steps.on_restyled)]
        return draws


@contextmanager
def view_tab(tab: str, explanation: str, **kwargs) -> Iterator[gr.Tab]:
    """The tab `tab` (the id of a `tabs.TABS` record, which gives its number and title), opening with its "What am I
    looking at?" explanation."""
    with gr.Tab(tabs.label(tab), id=tab, **kwargs) as shown:
        gr.Markdown(f"**What am I looking at?** {explanation}", elem_classes=["vitviz-explain"])
        yield shown
