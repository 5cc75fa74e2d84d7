"""`vitviz serve` as its clients meet it: the upload limits it was given, the files it serves and those it must not,
who may call it (its own pages, a login, the page token of vitviz's routes), the headers of its answers, and what its
Depth and Live tabs say on a machine with no depth model and no camera."""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from conftest import ASSETS
from support.harness import running_app

import vitviz
from vitviz.app import explorer
from vitviz.app.access import CONTENT_SECURITY_POLICY, needs_no_login
from vitviz.app.tabs import depth, live, qk

LIMIT = 2**20  # --max-upload-mb 1: not the default (25), so that a limit not passed on is seen


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app, offline with an empty model cache, started with --max-upload-mb 1: (url, its log file)."""
    folder = tmp_path_factory.mktemp("serve")
    with pytest.MonkeyPatch.context() as env, open(folder / "app.log", "w") as log:
        env.setenv("HF_HUB_CACHE", str(folder / "hub"))  # no depth model's weights kept here
        with running_app(["--max-upload-mb", "1"], log=log) as (url, _):
            yield url, folder / "app.log"


def form(*files: bytes) -> tuple[bytes, str]:
    """A multipart form of `files` as a browser sends it to Gradio's upload route: (body, its Content-Type)."""
    boundary = uuid.uuid4().hex
    head = 'Content-Disposition: form-data; name="files"; filename="photo{}.jpg"\r\n\r\n'
    body = b"".join(f"--{boundary}\r\n{head.format(i)}".encode() + data + b"\r\n" for i, data in enumerate(files))
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def upload(url: str, *files: bytes) -> tuple[int, str]:
    """POST files to Gradio's upload route, in one request, as a browser does: (HTTP status, body)."""
    body, kind = form(*files)
    status, _, said = ask(f"{url}gradio_api/upload", "POST", {"Content-Type": kind}, body)
    return status, said.decode()


def ask(url: str, method: str = "GET", headers: dict | None = None, data: bytes | None = None):
    """One request: (HTTP status, the answer's headers, the first 64 KiB of its body: some answers are streams that
    never end, the heartbeat's)."""
    request = urllib.request.Request(url, data, headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.headers, answer.read(2**16)
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers, refused.read(2**16)


def photo_of(size: int, path) -> str:
    """coffee.jpg padded with zeros to `size` bytes: an image that decodes, of the size wanted."""
    data = (ASSETS / "coffee.jpg").read_bytes()
    path.write_bytes(data + bytes(size - len(data)))
    return str(path)


def test_an_upload_over_max_upload_mb_is_refused_and_one_under_it_is_taken(app, tmp_path):
    gradio_client = pytest.importorskip("gradio_client")
    url, _ = app
    status, said = upload(url, bytes(LIMIT + 100_000))
    assert status == 413 and str(LIMIT) in said
    assert upload(url, bytes(LIMIT - 100_000))[0] == 200
    client = gradio_client.Client(url, verbose=False, ssl_verify=False)  # it reads the limit from the app's config
    with pytest.raises(ValueError, match=f"maximum file size of {LIMIT} bytes"):
        client.predict(gradio_client.handle_file(photo_of(LIMIT + 100_000, tmp_path / "big.jpg")), api_name="/analyze")
    under = gradio_client.handle_file(photo_of(LIMIT - 100_000, tmp_path / "small.jpg"))
    assert "tokens" in client.predict(under, api_name="/analyze")[1]


def call(url: str, api: str, data: list) -> str:
    """A request to an endpoint through Gradio's HTTP API, and the stream it answers with."""
    request = urllib.request.Request(
        f"{url}gradio_api/call/{api}", json.dumps({"data": data}).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        event = json.loads(answer.read())["event_id"]
    with urllib.request.urlopen(f"{url}gradio_api/call/{api}/{event}", timeout=60) as answer:
        return answer.read().decode()


def test_a_path_no_one_uploaded_is_refused_in_one_line(app):
    """A request naming /etc/passwd gets a message and one log line, not a traceback in the log each time."""
    url, log = app
    file = {"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}
    for _ in range(2):
        answer = call(url, "analyze", [file, "dinov2-small", "model default"])
        assert "event: error" in answer
        assert "this server reads only the files uploaded to it, not '/etc/passwd'" in answer
    time.sleep(0.5)  # the log is written by another process
    text = log.read_text()
    assert len([line for line in text.splitlines() if "/etc/passwd" in line]) == 2 and "Traceback" not in text


def config(url: str) -> dict:
    with urllib.request.urlopen(f"{url}config", timeout=30) as answer:
        return json.loads(answer.read())


def test_without_a_depth_model_the_depth_tab_says_so_whole_and_its_button_is_off(app):
    gradio_client = pytest.importorskip("gradio_client")
    url, _ = app
    components = config(url)["components"]
    (button,) = [c for c in components if c["props"].get("value") == "Estimate depth"]
    assert button["props"]["interactive"] is False
    (note,) = [c for c in components if c["props"].get("elem_id") == "depth-note"]
    assert note["props"]["value"] == depth.unavailable(depth.OFFLINE)
    client = gradio_client.Client(url, verbose=False, ssl_verify=False)
    image = gradio_client.handle_file(str(ASSETS / "coffee.jpg"))
    said = client.predict(image, vitviz.DEFAULT_DEPTH_MODEL, "magma", 1.0, 11, -1, api_name="/depth")[0]
    assert said.startswith("**Depth is not available here:** cannot download") and "no network" in said
    assert said.count("--depth-model PATH") == 1 and said.count("(") == said.count(")") and "(`" not in said


NAVIGATORS = {  # what a browser reports, as JavaScript, and what the Live tab's note then says
    "{}": live.NO_CAMERA,  # no mediaDevices: a page the browser offers no camera (plain http from elsewhere)
    "{mediaDevices: {enumerateDevices: async () => [{kind: 'audioinput'}]}}": live.NO_CAMERA,
    "{mediaDevices: {enumerateDevices: async () => [{kind: 'audioinput'}, {kind: 'videoinput'}]}}": live.CAMERA_OFF,
}


def test_the_live_tab_says_when_no_camera_is_found(app):
    """The app runs live.FIND_CAMERA_JS on the Live tab's note when the tab opens; run in Node against browsers
    with and without a camera, it says that none was found, or keeps the note."""
    if shutil.which("node") is None:
        pytest.skip("needs Node.js")
    url, _ = app
    found = config(url)
    (info,) = [c["id"] for c in found["components"] if c["props"].get("elem_id") == "live-info"]
    (check,) = [d for d in found["dependencies"] if d.get("js") == live.FIND_CAMERA_JS]
    assert check["inputs"] == check["outputs"] == [info] and [e for _, e in check["targets"]] == ["select"]
    script = "(async () => {\nconst find = " + live.FIND_CAMERA_JS + ";\nconst said = [];\n"
    for navigator in NAVIGATORS:
        script += (
            f"Object.defineProperty(globalThis, 'navigator', {{value: {navigator}, configurable: true}});\n"
            f"said.push(await find({json.dumps(live.CAMERA_OFF)}));\n"
        )
    script += "console.log(JSON.stringify(said));\n})();\n"
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True, timeout=30).stdout
    assert json.loads(out) == list(NAVIGATORS.values())


# ---- who may call the app, and what it serves


def test_one_upload_request_may_send_no_more_than_the_limit_in_all(app):
    """Gradio bounds each file of an upload, not their sum: three files under the limit each, in one request,
    wrote three times the limit. One request over the limit (plus its framing) is refused before it is read, and one
    that does not say its size is refused too."""
    url, _ = app
    status, said = upload(url, *(bytes(LIMIT * 6 // 10) for _ in range(3)))
    assert status == 413 and "an upload may send at most" in said and "--max-upload-mb" in said
    assert upload(url, bytes(LIMIT - 100_000))[0] == 200
    body, kind = form(bytes(1000))
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    try:  # chunks: no Content-Length
        connection.request("POST", "/gradio_api/upload", iter([body]), {"Content-Type": kind}, encode_chunked=True)
        answer = connection.getresponse()
        assert answer.status == 411 and b"must say its size" in answer.read()
    finally:
        connection.close()


def test_the_file_route_serves_the_apps_own_files_and_never_the_weights_nor_another_apps_files(app):
    """Gradio's /gradio_api/file= serves launch's allowed_paths (it was the whole assets folder, weights included)
    and every file in its cache folder (it was tempdir/gradio, which every Gradio app of the machine shares)."""
    url, _ = app
    for path in (*vitviz.ASSETS.glob("*.safetensors"), vitviz.ASSETS / "README.md"):
        status, _, said = ask(f"{url}gradio_api/file={path}")
        assert status == 403 and b"File not allowed" in said, path
    shared = Path(tempfile.gettempdir()) / "gradio" / f"vitviz-test-{uuid.uuid4().hex}"
    shared.mkdir(parents=True)
    try:  # another Gradio app's upload, in the folder that Gradio uses by default
        (shared / "photo.jpg").write_bytes((ASSETS / "coffee.jpg").read_bytes())
        assert ask(f"{url}gradio_api/file={shared / 'photo.jpg'}")[0] == 403
    finally:
        shutil.rmtree(shared)
    status, said = upload(url, (ASSETS / "coffee.jpg").read_bytes())
    (uploaded,) = json.loads(said)
    assert status == 200 and not uploaded.startswith(str(shared.parent))
    status, headers, _ = ask(f"{url}gradio_api/file={uploaded}")
    assert status == 200 and headers["Content-Type"] == "image/jpeg"
    (gallery,) = [c for c in config(url)["components"] if c["props"].get("elem_id") == "examples"]
    shown = [item["image"]["url"] for item in gallery["props"]["value"]]
    assert len(shown) == len(vitviz.EXAMPLES) and all(ask(u)[0] == 200 for u in shown)


def test_vitviz_routes_answer_a_page_with_its_sessions_token_alone(app):
    """The Explorer's layers and the Q·K view's UMAP: a session hash and an analysis key (the SHA-1 of a photo that
    others may have) are not enough; the session's page token, sent in the view's meta and back in a header, is."""
    gradio_client = pytest.importorskip("gradio_client")
    url, _ = app
    image = gradio_client.handle_file(str(ASSETS / "coffee.jpg"))
    metas = []
    for _ in range(2):
        client = gradio_client.Client(url, verbose=False, ssl_verify=False)
        metas.append(client.predict(image, "dinov2-small", "224", "inferno", 0.6, "log", api_name="/explorer"))
        assert metas[-1]["session"] == client.session_hash
    mine, other = metas
    assert mine["tokenHeader"] == explorer.TOKEN_HEADER and len(mine["token"]) >= 32 and mine["token"] != other["token"]
    query = urlencode({"session": mine["session"], "key": mine["key"], "layer": 0})
    layer = f"{url}{explorer.LAYER_PATH.lstrip('/')}?{query}"
    for token in (None, "guessed", other["token"]):
        status, _, said = ask(layer, headers={} if token is None else {explorer.TOKEN_HEADER: token})
        assert status == 403 and b"token is missing or wrong" in said
    status, _, data = ask(layer, headers={explorer.TOKEN_HEADER: mine["token"]})
    assert status == 200 and len(data) > 1000
    umap = f"{url}{qk.UMAP_PATH.lstrip('/')}?{query}&head=0"
    assert ask(umap, headers={explorer.TOKEN_HEADER: other["token"]})[0] == 403


def test_only_the_apps_own_pages_may_call_it(app):
    """Gradio's CORS middleware allowed, with credentials, any page of localhost (any port) on a server of localhost,
    and any page at all elsewhere. Another site's request is refused, its preflight allowed nothing, and a form of
    another site (which needs no preflight) cannot upload."""
    url, _ = app
    own = url.rstrip("/")
    for origin in ("http://localhost:9999", f"http://127.0.0.1:{urlsplit(url).port + 1}", "null", "https://e.example"):
        status, headers, said = ask(f"{url}config", headers={"Origin": origin})
        assert status == 403 and "Access-Control-Allow-Origin" not in headers and b"its own pages only" in said
        asked = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        assert "Access-Control-Allow-Origin" not in ask(f"{url}gradio_api/queue/join", "OPTIONS", asked)[1]
        body, kind = form(bytes(1000))
        assert ask(f"{url}gradio_api/upload", "POST", {"Origin": origin, "Content-Type": kind}, body)[0] == 403
    status, headers, _ = ask(f"{url}config", headers={"Origin": own})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == own


def test_every_answer_carries_the_security_headers(app):
    """The page, its config, a file, an answer of vitviz's routes, a page that does not exist and a refusal."""
    url, _ = app
    weights = next(vitviz.ASSETS.glob("*.safetensors"))
    files = [f"gradio_api/file={ASSETS / 'coffee.jpg'}", f"gradio_api/file={weights}"]
    answered = [("", {}), ("config", {}), *((f, {}) for f in files), ("no/such/page", {})]
    answered += [("vitviz/explorer/layer?session=s&key=k&layer=0", {}), ("config", {"Origin": "http://localhost:1"})]
    for path, headers in answered:
        status, headers, _ = ask(url + path, headers=headers)
        assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY, path
        assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY and headers["X-Frame-Options"] == "DENY"
        assert headers["X-Content-Type-Options"] == "nosniff" and headers["Referrer-Policy"] == "no-referrer", path


LOGIN = ("teacher", "s3cret")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """The app started with --auth teacher:s3cret: its URL."""
    folder = tmp_path_factory.mktemp("guarded")
    with open(folder / "app.log", "w") as log, running_app(["--auth", ":".join(LOGIN)], log=log) as (url, _):
        yield url


def every_route() -> list[tuple[str, str]]:
    """(method, path) of each route of a served app: Gradio's own, read from the app that it makes for an empty
    Blocks (path parameters filled with "x"), and vitviz's."""
    import re

    import gradio as gr
    from gradio.routes import App

    with gr.Blocks() as demo:
        gr.Markdown("routes")

    def walk(routes):
        for route in routes:
            if hasattr(route, "original_router"):  # FastAPI's included router (Gradio's /gradio_api/...)
                yield from walk(route.original_router.routes)
            else:
                for method in getattr(route, "methods", None) or ():
                    yield method, re.sub(r"\{[^}]*\}", "x", route.path)

    found = set(walk(App.create_app(demo).routes))
    return sorted(found | {("GET", explorer.LAYER_PATH), ("GET", qk.UMAP_PATH)})


def signed_in(url: str) -> dict:
    """The headers of a browser that signed in through the login page's form."""
    login = urlencode({"username": LOGIN[0], "password": LOGIN[1]}).encode()
    status, headers, _ = ask(f"{url}login", "POST", {"Content-Type": "application/x-www-form-urlencoded"}, login)
    assert status == 200
    return {"Cookie": "; ".join(c.split(";")[0] for c in headers.get_all("Set-Cookie"))}


@pytest.mark.app
def test_with_auth_every_route_but_the_login_pages_asks_the_login_and_the_login_opens_them(guarded):
    """Gradio's login guards its own routes one by one, not /gradio_api/heartbeat or /gradio_api/cancel (which end
    any session's runs), nor the routes an app adds: each of them, unauthenticated, gets 401."""
    gradio_client = pytest.importorskip("gradio_client")
    url = guarded
    routes = every_route()
    assert len(routes) > 60 and ("POST", "/gradio_api/cancel") in routes
    for method, path in routes:
        if not needs_no_login(method, path):
            status, _, said = ask(url + path.lstrip("/"), method, data=b"" if method == "POST" else None)
            assert status == 401 and (method == "HEAD" or b"log in first" in said), (method, path, status)
    status, _, page = ask(url)
    assert status == 200 and b'"auth_required":true' in page and b'"elem_id":"upload"' not in page  # the login's
    wrong = urlencode({"username": LOGIN[0], "password": "guessed"}).encode()
    assert ask(f"{url}login", "POST", {"Content-Type": "application/x-www-form-urlencoded"}, wrong)[0] == 400
    browser = signed_in(url)
    assert ask(f"{url}config", headers=browser)[0] == 200
    # past the login, vitviz's routes still want the page's token
    assert ask(f"{url}vitviz/explorer/layer?session=s&key=k&layer=0", headers=browser)[0] == 403
    with pytest.raises(Exception):  # noqa: B017 (gradio_client raises what its HTTP client does)
        gradio_client.Client(url, verbose=False, ssl_verify=False)
    client = gradio_client.Client(url, auth=LOGIN, verbose=False, ssl_verify=False)
    assert "tokens" in client.predict(gradio_client.handle_file(str(ASSETS / "coffee.jpg")), api_name="/analyze")[1]


def test_the_app_serves_the_static_site_at_its_path_with_the_sites_own_headers(app):
    """`/site/`: written in the background after the start (503 meanwhile), then served with COEP and the site's
    stricter policy rather than the page's, which the guard adds only where a route set none."""
    from vitviz.site.serve import HEADERS

    url, _ = app
    deadline = time.monotonic() + 120
    while (answer := ask(url + "site/"))[0] == 503 and time.monotonic() < deadline:
        time.sleep(2)
    status, headers, body = answer
    assert status == 200 and b"never leaves this device" in body
    for name, value in HEADERS.items():
        assert headers.get_all(name) == [value], name
    assert headers["X-Frame-Options"] == "DENY"  # the guard's, which the site does not set
    status, headers, _ = ask(url + "site/model.onnx", "HEAD")
    assert status == 200 and headers["Cross-Origin-Embedder-Policy"] == "require-corp"
