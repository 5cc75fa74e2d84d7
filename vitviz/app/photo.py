"""The photo panel, on the left of the page: the upload, the examples, the model, the input size and the display
settings; it makes the `Context` the views are built in.

The page's analysis (`analyze_in_page`; `/analyze` in the API) runs the one forward pass and sets the session's
analysis key, which the views follow (`Context.view`).
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
from gradio_client import handle_file

from .. import CATALOGUE, ModelUnavailableError, VitModel, sentences
from ..maps import DEFAULT_SCALE
from ..preprocess import pictures_in
from ..render import COLORMAPS
from ..views.common import display
from .context import PHONE, Context
from .pictures import picture
from .routing import NOTHING
from .scheduling import slots
from .server import EXAMPLES, SIZES, Server, user_errors

# The switch zooms the page; the pictures' labels are drawn large with it, and on a phone always.
LARGE_TEXT_JS = f"(on) => {{ document.body.classList.toggle('vitviz-large', on); return on || {PHONE}; }}"


EXAMPLE_URL = "https://raw.githubusercontent.com/scikit-image/scikit-image/main/skimage/data/chelsea.png"


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


NO_PHOTO = "No photo chosen: the views show the last one until you choose another."


def not_read(reason: str) -> str:
    """The status for an upload that could not be analysed: why, and what the views show meanwhile."""
    return f"**Not analysed:** {reason.rstrip('.')}. The views show the last photo until you choose another."


@user_errors
def analyze_image(server: Server, image, model_name, size, request: gr.Request, progress=gr.Progress()):
    """Analyse an image: one forward pass, cached. Clearing the upload leaves the key as it is, and the views show
    the last photo's pictures (`NO_PHOTO`)."""
    if not image:
        return None, NO_PHOTO, gr.skip()
    a = server.get_analysis(image, model_name, size, request, progress)
    status = status_text(a) + sentences.first_picture_note(*pictures_in(image))
    return display(a), status, server.analysis_key(image, model_name, size)


def analyze_in_page(server: Server, image, model_name, size, request: gr.Request, progress=gr.Progress()):
    """The page's analysis: `analyze_image`, and its key again for the page, which routes it (`Context.seen`):
    "" while no photo is in, so that the same photo chosen again is routed anew. An upload that cannot be analysed
    leaves the preview, the key and the views as they were, and the status says why (`not_read`), as a toast does."""
    try:
        *shown, key = analyze_image(server, image, model_name, size, request, progress)
    except gr.Error as exc:
        gr.Warning(exc.message)
        return gr.skip(), not_read(exc.message), gr.skip(), gr.skip()
    return *shown, key, key if image else ""


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


def build_photo_panel(demo: gr.Blocks, server: Server, model: VitModel, depth_model: str | None) -> Context:
    """The left column: the image and its settings. Returns the context the views are built in."""
    names = list(CATALOGUE)
    if model.name not in names:
        names.insert(0, model.name)
    # Rows whose parts wrap under each other in the narrow left column (1400 px wide), and stand side by side
    # when the views wrap under the panel at full width (a 1024x768 projector), so the tabs come up sooner.
    with gr.Row(elem_id="photo-strip"):
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
    # a timer where the photo went, on every screen; "full" would cover the box, and a queued upload could not be
    # cleared or replaced meanwhile
    forward = dict(show_progress="minimal", show_progress_on=[image], **slots("forward", server))
    in_page = dict(fn=server.bind(analyze_in_page), inputs=ctx.where, outputs=[*analyze_out, ctx.seen])
    demo.load(api_visibility="private", **in_page, **forward)
    changes = [image.change, size.change, ctx.current_model.change]
    # First, a step in the page: Gradio's page (6.31) sends an event's listeners one after another, each when the
    # one before has its answer, so a stop listening beside the analysis would wait for its forward pass.
    ctx.changed = gr.on(changes, None, js=NOTHING, queue=False, api_visibility="private")
    gr.on(changes, api_visibility="private", **in_page, **forward)
    # the API's: the page's answer holds the key once more, which an API client has no use for
    gr.Button(visible=False).click(server.bind(analyze_image), ctx.where, analyze_out, api_name="analyze", **forward)
    model_name.change(
        server.bind(change_model),
        [model_name, ctx.current_model],
        [model_name, ctx.current_model],
        api_visibility="private",
    )
    gallery.select(pick_example, None, image, api_visibility="private")
    return ctx
