"""Inside a head: one head's self-attention for one query, computed step by step on the user's image."""

from __future__ import annotations

import gradio as gr

from ... import sentences
from ...models import VitModel
from ...views.inside import inside_views, patch_at_inside
from .. import explorer
from ..context import Clicks, Context, view_tab
from ..pictures import picture
from ..server import user_errors
from .attention import QUERY_CHOICES, READOUT_QUERY, controls_fitter, patch_locator, query_of

LATEX = [{"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}]


def single_heads(model: VitModel) -> list[tuple[str, int]]:
    return [(f"head {h}", h) for h in range(model.num_heads)]


@user_errors
def draw(a, layer, head, query_mode, patch, cmap, alpha, colour_scale, request: gr.Request):
    """(scores, weights, weight × value norm, q/k/v strips, heads and layer bars, the steps in words)."""
    head = int(head)
    if not 0 <= head < a.model.num_heads:
        raise ValueError(f"head must be in [0, {a.model.num_heads}) here (one head, not the mean), got {head}")
    return inside_views(a, int(layer), head, query_of(query_mode, patch), cmap, float(alpha), colour_scale)


pick_patch = patch_locator(patch_at_inside)  # its three maps are drawn smaller, each a colour scale below


def build(ctx: Context) -> None:
    m = ctx.model
    with view_tab(
        "inside",
        (
            "How one head computes its attention, step by step, on your image: each token is normalised "
            "(LayerNorm), then turned into a *query*, a *key* and a *value*; the query's scaled dot product "
            "with every key gives a *score*; softmax turns the scores into *weights*; the head's output is "
            "the weighted sum of the values. **Move the pointer over the photo** (or drag a finger): your browser "
            "recomputes the chosen head's scores, weights and weight × value norms for the patch under it, from "
            "the model's own queries and keys; click to pin it. Below, the server walks through every step, "
            "LayerNorm and the layer's updates included, for the query you choose there."
        ),
    ) as tab:
        live = explorer.build(ctx, mode="inside")
        gr.Markdown(
            "**Every step, drawn by the server** (the API's `/inside_head`): click a picture to choose the query"
        )
        with gr.Row():
            last = m.num_layers - 1  # as the live panel above starts: the two show the same layer at first
            layer = gr.Slider(0, last, value=last, step=1, precision=0, label="Layer", elem_id="inside-layer")
            head = gr.Dropdown(single_heads(m), value=0, label="Head", elem_id="inside-head")
            query_mode = gr.Radio(QUERY_CHOICES, value=READOUT_QUERY, label="Query")
            patch = gr.Number(value=-1, precision=0, label="Query patch (index)", minimum=-1, elem_id="inside-patch")
        with gr.Row():
            scores = picture(label="2 · Scores minus the top score, s − max s", clickable=True, elem_id="inside-scores")
            weights = picture(label="3 · Weights α = softmax(scores)", clickable=True, elem_id="inside-weights")
            values = picture(
                label="4 · Weight × value norm ‖α W_O v‖",
                caption="4 · Weight × value norm ‖α W<sub>O</sub> v‖",
                clickable=True,
                elem_id="inside-values",
            )
        gr.Markdown(sentences.legend("query", "clip"), elem_classes=["legend"])
        note = gr.Markdown(label="The steps in numbers", latex_delimiters=LATEX, elem_id="inside-note")
        with gr.Row():
            strips = gr.Plot(label="1 · The query, and keys and values of some tokens", elem_id="inside-strips")
            bars = gr.Plot(label="5 · How the heads and the layer's updates add up", elem_id="inside-bars")
    ctx.view(tab, explorer.draw, [*ctx.where, ctx.cmap, ctx.alpha, ctx.scale], [live])
    ctx.view(
        tab,
        draw,
        [*ctx.where, layer, head, query_mode, patch, ctx.cmap, ctx.alpha, ctx.scale],
        [scores, weights, values, strips, bars, note],
        [layer.change, head.change, query_mode.input, patch.input],
        api_name="inside_head",
        prepare=(
            ctx.server.bind(controls_fitter(single_heads, 0, token_query=True)),
            [*ctx.where, layer, head, patch],
            [layer, head, patch, query_mode],
        ),
        clicks=Clicks([scores, weights, values], pick_patch, [patch, query_mode]),
    )
