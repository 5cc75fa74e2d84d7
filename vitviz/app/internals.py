"""Every reach into Gradio's internals, in one place: each says why it is needed and which Gradio it was written for.

`check_gradio` runs at start-up (`layout.build`): it says so in the log when the installed Gradio is not the one
tested, and stops with a clear message when an internal that a workaround needs is gone. tests/test_internals.py
holds one test per workaround that fails when Gradio no longer needs it or when it no longer works.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path

import gradio as gr

log = logging.getLogger("vitviz")

# The Gradio releases these workarounds were written for and tested on; pyproject.toml pins the same range.
TESTED = ((6, 31), (6, 32))  # from 6.31 up to, not including, 6.32
WRITTEN_FOR = "6.31"


def _release(version: str) -> tuple[int, int]:
    found = re.match(r"(\d+)(?:\.(\d+))?", version)
    if found is None:
        raise ValueError(f"not a version: {version!r}")
    return int(found[1]), int(found[2] or 0)


def untested(version: str) -> str | None:
    """Why `version` of Gradio is not one these workarounds were tested on, or None when it is."""
    low, high = TESTED
    if low <= _release(version) < high:
        return None
    return (
        f"vitviz was tested with gradio {low[0]}.{low[1]}.x and gradio {version} is installed: vitviz.app.internals "
        f"reaches into gradio {WRITTEN_FOR}'s internals, so some pictures, clicks or error messages may misbehave. "
        f'Install the tested one with: pip install "gradio>={low[0]}.{low[1]},<{high[0]}.{high[1]}"'
    )


def check_gradio(version: str | None = None) -> str | None:
    """At start-up: log a warning when the installed Gradio is untested (and return it); raise a RuntimeError
    naming what is missing when an internal that a workaround replaces or reads is gone."""
    from gradio import processing_utils, route_utils
    from gradio.block_function import BlockFunction

    missing = [
        name
        for name in ("save_pil_to_cache", "async_move_files_to_cache", "encode_pil_to_bytes", "hash_bytes")
        if not callable(getattr(processing_utils, name, None))
    ]
    if "input_parameter_names" not in inspect.signature(BlockFunction.__init__).parameters:
        missing.append("BlockFunction.input_parameter_names")
    if not callable(getattr(route_utils.CustomCORSMiddleware, "is_valid_origin", None)):
        missing.append("route_utils.CustomCORSMiddleware.is_valid_origin")
    version = gr.__version__ if version is None else version
    if missing:
        raise RuntimeError(
            f"gradio {version} lacks {', '.join(missing)}, which vitviz.app.internals needs: "
            f'install the tested gradio with: pip install "gradio>={TESTED[0][0]}.{TESTED[0][1]},'
            f'<{TESTED[1][0]}.{TESTED[1][1]}"'
        )
    said = untested(version)
    if said is not None:
        log.warning(said)
    return said


def write_pictures_whole() -> None:
    """Make Gradio write each picture it serves under a temporary name and rename it into place.

    Why: Gradio 6.31 names a picture's file by the hash of its bytes and rewrites it in place on every answer
    (`processing_utils.save_pil_to_cache`). Two answers with the same picture then truncate the file that a browser
    is still reading from the first: a broken image, and the next clicks on it miss. A picture already written is
    only touched (`delete_cache` ages files by their time), as Gradio's `save_file_to_cache` does for uploads.
    """
    from gradio import processing_utils

    def save_pil_to_cache(img, cache_dir: str, name: str = "image", format: str = "webp") -> str:
        data = processing_utils.encode_pil_to_bytes(img, format)
        folder = Path(cache_dir) / processing_utils.hash_bytes(data)
        folder.mkdir(exist_ok=True, parents=True)
        path = (folder / f"{name}.{format}").resolve()
        try:
            os.utime(path)
        except FileNotFoundError:
            fd, staging = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(staging, path)
        return str(path)

    save_pil_to_cache.writes_whole = True
    processing_utils.save_pil_to_cache = save_pil_to_cache


def name_refusals(demo: gr.Blocks, error: Callable[[str, str], Exception]) -> None:
    """Prefix each input's refusals with the API parameter it feeds ("layer: Value 99 is greater than ..."), and
    refuse a file path that no one uploaded in one line. error(message, where): the exception a user sees. Call
    once, after every event is wired.

    Why: Gradio 6.31 refuses some arguments itself, in `component.preprocess`, before any handler runs, without
    saying which argument ("Value: -1 is not in the list of choices"). Only `demo.fns` (each event's inputs and
    `input_parameter_names`) says which parameter each component feeds."""
    for fn in demo.fns.values():
        for component, name in zip(fn.inputs, fn.input_parameter_names or (), strict=False):  # None: unnamed
            if name and "preprocess" not in vars(component):
                component.preprocess = _naming(component.preprocess, name, error)
    refuse_paths_in_one_line(error)


def narrow_progress(demo: gr.Blocks) -> None:
    """Show each request's progress on one component, its first output that is shown and not a State (a "minimal"
    progress as a timer, a "full" one as an overlay), or on none (a "hidden" one), unless its listener chose. Call
    once, after every event is wired.

    Why: Gradio 6.31's page, at every loading status of every request, copies the props of every component that
    was ever a request's progress target (`update_loading_stati_state`), and a listener's targets are all its
    outputs by default: States, hidden components and plots' data included. With every output a target, an upload's
    requests spent much of the page's time in those copies (docs/benchmarks.md). Only `demo.fns` holds every
    listener."""
    for fn in demo.fns.values():
        if fn.fn is None or fn.show_progress_on is not None:
            continue
        outputs = [o for o in fn.outputs if not isinstance(o, gr.State)]
        shown = [o for o in outputs if o.visible is True] or outputs
        fn.show_progress_on = [] if fn.show_progress == "hidden" else shown[:1]


def _naming(preprocess, name: str, error: Callable[[str, str], Exception]):
    @wraps(preprocess)
    def named(payload):
        try:
            return preprocess(payload)
        except gr.Error as exc:
            raise error(f"{name}: {exc.message}", "the arguments' checks") from None

    return named


def refuse_paths_in_one_line(error: Callable[[str, str], Exception]) -> None:
    """A request that names a file the server must not read (`{"path": "/etc/passwd"}`) gets one line back and one
    line in the log.

    Why: Gradio 6.31 refuses it in `processing_utils.async_move_files_to_cache`, before any handler, with an
    InvalidPathError that its queue prints as a traceback and answers with no message: any client could flood the
    log. Here that refusal becomes error(message, where)."""
    from gradio import processing_utils
    from gradio.exceptions import InvalidPathError

    move = processing_utils.async_move_files_to_cache
    if getattr(move, "refuses_in_one_line", False):
        return

    @wraps(move)
    async def moved(data, block, *args, **kwargs):
        try:
            return await move(data, block, *args, **kwargs)
        except InvalidPathError:
            if not kwargs.get("check_in_upload_folder"):  # a file the app itself returns: its own error, as it was
                raise
            path = data.get("path") if isinstance(data, dict) else None
            raise error(f"this server reads only the files uploaded to it, not {path!r}", "a request") from None

    moved.refuses_in_one_line = True
    processing_utils.async_move_files_to_cache = moved


def component_key(component: gr.components.Component) -> int:
    """A number that names `component` within its app, the same in every process that builds it.

    Why: Gradio 6.31 components have no public identifier besides an optional elem_id; `_id` is the one Gradio
    itself sends to the browser."""
    return component._id


def take(
    fn: Callable,
    names: Sequence[str],
    request: bool = True,
    progress: bool = True,
    defaults: dict | None = None,
    select: bool = False,
) -> Callable:
    """Let Gradio see fn(*values) as taking `names` (those in `defaults` optional, with those defaults), then (if
    asked) a select event's data (a click's place on a picture), the request and a progress tracker.

    Why: Gradio 6.31 names an endpoint's API parameters, and decides which ones it fills itself (a gr.Request by
    its annotation, a gr.Progress by its default), from `inspect.signature(fn)` and `fn.__annotations__`, which
    *args hides."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    defaults = defaults or {}
    params = [inspect.Parameter(n, kind, **({"default": defaults[n]} if n in defaults else {})) for n in names]
    optional = {"default": None} if defaults else {}  # after optional parameters, the filled ones must be too
    if select:
        params.append(inspect.Parameter("evt", kind, annotation=gr.SelectData, **optional))
    if request:
        params.append(inspect.Parameter("request", kind, annotation=gr.Request, **optional))
    if progress:
        params.append(inspect.Parameter("progress", kind, default=gr.Progress()))
    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not inspect.Parameter.empty}
    return fn


def take_as(fn: Callable, like: Callable, drop: int = 0, first: Sequence[str] = ()) -> Callable:
    """Let Gradio see fn as taking like's parameters less the first `drop` of them, after parameters named
    `first` (see `take` for why Gradio reads signatures)."""
    signature = inspect.signature(like)
    added = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in first]
    kept = list(signature.parameters.values())[drop:]
    fn.__signature__ = signature.replace(parameters=[*added, *kept])
    fn.__annotations__ = {p.name: p.annotation for p in kept if p.annotation is not inspect.Parameter.empty}
    return fn


def signed_in(scope) -> bool:
    """Whether a request (its ASGI scope) carries a login of the Gradio app that serves it. An app whose login
    table is not where Gradio 6.31 keeps it signs no one in: the guard then refuses, and the log says why.

    Why: Gradio 6.31 checks the login in a dependency of each of its own routes (`routes.py` 425-449:
    `get_current_user` reads the cookie `access-token-{app.cookie_id}`, or `access-token-unsecure-...`, and looks it
    up in `app.tokens`), leaves some routes out (`/gradio_api/heartbeat`, `/gradio_api/cancel`, `/gradio_api/token`,
    `/gradio_api/stream/...`) and never guards the routes an app adds through `app_kwargs`. It offers no check that a
    middleware could call."""
    from starlette.requests import HTTPConnection

    app = scope.get("app")
    cookie_id, tokens = getattr(app, "cookie_id", None), getattr(app, "tokens", None)
    if not isinstance(cookie_id, str) or not isinstance(tokens, dict):
        log.error("gradio %s keeps no login table where vitviz reads it (App.tokens): none signs in", gr.__version__)
        return False
    cookies = HTTPConnection(scope).cookies
    token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
    return token is not None and token in tokens


def allow_origins(allowed: Callable) -> None:
    """Let Gradio's CORS middleware allow, with credentials, only the origins of requests that allowed(headers)
    passes (a starlette Headers of the request).

    Why: Gradio 6.31's `route_utils.CustomCORSMiddleware.is_valid_origin` (route_utils.py 1140-1149) allows every
    origin whose host is localhost when the server's is (another local app's page, on any port, could drive the
    API with the user's cookies), and every origin at all when it is not (a server on a school's network). launch()
    has no setting for it (`strict_cors` only adds "null"), and Gradio's advisories name this class as the place to
    change it."""
    from gradio.route_utils import CustomCORSMiddleware

    gradios = getattr(CustomCORSMiddleware.is_valid_origin, "gradios", CustomCORSMiddleware.is_valid_origin)

    def is_valid_origin(self, request_headers) -> bool:
        return allowed(request_headers)

    is_valid_origin.vitviz, is_valid_origin.gradios = True, gradios  # Gradio's own, for the test that it is needed
    CustomCORSMiddleware.is_valid_origin = is_valid_origin


def say_when_full(demo: gr.Blocks, message: Callable[[int, int, float | None], str]) -> None:
    """When the queue is full, refuse a request with message(waiting, ahead, eta_s): how many requests wait in all,
    how many wait before it in its own line (its concurrency group), and when it would have been answered by the
    average time of the requests of each kind answered so far (None before any is). Call after `demo.queue()`.

    Why: Gradio 6.31 refuses with a 503 (`Queue.push` returns "queue_full"), which its page shows as "This
    application is currently busy" and gradio_client as "Queue is full! Please try again.", whatever the answer
    says; a 400's detail reaches the page as a bare "Error". A 422 (`Queue.push`'s "validator_error") is shown by
    both: its detail as text, in a toast, by the page (a list of failed validations goes to the event's inputs,
    where the next request's answer clears it); its list's messages by gradio_client, in its ValidationError (a
    text it cannot read: `utils.extract_validation_message`), so its requests (by their user-agent) get the list.
    The estimate reads what Gradio's own queue estimates from (`Queue.event_queue_per_concurrency_id`,
    `process_time_per_fn`)."""
    from gradio import route_utils

    queue = demo._queue
    push = queue.push

    async def refusing_in_words(body, request, username):
        pushed = await push(body, request, username)
        if pushed[2] != "queue_full":
            return pushed
        fn = route_utils.get_fn(demo, None, body)
        line = queue.event_queue_per_concurrency_id.get(fn.concurrency_id)
        ahead = list(line.queue) if line is not None else []
        times = queue.process_time_per_fn
        eta = None
        if all(e.fn in times for e in ahead) and fn in times:
            limit = (line.concurrency_limit if line is not None else None) or 1
            eta = sum(times[e.fn].avg_time for e in ahead) / limit + times[fn].avg_time
        said = message(len(queue), len(ahead), eta)
        if request.headers.get("user-agent", "").startswith("gradio_client"):
            said = [{"__type__": "validate", "is_valid": False, "parameter_name": "the queue", "message": said}]
        return False, said, "validator_error"

    queue.push = refusing_in_words
