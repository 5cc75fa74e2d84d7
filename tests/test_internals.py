"""vitviz.app.internals: each reach into Gradio's internals still works, and is still needed (the second test of each
pair fails once Gradio does the thing itself, so that the workaround can go)."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import threading
import warnings
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import tomllib
from gradio import processing_utils
from gradio.exceptions import InvalidPathError
from PIL import Image

from vitviz.app import internals

ROOT = Path(__file__).resolve().parents[1]


class Refused(Exception):
    """What the tests' error(message, where) raises."""


def refused(message: str, where: str) -> Refused:
    return Refused(message)


# ---- the version check


def test_the_installed_gradio_is_the_tested_one_and_the_package_pins_that_range():
    assert internals.check_gradio() is None
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [p for p in pins if re.match(r"gradio\b", p)]
    (low, high), ((a, b), (c, d)) = re.findall(r"[<>]=?(\d+\.\d+)", pin), internals.TESTED
    assert (low, high) == (f"{a}.{b}", f"{c}.{d}")
    pinned = (ROOT / "requirements.txt").read_text()
    assert internals.untested(re.search(r"^gradio==(\S+)", pinned, re.M)[1]) is None


@pytest.mark.parametrize("version", ["6.30.2", "6.32.0", "7.0.0b1", "5.49"])
def test_an_untested_gradio_is_named_with_the_command_that_installs_the_tested_one(version, caplog):
    said = internals.check_gradio(version)
    assert said == internals.untested(version) and said is not None
    assert f"gradio {version} is installed" in said and 'pip install "gradio>=6.31,<6.32"' in said
    assert said in caplog.text and "vitviz was tested with gradio 6.31.x and" in said
    assert internals.untested("6.31.0") is None and internals.untested("6.31.7") is None
    with pytest.raises(ValueError, match="not a version: 'dev'"):
        internals.untested("dev")


def test_a_gradio_without_an_internal_that_a_workaround_replaces_stops_the_start(monkeypatch):
    from gradio.block_function import BlockFunction

    monkeypatch.delattr(processing_utils, "save_pil_to_cache")
    monkeypatch.delattr(processing_utils, "hash_bytes")
    from gradio.route_utils import CustomCORSMiddleware

    monkeypatch.setattr(BlockFunction, "__init__", lambda self, fn, inputs: None)  # no parameter names kept
    monkeypatch.delattr(CustomCORSMiddleware, "is_valid_origin")
    with pytest.raises(RuntimeError) as raised:
        internals.check_gradio("6.31.0")
    assert str(raised.value) == (
        "gradio 6.31.0 lacks save_pil_to_cache, hash_bytes, BlockFunction.input_parameter_names, "
        "route_utils.CustomCORSMiddleware.is_valid_origin, which vitviz.app.internals needs: install the tested "
        'gradio with: pip install "gradio>=6.31,<6.32"'
    )


# ---- pictures written whole


def test_a_picture_is_never_served_half_written_while_the_same_picture_is_written_again(monkeypatch, tmp_path):
    """Two answers with the same picture wrote one file, and a browser reading it during the second write got a
    truncated JPEG (a broken image that lost the next clicks)."""
    import tempfile

    monkeypatch.setattr(processing_utils, "save_pil_to_cache", processing_utils.save_pil_to_cache)
    internals.write_pictures_whole()
    assert processing_utils.save_pil_to_cache.writes_whole is True
    staged, mkstemp = [], tempfile.mkstemp
    monkeypatch.setattr(tempfile, "mkstemp", lambda **kw: staged.append(kw) or mkstemp(**kw))
    picture = Image.fromarray(np.random.default_rng(0).integers(0, 255, (480, 640, 3), np.uint8))
    cache = tmp_path / "not" / "made" / "yet"
    path = Path(processing_utils.save_pil_to_cache(picture, str(cache), format="jpeg"))
    assert path.name == "image.jpeg" and path.parent.parent == cache and list(path.parent.iterdir()) == [path]
    assert staged == [{"dir": path.parent, "prefix": ".image."}]  # written beside it, then renamed into place
    assert Path(processing_utils.save_pil_to_cache(picture, str(cache))).name == "image.webp"  # Gradio's default
    tmp_path = cache
    whole = path.read_bytes()
    done = threading.Event()

    def write_again():
        for _ in range(300):
            assert processing_utils.save_pil_to_cache(picture, str(tmp_path), format="jpeg") == str(path)
        done.set()

    writer = threading.Thread(target=write_again)
    writer.start()
    reads = 0
    while not done.is_set():
        assert path.read_bytes() == whole
        reads += 1
    writer.join()
    assert reads > 10


def test_gradios_own_picture_cache_still_rewrites_a_served_file_in_place(tmp_path):
    """Needed while Gradio's own save_pil_to_cache writes into the file that a browser may be reading."""
    assert not getattr(processing_utils.save_pil_to_cache, "writes_whole", False)  # the test runs Gradio's own
    picture = Image.fromarray(np.full((32, 32, 3), 90, np.uint8))
    path = Path(processing_utils.save_pil_to_cache(picture, str(tmp_path), format="jpeg"))
    before = path.stat().st_ino
    os.utime(path, (1, 1))
    processing_utils.save_pil_to_cache(picture, str(tmp_path), format="jpeg")
    after = path.stat()
    assert after.st_ino == before and after.st_mtime != 1  # the same file, written again


# ---- refusals named


def _slider_event():
    def draw(layer):
        return layer

    with gr.Blocks() as demo:
        layer, out = gr.Slider(0, 11, step=1), gr.Number()
        layer.change(draw, [layer], out, api_name="draw")
        layer.release(None, [layer], None, js="(x) => x")  # an event with no parameter names: left alone
    return demo, layer


def test_gradios_own_refusals_name_the_api_parameter_they_refuse(monkeypatch):
    monkeypatch.setattr(processing_utils, "async_move_files_to_cache", processing_utils.async_move_files_to_cache)
    demo, layer = _slider_event()
    with demo:
        unnamed = gr.Number()
        unnamed.change(None, [unnamed], None, js="(x) => x")  # only in an event with no parameter names
    internals.name_refusals(demo, lambda message, where: gr.Error(message))
    internals.name_refusals(demo, lambda message, where: gr.Error(message))  # once named, never twice
    with pytest.raises(gr.Error) as raised:
        layer.preprocess(99)
    assert raised.value.message.startswith("layer: Value 99 is greater than")
    assert layer.preprocess(5) == 5 and "preprocess" not in vars(unnamed)
    with pytest.raises(gr.Error) as raised:  # the paths' refusal too
        _move("/etc/passwd")
    assert raised.value.message == "this server reads only the files uploaded to it, not '/etc/passwd'"


def test_gradios_own_refusal_still_does_not_name_the_parameter():
    """Needed while Gradio's refusal leaves out which argument it refuses."""
    _, layer = _slider_event()
    with pytest.raises(gr.Error) as raised:
        layer.preprocess(99)
    assert "greater than" in raised.value.message and "layer" not in raised.value.message


def _move(path: str):
    """A request's file path through Gradio's move to its cache, as a launched app's preprocessing does it."""
    from types import SimpleNamespace

    from gradio.context import LocalContext

    launched = SimpleNamespace(has_launched=True, blocked_paths=[], allowed_paths=[])  # what the check reads
    token = LocalContext.blocks.set(launched)
    try:
        data = {"path": path, "meta": {"_type": "gradio.FileData"}}
        return asyncio.run(processing_utils.async_move_files_to_cache(data, gr.File(), check_in_upload_folder=True))
    finally:
        LocalContext.blocks.reset(token)


def test_a_path_that_no_one_uploaded_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(processing_utils, "async_move_files_to_cache", processing_utils.async_move_files_to_cache)
    internals.refuse_paths_in_one_line(refused)
    internals.refuse_paths_in_one_line(refused)  # once, never wrapped twice
    assert processing_utils.async_move_files_to_cache.refuses_in_one_line is True
    assert not hasattr(processing_utils.async_move_files_to_cache.__wrapped__, "refuses_in_one_line")
    with pytest.raises(Refused, match="reads only the files uploaded to it, not '/etc/passwd'"):
        _move("/etc/passwd")


def test_gradio_still_refuses_such_a_path_with_an_error_that_its_queue_prints_as_a_traceback():
    """Needed while Gradio's refusal is an InvalidPathError, not a gr.Error that its queue answers with a message."""
    with pytest.raises(InvalidPathError) as raised:
        _move("/etc/passwd")
    assert not isinstance(raised.value, gr.Error)


# ---- a component's key


def test_a_components_key_is_the_id_that_gradio_sends_to_the_browser_and_no_public_one_exists():
    with gr.Blocks() as demo:
        a, b = gr.Image(), gr.Image()
    sent = {c["id"] for c in demo.get_config_file()["components"]}
    keys = [internals.component_key(a), internals.component_key(b)]
    assert len(set(keys)) == 2 and set(keys) <= sent
    assert not hasattr(a, "id") and a.elem_id is None  # needed while Gradio has no public id of its own


# ---- signatures that Gradio reads


def _parameter_names(fn, inputs: int) -> list:
    """The API names Gradio gives an event's inputs; a handler that Gradio thinks takes more or fewer is an error."""
    with warnings.catch_warnings(), gr.Blocks() as demo:
        warnings.simplefilter("error")
        boxes = [gr.Textbox() for _ in range(inputs)]
        boxes[0].change(fn, boxes, boxes[0], api_name="f")
    (event,) = demo.fns.values()
    return event.input_parameter_names


def test_a_handler_taken_as_names_gets_those_api_names_and_its_request_filled_by_gradio():
    def handler(*values):
        return values

    names = _parameter_names(internals.take(handler, ["key", "layer"]), 2)
    assert names == ["key", "layer"]

    def server_first(server, layer, request: gr.Request):
        return layer

    assert _parameter_names(internals.take_as(lambda *a: a, server_first, drop=1), 1) == ["layer"]
    assert list(inspect.signature(internals.take_as(lambda *a: a, server_first)).parameters) == [
        "server",
        "layer",
        "request",
    ]  # nothing dropped unless asked
    assert _parameter_names(internals.take_as(lambda *a: a, server_first, drop=1, first=["click"]), 2) == [
        "click",
        "layer",
    ]


def test_gradio_still_cannot_name_the_parameters_of_a_handler_that_takes_star_args():
    """Needed while Gradio reads names only from a signature."""

    def handler(*values):
        return values

    assert _parameter_names(handler, 2) == [None, None]


def test_take_gives_exactly_the_signature_that_gradio_reads():
    import inspect

    fn = internals.take(lambda *values: values, ["a", "b"], defaults={"b": 2}, select=True)
    params = inspect.signature(fn).parameters
    assert list(params) == ["a", "b", "evt", "request", "progress"]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params.values())
    assert params["a"].default is inspect.Parameter.empty and params["b"].default == 2
    assert params["evt"].annotation is gr.SelectData and params["request"].annotation is gr.Request
    assert (
        params["evt"].default is None
        and params["request"].default is None
        and isinstance(params["progress"].default, gr.Progress)
    )
    assert fn.__annotations__ == {"evt": gr.SelectData, "request": gr.Request}
    plain = inspect.signature(internals.take(lambda *values: values, ["a"])).parameters
    assert list(plain) == ["a", "request", "progress"] and plain["request"].default is inspect.Parameter.empty
    bare = internals.take(lambda *values: values, ["a"], request=False, progress=False)
    assert list(inspect.signature(bare).parameters) == ["a"] and bare.__annotations__ == {}


# ---- the progress shown on one output, not on every one


def test_gradio_still_shows_a_requests_progress_on_every_output_states_included():
    """Why `narrow_progress` is needed (its own test is in test_ui.py, which builds the app)."""
    with gr.Blocks() as demo:
        state, shown = gr.State(0), gr.Markdown()
        gr.Button().click(lambda: (1, "a"), None, [state, shown], show_progress="hidden")
    (dependency,) = demo.get_config_file()["dependencies"]
    assert dependency["show_progress_on"] is None  # the page then shows it on every output


# ---- the login, read from Gradio's own table, and the origins its CORS middleware allows


def login_app():
    """A test client of the Gradio app of a tiny Blocks with a login, and one added route that says whether its
    request is signed in (`internals.signed_in`)."""
    from fastapi.testclient import TestClient
    from gradio.routes import App
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    def says(request):
        return PlainTextResponse(str(internals.signed_in(request.scope)))

    with gr.Blocks() as demo:
        gr.Markdown("login")
    demo.auth, demo.auth_message = [("teacher", "s3cret")], None  # what launch(auth=...) sets
    return TestClient(App.create_app(demo, app_kwargs={"routes": [Route("/says", says)]}))


def test_a_request_is_signed_in_with_the_cookie_of_gradios_login_alone():
    client = login_app()
    assert client.get("/says").text == "False"
    assert client.post("/login", data={"username": "teacher", "password": "guessed"}).status_code == 400
    assert client.get("/says").text == "False"
    client.cookies.set(f"access-token-unsecure-{client.app.cookie_id}", "forged")
    assert client.get("/says").text == "False"
    client.cookies.clear()
    assert client.post("/login", data={"username": "teacher", "password": "s3cret"}).status_code == 200
    assert client.get("/says").text == "True" and client.get("/config").status_code == 200


def test_gradio_still_leaves_open_without_the_login_the_routes_an_app_adds_and_some_of_its_own():
    """Why vitviz's guard checks the login of every request itself."""
    client = login_app()
    assert client.get("/config").status_code == 401  # Gradio's dependency on its own routes
    assert client.get("/says").status_code == 200
    assert client.post("/gradio_api/cancel", json={"session_hash": "x", "fn_index": 0, "event_id": "y"}).is_success


def test_the_cors_middleware_allows_the_origins_that_vitviz_allows_alone(monkeypatch):
    from gradio.route_utils import CustomCORSMiddleware
    from starlette.datastructures import Headers

    monkeypatch.setattr(CustomCORSMiddleware, "is_valid_origin", CustomCORSMiddleware.is_valid_origin)
    internals.allow_origins(lambda headers: headers["origin"] == "http://127.0.0.1:7860")
    middleware = CustomCORSMiddleware(None)
    assert CustomCORSMiddleware.is_valid_origin.vitviz is True
    assert middleware.is_valid_origin(Headers({"origin": "http://127.0.0.1:7860", "host": "127.0.0.1:7860"}))
    assert not middleware.is_valid_origin(Headers({"origin": "http://localhost:9999", "host": "127.0.0.1:7860"}))


def test_gradios_cors_middleware_still_allows_another_local_page_and_any_page_of_a_server_elsewhere():
    """Why `allow_origins` is needed: Gradio's own check lets another site's page call the API with the user's
    cookies."""
    from gradio.route_utils import CustomCORSMiddleware
    from starlette.datastructures import Headers

    gradios = getattr(CustomCORSMiddleware.is_valid_origin, "gradios", CustomCORSMiddleware.is_valid_origin)
    middleware = CustomCORSMiddleware(None)
    assert gradios(middleware, Headers({"origin": "http://localhost:9999", "host": "127.0.0.1:7860"}))
    assert gradios(middleware, Headers({"origin": "https://e.example", "host": "192.168.1.20:7860"}))


# ---- a full queue, refused in the app's own words


def full_queue(say: bool):
    """A launched app of one slow endpoint (one slot, one place in the queue), with `say_when_full` or without: one
    request answered (its time is known), one running until `gate` opens, one waiting. Returns (the app, its url,
    the gate, the two jobs)."""
    from gradio_client import Client

    gate = threading.Event()

    def slow(x: str) -> str:
        if x == "wait":
            gate.wait(60)
        return x

    with gr.Blocks() as demo:
        box = gr.Textbox()
        box.submit(slow, box, box, api_name="slow", concurrency_limit=1)
    demo.queue(max_size=1)
    if say:
        internals.say_when_full(demo, lambda waiting, ahead, eta: f"waiting {waiting}, ahead {ahead}, eta {eta}")
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True, server_name="127.0.0.1", server_port=None)
    client = Client(url, verbose=False)
    assert client.predict("quick", api_name="/slow") == "quick"  # now its average time is known
    jobs = [client.submit("wait", api_name="/slow")]  # runs, holding the one slot
    for _ in range(100):
        if jobs[0].status().code.name == "PROCESSING":
            break
        threading.Event().wait(0.05)
    jobs.append(client.submit("wait", api_name="/slow"))  # waits: the queue is full
    for _ in range(100):
        if jobs[1].status().code.name == "IN_QUEUE":
            break
        threading.Event().wait(0.05)
    return demo, url, gate, jobs


@pytest.mark.app
def test_a_full_queue_tells_gradio_client_and_the_page_where_the_request_stood_and_an_estimate():
    """gradio_client's ValidationError and the page's answer carry the app's message."""
    import httpx
    from gradio_client import Client
    from gradio_client.exceptions import ValidationError

    demo, url, gate, jobs = full_queue(say=True)
    try:
        with pytest.raises(ValidationError) as refused:
            Client(url, verbose=False).predict("third", api_name="/slow")
        said = re.search(r"waiting (\d+), ahead (\d+), eta (\S+)", str(refused.value))
        assert said is not None, str(refused.value)
        assert said[1] == "1" and said[2] == "1" and float(said[3]) > 0  # one ahead: the running one holds no place
        fn = next(i for i, d in enumerate(demo.config["dependencies"]) if d["api_name"] == "slow")
        body = {"data": ["third"], "fn_index": fn, "session_hash": "page", "event_data": None, "trigger_id": None}
        answer = httpx.post(f"{url}gradio_api/queue/join", json=body)  # as the page sends it
        assert answer.status_code == 422  # its detail a text, which the page shows in a toast
        assert answer.json()["detail"].startswith("waiting 1, ahead 1, eta ")
    finally:
        gate.set()
        assert [j.result(30) for j in jobs] == ["wait", "wait"]
        demo.close()


@pytest.mark.app
def test_without_it_gradio_says_only_that_the_queue_is_full():
    from gradio_client import Client
    from gradio_client.utils import QueueError

    demo, url, gate, jobs = full_queue(say=False)
    try:
        with pytest.raises(QueueError, match="^Queue is full! Please try again.$"):
            Client(url, verbose=False).predict("third", api_name="/slow")
    finally:
        gate.set()
        [j.result(30) for j in jobs]
        demo.close()
