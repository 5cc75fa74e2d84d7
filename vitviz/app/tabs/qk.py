"""Queries & keys: one head's queries and keys in one map (AttentionViz's joint embedding), drawn in the browser.

The page gets `vitviz.qk.meta` (sizes, the photo, each patch's colour, what every head sorts by) through a
`gr.HTML` value, then each layer's queries and keys from the Explorer's route, `GET /vitviz/explorer/layer`: the
normalisation and the PCA run in the browser. The script is `vitviz/static/qk*.js`, run as the component's
`js_on_load`; `window.vitviz.qk` is its test handle.
"""

from __future__ import annotations

import re
import threading
import warnings

import gradio as gr
import numpy as np
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ... import explorer, qk
from ..context import Context, view_tab
from ..explorer import STATIC, refused_page, route_meta
from ..server import Server, user_errors

UMAP_PATH = "/vitviz/qk/umap"
# One UMAP at a time over every user: seconds of both cores each. A request that waits longer gets 503 (the page
# says the server is busy and asks again).
UMAP_SLOTS, BUSY_S = threading.BoundedSemaphore(1), 30.0


def script() -> str:
    """The component's js_on_load: the view, its layers' parser and the route's source, the words' number
    formatter (text.js), and its boot."""
    return qk.script("boot_qk_gradio.js", engine=("attention.js", "source.js", "text.js"))


@user_errors
def draw(image, model_name, size, server: Server = None, request: gr.Request = None) -> dict:
    """The session's analysis' meta for the Q·K view, with where its layers are."""
    a = server.get_analysis(image, model_name, size, request)
    return {**qk.meta(a), **route_meta(server, request), "key": server.analysis_key(image, model_name, size)}


def umap_response(server: Server, request: Request) -> Response:
    """GET ?session=&key=…&layer=&head=, with the session's page token in `explorer.TOKEN_HEADER`: the UMAP map of
    one head over the session's photos named by `key` (one or several, of one model), normalised together as the
    page's PCA is, little-endian float32 [2N, 2] (every photo's queries, then every photo's keys, in the keys'
    order), or a 4xx that says why."""
    p = request.query_params
    session, keys, layer, head = p.get("session"), p.getlist("key"), p.get("layer", ""), p.get("head", "")
    if not session or not keys:
        return PlainTextResponse("session and key are required", status_code=400)
    refused = refused_page(server, request, session)
    if refused is not None:
        return refused
    if len(keys) > qk.MAX_PHOTOS:
        return PlainTextResponse(f"at most {qk.MAX_PHOTOS} photos in one map, got {len(keys)}", status_code=400)
    analyses = [server.cache.get((session, key)) for key in keys]
    if any(a is None for a in analyses):
        return PlainTextResponse("a photo's analysis is no longer kept: pick the photo again", status_code=404)
    m = analyses[0].model
    if any(a.model.name != m.name for a in analyses):
        return PlainTextResponse("the photos of one map must come from one model", status_code=400)
    if not re.fullmatch(r"[0-9]{1,4}", layer) or not 0 <= int(layer) < m.num_layers:
        return PlainTextResponse(f"layer must be an integer in [0, {m.num_layers}), got {layer[:20]!r}", 400)
    if not re.fullmatch(r"[0-9]{1,4}", head) or not 0 <= int(head) < m.num_heads:
        return PlainTextResponse(f"head must be an integer in [0, {m.num_heads}), got {head[:20]!r}", 400)
    if not qk.umap_available():
        return PlainTextResponse(f"the server has no umap-learn: {qk.UMAP_INSTALL}", status_code=501)
    if not UMAP_SLOTS.acquire(timeout=BUSY_S):
        return PlainTextResponse("the server is busy: the page asks again", status_code=503)
    try:
        parts = [explorer.layer_data(a, int(layer)) for a in analyses]
        qs, ks = zip(*(qk.head_vectors(d.q, d.k, m.num_heads, int(head)) for d in parts), strict=True)
        with warnings.catch_warnings():  # umap-learn warns that a seed turns off its threads: that is the point
            warnings.simplefilter("ignore")
            q2, k2 = qk.umap_map(np.vstack(qs).astype(np.float64), np.vstack(ks).astype(np.float64))
    finally:
        UMAP_SLOTS.release()
    body = np.ascontiguousarray(np.vstack([q2, k2]), dtype="<f4").tobytes()
    return Response(body, media_type="application/octet-stream", headers={"Cache-Control": "private, max-age=3600"})


def routes(server: Server) -> list[Route]:
    """The view's route, beside the Explorer's (see `vitviz.app.main`)."""

    def umap(request: Request) -> Response:  # a function: Starlette takes anything else for an ASGI app
        return umap_response(server, request)

    return [Route(UMAP_PATH, umap, methods=["GET"])]


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
            label="The Q·K view's meta",  # the API's name for it: the page shows no label
            apply_default_css=False,
        )
    ctx.view(tab, draw, ctx.where, [shown], api_name="qk")
