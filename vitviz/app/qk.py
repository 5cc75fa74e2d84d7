"""Queries & keys: one head's queries and keys in one map (AttentionViz's joint embedding), drawn in the browser.

The page gets `vitviz.qk.meta` (sizes, the photo, each patch's colour, what every head sorts by) through a
`gr.HTML` value, then each layer's queries and keys from the Explorer's route, `GET /vitviz/explorer/layer`: the
normalisation and the PCA run in the browser. The script is `vitviz/static/qk*.js`, run as the component's
`js_on_load`; `window.vitviz.qk` is its test handle.
"""

from __future__ import annotations

import gradio as gr

from .. import qk
from .explorer import STATIC
from .session import Server, session_of, user_errors
from .source import Context, view_tab

SCRIPTS = ("attention.js", "qkmath.js", "qkdraw.js", "qk.js")  # the layer parser, arithmetic, drawing, the view


def script() -> str:
    """The component's js_on_load."""
    return "\n".join((STATIC / name).read_text() for name in SCRIPTS)


@user_errors
def draw(image, model_name, size, server: Server = None, request: gr.Request = None) -> dict:
    """The session's analysis' meta for the Q·K view, with where its layers are."""
    a = server.get_analysis(image, model_name, size, request)
    return {**qk.meta(a), "session": session_of(request), "key": server.analysis_key(image, model_name, size)}


def build(ctx: Context) -> None:
    with view_tab(
        "qk",
        (
            "Attention is a query's dot product with each key. Here every query of one head is a **filled dot** "
            "and every key a **ring**, in one map where a query lies near the keys it attends to. **Hover a "
            "point** to see its patch and the patches it attends to; **drag a rectangle** to light up patches; "
            "the sentence says whether the head sorts patches by where they are or by their colour."
        ),
    ) as tab:
        shown = gr.HTML(
            value=None,
            html_template='<div class="qk"></div>',
            css_template=(STATIC / "qk.css").read_text(),
            js_on_load=script(),
            elem_id="qk",
            apply_default_css=False,
        )
    ctx.view(tab, draw, ctx.where, [shown], api_name="qk")
