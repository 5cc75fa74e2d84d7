"""`vitviz serve` as its clients meet it: the upload limit it was given, a file path it must not read, and what
its Depth and Live tabs say on a machine with no depth model and no camera."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest
from conftest import ASSETS
from support.harness import running_app

import vitviz
from vitviz.app import depth, live

LIMIT = 2**20  # --max-upload-mb 1: not the default (25), so that a limit not passed on is seen


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app, offline with an empty model cache, started with --max-upload-mb 1: (url, its log file)."""
    folder = tmp_path_factory.mktemp("serve")
    with pytest.MonkeyPatch.context() as env, open(folder / "app.log", "w") as log:
        env.setenv("HF_HUB_CACHE", str(folder / "hub"))  # no depth model's weights kept here
        with running_app(["--max-upload-mb", "1"], log=log) as (url, _):
            yield url, folder / "app.log"


def upload(url: str, data: bytes) -> tuple[int, str]:
    """POST a file to Gradio's upload route as a browser does: (HTTP status, body)."""
    boundary = uuid.uuid4().hex
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="photo.jpg"\r\n\r\n'
    body = head.encode() + data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(f"{url}gradio_api/upload", body,
                                     {"Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


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
    request = urllib.request.Request(f"{url}gradio_api/call/{api}", json.dumps({"data": data}).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
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
        script += (f"Object.defineProperty(globalThis, 'navigator', {{value: {navigator}, configurable: true}});\n"
                   f"said.push(await find({json.dumps(live.CAMERA_OFF)}));\n")  # fmt: skip
    script += "console.log(JSON.stringify(said));\n})();\n"
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True, timeout=30).stdout
    assert json.loads(out) == list(NAVIGATORS.values())
