"""What if: switch off parts of the model (a head, every head of a layer, a layer's MLP, a set of layers, patches) and
see the output, the attention and the rollout beside the unablated model's; and every head's importance to the
output."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import numpy as np

from ... import render, sentences, whatif_words
from ...ablation import HEAD_MODES, PATCH_MODES, ablate
from ...head_importance import Importance, cost, importance
from ...render import large_labels
from ...views.common import display, patch_at_display
from ...views.whatif import importance_tiles, whatif_views
from .. import heavy
from ..context import Clicks, Context, view_tab
from ..heavy import expected, stop_run, stoppable, within_budget
from ..pictures import picture
from ..scheduling import slots
from ..server import Server, user_errors

TARGETS = {
    "head": "One head",
    "layer": "Every head of a layer",
    "mlp": "A layer's MLP",
    "layers": "A set of layers, skipped whole (type them below)",
    "patches": "Patches (click them on the photo)",
}
STOPPED_NOTE = (
    "**Stopped.** Head importance ended at its next layer and kept nothing; press its button to run it again."
)


def parsed_indices(text: str, what: str = "patches (patch indices, row by row)") -> list[int]:
    """The indices that a box holds ("3, 17, 40"), checked to be whole numbers; `what` names them in the error."""
    words = [w for w in str(text or "").replace(",", " ").split() if w]
    bad = [w for w in words if not w.isdigit()]
    if bad:
        raise ValueError(f"{what} are whole numbers separated by commas, got {bad[0]!r}")
    return [int(w) for w in words]


@dataclass(frozen=True)
class Target:
    """What the tab's controls switch off: `target` (a key of TARGETS), the layer and the head, how a head is
    switched off (`ablation.HEAD_MODES`), the patches box and how they are (`ablation.PATCH_MODES`), and the
    layers box."""

    target: str
    layer: int
    head: int
    mode: str = "zero"
    patches: str = ""
    patch_mode: str = "keys"
    layers: str = ""


def chosen(t: Target) -> dict:
    """`vitviz.ablate`'s keywords for the tab's controls."""
    if t.target not in TARGETS:
        raise ValueError(f"what to switch off must be one of {', '.join(TARGETS)}, got {t.target!r}")
    layer, head = int(t.layer), int(t.head)
    if t.target == "head":
        return {"heads": [(layer, head)], "mode": t.mode}
    if t.target == "layer":
        return {"heads": [(layer, None)], "mode": t.mode}
    if t.target == "mlp":
        return {"mlp": [layer]}
    if t.target == "layers":
        skipped = parsed_indices(t.layers, "layers (numbers from 0)")
        if not skipped:
            raise ValueError("no layer chosen: type the layers to skip (e.g. 3, 4, 5), then ablate")
        return {"layers": skipped}
    found = parsed_indices(t.patches)
    if not found:
        raise ValueError("no patch chosen: click patches on the photo (or type their indices), then ablate")
    return {"patches": found, "patch_mode": t.patch_mode}


@user_errors
def draw(a, asked: Target, cmap, alpha, colour_scale, request: gr.Request):
    """(what is off, the difference in words and numbers, top-5 before and after (None without classes), dense map
    before and after (None without a dense head), the last layer's attention before and after, rollout before and
    after): one ablated forward against the analysis the app holds (`baseline=`)."""
    w = ablate(a.model, a.image, longest=longest_of(a), baseline=a, **chosen(asked))
    v = whatif_views(w, cmap, float(alpha), colour_scale)
    return (*said_and_output(w, v["output"]), *v["attention"], *v["rollout"])


def said_and_output(w, output: tuple) -> tuple:
    """(what is off, the difference in words and numbers, top-5 before and after (None without classes), dense map
    before and after (None without a dense head)) of an ablation `w` (`ablation.Ablated`), its output views
    `output` (`whatif_views`' "output")."""
    (top_before, dense_before), (top_after, dense_after) = output
    off = "**Switched off:** " + "; ".join(w.ablation.names(w.model)) + "."
    return (
        off,
        whatif_words.ablation_words(w),
        dict(top_before) or None,
        dict(top_after) or None,
        dense_before,
        dense_after,
    )


def longest_of(a) -> int | None:
    """The `longest` (as `analyze`'s) that gives the analysis `a`'s input again: None for a fixed-size model's
    native input, else the input's longest side (a multiple of the patch, which `analyze` keeps)."""
    m, (h, w) = a.model, a.pixel_values.shape[2:]
    native = (m.native_grid[0] * m.patch_size, m.native_grid[1] * m.patch_size)
    return None if m.fixed_size and (h, w) == native else max(h, w)


def tile_at(a, x: float, y: float):
    """(layer, head, "head") of the head tile clicked, or None off the tiles."""
    at = render.head_tile_at(a.model.num_layers, a.model.num_heads, x, y)
    return None if at is None else (at[0], at[1], "head")


def patch_toggled(server: Server, image, model_name, size, patches, evt: gr.SelectData, request: gr.Request = None):
    """The patches box with the clicked patch of the photo added (or removed, if it was chosen), and the photo
    with the chosen patches outlined."""
    a = server.get_analysis(image, model_name, size, request)
    found = parsed_indices(patches)
    patch = patch_at_display(a, *evt.index)
    if patch is not None:
        found = [p for p in found if p != patch] if patch in found else sorted([*found, patch])
    return ", ".join(map(str, found)), marked_photo(a, found)


def marked_photo(a, patches: list[int]):
    """The photo at display size with `patches` outlined."""
    base = display(a)
    mask = [i in set(patches) for i in range(a.grid[0] * a.grid[1])]
    return render.mark_boxes(base, a.grid, np.array(mask).reshape(a.grid))


@dataclass(frozen=True, eq=False)  # its grid's arrays have no truth value to compare
class Measured:
    """The head importance measured on one analysis (`key`: `Server.analysis_key`), kept by the session so that
    its tiles are drawn again in the labels' mode that the page switches to."""

    key: str | None
    grid: Importance


def fresh(server: Server, image, model_name, size, large_text: bool = False, request: gr.Request = None):
    """A new photo or model: grey head tiles to click (in the labels' mode of `large_text`, the projector's), no
    chosen patch, the photo, the importance button with its stated cost on this photo here, and no importance
    kept."""
    m = server.get_model(model_name)
    with large_labels(large_text):
        tiles = render.head_tiles(m.num_layers, m.num_heads)
    layer, head = gr.Slider(maximum=m.num_layers - 1), gr.Slider(maximum=m.num_heads - 1)
    if not image:
        return tiles, "", None, layer, head, gr.skip(), None
    a = server.get_analysis(image, model_name, size, request)
    cost_said = gr.Button(f"{IMPORTANCE} ({importance_cost(server, a)})")
    return tiles, "", marked_photo(a, []), layer, head, cost_said, None


def relabelled(server: Server, measured: Measured | None, key, model_name, large_text: bool):
    """The head tiles drawn again in the labels' mode now on (`large_text`: the projector's, or not), so that a
    click is read in the mode its tiles were drawn in (`Clicks`): coloured by the importance kept for this
    analysis (`key`), grey where none is."""
    with large_labels(large_text):
        if measured is not None and measured.key == key:
            return importance_tiles(measured.grid)[0]
        m = server.get_model(model_name)
        return render.head_tiles(m.num_layers, m.num_heads)


IMPORTANCE = "Measure every head's importance: each switched off alone"


def importance_time(server: Server, a) -> str:
    """How long measuring every head's importance on `a`'s photo takes here, before it starts: "about 12 s"."""
    forwards = cost(a.model, tuple(a.pixel_values.shape[2:]))
    return expected(server, a, forward=lambda _: forwards)


def importance_cost(server: Server, a) -> str:
    """What measuring every head's importance on `a`'s photo costs, before it is pressed: "40 forwards' work, about
    12 s"."""
    return f"{cost(a.model, tuple(a.pixel_values.shape[2:])):.0f} forwards' work, {importance_time(server, a)}"


def measured_importance(server: Server, a, mode: str, request: gr.Request, progress, tab: str):
    """`vitviz.importance` on the analysis `a`'s photo as one heavy run of this session in `tab` (`heavy.stoppable`:
    its progress shown, ended by that tab's Stop, a new photo or Clear), refused over the server's budget."""
    m = a.model
    forwards = cost(m, tuple(a.pixel_values.shape[2:]))
    name = "Head importance"
    within_budget(a, lambda _: forwards, name)
    with stoppable(
        server,
        request,
        name,
        f"{name}: {m.num_layers * m.num_heads} heads, each switched off alone",
        progress,
        tab=tab,
        work=("forward", heavy.cost(a, lambda _: forwards)),  # counted at 224×224, as `expected` reads the rate
    ) as report:
        return importance(m, a.image, mode=mode, longest=longest_of(a), progress=report)


@user_errors
def measure_importance(
    server: Server,
    image,
    model_name,
    size,
    mode="zero",
    large_text: bool = False,
    request: gr.Request = None,
    progress=gr.Progress(),
):
    """(the head tiles coloured by each head's change of the output, in % of its unablated value, the top head
    outlined, drawn in the labels' mode of `large_text`; the sentence naming the head that matters most; the grid,
    kept for this analysis): every head switched off alone, batched (`vitviz.importance`)."""
    a = server.get_analysis(image, model_name, size, request)
    grid = measured_importance(server, a, mode, request, progress, "whatif")
    with large_labels(large_text):
        tiles, unit = importance_tiles(grid)
    note = (
        f"{whatif_words.importance_words(grid, a.model)} (Tiles: each head's change {unit}, the top one outlined in "
        f"green; {grid.seconds:.1f} s here.)"
    )
    return tiles, note, Measured(server.analysis_key(image, model_name, size), grid)


def stop(server: Server, request: gr.Request) -> str:
    """Stop this session's head importance at its next layer (the Stop button, a new photo, the page closed)."""
    return STOPPED_NOTE if stop_run(server, request, "whatif") else gr.skip()


def build(ctx: Context) -> None:
    m = ctx.model
    with view_tab(
        "whatif",
        (
            "Ask the model *what if*: switch off one part of it and run the photo again. Click a head's tile (or "
            "choose below) to switch that head off: its output zeroed, or replaced by its mean over the photo's "
            "tokens; or switch off every head of a layer, a layer's MLP, a set of layers, or patches you click on "
            "the photo "
            "(hidden as keys no query may attend to, or blurred). Each picture pair shows the model as it is, "
            "then with that part off; the sentence says how much the output moved. Attention weights only show "
            "where a head looks: switching it off measures what it does for the output."
        ),
    ) as tab:
        with gr.Row(elem_id="whatif-top"):  # on a projector: the tiles on the left, what switches a head off beside
            with gr.Column(scale=1, min_width=300, elem_id="whatif-left"):
                tiles = picture(label="Head tiles: click one to switch it off", clickable=True, elem_id="whatif-tiles")
                with gr.Row():
                    measure = gr.Button(IMPORTANCE, elem_id="whatif-importance")
                    halt = gr.Button("Stop", variant="stop", size="sm", scale=0, min_width=100, elem_id="whatif-stop")
                importance_note = gr.Markdown(elem_id="whatif-importance-note", label="Head importance")
            with gr.Column(scale=1, min_width=300, elem_id="whatif-controls"):
                target = gr.Radio(
                    [(v, k) for k, v in TARGETS.items()], value="head", label="Switch off", elem_id="whatif-target"
                )
                with gr.Row():
                    layer = gr.Slider(
                        0,
                        m.num_layers - 1,
                        value=m.num_layers - 1,
                        step=1,
                        precision=0,
                        label="Layer",
                        elem_id="whatif-layer",
                    )
                    head = gr.Slider(
                        0, m.num_heads - 1, value=0, step=1, precision=0, label="Head", elem_id="whatif-head"
                    )
                run = gr.Button("Switch it off and compare", variant="primary", elem_id="whatif-run")
                mode = gr.Radio(
                    [(v, k) for k, v in HEAD_MODES.items()],
                    value="zero",
                    label="A head switched off is",
                    elem_id="whatif-mode",
                )
                patch_mode = gr.Radio(
                    [(v, k) for k, v in PATCH_MODES.items()],
                    value="keys",
                    label="Chosen patches are",
                    elem_id="whatif-patch-mode",
                )
                with gr.Row():
                    patches = gr.Textbox(
                        label="Patches (indices, row by row; click the photo)", elem_id="whatif-patches"
                    )
                    layers = gr.Textbox(
                        label="Layers to skip (e.g. 3, 4, 5)", placeholder="3, 4, 5", elem_id="whatif-layers"
                    )
                photo = picture(
                    label="Your photo: click patches to choose them", clickable=True, elem_id="whatif-photo"
                )
        off = gr.Markdown(elem_id="whatif-off", label="Switched off")
        said = gr.Markdown(elem_id="whatif-said", label="The difference")
        with gr.Row(elem_classes=["vitviz-pair"]):
            top_before = gr.Label(num_top_classes=5, label="Top-5, as it is", visible=m.labels is not None)
            top_after = gr.Label(num_top_classes=5, label="Top-5, with it off", visible=m.labels is not None)
        with gr.Row(elem_classes=["vitviz-pair"]):
            dense_before = picture(label="Output, as it is", elem_id="whatif-dense-before")
            dense_after = picture(label="Output, with it off", elem_id="whatif-dense-after")
        with gr.Row(elem_classes=["vitviz-pair"]):
            attention_before = picture(
                label="Last layer's attention of the readout, as it is", elem_id="whatif-attention-before"
            )
            attention_after = picture(
                label="Last layer's attention of the readout, with it off", elem_id="whatif-attention-after"
            )
        with gr.Row(elem_classes=["vitviz-pair"]):
            rollout_before = picture(label="Rollout, as it is", elem_id="whatif-rollout-before")
            rollout_after = picture(label="Rollout, with it off", elem_id="whatif-rollout-after")
        gr.Markdown(sentences.legend("clip"), elem_classes=["legend"])
        measured = gr.State(None)  # this analysis' head importance (`Measured`), drawn again in another labels' mode
    bind = ctx.server.bind
    ctx.on_new_analysis(
        tab,
        bind(fresh),
        [*ctx.where, ctx.large],
        [tiles, patches, photo, layer, head, measure, measured],
        api_visibility="private",
        show_progress="hidden",
    )
    relabelling = dict(api_visibility="private", show_progress="hidden", **slots("draw"))
    ctx.on_display(bind(relabelled), [measured, ctx.key, ctx.model_name, ctx.large], [tiles], **relabelling)
    ctx.server.on_click(photo, patch_toggled, [*ctx.where, patches], [patches, photo])
    outputs = [
        off,
        said,
        top_before,
        top_after,
        dense_before,
        dense_after,
        attention_before,
        attention_after,
        rollout_before,
        rollout_after,
    ]
    ctx.view(
        tab,
        draw,
        [*ctx.where, target, layer, head, mode, patches, patch_mode, layers, ctx.cmap, ctx.alpha, ctx.scale],
        outputs,
        [run.click, target.input, mode.input, patch_mode.input, layer.release, head.release, layers.submit],
        api_name="ablate",
        concurrency_id="forward",
        clicks=Clicks([tiles], tile_at, [layer, head, target]),
    )
    measuring = measure.click(
        bind(measure_importance),
        [*ctx.where, mode, ctx.large],
        [tiles, importance_note, measured],
        api_name="importance",
        **slots("heavy"),
    )
    halt.click(bind(stop), None, importance_note, cancels=[measuring], api_visibility="private", queue=False)
    ctx.stop_with_the_photo(stop, importance_note, [measuring])
