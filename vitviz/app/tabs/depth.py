"""Depth: the depth map a DPT decodes from ViT tokens, its reassemble and fusion maps, its encoder."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import gradio as gr

from ... import DEFAULT_DEPTH_MODEL, DEPTH_CATALOGUE, DepthResult, ModelUnavailableError, plots, tabs
from ...depth import save_depth
from ...hub import hub_cached, hub_reachable
from ...render import large_labels
from ...sentences import grid_words, pixel_words
from ...views.attention import attention_view
from ...views.depth import decoder_stage_views, depth_view
from ..context import Context, Progress, view_tab
from ..head_choice import MEAN_OF_HEADS_VALUE, head_arg, head_choices
from ..heavy import stop_run, stoppable
from ..pictures import picture
from ..scheduling import slots
from ..server import Server, user_errors

ENCODER_ALPHA = 0.6  # the encoder's attention keeps the image visible whatever the depth opacity
DOWNLOADS_KEPT = 32  # depth results whose files stay on disk, newest first
STOPPED_NOTE = (
    "**Stopped.** The depth estimate ended at its encoder's next layer and kept nothing; press Estimate depth to "
    "run it again."
)
OFFLINE = (
    "this machine cannot reach the model hub, and keeps no depth model's weights. Connect once to download one, "
    "or give a local folder in save_pretrained layout instead."
)


def unavailable(reason: str) -> str:
    """What the Depth tab says when it has no depth model: why (the hub's own words), and how the app takes one."""
    return f"**Depth is not available here:** {reason} The app takes a folder as `vitviz serve --depth-model PATH`."


def downloads(server: Server, r: DepthResult, image: str, key: tuple) -> list[str]:
    """16-bit PNG and .npy of the depth, written once per result in the server's folder; old ones are deleted."""
    with server.files_lock:
        kept = server.depth_files
        if key not in kept:
            folder = Path(tempfile.mkdtemp(prefix="depth-", dir=server.scratch()))
            save_depth(r.depth, folder, Path(image).stem)
            kept[key] = folder
            while len(kept) > DOWNLOADS_KEPT:
                shutil.rmtree(kept.popitem(last=False)[1], ignore_errors=True)
        return [str(f) for f in sorted(kept[key].iterdir())]


def status(r: DepthResult) -> str:
    m, a = r.model, r.encoder
    h, w = r.pixel_values.shape[2:]
    where = "GPU" if m.device.type == "cuda" else "CPU"
    shape = "square, as DPT's own ViT needs" if m.square else "aspect kept"
    return (
        f"**{m.name}** on **{where}** ({str(m.dtype).removeprefix('torch.')}) · input {pixel_words(h, w)} ({shape}) · "
        f"encoder grid {grid_words(*a.grid)} of patches of {m.patch_size} px · "
        f"{a.model.num_layers} layers × {a.model.num_heads} heads"
    )


def encoder_attention(r: DepthResult, layer: int, head: int, cmap: str):
    encoder = r.encoder.model
    layer = min(int(layer), encoder.num_layers - 1)
    return attention_view(r.encoder, layer, head_arg(head, encoder), "cls", cmap, ENCODER_ALPHA)[0]


def depth_of(server: Server, image, depth_name: str, request: gr.Request, progress, tab: str = "depth") -> DepthResult:
    """This session's depth of `image`: the cached one, or a run of `tab`'s (the Depth tab's, or the lesson's dense
    step's) that holds the heavy slot and ends at the encoder's next layer when the photo changes or is cleared, or
    the page closes (`stop`)."""
    name = f"Depth with {depth_name}"
    with stoppable(server, request, name, f"{name}: the encoder's layers", progress, tab=tab) as report:
        return server.get_depth(image, depth_name, server.depth_key(image, depth_name, request), report)


def stop(server: Server, request: gr.Request) -> str:
    """End this session's depth run at its encoder's next layer (a new, cleared or resized photo, another model,
    the page closed: `Context.stop_with_the_photo`), and say so."""
    return STOPPED_NOTE if stop_run(server, request, "depth") else gr.skip()


@user_errors
def draw(
    image,
    depth_name,
    cmap,
    alpha,
    layer,
    head,
    server: Server,
    request: gr.Request,
    progress=gr.Progress(track_tqdm=True),
):
    """Depth over the image, 3-D cloud, decoder stages and table, encoder attention, downloads."""
    progress(0.1, desc=f"Depth with {depth_name} (a hub model downloads once)")
    try:
        r = depth_of(server, image, depth_name, request, progress)
    except ModelUnavailableError as exc:
        return (unavailable(str(exc)),) + (None,) * 7
    original, overlay = depth_view(r, cmap, float(alpha))
    return (
        status(r),
        original,
        overlay,
        plots.depth_cloud(r.depth, r.encoder.image),
        *decoder_stage_views(r),
        encoder_attention(r, layer, head, cmap),
        downloads(server, r, image, server.depth_key(image, depth_name, request)),
    )


@user_errors
def draw_attention(
    server: Server, image, depth_name, layer, head, cmap, large_text, request: gr.Request, progress=gr.Progress()
):
    """The depth encoder's CLS attention in one layer: one head, the mean, or all heads."""
    r = depth_of(server, image, depth_name, request, progress)
    with large_labels(large_text):
        return encoder_attention(r, layer, head, cmap)


def fit_controls(server: Server, depth_name, layer, head):
    """Another depth model: the layer range and heads of its encoder (nothing to fit while it cannot load)."""
    try:
        encoder = server.get_depth_model(depth_name).encoder
    except (ModelUnavailableError, ValueError, OSError):
        return gr.skip(), gr.skip()
    last = encoder.num_layers - 1
    return (
        gr.Slider(maximum=last, value=min(layer, last)),
        gr.Dropdown(choices=head_choices(encoder), value=head if head < encoder.num_heads else MEAN_OF_HEADS_VALUE),
    )


# On a projector the results' parts take their places in the tab's layout (layout.PAGE_CSS), the pictures on the left
CSS = """body.vitviz-large #depth-results { display: contents; }
body.vitviz-large :where(#depth-results) > * { grid-column: 1 / -1; }"""


def build(ctx: Context) -> None:
    names = list(DEPTH_CATALOGUE)
    if ctx.depth_model is not None:
        encoder = ctx.server.get_depth_model(ctx.depth_model).encoder
        if ctx.depth_model not in names:
            names.insert(0, ctx.depth_model)
    with view_tab(
        "depth",
        (
            "A *Dense Prediction Transformer* (DPT) decodes ViT tokens "
            "into a picture-shaped output: here, depth. It takes the tokens of four encoder "
            "layers, *reassembles* each set into a feature map registered to the image (the "
            "readout token is folded into every patch token, tokens go back to their patch "
            "positions, a 1×1 convolution (one small linear map applied at every position) "
            "projects them, and they are resampled to a scale *s*), "
            "then *fuses* (combines) the maps from coarse to fine. The result is **relative "
            "inverse depth**: bright means near, and the scale is unknown, so compare places "
            "within one picture, not numbers between pictures."
        ),
        elem_id="depth-tab",
    ) as tab:
        offline = ctx.depth_model is None and not hub_reachable() and not any(map(hub_cached, DEPTH_CATALOGUE))
        # On a projector: the depth map on the left, the status, the model and the button on its right
        note = gr.Markdown(
            unavailable(OFFLINE) if offline else "",
            elem_id="depth-note",
            label="Depth status",
            elem_classes=["vitviz-head"],
        )
        with gr.Row(elem_classes=["vitviz-controls"]):
            model = gr.Dropdown(
                [(f"{n}: {DEPTH_CATALOGUE.get(n, 'local folder')}", n) for n in names],
                value=ctx.depth_model or DEFAULT_DEPTH_MODEL,
                label="Depth model",
                scale=3,
                elem_id="depth-model",
            )
            button = gr.Button("Estimate depth", variant="primary", scale=1, interactive=not offline)
        # Offline with no depth model, the notice stands alone: no empty panels under it.
        with gr.Column(visible=not offline, elem_id="depth-results"):
            with gr.Row(elem_classes=["vitviz-pair", "vitviz-second-first", "vitviz-main"]):  # stacked on a projector
                original = picture(label="Your image (depth input)")
                overlay = picture(label="Relative inverse depth (bright = near)", elem_id="depth")
            cloud = gr.Plot(label="3-D view")
            gr.Markdown(
                "#### Inside the decoder\nEach map shows its first three principal components as "
                "colours (same colour = similar features); one square is one cell of the map. "
                "*Reassemble* maps come from the encoder's tokens at four scales; *fusion* maps "
                "merge them, coarsest first, each one twice as fine as the last."
            )
            stages = gr.Gallery(label="Reassemble 1-4, then fusion 1-4", columns=4, height="auto", object_fit="contain")
            table = gr.Markdown(label="Decoder maps")
            gr.Markdown(
                "#### The depth model's own encoder\nThe CLS (readout) token's attention in the DPT's ViT, as in "
                f"tab {tabs.number('attention')}."
            )
            with gr.Row():
                enc = encoder if ctx.depth_model is not None else None
                last = enc.num_layers - 1 if enc else 11
                layer = gr.Slider(0, last, value=last, step=1, precision=0, label="Encoder layer")
                head = gr.Dropdown(
                    head_choices(enc) if enc else head_choices(ctx.model)[:2], value=MEAN_OF_HEADS_VALUE, label="Head"
                )
            attention = picture(label="Encoder attention of the CLS token", height=480)
            files = gr.File(label="Download the depth: .npy (float32) and 16-bit PNG")
    fitted = model.change(ctx.server.bind(fit_controls), [model, layer, head], [layer, head], api_visibility="private")
    draws = ctx.view(
        tab,
        draw,
        [ctx.image, model, ctx.cmap, ctx.alpha, layer, head],
        [note, original, overlay, cloud, stages, table, attention, files],
        [button.click, fitted],  # a new depth model: its layer and head fitted first, then the draw
        api_name="depth",
        concurrency_id="heavy",
        progress=Progress("full", overlay),
    )
    redraw_attention = gr.on(
        [layer.change, head.change],
        ctx.server.bind(draw_attention),
        [ctx.image, model, layer, head, ctx.cmap, ctx.large],
        attention,
        api_name="depth_attention",
        trigger_mode="always_last",
        show_progress="minimal",
        **slots("heavy"),  # it computes the depth first if there is none yet
    )
    ctx.stop_with_the_photo(stop, note, [*draws, redraw_attention])
