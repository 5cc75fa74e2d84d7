"""The Explorer, at the head of the Attention tab: attention computed and drawn in the browser.

The page gets the analysis' meta through a `gr.HTML` (its value), then each layer's queries and keys as raw
float32 from `GET /vitviz/explorer/layer`, outside Gradio's queue: a layer takes no model lock and no
queue slot, and each browser fetches one layer at a time. The script is `vitviz/static/*.js` (see
`vitviz.explorer.ENGINE`), run as the component's `js_on_load`; `window.vitviz.explorer` is its test handle.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict

import anyio
import gradio as gr
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from .. import explorer
from ..maps import DEFAULT_SCALE
from .server import Server, session_of, user_errors

STATIC = explorer.STATIC
LAYER_PATH = "/vitviz/explorer/layer"
# The request header that carries the session's page token (`Server.page_token`) to vitviz's routes: a header, not
# the query, so that it is in no URL (a log, a history, a shared screen). The meta names it for the page.
TOKEN_HEADER = "X-Vitviz-Token"
# Layers computed at once, over every user: a few ms each on the cached tokens, but a page that loops on the route
# must not take the cores from the others. A request that waits longer than BUSY_S gets 503, which the page retries.
LAYER_SLOTS, BUSY_S = threading.BoundedSemaphore(2), 5.0


class OnePerSession:
    """At most one layer computing per session, and each layer of a photo sent to it once in REPEAT_S: a page
    fetches one at a time and keeps what it got (its HTTP cache too), so a second request at once, or the same
    layer again, is a flood (a script, a stuck loop) that must not take the cores from the other users. Its
    request gets 503 at once, which a page retries."""

    REPEAT_S = 10.0

    def __init__(self, sessions: int = 10_000) -> None:
        self._busy: OrderedDict[str, None] = OrderedDict()
        self._sent: OrderedDict[tuple, float] = OrderedDict()  # (session, key, layer) -> when it was sent
        self._sessions, self._lock = sessions, threading.Lock()

    def start(self, session: str, key: str = "", layer: int = 0) -> str | None:
        """None where `session` may compute `layer` of photo `key` now (then `done` must follow), or why not."""
        now = time.monotonic()
        with self._lock:
            if session in self._busy:
                return "this page has a layer on its way already: it asks again"
            if now - self._sent.get((session, key, layer), -self.REPEAT_S) < self.REPEAT_S:
                return "this page was sent this layer just now: it asks again later"
            self._busy[session] = None
            while len(self._busy) > self._sessions:  # a bound, not a lease: sessions end without telling
                self._busy.popitem(last=False)
            return None

    def done(self, session: str, key: str = "", layer: int = 0, sent: bool = True) -> None:
        with self._lock:
            self._busy.pop(session, None)
            if sent:
                self._sent[(session, key, layer)] = time.monotonic()
                self._sent.move_to_end((session, key, layer))
                while len(self._sent) > 12 * self._sessions:
                    self._sent.popitem(last=False)


LAYER_SESSIONS = OnePerSession()


def script() -> str:
    """The component's js_on_load: the engine, booted on the component's value and the layer route."""
    return explorer.script("boot_gradio.js")


@user_errors
def draw(
    image,
    model_name,
    size,
    cmap,
    alpha=0.6,
    colour_scale=DEFAULT_SCALE,
    server: Server = None,
    request: gr.Request = None,
) -> dict:
    """The meta of the session's analysis, with where its layers are and the page's display settings (colormap,
    opacity, colour scale): the browser does the rest."""
    a = server.get_analysis(image, model_name, size, request)
    return {
        **explorer.meta(a),
        **explorer.look(cmap, alpha, colour_scale),
        **route_meta(server, request),
        "key": server.analysis_key(image, model_name, size),
    }


def route_meta(server: Server, request: gr.Request | None) -> dict:
    """What a page needs in its meta to ask vitviz's routes: its session, its page token and the header for it."""
    session = session_of(request)
    return {"session": session, "token": server.page_token(session), "tokenHeader": TOKEN_HEADER}


def refused_page(server: Server, request: Request, session: str) -> Response | None:
    """403 for a request to vitviz's routes without its session's page token (`TOKEN_HEADER`), else None."""
    if server.holds_page_token(session, request.headers.get(TOKEN_HEADER)):
        return None
    return PlainTextResponse("this page's token is missing or wrong: reload the page", status_code=403)


async def layer_response(server: Server, request: Request) -> Response:
    """GET ?session=&key=&layer=, with the session's page token in `TOKEN_HEADER`: one layer's bytes (see
    `vitviz.explorer`), or a 4xx that says why. A refusal is answered on the event loop; only a layer's computing
    takes a worker thread, so a flood of refused requests costs the others little."""
    params = request.query_params
    session, key, layer = params.get("session"), params.get("key"), params.get("layer", "")
    if not session or not key:
        return PlainTextResponse("session and key are required", status_code=400)
    refused = refused_page(server, request, session)
    if refused is not None:
        return refused
    a = server.cache.get((session, key))
    if a is None:
        return PlainTextResponse("this photo's analysis is no longer kept: pick the photo again", status_code=404)
    if not re.fullmatch(r"[0-9]{1,4}", layer) or not 0 <= int(layer) < a.model.num_layers:
        return PlainTextResponse(f"layer must be an integer in [0, {a.model.num_layers}), got {layer[:20]!r}", 400)
    refused = LAYER_SESSIONS.start(session, key, int(layer))
    if refused:
        return PlainTextResponse(refused, status_code=503)
    data = None
    try:
        data = await anyio.to_thread.run_sync(computed, server, a, int(layer))
    finally:
        LAYER_SESSIONS.done(session, key, int(layer), sent=isinstance(data, bytes))
    if isinstance(data, Response):
        return data
    # identity: float32 barely compresses, and Gradio's middleware would spend time on it (docs/benchmarks.md)
    headers = {"Cache-Control": "private, max-age=3600", "Content-Encoding": "identity"}
    return Response(data, media_type="application/octet-stream", headers=headers)


def computed(server: Server, a, layer: int) -> bytes | Response:
    """A layer's bytes, in one of the few slots for every user, or the 4xx/503 that says why not."""
    if not LAYER_SLOTS.acquire(timeout=BUSY_S):
        return PlainTextResponse("the server is busy: the page asks again", status_code=503)
    try:
        with server.redraws.interactive():  # the background warm pauses between its steps meanwhile
            return explorer.layer_data(a, layer).tobytes()
    except ValueError as exc:
        return PlainTextResponse(str(exc), status_code=400)
    finally:
        LAYER_SLOTS.release()


def routes(server: Server) -> list[Route]:
    """The routes the app adds to Gradio's (see `vitviz.app.main`), answering from `server`."""

    async def layer(request: Request) -> Response:  # a function: Starlette takes anything else for an ASGI app
        return await layer_response(server, request)

    return [Route(LAYER_PATH, layer, methods=["GET"])]


# How to use it, said for a pointer and keys or for a finger (a touch screen has no keys to press); the page shows
# the one that fits (layout.PAGE_CSS)
POINTER_HELP = (
    "**Move the pointer over the photo**: the patch under it is the *query*. Click to pin it there, and click it "
    "again to unpin; with the photo clicked, ← → change the layer and ↑ ↓ the head."
)
TOUCH_HELP = (
    "**Drag a finger over the photo**: the patch under it is the *query*; it stays where you lift your finger. "
    "Layer and Head, above the photo, change the layer and the head."
)


def build(ctx, mode: str = "attention") -> gr.HTML:
    """The Explorer component, under its help. mode "attention": every head of a layer (the Attention tab, handle
    `window.vitviz.explorer`); "inside": one head step by step (Inside a head, `window.vitviz.inside`)."""
    gr.Markdown(POINTER_HELP, elem_classes=["vitviz-pointer"])
    gr.Markdown(TOUCH_HELP, elem_classes=["vitviz-touch"])
    return gr.HTML(
        value=None,
        html_template=f'<div class="vx" data-mode="{mode}"></div>',  # the template, not a prop: read at load
        # the photo's width / height, for the projector's layout (the template is evaluated again on a new value)
        css_template="--vx-aspect: ${value?.photoSize ? value.photoSize[0] / value.photoSize[1] : 1};\n"
        + (STATIC / "explorer.css").read_text(),
        js_on_load=script(),
        elem_id="explorer" if mode == "attention" else "inside-explorer",
        label="The Explorer's meta",  # the API's name for it: the page shows no label
        apply_default_css=False,
    )
