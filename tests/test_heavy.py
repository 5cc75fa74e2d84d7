"""Heavy runs (vitviz/app/heavy.py): what a button says of its run before it is pressed, from the server's own
measured rate, and how a run that ends well updates that rate."""

from __future__ import annotations

import time
from types import SimpleNamespace

import cv2
import pytest
from conftest import FAMILIES, random_image

from vitviz.app.heavy import Stopped, cost, expected, stoppable
from vitviz.app.server import Server
from vitviz.app.tabs import attributions, rollout
from vitviz.deletion import passes


@pytest.fixture
def served(tmp_path):
    """A server whose "tiny" model is a tiny DINOv2 (attribution input: 224 px on the longest side), and a photo."""
    server = Server(device="cpu", cache_mb=256)
    server.models["tiny"] = FAMILIES["dinov2"]()
    path = tmp_path / "photo.png"
    cv2.imwrite(str(path), random_image(112, 224, seed=3))
    return server, str(path), SimpleNamespace(session_hash="s")


def seconds_in(label: str) -> int:
    """The seconds a label states: "(about 20 s)", or "(about 2 min)" past 90 s, as 120."""
    number, unit = label.rsplit("(about ", 1)[1].rstrip(")").split(",")[0].split()
    return int(number) * (60 if unit == "min" else 1)


def said(seconds: float) -> int:
    """What a label states of `seconds`, in seconds: whole seconds, or whole minutes past 90 s."""
    return max(1, round(seconds)) if seconds < 90 else 60 * round(seconds / 60)


def test_each_button_says_its_time_from_the_images_it_sends_and_the_servers_rate(served):
    server, image, request = served
    server.heavy.measured("forward", 0.5)
    server.heavy.measured("gradient", 3.0)
    a = server.get_analysis(image, "tiny", "model default", request)
    area = 112 * 224 / 224**2  # the attribution input, 224 x 112, counted at 224 x 224
    assert cost(a, lambda grid: 10) == pytest.approx(10 * area)
    check = rollout.label_check(server, image, "tiny", "model default", request=request)
    assert seconds_in(check.value) == said((1 + passes(maps=3)) * area * 0.5)
    where = (image, "tiny", "model default")
    settings = attributions.Settings.of("Integrated Gradients", "default", "blurred", 16, 0, 0, [])
    ig, faithful, sanity = attributions.relabel(server, where, settings, request)
    ig_passes = 16 + 2  # its path's steps, and the two ends for the convergence delta
    assert seconds_in(ig.value) == round(ig_passes * area * 3.0)
    assert seconds_in(faithful.value) == said(ig_passes * area * 3.0 + (passes(maps=3) + 2) * area * 0.5)
    assert sanity.value.endswith(f"(about {(a.num_layers + 1) * ig_passes * area * 3.0 / 60:.0f} min)")
    settings = attributions.Settings.of("Saliency (|gradient|)", "default", "blurred", 16, 0, 0, [])
    saliency = attributions.relabel(server, where, settings, request)
    assert seconds_in(saliency[0].value) == max(1, round(area * 3.0))  # one pass, whatever the steps
    assert expected(server, a, gradient=lambda grid: 100) == f"about {100 * area * 3.0 / 60:.0f} min"


def test_a_run_that_ends_updates_the_rate_and_a_stopped_one_does_not(served):
    """The rate is the median of the recent runs that ended well; a stopped run adds nothing."""
    server, _, request = served
    for rate in (1.0, 2.0):
        server.heavy.measured("forward", rate)
    server.heavy.measured("gradient", 1.0)
    with stoppable(server, request, "test", "testing", lambda *a, **k: None, work=("forward", 4)):
        time.sleep(0.4)  # 0.1 s an image
    assert server.heavy.runs("forward") == 3 and server.heavy.rate("forward", None) == 1.0  # median of 0.1, 1, 2
    with pytest.raises(RuntimeError):
        with stoppable(server, request, "test", "testing", lambda *a, **k: None, work=("gradient", 4)):
            raise RuntimeError("stopped")
    assert server.heavy.runs("gradient") == 1 and server.heavy.rate("gradient", None) == 1.0


def test_before_any_run_the_rate_is_a_probe_timed_here_not_a_constant(served):
    """A fresh server times one image through the model, forward and forward-backward, once per kind, and leaves
    the weights' gradients empty."""
    server, image, request = served
    a = server.get_analysis(image, "tiny", "model default", request)
    calls = []
    real = a.model.forward
    object.__setattr__(a.model, "forward", lambda x, **k: calls.append(tuple(x.shape)) or real(x, **k))
    first = server.heavy.rate("gradient", a.model)
    assert calls == [(1, 3, 224, 224)] and first > 0 and server.heavy.runs("gradient") == 0
    assert server.heavy.rate("gradient", a.model) == first and len(calls) == 1  # timed once
    assert server.heavy.rate("forward", a.model) > 0 and len(calls) == 2
    assert all(w.grad is None for w in a.model.net.parameters())


def test_a_button_counts_the_runs_under_way_and_what_they_have_left(served):
    """A run half done after t seconds has about t left: a button pressed now says its own time plus that, and how
    many runs are ahead; the run's progress says what it has left."""
    server, image, request = served
    server.heavy.measured("forward", 0.5)
    a = server.get_analysis(image, "tiny", "model default", request)
    alone = expected(server, a, forward=lambda grid: 10)
    said = []
    with stoppable(server, request, "test", "testing", lambda f, desc: said.append(desc), work=None) as report:
        time.sleep(0.3)
        report(0.5)
        busy = expected(server, a, forward=lambda grid: 10)
    assert ", after" not in alone and busy.endswith(", after 1 run under way")
    assert said == ["testing: about 1 s left at this pace"]
    assert expected(server, a, forward=lambda grid: 10) == alone  # the run is over: nothing ahead


@pytest.mark.parametrize("tab", ["depth", "lesson"])
def test_a_depth_run_stops_at_its_encoders_next_layer_frees_the_heavy_run_and_keeps_nothing(tmp_path, tab):
    """The Depth tab's run (`app.depth.depth_of`), and the lesson's dense step's (its own run, `DEPTH_RUN`), its
    layers slowed to 0.3 s each by the test's own hooks: the photo's stop (the tab's `stop`) in the second layer says
    "Stopped." with what it stopped and ends the run at that layer's end, the server counts no heavy run under way,
    nothing is cached, and a second stop finds nothing to stop."""
    import threading

    import gradio as gr
    from conftest import tiny_dpt

    from vitviz.app.tabs import depth, lesson
    from vitviz.depth import wrap_depth

    run_of, stop, note = {
        "depth": ("depth", depth.stop, depth.STOPPED_NOTE),
        "lesson": (lesson.DEPTH_RUN, lesson.stop, lesson.DEPTH_STOPPED_NOTE),
    }[tab]

    server, request = Server(device="cpu"), SimpleNamespace(session_hash="s")
    model = server.depth_models["tiny-dpt"] = wrap_depth(tiny_dpt(), "tiny-dpt")
    second = threading.Event()  # the encoder's second layer has begun

    def slow(layer: int) -> None:
        if layer == 1:
            second.set()
        time.sleep(0.3)

    for i, block in enumerate(model.encoder.blocks):
        block.register_forward_pre_hook(lambda *_, i=i: slow(i))
    path = tmp_path / "photo.png"
    cv2.imwrite(str(path), random_image(64, 64, seed=3))
    ended: list = []

    def run() -> None:
        try:
            depth.depth_of(server, str(path), "tiny-dpt", request, lambda *a, **k: None, tab=run_of)
        except Stopped as exc:
            ended.append((time.perf_counter(), str(exc)))

    thread = threading.Thread(target=run)
    thread.start()
    assert second.wait(10)
    assert server.heavy.ahead()[0] == 1
    stopped = time.perf_counter()
    assert stop(server, request) == note
    thread.join(5)
    ((at, said),) = ended
    assert at - stopped < 2.0 and "stopped at 50%" in said  # at the end of the layer under way
    assert server.heavy.ahead() == (0, 0) and len(server.depth_cache) == 0
    assert isinstance(stop(server, request), type(gr.skip()))
