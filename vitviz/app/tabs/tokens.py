"""Tokens: the picture cut into patches, and the token sequence the ViT reads."""

from __future__ import annotations

import gradio as gr

from ...views.tokens import tokens_view
from ..context import Context, view_tab
from ..pictures import picture
from ..server import user_errors

# On a phone the picture is as tall as its width makes it, with no blank band above and under it
CSS = "@media (max-width: 600px) { #tokens { height: auto !important; } }"


@user_errors
def draw(a, request: gr.Request):
    """The patch grid with the scan order, and a sentence on the token sequence."""
    return tokens_view(a)


def build(ctx: Context) -> None:
    with view_tab(
        "tokens",
        (
            "The picture cut into the square patches the ViT reads. "
            "Each patch becomes one token. The margins give the scan order; the strip under the picture is the "
            "token sequence the transformer reads, prefix tokens first."
        ),
    ) as tab:
        with gr.Column(elem_classes=["vitviz-main"]):  # on a projector: on the left, the sentence on its right
            grid = picture(label="Patches and scan order", height=640, elem_id="tokens")
        text = gr.Markdown(label="Token sequence", elem_classes=["vitviz-beside"])
    ctx.view(tab, draw, ctx.where, [grid, text], api_name="tokens")
