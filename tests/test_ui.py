"""The app through gradio_client against a real launched server, and its offline behaviour."""

from __future__ import annotations

import re
import time

import cv2
import numpy as np
import pytest
from app_server import running_app
from conftest import ASSETS, tiny_depth_anything

import vitviz
from vitviz.app.photo import NO_PHOTO
from vitviz.outputs import Output

LAYOUT_BLOCKS = {"tabs", "tabitem", "row", "column", "group", "accordion", "sidebar", "form"}


@pytest.fixture(scope="module")
def client():
    gradio_client = pytest.importorskip("gradio_client")
    with running_app() as url:
        yield gradio_client.Client(url, verbose=False, ssl_verify=False)


def read(path) -> np.ndarray:
    return vitviz.load_image(path)


def plot_traces(figure) -> list[dict]:
    """A gr.Plot's traces as gradio_client returns them, with each y as an array: Plotly sends arrays as
    {"dtype": "f8", "bdata": base64}."""
    import base64
    import json

    traces = json.loads(figure["plot"])["data"]
    for t in traces:
        if isinstance(t.get("y"), dict):
            t["y"] = np.frombuffer(base64.b64decode(t["y"]["bdata"]), t["y"]["dtype"])
    return traces


def test_analyze_then_change_layer_and_head(client):
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "coffee.jpg"))
    preview, status = client.predict(image, api_name="/analyze")
    assert "grid 21 rows × 32 columns" in status and "673 tokens" in status and "CPU" in status
    assert read(preview).shape == (427, 640, 3)  # the user's 400x600 image at display size
    grid_img, tokens_md = client.predict(image, api_name="/tokens")
    assert "672 patch tokens" in tokens_md
    assert read(grid_img).shape[1] == read(preview).shape[1] + 64  # the picture, its scan-order margin, the strip
    params = dict(
        image=image,
        model_name="dinov2-small",
        size="model default",
        query_mode="readout",
        patch=-1,
        cmap="inferno",
        alpha=0.6,
        grid_scale="shared across heads",
    )
    last, _, _ = client.predict(layer=11, head=-1, **params, api_name="/attention")
    first, _, layer0 = client.predict(layer=0, head=0, **params, api_name="/attention")
    a, b = read(last), read(first)
    assert a.shape == b.shape
    assert np.abs(a.astype(int) - b.astype(int)).mean() > 3  # a different overlay came back
    # The sentence under the map gives the model's own numbers for the layer, not a textbook claim.
    share, entropy, uniform = re.search(
        r"takes \*\*([\d.]+)%.*entropy \*\*([\d.]+) nats\*\* \(.*?\) against ([\d.]+)", layer0
    ).groups()
    a0 = vitviz.analyze(vitviz.load_model(device="cpu"), ASSETS / "coffee.jpg")
    assert float(entropy) == pytest.approx(a0.attention_entropy[0, 0], abs=0.01)  # head 0's own, not the layer's
    assert float(uniform) == pytest.approx(np.log(673), abs=0.01)
    assert float(share) == pytest.approx(100 * a0.layer_attention(0)[0, 0, :1].astype(float).sum(), abs=0.06)
    grid, _, _ = client.predict(layer=5, head=-2, **params, api_name="/attention")
    assert read(grid).shape[0] > a.shape[0]  # 6 heads + mean tiled
    roll, note, truth = client.predict(
        image, "dinov2-small", "model default", "max", 0.5, "output", "inferno", 0.6, api_name="/rollout"
    )
    assert read(roll).shape == a.shape
    assert "brightest patch" in note and "the level that only 1 in 100 patches exceeds" in note
    assert note.startswith("Rollout toward the output: it starts from the patch tokens that the dense head reads")
    assert truth.startswith("**What this map can tell you, on this photo.** Rollout toward the output and toward")
    roll, note, same = client.predict(
        image, "dinov2-small", "model default", "max", 0.5, "readout", "inferno", 0.6, api_name="/rollout"
    )
    assert "which this model's output (its dense head) does not read" in note and same == truth
    grid_fig, pos_map = client.predict("dinov2-small", 3, 30, api_name="/position_embeddings")
    assert read(pos_map).shape[0] == 480
    other = client.predict("dinov2-small", 30, 3, api_name="/position_map")
    assert np.abs(read(other).astype(int) - read(pos_map).astype(int)).mean() > 3


def test_inside_a_head_says_this_heads_own_numbers(client):
    """The steps' numbers are the engine's for this layer, head and query; weight × value differs from weight."""
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "coffee.jpg"))
    where = dict(image=image, model_name="dinov2-small", size="model default")
    display = dict(cmap="inferno", alpha=0.6, colour_scale="robust")
    query = dict(query_mode="a patch (click one in a picture)", patch=100)
    scores, weights, values, strips, bars, note = client.predict(
        **where, layer=6, head=3, **query, **display, api_name="/inside_head"
    )
    d = vitviz.analyze(vitviz.load_model(device="cpu"), ASSETS / "coffee.jpg").inside_head(6, 3, 100)
    largest, top, keys = re.search(
        r"largest weight is \*\*([\d.]+)\*\*.*hold \*\*(\d+)%.*as if \*\*([\d.]+)\*\* of", note
    ).groups()
    assert float(largest) == pytest.approx(d.weights.max(), abs=6e-4)
    assert float(top) == pytest.approx(100 * d.top_share, abs=0.6)
    assert float(keys) == pytest.approx(d.effective_keys, abs=0.06)
    assert "patch 100 (row 3, column 4)" in note and "$d = 64$" in note
    assert len({read(x).tobytes() for x in (scores, weights, values)}) == 3
    other = client.predict(**where, layer=6, head=4, **query, **display, api_name="/inside_head")
    assert np.abs(read(other[1]).astype(int) - read(weights).astype(int)).mean() > 1
    params = dict(**where, layer=6, head=3, **query, cmap="inferno", alpha=0.6, grid_scale="shared across heads")
    weight = client.predict(**params, measure="weight", api_name="/attention")[0]
    value = client.predict(**params, measure="weight × value norm", api_name="/attention")[0]
    weight, value = read(weight), read(value)
    w = min(weight.shape[1], value.shape[1])  # each colour scale as wide as its own words
    assert np.abs(weight[:, :w].astype(int) - value[:, :w].astype(int)).mean() > 1


def test_api_is_typed_and_named(client):
    """Named outputs, int layers/heads/patches, the real target options, and a photo as the example image."""
    info = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    for name, endpoint in info.items():
        outputs = [r["label"] for r in endpoint["returns"]]
        assert all(outputs) and len(set(outputs)) == len(outputs), (name, outputs)
        for p in endpoint["parameters"]:
            assert not p["parameter_name"].startswith("param_"), (name, p)
            if p["parameter_name"] in ("layer", "patch", "row", "col", "n_steps", "noise_samples", "block"):
                assert p["python_type"]["type"] == "int", (name, p)
            if p["parameter_name"] == "image":
                assert "chelsea" in str(p["example_input"]), (name, p)
    head = {p["parameter_name"]: p for p in info["/attention"]["parameters"]}["head"]
    assert head["type"]["enum"][:3] == [-1, -2, 0]
    target = {p["parameter_name"]: p for p in info["/attribute"]["parameters"]}["target"]
    assert target["type"]["enum"] == ["default", "top-2", "top-3", "top-4", "top-5"]


def test_malformed_arguments_name_the_argument(client):
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "coffee.jpg"))
    with pytest.raises(Exception, match="patch must be -1"):
        client.predict(
            image,
            "dinov2-small",
            "model default",
            3,
            2,
            "a patch (click one in a picture)",
            5000,
            "weight",
            "inferno",
            0.6,
            "per head",
            api_name="/attention",
        )
    with pytest.raises(Exception, match="layer: Value 99 is greater than maximum value 11"):  # Gradio's check
        client.predict(
            image,
            "dinov2-small",
            "model default",
            99,
            2,
            "readout",
            -1,
            "weight",
            "inferno",
            0.6,
            "per head",
            api_name="/attention",
        )
    with pytest.raises(Exception, match="discard: Value -0.5 is less than minimum value 0"):
        client.predict(
            image, "dinov2-small", "model default", "mean", -0.5, "output", "inferno", 0.6, api_name="/rollout"
        )
    with pytest.raises(Exception, match="head: Value: -1 is not in the list of choices"):  # one head, not the mean
        client.predict(
            image,
            "dinov2-small",
            "model default",
            3,
            -1,
            "readout",
            -1,
            "inferno",
            0.6,
            "robust",
            api_name="/inside_head",
        )
    with pytest.raises(Exception, match="box must be two corners"):
        client.predict(
            image,
            "dinov2-small",
            "model default",
            "Saliency (|gradient|)",
            "default",
            "blurred",
            8,
            0,
            11,
            [["a", "b"], [1, 2]],
            "inferno",
            0.6,
            api_name="/attribute",
        )
    assert client.predict(None, api_name="/analyze") == (None, NO_PHOTO)  # clearing the upload is not an error


@pytest.mark.parametrize(
    "payload, message", [(b"this is not a picture", "not an image"), (None, "truncated")], ids=["text", "truncated"]
)
def test_bad_upload_is_an_error_and_the_app_keeps_serving(client, tmp_path, payload, message):
    from gradio_client import handle_file

    if payload is None:
        payload = (ASSETS / "coffee.jpg").read_bytes()[:20_000]
    bad = tmp_path / "upload.jpg"
    bad.write_bytes(payload)
    with pytest.raises(Exception, match=message):
        client.predict(handle_file(str(bad)), api_name="/analyze")
    status = client.predict(handle_file(str(ASSETS / "chelsea.jpg")), api_name="/analyze")[1]
    assert "tokens" in status


def test_offline_model_change_keeps_the_current_model(tmp_path, monkeypatch):
    from vitviz.app.photo import change_model
    from vitviz.app.server import Server

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    start = time.perf_counter()
    with pytest.warns(UserWarning, match="no network"):
        result = change_model(Server(device="cpu"), "google/vit-base-patch16-224", "dinov2-small")
    assert time.perf_counter() - start < 5.0
    assert result[0] == "dinov2-small" and result[1] == "dinov2-small"


@pytest.fixture(scope="module")
def depth_app(tmp_path_factory):
    """The app started with --depth-model: a tiny random Depth Anything in a save_pretrained folder."""
    gradio_client = pytest.importorskip("gradio_client")
    folder = tmp_path_factory.mktemp("depth-model")
    tiny_depth_anything().save_pretrained(folder)
    with running_app(["--depth-model", str(folder)]) as url:
        yield gradio_client.Client(url, verbose=False, ssl_verify=False), str(folder)


def test_the_lessons_dense_step_shows_the_depth_models_map_when_there_is_one(depth_app):
    from gradio_client import handle_file

    client, folder = depth_app
    where = dict(image=handle_file(str(ASSETS / "coffee.jpg")), model_name="dinov2-small", size="model default")
    title, picture, text = client.predict(
        **where, step=8, cmap="inferno", alpha=0.6, colour_scale="robust", api_name="/lesson"
    )
    assert "Step 8 of 9" in title and folder in text and "bright = near" in text
    assert read(picture).ndim == 3


def test_depth_end_to_end(depth_app):
    from gradio_client import handle_file

    client, folder = depth_app
    image = handle_file(str(ASSETS / "coffee.jpg"))
    out = client.predict(image, folder, "magma", 1.0, 3, -1, api_name="/depth")
    status, original, overlay, cloud, stages, table, att, files = out
    assert "input 350 px high × 518 px wide" in status and re.search(r"encoder grid \d+ rows × \d+ columns of", status)
    assert "aspect kept" in status and "CPU" in status
    assert read(overlay).shape[0] == read(original).shape[0] == 427
    assert len(stages) == 8 and "Reassemble 1" in stages[0]["caption"] and "Fusion 4" in stages[7]["caption"]
    assert "encoder layer 1's tokens" in table and "fusion 3 + reassemble 1" in table
    by_suffix = {p.rsplit("-", 1)[-1]: p for p in files}
    depth = np.load(by_suffix["depth.npy"])
    png = cv2.imread(by_suffix["depth16.png"], cv2.IMREAD_UNCHANGED)
    assert depth.shape == png.shape == (400, 600) and png.dtype == np.uint16
    # the same numbers as the Python API gives for the same file
    expected = vitviz.estimate_depth(vitviz.load_depth_model(folder, device="cpu"), ASSETS / "coffee.jpg").depth
    np.testing.assert_allclose(depth, expected, rtol=1e-5, atol=1e-6)
    layer0 = client.predict(image, folder, 0, 1, "magma", api_name="/depth_attention")
    assert np.abs(read(layer0).astype(int) - read(att).astype(int)).mean() > 1


def test_depth_offline_says_how_to_enable_it(client):
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "coffee.jpg"))
    start = time.perf_counter()
    out = client.predict(image, vitviz.DEFAULT_DEPTH_MODEL, "magma", 1.0, 11, -1, api_name="/depth")
    assert time.perf_counter() - start < 10
    assert "--depth-model PATH" in out[0] and "no network" in out[0]
    assert out[2] is None and out[7] is None  # no depth picture, no downloads
    assert "tokens" in client.predict(image, api_name="/analyze")[1]  # the rest of the app goes on


def test_attribute_endpoint(client):
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "coffee.jpg"))
    where = [image, "dinov2-small", "model default"]
    args = where + ["Integrated Gradients", "default", "blurred", 8, 0, 11, [], "inferno", 0.6]
    shown, roll, rel, summary = client.predict(*args, api_name="/attribute")
    assert "the dense head's map where it marks your photo as salient" in summary and "Convergence delta" in summary
    assert read(shown).shape == read(roll).shape == read(rel).shape
    assert np.abs(read(shown).astype(int) - read(roll).astype(int)).mean() > 1
    args[3] = "Saliency (|gradient|)"
    args[9] = [[0, 0], [300, 400]]  # a box: the left half
    summary = client.predict(*args, api_name="/attribute")[3]
    assert "inside the box" in summary and "Convergence delta" not in summary
    log_roll = client.predict(*args, "log", api_name="/attribute")[1]
    linear_roll = client.predict(*args, "min-max", api_name="/attribute")[1]  # the shared colour scale applies
    assert np.abs(read(log_roll).astype(int) - read(linear_roll).astype(int)).mean() > 1


def test_a_display_setting_recolours_the_attribution_without_running_it_again(monkeypatch):
    """The result is kept for the session: a new colormap or scale redraws its pictures from it (the
    attribution is not run again), and a result of another image is never redrawn."""
    import gradio as gr

    from vitviz.app.server import Server
    from vitviz.app.tabs import attributions

    server = Server(device="cpu")
    analysis_key = server.analysis_key
    where = (str(ASSETS / "coffee.jpg"), "dinov2-small", "224")
    s = attributions.Settings.of("Saliency (|gradient|)", "default", "blurred", 8, 0, 11, [])
    display = attributions.Display("inferno", 0.6, "log")
    shown, roll, rel, _, kept = attributions.run(server, where, s, display, request=None, progress=lambda *a, **k: None)
    assert sum(x.nbytes for x in kept.inputs if isinstance(x, np.ndarray)) < 2**20  # kept at the size shown
    monkeypatch.setattr(attributions, "attribute", lambda *a, **k: pytest.fail("recolouring ran the model"))
    for name in ("get_analysis", "get_attribution_model"):  # drawn from the kept result alone
        monkeypatch.setattr(server, name, lambda *a, **k: pytest.fail("recolouring ran the model"))
    viridis = attributions.recolour(server, kept, analysis_key(*where), "viridis", 0.6, "min-max", False)
    for before, after in zip((shown, roll, rel), viridis, strict=True):
        assert np.abs(before.astype(int) - after.astype(int)).mean() > 1  # every picture recoloured
    again = attributions.recolour(server, kept, analysis_key(*where), "inferno", 0.6, "log", False)
    for before, after in zip((shown, roll, rel), again, strict=True):
        np.testing.assert_array_equal(before, after)  # back to the run's settings: its very pictures
    other = analysis_key(str(ASSETS / "chelsea.jpg"), "dinov2-small", "224")
    assert attributions.recolour(server, kept, other, "viridis", 0.6, "log", False) == (gr.skip(),) * 3
    assert attributions.recolour(server, None, other, "viridis", 0.6, "log", False) == (gr.skip(),) * 3


def test_no_event_sets_off_a_request_that_sets_off_the_others_again():
    """Gradio's browser client, when an `always_last` listener whose request was running is done, fires its whole
    event again: every listener on it, not that one alone. Two such listeners on one event then set each other
    off without end (13 requests a second from a phone, whose large labels changed as the views drew). So an
    event that a browser fires (a State's change is fired per listener) has one listener with a request where
    any is `always_last`; the display settings have one step in the browser, and each view follows it."""
    from collections import defaultdict

    from vitviz.app.layout import build
    from vitviz.app.server import Server

    config = build(Server(device="cpu"), "dinov2-small").get_config_file()
    kinds = {c["id"]: c["type"] for c in config["components"]}
    listeners = defaultdict(list)
    for d in config["dependencies"]:
        for target, event in d["targets"]:
            if target is not None and kinds.get(target) != "state":  # 0: the page (load)
                listeners[(target, event)].append(d)
    for (target, event), deps in listeners.items():
        requests = [d for d in deps if d["backend_fn"]]
        if any(d["trigger_mode"] == "always_last" for d in requests):
            assert len(requests) == 1, f"{kinds.get(target)} {target} {event}: {[d['api_name'] for d in requests]}"
    labels = {c["props"].get("label"): c["id"] for c in config["components"]}
    settings = [labels[n] for n in ("Colormap", "Opacity", "Colour scale of every map", "Large labels")]
    (step,) = {d["id"] for s in settings for d in listeners[(s, "change")]}  # one step, no request
    followers = [d for d in config["dependencies"] if d["trigger_after"] == step]
    assert not config["dependencies"][step]["backend_fn"]
    # one of them, in the page too, counts the shown tab's restyles; each count's change is one step in the page,
    # and each view of the tab redraws after it
    (route,) = [d for d in followers if not d["backend_fn"]]
    assert len(route["outputs"]) >= 10 and all(d["backend_fn"] for d in followers if d is not route)
    for count in route["outputs"]:
        (counted,) = [d["id"] for d in config["dependencies"] if [count, "change"] in map(list, d["targets"])]
        assert not config["dependencies"][counted]["backend_fn"]
        redraws = [d for d in config["dependencies"] if d["trigger_after"] == counted]
        assert redraws and all(d["backend_fn"] and d["trigger_mode"] == "always_last" for d in redraws)


def test_no_event_of_the_page_waits_for_one_request_before_sending_the_next():
    """Gradio's browser client (6.31) sends the listeners of one event one after another, each when the one
    before has its answer: a tab with two views (Inside a head's live panel and its steps) drew the second a round
    trip late. So an event of a component has at most one listener with a request, and a tab's views follow the
    step that selects it (`.then`), which the client sends all at once."""
    from collections import defaultdict

    from vitviz.app.layout import build
    from vitviz.app.server import Server

    config = build(Server(device="cpu"), "dinov2-small").get_config_file()
    kinds = {c["id"]: c["type"] for c in config["components"]}
    listeners = defaultdict(list)
    for d in config["dependencies"]:
        for target, event in d["targets"]:
            if target is not None and kinds.get(target) != "state":  # a State's change is sent per listener
                listeners[(target, event)].append(d)
    for (target, event), deps in listeners.items():
        requests = [d for d in deps if d["backend_fn"] and d["queue"] is not False]
        assert len(requests) <= 1, f"{kinds.get(target)} {target} {event}: {[d['id'] for d in requests]}"
    tab = next(c["id"] for c in config["components"] if c["type"] == "tabitem" and c["props"].get("id") == "inside")
    (step,) = listeners[(tab, "select")]
    assert not step["backend_fn"]  # in the page: it sets the tab's analysis key, or counts its selections
    for routed in step["outputs"][1:]:
        (changed,) = [d["id"] for d in config["dependencies"] if [routed, "change"] in map(list, d["targets"])]
        after, draws = [changed], []
        while after:  # what follows the change, and what follows that (a fit of the controls, then the draws)
            following = [d for d in config["dependencies"] if d["trigger_after"] in after]
            draws += [d for d in following if d["queue"] is not False]
            after = [d["id"] for d in following]
        assert len(draws) == 2, routed  # the live panel's meta and the steps, sent at once


def test_no_request_has_a_layout_block_as_output():
    """Gradio's browser client (6.31), at every loading status of every request, copies the props of every
    component that was ever a request's output, and, where one is a layout block, of all its children: the tab
    bar as an output (the Lesson's deep link) made every upload copy 280 components' props some 70 times (2.5 s
    in the page). So no request has a layout block as an output, or shows its progress on one."""
    from vitviz.app.layout import build
    from vitviz.app.server import Server

    config = build(Server(device="cpu"), "dinov2-small").get_config_file()
    layouts = {c["id"]: c["type"] for c in config["components"] if c["type"] in LAYOUT_BLOCKS}
    for d in config["dependencies"]:
        if d["backend_fn"]:
            shown_on = [*d["outputs"], *(d.get("show_progress_on") or [])]
            assert not [layouts[o] for o in shown_on if o in layouts], (d["id"], d["api_name"])


def test_readme_api_example_runs(client):
    """The README's gradio_client block, as written, against the running app; its answers are checked."""
    from app_server import ROOT

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## HTTP API") :]
    code = section[section.index("```python") + len("```python") : section.index("```", section.index("```python") + 9)]
    code = code.replace('Client("http://127.0.0.1:7860/", ssl_verify=False)', "Client(URL, ssl_verify=False)").replace(
        "assets/", str(ROOT / "assets") + "/"
    )
    scope = {"URL": client.src}
    exec(compile(code, "README.md", "exec"), scope)
    assert "grid 32 rows × 32 columns" not in scope["status"] and "tokens" in scope["status"]
    assert "patch tokens" in scope["sequence"] and "inside the box" in scope["summary"]
    assert read(scope["overlay"]).shape[0] == read(scope["preview"]).shape[0]  # the same picture, plus a colorbar
    assert "No token stands apart" in scope["norms_note"]  # a small DINOv2 has no artifact tokens
    for name in ("rollout", "similarity", "norms", "pca", "dense", "shown", "relevancy"):
        assert read(scope[name]).ndim == 3, name


def test_limits_refuse_heavy_requests_with_a_message(client, tmp_path):
    """The UI's maximum Integrated Gradients would hold a CPU for half an hour: it is refused at once, and so
    is an upload over the size limit; the app goes on serving."""
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "coffee.jpg"))
    start = time.perf_counter()
    args = [
        image,
        "dinov2-small",
        "model default",
        "Integrated Gradients",
        "default",
        "blurred",
        128,
        16,
        11,
        [],
        "inferno",
        0.6,
    ]
    with pytest.raises(Exception, match="over this server's limit .*lower the steps or the samples"):
        client.predict(*args, api_name="/attribute")
    assert time.perf_counter() - start < 10
    big = tmp_path / "big.jpg"
    big.write_bytes((ASSETS / "coffee.jpg").read_bytes() + bytes(26 * 2**20))
    with pytest.raises(Exception, match="(?i)size|large"):
        client.predict(handle_file(str(big)), api_name="/analyze")
    assert "tokens" in client.predict(image, api_name="/analyze")[1]


def assert_the_panel_shows(f, name: str, traces: list[dict], note: str) -> None:
    """A faithfulness panel shows `f` (the Python API's curves of one map) as the traces named `name`, and its
    sentence quotes that map's areas and verdict."""
    mine = [t for t in traces if t.get("name") == name]
    np.testing.assert_allclose(mine[0]["y"], f.deletion, rtol=1e-4)
    np.testing.assert_allclose(mine[1]["y"], f.insertion, rtol=1e-4)
    said = note.split(f"**{name}.**")[1].split("\n\n")[0]
    assert f"area under the deletion curve is {f.deletion_auc:.4g}" in said
    assert f"the random orders' mean of {f.random_auc:.4g}" in said and f"of {len(f.random)} random orders" in said
    assert f": {f.verdict}." in said or f": {f.verdict};" in said  # "; hiding them raises it…" may follow


def curves_of(model, image, maps: list[dict]) -> list:
    """The Python API's curves of each map (`faithfulness` arguments) on one image and target, all ranked against
    the random orders that the first map's check draws from the default seed, as the panel's are."""
    from vitviz.deletion import faithfulness

    first = faithfulness(model, image, **maps[0])
    return [first] + [faithfulness(model, image, band=first.band, **m) for m in maps[1:]]


@pytest.mark.slow
def test_the_faithfulness_panel_says_what_the_curves_show(client):
    """/faithfulness on the image and target of the attribution: its figure holds the Python API's curves, and
    each sentence's areas and verdict are that map's own."""
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "coffee.jpg"))
    args = [image, "dinov2-small", "224", "Saliency (|gradient|)", "default", "blurred", 8, 0, 11, []]
    figure, note = client.predict(*args, api_name="/faithfulness")
    traces = plot_traces(figure)
    model = vitviz.load_model(device="cpu")
    names = {
        "saliency": "Saliency (|gradient|)",
        "rollout": "Attention rollout",
        "relevancy": vitviz.METHODS["relevancy"],
    }
    for f in curves_of(model, ASSETS / "coffee.jpg", [{"method": m} for m in names]):
        assert_the_panel_shows(f, names[f.method], traces, note)
    band = [t for t in traces if t.get("fill") == "tonexty"][0]
    np.testing.assert_allclose(band["y"], np.percentile(f.random, 5, 0), rtol=1e-4)


@pytest.mark.slow
def test_the_rollout_tabs_faithfulness_check_scores_the_rollout_with_its_settings(client):
    """/rollout_faithfulness with max fusion and half discarded: the figure holds the curves of the rollout made
    with those settings on the attributions' input (and of the other two fusions), each sentence that map's
    areas and verdict, and the note the input size and the discard ratio."""
    from gradio_client import handle_file

    from vitviz.attributions import input_analysis

    image = ASSETS / "coffee.jpg"
    figure, note = client.predict(
        handle_file(str(image)), "dinov2-small", "448", "max", 0.5, api_name="/rollout_faithfulness"
    )
    traces = plot_traces(figure)
    model = vitviz.load_model(device="cpu")
    same = input_analysis(model, image)
    assert "discards the weakest 50% of each layer's attention" in note
    assert "on one forward of the 224 px high × 224 px wide input, where it hides patches: another forward than" in note
    assert "the picture above's, which is the 294 px high × 448 px wide analysis." in note
    fusions = ("max", "mean", "min", "max")  # the last: the same rollout with nothing discarded
    maps = [
        {"method": "rollout", "scores": same.rollout(fusion, 0.5 if i < 3 else 0.0)} for i, fusion in enumerate(fusions)
    ]
    *checked, undiscarded = curves_of(model, image, maps)
    for fusion, f in zip(fusions[:3], checked, strict=True):
        assert_the_panel_shows(
            f, f"Rollout, {fusion} fusion" + (" (the one shown)" if fusion == "max" else ""), traces, note
        )
    shown = [t for t in traces if t.get("name") == "Rollout, max fusion (the one shown)"][0]
    assert not np.allclose(undiscarded.deletion, shown["y"])  # the discard ratio was applied


def test_the_layer_lens_shows_every_layer_with_its_sentence(client):
    """/lens on the embedded model: one tile per layer, in order, and the sentence of the lens on that image, read
    from the tab's own analysis (its last layer the Output tab's map)."""
    import base64
    import json

    from gradio_client import handle_file

    from vitviz.lens import analysis_lens

    image = handle_file(str(ASSETS / "coffee.jpg"))
    figure, note = client.predict(image, "dinov2-small", "224", api_name="/lens")
    figure = json.loads(figure["plot"])
    assert [t["text"] for t in figure["layout"]["annotations"]] == [f"layer {i}" for i in range(12)]
    a = vitviz.analyze(vitviz.load_model(device="cpu"), ASSETS / "coffee.jpg", longest=224)  # 154 x 224 px
    lens = analysis_lens(a)
    assert note == lens.sentence()
    np.testing.assert_allclose(lens.values[-1], a.dense_map(), atol=1e-5)
    last = figure["data"][-1]["z"]
    last = np.frombuffer(base64.b64decode(last["bdata"]), last["dtype"]).reshape(44, 64) if "bdata" in last else last
    small = cv2.resize(lens.values[-1], (64, 44), interpolation=cv2.INTER_AREA)  # 154 x 224 px shown as 44 x 64 cells
    np.testing.assert_allclose(last, small, atol=1e-5)
    figure, note = client.predict(image, "dinov2-small", "224", "readout", api_name="/lens")
    readout = analysis_lens(a, output=Output("readout"))
    assert note == readout.sentence()
    assert "follows **the readout vector" in note and json.loads(figure["plot"])["data"][0]["name"] == "readout"


@pytest.mark.slow
def test_the_sanity_check_tiles_carry_the_cascades_correlations(client):
    import base64
    import json

    from gradio_client import handle_file

    from vitviz.sanity import sanity_check

    image = handle_file(str(ASSETS / "coffee.jpg"))
    args = [image, "dinov2-small", "224", "Saliency (|gradient|)", "default", "blurred", 8, 0, 11, [], "inferno", 0.6]
    figure, maps, note = client.predict(*args, "min-max", api_name="/sanity")
    s = sanity_check(vitviz.load_model(device="cpu"), ASSETS / "coffee.jpg", "saliency")
    titles = [t["text"] for t in json.loads(maps["plot"])["layout"]["annotations"]]
    assert titles[0] == "the model" and len(titles) == 13
    for k in (1, 6, 12):
        assert titles[k] == f"{k} random<br>ρ {s.correlation[k]:.2f}"
    assert s.sentence() in note
    curve = json.loads(figure["plot"])["data"][0]["y"]
    curve = np.frombuffer(base64.b64decode(curve["bdata"]), curve["dtype"]) if isinstance(curve, dict) else curve
    np.testing.assert_allclose(curve, s.correlation, atol=1e-6)


def test_stop_ends_a_long_attribution_at_its_next_batch():
    """Stop (or the page closing) ends an Integrated Gradients run within seconds, not after its minutes."""
    import threading

    import gradio as gr

    from vitviz.app.server import Server
    from vitviz.app.tabs import attributions

    class Request:
        session_hash = "stop-test"

    server = Server(device="cpu")
    outcome, fractions = {}, []

    def long_run():
        start = time.perf_counter()
        try:
            attributions.run(
                server,
                (str(ASSETS / "coffee.jpg"), "dinov2-small", "224"),
                attributions.Settings.of("Integrated Gradients", "default", "blurred", 128, 0, 11, []),
                request=Request(),
                progress=lambda f, **k: fractions.append(f),
            )
        except gr.Error as exc:
            outcome["error"] = str(exc)
        outcome["seconds"] = time.perf_counter() - start

    worker = threading.Thread(target=long_run)
    worker.start()
    deadline = time.perf_counter() + 60
    while not any(f > 0 for f in fractions) and time.perf_counter() < deadline:  # the batches have begun
        time.sleep(0.1)
    stopped_at = time.perf_counter()
    assert attributions.stop(server, Request()) == attributions.STOPPED_NOTE  # what the page shows under the buttons
    worker.join(60)
    assert "stopped at" in outcome["error"]
    assert time.perf_counter() - stopped_at < 10  # 128 steps take about a minute here
    assert ("stop-test", "attributions") not in server.stopped  # nothing kept for a session once its run is over

    from vitviz.app.attribution_controls import Kept

    old = Kept("old image", (), None, np.zeros(1))
    assert attributions.drop_stale(old, "new image") == (None, None, None, "", None)
    assert attributions.drop_stale(old, "old image") == (gr.skip(),) * 5 == attributions.drop_stale(None, "new image")


def test_maps_land_where_they_are_through_the_endpoints(client):
    """Opaque, min-max: the brightest square of /attention (nearest) and the brightest spot of /rollout
    (bilinear) sit on the patch where the engine's map has its maximum."""
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "astronaut.jpg"))
    a = vitviz.analyze(vitviz.load_model(device="cpu"), ASSETS / "astronaut.jpg")
    where = dict(image=image, model_name="dinov2-small", size="model default", cmap="gray", alpha=1.0)
    query = dict(layer=11, head=2, query_mode="readout", patch=-1, measure="weight", grid_scale="shared across heads")
    overlay = client.predict(**where, **query, colour_scale="min-max", api_name="/attention")[0]
    roll = client.predict(**where, fusion="mean", discard=0.0, colour_scale="min-max", api_name="/rollout")[0]
    gh, gw = a.grid
    for shown, values in ((overlay, a.attention_map(11, 2)), (roll, a.rollout("mean"))):
        picture = read(shown)[..., 0].astype(float)
        picture = picture[:, : round(picture.shape[0] * gw / gh)]  # the map, without its colorbar
        cells = cv2.resize(picture, (gw, gh), interpolation=cv2.INTER_AREA)
        assert np.unravel_index(cells.argmax(), cells.shape) == np.unravel_index(values.argmax(), values.shape)


@pytest.mark.app
def test_the_app_serves_from_a_process_that_goes_on(embedded):
    """`main(block=False)`, the benchmark's way: it returns at once, the app serving on the caller's own model
    object (a bare forward timed beside it runs as the server's does), and `close()` stops it."""
    import urllib.request

    gradio_client = pytest.importorskip("gradio_client")
    from support.harness import free_port

    from vitviz.app import main
    from vitviz.app.server import Server

    server = Server(device="cpu")
    server.models[embedded.name] = embedded
    port = free_port()
    demo = main(["--port", str(port), "--device", "cpu", "--model", embedded.name], block=False, server=server)
    url, made = f"http://127.0.0.1:{port}/", []
    try:
        image = gradio_client.handle_file(str(ASSETS / "coffee.jpg"))
        client = gradio_client.Client(url, verbose=False, ssl_verify=False)
        assert "673 tokens" in client.predict(image, api_name="/analyze")[1]  # the default size, 448 px
        made = [key for key, a in server.cache.items() if a.model is embedded]
        assert made  # the server analysed with the object given, not a model of its own
        assert demo.state_session_capacity == server.STATES_KEPT  # sessions whose state Gradio keeps
    finally:
        demo.close()
        server.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)


@pytest.mark.app
def test_a_full_queue_is_refused_in_the_apps_words(embedded):
    """`--max-queue 0`: every queued request is refused, with its place and why there is no estimate yet
    (`scheduling.queue_full`), not Gradio's "Queue is full! Please try again."."""
    gradio_client = pytest.importorskip("gradio_client")
    from gradio_client.exceptions import ValidationError
    from support.harness import free_port

    from vitviz.app import main
    from vitviz.app.scheduling import queue_full
    from vitviz.app.server import Server

    server = Server(device="cpu")
    server.models[embedded.name] = embedded
    port = free_port()
    demo = main(["--port", str(port), "--max-queue", "0", "--model", embedded.name], block=False, server=server)
    try:
        client = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False, ssl_verify=False)
        with pytest.raises(ValidationError) as refused:
            client.predict(gradio_client.handle_file(str(ASSETS / "coffee.jpg")), api_name="/analyze")
        assert queue_full(0, 0, None) in str(refused.value)
        assert "number 1 in line" in queue_full(0, 0, None) and "no estimate" in queue_full(0, 0, None)
        assert "number 3 in line, answered in about 1 min 5 s" in queue_full(64, 2, 64.6)
    finally:
        demo.close()
        server.stop()


def test_inside_a_head_asks_the_centre_patch_of_a_model_without_a_readout_token(tmp_path):
    """SigLIP reads out through a pooling probe, which is no token of the layers: inside a head then starts on the
    centre patch, where the readout would be an error. A model with a CLS token keeps the readout."""
    from conftest import random_image, tiny_siglip_vision

    from vitviz.app.server import Server
    from vitviz.app.tabs.attention import PATCH_QUERY, controls_fitter
    from vitviz.app.tabs.inside import single_heads

    server, path = Server(device="cpu"), tmp_path / "photo.png"
    cv2.imwrite(str(path), random_image(40, 56))
    fit = server.bind(controls_fitter(single_heads, 0, token_query=True))
    for model, expected in ((tiny_siglip_vision(), (PATCH_QUERY,)), (vitviz.load_model(device="cpu"), None)):
        server.models[model.name] = model
        *_, patch, mode = fit(str(path), model.name, "224", 2, 0, -1, None)
        if expected is None:  # a CLS token: nothing to change
            assert (patch, mode) == (gr_skip(), gr_skip())
        else:
            a = server.get_analysis(str(path), model.name, "224", None)
            assert mode == PATCH_QUERY and patch == (a.grid[0] // 2) * a.grid[1] + a.grid[1] // 2
            assert a.inside_head(0, 0, patch).weights.sum() == pytest.approx(1, abs=1e-3)


def gr_skip():
    import gradio as gr

    return gr.skip()


@pytest.mark.slow
def test_the_faithfulness_check_scores_the_map_shown_when_its_settings_match(monkeypatch):
    """After Compute, the check reuses the map on screen (no second attribution); other settings make a new one."""
    from vitviz import deletion
    from vitviz.app.server import Server
    from vitviz.app.tabs import attributions

    server, quiet = Server(device="cpu"), dict(request=None, progress=lambda *a, **k: None)
    where = (str(ASSETS / "coffee.jpg"), "dinov2-small", "224")
    controls = ("Saliency (|gradient|)", "default", "blurred", 8, 0, 11, [])
    *_, kept = attributions.run(server, where, attributions.Settings.of(*controls), **quiet)
    calls = []
    quick = dict(steps=2)  # what is checked is which map is scored, not the curves
    real, band = deletion.faithfulness, deletion.random_band
    monkeypatch.setattr(attributions, "faithfulness", lambda *a, **k: calls.append(k) or real(*a, **k, **quick))
    monkeypatch.setattr(deletion, "random_band", lambda *a, **k: band(*a, **k, random_orders=1, **quick))
    _, text = attributions.check_faithfulness(server, where, attributions.Settings.of(*controls), kept, **quiet)
    assert calls[0]["scores"] is kept.scores and "The map shown above" in text
    other = (*controls[:5], 10, [])  # another Grad-CAM block: a saliency map is the same, but the settings differ
    _, text = attributions.check_faithfulness(server, where, attributions.Settings.of(*other), kept, **quiet)
    assert len(calls) == 6  # the method, the rollout and the relevancy beside it, twice
    assert calls[3]["scores"] is None and "press Compute first" in text


@pytest.mark.parametrize(("family", "same"), [("vit", False), ("dinov2", True)])
def test_the_attributions_check_explains_the_forward_of_its_maps_and_names_it_beside_the_analysis(
    tmp_path, family, same, monkeypatch
):
    """Through the tab's handler: the check's curves are the Python API's on the forward that the map explains (its
    input, as `attribute` makes it), and its note names that input, and the analysis that the other tabs draw only
    where it is another forward (a classifier's native square against the 448 px analysis; an aspect-kept encoder
    reads the analysis' own input). Both sides draw 19 random orders (the fewest that allow a verdict), not 50:
    which forward is checked is the point here, and the odds' own tests are test_bands.py's."""
    from conftest import FAMILIES, random_image

    from vitviz import deletion
    from vitviz.app.server import Server
    from vitviz.app.tabs import attributions

    band = deletion.random_band
    monkeypatch.setattr(deletion, "random_band", lambda *a, **k: band(*a, **{**k, "random_orders": 19}))

    server, path = Server(device="cpu"), tmp_path / "photo.png"
    cv2.imwrite(str(path), random_image(40, 56))
    model = FAMILIES[family]()
    server.models[model.name] = model
    where, p = (str(path), model.name, "224"), model.patch_size
    a = server.get_analysis(*where, None)
    settings = attributions.Settings.of("saliency", "default", "blurred", 8, 0, 1, [])
    figure, note = attributions.check_faithfulness(
        server, where, settings, None, request=None, progress=lambda *a, **k: None
    )
    r = vitviz.attribute(model, str(path), "saliency", output=settings.output_options(a, str(path))["output"])
    (h, w), (ah, aw) = (r.grid[0] * p, r.grid[1] * p), a.pixel_values.shape[2:]
    assert ((h, w) == (ah, aw)) == same, ((h, w), (ah, aw))
    said = f"on the forward that the maps above explain, the {h} px high × {w} px wide input: "
    said += (
        "the forward that the other tabs draw too."
        if same
        else (f"not the {ah} px high × {aw} px wide analysis that the other tabs draw.")
    )
    assert said in note and f"The curves follow {r.output.name(model)} on that forward." in note, note
    f, *_ = curves_of(model, str(path), [{"method": "saliency", "output": r.output, "random_orders": 19}])
    assert_the_panel_shows(f, "Saliency (|gradient|)", [t.to_plotly_json() for t in figure.data], note)


def test_the_attributions_tab_explains_a_text_target_on_a_model_with_a_text_tower(tmp_path):
    """The text box shows for a full CLIP model (not for the embedded one), and a text written there is the
    target that the summary names, with the score of the Python API's attribution."""
    from conftest import random_image, tiny_clip
    from test_attributions import word_tokenizer

    from vitviz.app.server import Server
    from vitviz.app.tabs import attributions

    server, path, quiet = (
        Server(device="cpu"),
        tmp_path / "photo.png",
        dict(request=None, progress=lambda *a, **k: None),
    )
    cv2.imwrite(str(path), random_image(40, 56))
    clip, embedded = tiny_clip(), vitviz.load_model(device="cpu")
    clip.tokenizer = word_tokenizer()
    for model, shown in ((clip, True), (embedded, False)):
        server.models[model.name] = model
        *_, text_box = attributions.setup(server.get_analysis(str(path), model.name, "224", None), [], None)
        assert text_box.visible is shown
    controls = ("Saliency (|gradient|)", "default", "blurred", 8, 0, 1, [])
    where = (str(path), clip.name, "224")
    *_, summary, kept = attributions.run(server, where, attributions.Settings.of(*controls, text=" a dog "), **quiet)
    expected = vitviz.attribute(clip, str(path), "saliency", text="a dog")
    assert f'**target:** the image-text similarity with "a dog" (CLIP\'s logit) = {expected.score:.4g}' in summary
    np.testing.assert_allclose(kept.scores, vitviz.attributions.patch_scores(expected.raw, clip.patch_size))
    *_, plain, _ = attributions.run(server, where, attributions.Settings.of(*controls, text=""), **quiet)
    assert "the readout vector (the CLS token, after the final norm)" in plain  # no text: the readout vector


def test_each_request_shows_its_progress_on_one_shown_output_or_on_none():
    """`narrow_progress`: a request shows its progress on one component, its first output that is shown and not a
    State, or on none where it is hidden; an analysis shows it on the upload box, which every screen shows, and
    the depth view on its map. So the components whose props the page copies at each loading status are under
    half of the outputs."""
    from vitviz.app.layout import build
    from vitviz.app.server import Server

    config = build(Server(device="cpu"), "dinov2-small").get_config_file()
    components = {c["id"]: c for c in config["components"]}
    status, upload, depth = (
        next(i for i, c in components.items() if c["props"].get("elem_id") == e) for e in ("status", "upload", "depth")
    )
    every, targets, analyses = set(), set(), 0
    for d in (d for d in config["dependencies"] if d["backend_fn"]):
        shown_on = d["show_progress_on"]
        outputs = [o for o in d["outputs"] if components[o]["type"] != "state"]
        assert shown_on is not None and len(shown_on) == (d["show_progress"] != "hidden" and bool(outputs)), d["id"]
        visible = [o for o in outputs if components[o]["props"].get("visible") is True] or outputs
        if status in outputs:  # an analysis: a timer on the upload box, which a full progress would cover
            analyses += 1
            assert shown_on == [upload] and d["show_progress"] == "minimal", d["id"]
        elif depth in outputs:  # the depth view: on its depth map, not on the note above it (empty online)
            assert shown_on == [depth], d["id"]
        elif shown_on:
            assert shown_on == visible[:1], d["id"]
        every.update(d["outputs"])
        targets.update(shown_on)
    assert analyses == 3  # the page's (on a new photo, and as it loads) and the API's
    assert len(targets) <= len(every) / 2, (len(targets), len(every))


def test_a_draws_settings_record_is_made_from_its_fields_inputs_and_the_api_names_them():
    """`Context.view` gives a parameter annotated with a dataclass that record, from as many inputs as it has
    fields, in their order; the endpoint names those inputs by the fields."""
    from vitviz.app.context import gathered, input_names, settings_records
    from vitviz.app.tabs.attention import Query, draw

    records = settings_records(draw)
    assert records == {"asked": Query}
    own = ["asked", "measure", "cmap"]
    assert input_names(own, records) == ["layer", "head", "query_mode", "patch", "measure", "cmap"]
    asked, measure, cmap = gathered([3, -1, "readout", 7, "weight", "inferno"], own, records)
    assert asked == Query(3, -1, "readout", 7) and (measure, cmap) == ("weight", "inferno")


def test_a_multipage_tiff_is_read_from_its_first_page_and_the_status_says_so(tmp_path):
    """The status of a three-page TIFF says that the views show its first page alone and how to see another, and
    the preview is that page (a tiny DINOv2); a one-page photo's status says nothing of pages."""
    from conftest import FAMILIES
    from PIL import Image

    from vitviz.app import photo
    from vitviz.app.server import Server
    from vitviz.sentences import first_picture_note

    server, quiet = Server(device="cpu"), dict(request=None, progress=lambda *a, **k: None)
    server.models["tiny"] = FAMILIES["dinov2"]()
    path, single = tmp_path / "pages.tiff", tmp_path / "one.tiff"
    pages = [Image.fromarray(np.full((30, 40, 3), 40 + 80 * i, np.uint8)) for i in range(3)]
    pages[0].save(path, save_all=True, append_images=pages[1:])
    pages[1].save(single)
    preview, status, _ = photo.analyze_image(server, str(path), "tiny", "model default", **quiet)
    assert status.endswith(first_picture_note("TIFF", 3)) and "holds 3 pages" in status
    assert np.all(preview == 40)  # the first page's grey
    _, status, _ = photo.analyze_image(server, str(single), "tiny", "model default", **quiet)
    assert "pages" not in status and "tokens" in status


def test_an_upload_the_page_cannot_analyse_says_why_in_the_status_and_leaves_the_views(tmp_path):
    """In the page (`analyze_in_page`), a file that is not an image: a toast and the status give the reason, and
    the preview, the key and the views' routing are left as they were (gr.skip), as the status says."""
    import gradio as gr

    from vitviz.app import photo
    from vitviz.app.server import Server

    bad = tmp_path / "upload.jpg"
    bad.write_bytes(b"this is not a picture")
    with pytest.warns(UserWarning, match="upload.jpg is not an image"):
        preview, status, key, seen = photo.analyze_in_page(
            Server(device="cpu"), str(bad), "dinov2-small", "model default", None, lambda *a, **k: None
        )
    assert status == photo.not_read("upload.jpg is not an image (unrecognised file format)")
    assert status.startswith("**Not analysed:** upload.jpg is not an image") and "show the last photo" in status
    assert all(isinstance(x, type(gr.skip())) for x in (preview, key, seen))
