"""Rollout: attention followed through every layer to the readout token."""

from __future__ import annotations

import gradio as gr

from .. import sentences, views
from ..maps import HEAD_FUSIONS
from .session import picture, user_errors
from .source import Context, view_tab


@user_errors
def draw(a, fusion, discard, cmap, alpha, colour_scale, request: gr.Request):
    """Attention rollout with head fusion and discard ratio."""
    if fusion not in HEAD_FUSIONS:
        raise ValueError(f"fusion must be one of {HEAD_FUSIONS}, got {fusion!r}")
    return views.rollout_view(a, fusion, float(discard), cmap, float(alpha), colour_scale)


def build(ctx: Context) -> None:
    with view_tab(
        "rollout",
        (
            "Attention *rollout* follows attention through all layers "
            "at once: it multiplies the layers' attention (plus the skip connection) to estimate "
            "how much each patch flows into the CLS token at the end. Bright = more. "
            "On the default log scale equal steps of colour are equal factors, so a faint background and "
            "a bright object both show. "
            "The sentence under the pictures says what the brightest patch is on this image; "
            "a discard ratio or max fusion shows more than the few brightest patches."
        ),
    ) as tab:
        with gr.Row():
            fusion = gr.Radio(list(HEAD_FUSIONS), value="mean", label="Fuse the heads of a layer by")
            discard = gr.Slider(0, 0.95, value=0.0, step=0.05, label="Discard the weakest fraction")
        with gr.Row():
            original = picture(label="Your image, for comparison")
            rollout = picture(label="Rollout (bilinear)", elem_id="rollout")
        gr.Markdown(sentences.legend("clip"), elem_classes=["legend"])
        note = gr.Markdown(label="Brightest patch", elem_id="rollout-note")
    ctx.mirror_preview(original)
    ctx.view(
        tab,
        draw,
        [*ctx.where, fusion, discard, ctx.cmap, ctx.alpha, ctx.scale],
        [rollout, note],
        [fusion.change, discard.change],
        api_name="rollout",
    )
