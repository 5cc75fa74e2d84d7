"""The image panel (upload, examples, model, input size, display settings) and the context views draw from.

`/analyze` runs the one forward pass and sets the session's analysis key. Each view is wired by
`Context.view`: it draws when its tab is shown and its inputs changed, and is otherwise left stale
until its tab is selected, so an upload draws one view, not all of them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
from gradio.events import Dependency
from gradio_client import handle_file

from .. import CATALOGUE, ModelUnavailableError, VitModel, sentences, tabs, views
from ..maps import DEFAULT_SCALE
from ..render import COLORMAPS, large_labels
from .internals import take
from .pictures import picture
from .session import EXAMPLES, SIZES, Server, slots, user_errors

INTRO = """# vitviz: see inside a Vision Transformer
Drop in a photo. A ViT cuts it into patches, turns each patch into a **token**, adds a **position
embedding**, puts a **readout (CLS) token** in front, and passes the tokens through pre-norm layers of
**multi-head self-attention**. Each tab shows one part of that, on *your* image."""
# Larger text for the back row of a classroom: every text grows by a quarter (see CSS in the launch).
CSS = """body.vitviz-large .gradio-container { zoom: 1.25; }
/* the screen's height in the zoomed page's px (a length in vh grows with the zoom, as every length there does) */
body.vitviz-large { --vitviz-screen-h: calc(100vh / 1.25); }
body.vitviz-large #intro, body.vitviz-large .settings { display: none !important; }
/* Pictures side by side stack in the projector mode, the main one first: each shown at the page's width, so
   that the labels drawn in them (render.LARGE_LABEL_PX) are 18 px or more on the screen */
body.vitviz-large .vitviz-pair { flex-direction: column; }
body.vitviz-large .vitviz-pair.vitviz-second-first { flex-direction: column-reverse; }
body.vitviz-large .vitviz-pair > * { flex: none; width: 100%; }
/* Once a photo is in, the upload box is a strip with its name: drop another on it, or clear it for the box */
#upload:has(.file-preview) { min-height: 0; height: auto !important; }
#upload:has(.file-preview) > label { display: none; }
#upload .file-preview-holder, #upload .file-preview { margin: 0; padding: 0; }
#upload .file-preview tbody { padding: 0; }
#upload .file-preview tr.file { padding: 2px 40px 2px 8px; }
/* The projector's first screen: a strip (the photo's name, the examples, the switch), the status and the tab bar,
   then each tab's controls and main picture; what the tab shows ("What am I looking at?") comes after them */
body.vitviz-large .main { padding-top: 6px; }
body.vitviz-large .row:has(> #source-panel) { row-gap: 6px; }
body.vitviz-large .tab-wrapper { padding-bottom: 0; margin-bottom: 6px; }
body.vitviz-large #source-panel { flex-direction: row; flex-wrap: wrap; align-items: center; gap: 4px 12px; }
body.vitviz-large #source-strip { flex: 1 1 0; flex-wrap: nowrap; align-items: center; gap: 12px; }
body.vitviz-large #source-strip > .column { flex: 1 1 0 !important; min-width: 0 !important; }
body.vitviz-large #source-strip > .column:has(#examples) { flex: 0 0 auto !important; }
body.vitviz-large #source-strip .caption, body.vitviz-large #large-text .info-text { display: none; }
body.vitviz-large #source-panel > .form:has(#large-text) { flex: 0 0 auto; width: auto; min-width: 0; }
body.vitviz-large #large-text { padding: 8px 10px; }
body.vitviz-large #status { flex: 1 1 100%; }
body.vitviz-large #examples :is(.gallery-container, .grid-wrap), body.vitviz-large #examples {
  height: auto !important; max-height: none !important; min-height: 0 !important; }
body.vitviz-large #examples .grid-wrap { padding: 4px; width: max-content; }
body.vitviz-large #examples .grid-container {
  grid-template-columns: repeat(4, 40px) !important; grid-auto-rows: 40px; gap: 6px; }
body.vitviz-large #examples .thumbnail-item { width: 40px; height: 40px; }
body.vitviz-large #examples :is(.caption-label, .icon-button-wrapper) { display: none; }
body.vitviz-large .vitviz-explain { order: 9; }
/* Under the tab bar a tab has --vitviz-tab-h of the first screen. A tab shows its main picture (.vitviz-main) on the
   left, capped to that height, and on its right the picture's caption, the tab's title (.vitviz-head), its controls
   (.vitviz-controls) and what reads beside it (.vitviz-beside); the rest follows under both. Rollout's parts, which
   name no class, by their ids. A row that holds the main picture gives its parts to this layout, and so does a
   column that holds it with its caption. */
body.vitviz-large { --vitviz-tab-h: calc(var(--vitviz-screen-h) - 176px); }
body.vitviz-large .tabitem > .column:has(.vitviz-main, > .vitviz-pair #rollout) {
  display: grid; grid-template-columns: auto minmax(230px, 1fr); grid-template-rows: auto auto auto 1fr;
  gap: 10px 14px; align-items: start; }
body.vitviz-large .tabitem > .column:where(:has(.vitviz-main, > .vitviz-pair #rollout)) > * { grid-column: 1 / -1; }
/* Rollout's three controls take a wider column; its picture is still shown at 0.67 of its size or more */
body.vitviz-large .tabitem > .column:has(> .vitviz-pair #rollout) { grid-template-columns: auto minmax(262px, 1fr); }
body.vitviz-large .tabitem :is(.row:has(> .vitviz-main), .column.vitviz-main, .column.vitviz-main > .column) {
  display: contents; }
body.vitviz-large .tabitem > .column :where(.vitviz-main, .vitviz-main > .column > .block, .vitviz-pair:has(#rollout)) {
  grid-column: 1; grid-row: 1 / 5; }
body.vitviz-large .tabitem .column.vitviz-main > .column > .caption { grid-column: 2; grid-row: 1; padding-left: 36px; }
body.vitviz-large .tabitem .column.vitviz-main .image-container .icon-button-wrapper.top-panel {
  top: 0; bottom: auto; left: calc(100% + 8px); right: auto; }  /* beside the caption: above is the tab bar */
body.vitviz-large .tabitem > .column:has(.vitviz-main) .vitviz-head { grid-column: 2; grid-row: 2; }
body.vitviz-large .tabitem > .column:has(.vitviz-main) .vitviz-controls,
body.vitviz-large .tabitem .row:has(> .form > #rollout-fusion) { grid-column: 2; grid-row: 3; flex-direction: column; }
body.vitviz-large .tabitem > .column:has(.vitviz-main) .vitviz-beside { grid-column: 2; grid-row: 4; }
/* Attributions: the attribution map on the left; on its right the method, target and baseline, the Compute and
   Stop buttons, the method's settings and a text target; the rollout and relevancy it is compared with under
   them, then the rest */
body.vitviz-large #attributions-tab > .column {
  display: grid; grid-template-columns: auto minmax(0, 1fr); gap: 10px 14px; align-items: start; }
body.vitviz-large #attributions-tab > .column > :where(*) { grid-column: 1 / -1; }
body.vitviz-large #attr-results { display: contents; }
body.vitviz-large #attr-results > :first-child { grid-column: 1; grid-row: 1 / 5; }
body.vitviz-large #attributions-tab > .column > .row:has(#method) { grid-column: 2; grid-row: 1; }
body.vitviz-large #attributions-tab > .column > #attr-options { display: contents; }
body.vitviz-large #attr-options > .column:has(> button) { grid-column: 2; grid-row: 2; }
body.vitviz-large #attr-options > .form { grid-column: 2; grid-row: 3; }
body.vitviz-large #attributions-tab > .column > :has(> #text-target) { grid-column: 2; grid-row: 4; }
body.vitviz-large #attr-results > :nth-child(2) { grid-column: 1; grid-row: 5; }
body.vitviz-large #attr-results > :nth-child(3) { grid-column: 2; grid-row: 5; }
body.vitviz-large #attr-results img { width: auto; max-width: 100%; max-height: calc(var(--vitviz-tab-h) - 50px); }
body.vitviz-large :is(#tokens, #rollout, #dense, #pos-large, #lesson-picture, #depth) { height: auto !important; }
body.vitviz-large :is(#tokens, #rollout, #dense, #pos-large, #lesson-picture, #depth) img {
  object-fit: contain; width: auto; max-width: 100%; max-height: calc(var(--vitviz-tab-h) - 50px); }
body.vitviz-large :is(#tokens, #pos-large, #lesson-picture) img { max-height: calc(var(--vitviz-tab-h) - 7px); }
@media (min-width: 700px) and (max-width: 1100px) { #preview-panel { display: none; } }
/* A phone: the upload and the examples, then the views, then the settings and the status, so that the tabs come
   on the first screen; the Tokens view shows the photo, and the projector's switch has no use there */
@media (max-width: 600px) {
  #source-panel { display: contents; }
  #source-panel > * { flex: 1 1 100%; }
  #source-panel > :is(.settings, #status) { order: 2; }
  #views-panel { order: 1; }
  #preview-panel, #large-text { display: none !important; }
  /* the examples a strip of small pictures, the tabs closer, and what a tab shows after it: the Explorer's photo
     comes on the first screen */
  #source-strip .caption, #examples :is(.caption-label, .icon-button-wrapper) { display: none; }
  #examples, #examples :is(.gallery-container, .grid-wrap) {
    height: auto !important; max-height: none !important; min-height: 0 !important; }
  #examples .grid-container { grid-template-columns: repeat(4, 56px) !important; grid-auto-rows: 56px; gap: 8px; }
  #examples .thumbnail-item { width: 56px; height: 56px; }
  .tab-container > button { padding: 0 7px; }
  .vitviz-explain { order: 9; }
}
/* Gradio's strip of picture buttons spans the picture's top-right corner even when empty: clicks on the
   patches under it must reach the picture (its buttons stay clickable) */
.image-container .icon-button-wrapper { pointer-events: none; }
.image-container .icon-button-wrapper > * { pointer-events: auto; }
/* and the fullscreen button sits above the picture, not over its colour scale's top number */
.image-container .icon-button-wrapper.top-panel { top: auto; bottom: 100%; }
.block:has(> .image-container), .image-container { overflow: visible !important; }
/* The Explorer's help: for a pointer and keys, or on a touch screen for a finger; on a projector after the Explorer */
@media (hover: hover) { .vitviz-touch { display: none !important; } }
@media (hover: none) { .vitviz-pointer { display: none !important; } }
body.vitviz-large :is(.vitviz-pointer, .vitviz-touch) { order: 8; }
/* on a phone, Plotly's toolbar would sit on the chart's label: pinch and drag still zoom and pan */
@media (max-width: 600px) { .js-plotly-plot .modebar-container { display: none !important; } }"""
# The switch zooms the page; the pictures' labels are drawn large with it, and on a phone (which shows pictures
# at half their size or less) always.
PHONE = "window.innerWidth < 600"
LARGE_TEXT_JS = f"(on) => {{ document.body.classList.toggle('vitviz-large', on); return on || {PHONE}; }}"
EXAMPLE_URL = "https://raw.githubusercontent.com/scikit-image/scikit-image/main/skimage/data/chelsea.png"


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
    shown: gr.State = field(default_factory=lambda: gr.State("tokens"))  # the id of the selected tab
    tabs: gr.Tabs | None = None  # the views' tab bar, for views that select a tab (a lesson's deep link)
    depth_model: str | None = None
    _display: Dependency | None = None
    _tabs_shown: set = field(default_factory=set)  # the tabs whose selection sets `shown` already

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
            self._display = gr.on(
                [c.change for c in settings], None, js="() => []", queue=False, api_visibility="private"
            )
        self._display.then(fn, inputs, outputs, trigger_mode="always_last", **kwargs)

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
        progress: str = "minimal",
        prepare: tuple[Callable, Sequence, Sequence] | None = None,
        clicks: Sequence[gr.Image] = (),
        pick: tuple[Callable, Sequence] | None = None,
    ) -> None:
        """Wire one view. draw(*inputs, request) returns its outputs. A draw whose first parameter is `a` gets the
        session's analysis in place of the first three inputs (ctx.where: image, model and size), and one with a
        `server` parameter gets the server. Every draw runs in the projector mode's labels (`large_labels`) when it
        is on: its endpoint takes `large_text` last, which a draw with a `large_text` parameter gets too.

        `triggers` (its own controls' events) redraw it at once, as the endpoint `api_name`; a listener among them
        (a `Dependency`) redraws it when it is done, so that no event fires two requests (see `on_display`). A new
        analysis or a display setting redraws it if its tab is shown; otherwise selecting the tab draws it. Nothing
        is drawn twice for the same inputs. prepare: (fn, inputs, outputs) run on a new analysis before the view
        redraws, to fit its controls (layer range, heads, the query patch) to it.

        clicks: pictures (`picture(clickable=True)`) whose click sets some inputs and redraws in the same answer,
        one round trip: pick = (locate, inputs), locate(a, x, y) -> their values, or None where the click picks
        nothing. Those inputs' triggers are then `.input` events, which a click's setting does not fire.
        """
        with tab:  # what the wiring adds belongs to the tab, not between the tabs
            drawn = gr.State(None)
            hidden = gr.Button(visible=False)
        n = len(outputs)
        outputs = list(outputs)
        params = inspect.signature(draw).parameters
        names = [name for name in params if name not in ("request", "progress", "server", "large_text")]
        takes_analysis = names[0] == "a"
        if takes_analysis:
            names = ["image", "model_name", "size", *names[1:]]
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
                    return draw(a, *args[3:], request=request, **kwargs)
                return draw(*args, request=request, **kwargs)

        call.__name__ = draw.__name__
        call = user_errors(call)

        def drawn_now(key, args, request, progress) -> tuple:
            if not args[0]:  # no image: an empty view, not an error
                out = (None,) * n
            else:
                # a redraw takes milliseconds: the background warm waits for it
                with server.redraws.interactive() if concurrency_id == "draw" else nullcontext():
                    out = call(args, request, progress)
            return (*(out if isinstance(out, tuple) else (out,)), (key, *args))

        def render(*values):  # key, *inputs, request, progress
            return drawn_now(values[0], values[1:-2], *values[-2:])

        def refresh(*values):  # shown, key, last, *inputs, request, progress
            shown, key, last, args = values[0], values[1], values[2], values[3:-2]
            if shown != tab.id or (key, *args) == last:
                return (gr.skip(),) * (n + 1)
            return drawn_now(key, args, *values[-2:])

        def selected(*values):  # key, last, *inputs, request, progress
            return refresh(tab.id, *values)

        take(render, ["key", *names])
        take(refresh, ["shown", "key", "last", *names])
        take(selected, ["key", "last", *names])
        if clicks:
            locate, picked = pick
            at = [next(i for i, c in enumerate(inputs) if c is p) for p in picked]
            nothing = (gr.skip(),) * (len(picked) + n + 1)

            def clicked(_server, key, *values):  # the picked inputs' values, then the view's outputs
                *args, evt, request, progress = values
                if not args[0]:
                    return nothing
                chosen = locate(server.get_analysis(*args[:3], request), *evt.index)
                if chosen is None:
                    return nothing
                for i, value in zip(at, chosen, strict=True):
                    args[i] = value
                return (*chosen, *drawn_now(key, args, request, progress))

            take(clicked, ["server", "key", *names], select=True)
            for shown in clicks:
                server.on_click(shown, clicked, [self.key, *inputs], [*picked, *outputs, drawn])
        after = [t for t in triggers if isinstance(t, Dependency)]  # listeners the view's draw follows
        events = [t for t in triggers if not isinstance(t, Dependency)]
        drawing = dict(trigger_mode="always_last", show_progress=progress, **slots(concurrency_id))
        if events or api_name:  # a view without controls gets its endpoint through a button nobody sees
            visibility = "public" if api_name else "private"
            gr.on(events or [hidden.click], render, [self.key, *inputs], [*outputs, drawn], api_name=api_name,
                  api_visibility=visibility, **drawing)  # fmt: skip
        for listener in after:
            listener.then(render, [self.key, *inputs], [*outputs, drawn], api_visibility="private", **drawing)
        refresh_in = [self.shown, self.key, drawn, *inputs]
        if prepare is not None:  # fit the view's controls to the new analysis first
            fn, prepare_in, prepare_out = prepare
            self.key.change(fn, prepare_in, prepare_out, api_visibility="private").then(
                refresh, refresh_in, [*outputs, drawn], api_visibility="private", show_progress=progress
            )
        refreshing = dict(api_visibility="private", show_progress=progress, **slots(concurrency_id))
        self.on_display(refresh, refresh_in, [*outputs, drawn], **refreshing)
        if prepare is None:
            self.key.change(refresh, refresh_in, [*outputs, drawn], trigger_mode="always_last", **refreshing)
        if tab.id not in self._tabs_shown:  # once a tab: each more is one more request on its selection
            self._tabs_shown.add(tab.id)
            tab.select(lambda: tab.id, None, self.shown, api_visibility="private", queue=False)
        tab.select(
            selected,
            [self.key, drawn, *inputs],
            [*outputs, drawn],
            api_visibility="private",
            show_progress=progress,
            **slots(concurrency_id),
        )


@contextmanager
def view_tab(tab: str, explanation: str, **kwargs) -> Iterator[gr.Tab]:
    """The tab `tab` (an id of `tabs.ORDER`, which gives its number and title), opening with its "What am I
    looking at?" explanation."""
    with gr.Tab(tabs.label(tab), id=tab, **kwargs) as shown:
        gr.Markdown(f"**What am I looking at?** {explanation}", elem_classes=["vitviz-explain"])
        yield shown


def status_text(a) -> str:
    m = a.model
    h, w = a.pixel_values.shape[2:]
    where = "GPU (" + str(m.device) + ")" if m.device.type == "cuda" else "CPU"
    text = (
        f"**{m.name}** on **{where}** · input {sentences.pixel_words(h, w)} · grid {sentences.grid_words(*a.grid)} of "
        f"patches of "
        f"{m.patch_size} px · {a.num_tokens} tokens · {m.num_layers} layers × {m.num_heads} heads"
    )
    return text + sentences.upscale_note(a)


@user_errors
def analyze_image(server: Server, image, model_name, size, request: gr.Request, progress=gr.Progress()):
    """Analyse an image: one forward pass, cached. Clearing the upload clears the views."""
    if not image:
        return None, "", None
    a = server.get_analysis(image, model_name, size, request, progress)
    return views.display(a), status_text(a), server.analysis_key(image, model_name, size)


def change_model(server: Server, name: str, current: str, progress=gr.Progress(track_tqdm=True)):
    """Load another model; offline, say so within seconds and keep the current one."""
    try:
        server.get_model(name, progress)
    except (ModelUnavailableError, ValueError, OSError) as exc:
        gr.Warning(f"{name} is not available: {exc} Keeping {current}.")
        return current, current
    return name, name


def pick_example(evt: gr.SelectData) -> str:
    return EXAMPLES[evt.index]


def build_source(demo: gr.Blocks, server: Server, model: VitModel, depth_model: str | None) -> Context:
    """The left column: the image and its settings. Returns the context the views are built in."""
    names = list(CATALOGUE)
    if model.name not in names:
        names.insert(0, model.name)
    # Rows whose parts wrap under each other in the narrow left column (1400 px wide), and stand side by side
    # when the views wrap under the panel at full width (a 1024x768 projector), so the tabs come up sooner.
    with gr.Row(elem_id="source-strip"):
        with gr.Column(min_width=280):
            # A File, not an Image: Gradio would decode an Image upload itself, and vitviz's own decoder is
            # what names the problem with a bad upload.
            image = gr.File(value=EXAMPLES[0], type="filepath", label="Image", height=90, elem_id="upload")
            with gr.Column(elem_id="preview-panel"):  # hidden on a projector: the Tokens view shows the image
                preview = picture(label="Your image", height=260)
        with gr.Column(min_width=280):
            gr.Markdown("**Examples: click one**", elem_classes=["caption"])
            gallery = gr.Gallery(
                [(p, Path(p).stem) for p in EXAMPLES],
                columns=4,
                height=120,
                allow_preview=False,
                label="Examples: click one",
                show_label=False,
                elem_id="examples",
            )
    # The API's example is a photo, not Gradio's generic PDF.
    image.example_payload = lambda: handle_file(EXAMPLE_URL)
    image.example_value = lambda: EXAMPLE_URL
    with gr.Row(elem_classes=["settings"]):
        model_name = gr.Dropdown(
            [(f"{n}: {CATALOGUE.get(n, 'local folder')}", n) for n in names],
            value=model.name,
            label="Model",
            min_width=280,
        )
        size = gr.Dropdown(
            SIZES, value=SIZES[0], label="Input size (longest side, pixels)", min_width=200, elem_id="size"
        )
    with gr.Row(elem_classes=["settings"]):
        with gr.Row():
            cmap = gr.Dropdown(list(COLORMAPS), value="inferno", label="Colormap", min_width=120, elem_id="cmap")
            alpha = gr.Slider(0, 1, value=0.6, step=0.05, label="Opacity", min_width=120)
        scale = gr.Radio(
            [("log (1st to 99th percentile)", "log"), ("linear, clip at the 99th", "robust"), ("min–max", "min-max")],
            value=DEFAULT_SCALE,
            label="Colour scale of every map",
            elem_id="colour-scale",
            min_width=280,
        )
    large = gr.Checkbox(
        False,
        label="Large text, for a projector",
        info="Everything grows by a quarter, the pictures' labels more; the introduction and the settings above "
        "hide, so the tabs come up",
        elem_id="large-text",
    )
    labels = gr.Checkbox(False, visible=False, label="Large labels")  # the views' large_text: set in the browser
    large.change(None, large, labels, js=LARGE_TEXT_JS, api_visibility="private", queue=False)
    demo.load(None, None, labels, js=f"() => {PHONE}", api_visibility="private", queue=False)
    status = gr.Markdown(elem_id="status", label="Model and input")
    ctx = Context(
        demo,
        server,
        model,
        image,
        model_name,
        size,
        cmap,
        alpha,
        scale,
        gr.State(None),
        gr.State(model.name),
        preview,
        labels,
    )
    ctx.depth_model = depth_model

    analyze_out = [preview, status, ctx.key]
    analyzing = server.bind(analyze_image)
    demo.load(analyzing, ctx.where, analyze_out, api_visibility="private", **slots("forward", server))
    gr.on(
        [image.change, size.change, ctx.current_model.change],
        analyzing,
        ctx.where,
        analyze_out,
        api_name="analyze",
        **slots("forward", server),
    )
    model_name.change(
        server.bind(change_model),
        [model_name, ctx.current_model],
        [model_name, ctx.current_model],
        api_visibility="private",
    )
    gallery.select(pick_example, None, image, api_visibility="private")
    return ctx
