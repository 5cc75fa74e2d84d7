"""Heads: every head at a glance (attention distance, entropy), token norms and a PCA of the tokens."""

from __future__ import annotations

import gradio as gr

from ... import sentences
from ...views.heads import heads_views
from ..context import Context, Progress, view_tab
from ..pictures import picture
from ..server import user_errors

# On a projector the two charts come on the first screen, under the tab bar: this tall (px, before the page's zoom)
PROJECTOR_CHART_HEIGHT = 424


@user_errors
def draw(a, cmap, colour_scale, large_text, request: gr.Request, progress=gr.Progress()):
    """(attention distance, entropy, token norms, PCA); the statistics read every weight once per analysis."""
    progress(0.2, desc="Statistics over every layer's and head's attention (once per image)")
    distance, entropy, *rest = heads_views(a, cmap, colour_scale)
    if large_text:
        for chart in (distance, entropy):
            chart.update_layout(height=PROJECTOR_CHART_HEIGHT)
    return distance, entropy, *rest


def build(ctx: Context) -> None:
    with view_tab(
        "heads",
        (
            "*Mean attention distance*: how far, in pixels, each head "
            "looks on average; *entropy*: how spread out its attention is. *Token norms*: some ViTs "
            "keep a few tokens with norms far above the rest as scratch space (green boxes, if any). "
            "*PCA*: the final patch features squeezed to three colours; same colour = similar."
        ),
    ) as tab:
        with gr.Row(elem_id="heads-charts"):
            distance = gr.Plot(label="Attention distance")
            entropy = gr.Plot(label="Attention entropy")
        with gr.Row(elem_classes=["vitviz-pair"]):
            norms = picture(label="Output token norms", elem_id="norms")
            pca = picture(label="PCA of patch features as RGB")
        gr.Markdown(sentences.legend("clip", "artifact"), elem_classes=["legend"])
        norms_note = gr.Markdown(label="Token norms")
    ctx.view(
        tab,
        draw,
        [*ctx.where, ctx.cmap, ctx.scale],
        [distance, entropy, norms, pca, norms_note],
        api_name="heads",
        progress=Progress("full"),
    )
