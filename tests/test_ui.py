"""The app through gradio_client against a real launched server, and its offline behaviour."""

from __future__ import annotations

import time

import numpy as np
import pytest
from app_server import running_app
from conftest import ASSETS

import vitviz


@pytest.fixture(scope="module")
def client():
    gradio_client = pytest.importorskip("gradio_client")
    with running_app() as url:
        yield gradio_client.Client(url, verbose=False)


def read(path) -> np.ndarray:
    return vitviz.load_image(path)


def test_analyze_then_change_layer_and_head(client):
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "coffee.jpg"))
    out = client.predict(image, api_name="/analyze")
    preview, status, grid_img, tokens_md, att_img = out[:5]
    assert "21×32" in status and "673 tokens" in status and "CPU" in status
    assert "672 patch tokens" in tokens_md
    assert read(preview).shape == (427, 640, 3)  # the user's 400x600 image at display size
    assert read(grid_img).shape == read(preview).shape
    params = dict(
        image=image,
        model_name="dinov2-small",
        size="model default",
        query_mode="CLS token",
        patch=-1,
        cmap="inferno",
        alpha=0.6,
        scale="shared across heads",
    )
    last, _ = client.predict(layer=11, head="mean of heads", **params, api_name="/attention")
    first, _ = client.predict(layer=0, head="head 0", **params, api_name="/attention")
    a, b = read(last), read(first)
    assert a.shape == b.shape
    assert np.abs(a.astype(int) - b.astype(int)).mean() > 3  # a different overlay came back
    grid, _ = client.predict(layer=5, head="all heads (grid)", **params, api_name="/attention")
    assert read(grid).shape[0] > a.shape[0]  # 6 heads + mean tiled
    roll = client.predict(image, "dinov2-small", "model default", "max", 0.5, "inferno", 0.6, api_name="/rollout")
    assert read(roll).shape == a.shape
    grid_fig, pos_map = client.predict("dinov2-small", 3, 30, "viridis", api_name="/position_embeddings")
    assert read(pos_map).shape[0] == 480
    other = client.predict("dinov2-small", 30, 3, "viridis", api_name="/position_map")
    assert np.abs(read(other).astype(int) - read(pos_map).astype(int)).mean() > 3


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
    from vitviz import ui

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    start = time.perf_counter()
    with pytest.warns(UserWarning, match="no network"):
        result = ui.change_model("google/vit-base-patch16-224", "dinov2-small")
    assert time.perf_counter() - start < 5.0
    assert result[0] == "dinov2-small" and result[1] == "dinov2-small"
