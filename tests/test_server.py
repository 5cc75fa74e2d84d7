"""What every view shares: how a user's error reaches the browser and the server's log."""

from __future__ import annotations

import logging
import os
import sys
import threading

import gradio as gr
import numpy as np
import pytest

import vitviz
from vitviz.app.server import user_errors
from vitviz.outputs import Output


def test_a_user_error_is_one_log_line_and_no_traceback(caplog):
    @user_errors
    def draw(patch):
        raise ValueError(f"patch must be in [0, 672), got {patch}")

    with caplog.at_level(logging.INFO, logger="vitviz"), pytest.raises(gr.Error) as raised:
        draw(5000)
    assert raised.value.message == "patch must be in [0, 672), got 5000"
    assert raised.value.print_exception is False  # Gradio's queue would print a traceback otherwise
    assert [r.getMessage() for r in caplog.records] == ["user error in draw: patch must be in [0, 672), got 5000"]
    assert all(r.exc_info is None for r in caplog.records)


def test_a_bug_is_logged_with_its_traceback_and_named_to_the_user(caplog):
    @user_errors
    def draw():
        return {}["missing"]

    with caplog.at_level(logging.INFO, logger="vitviz"), pytest.raises(gr.Error) as raised:
        draw()
    assert "unexpected error: KeyError" in raised.value.message
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None


def test_importing_every_module_starts_no_thread_makes_no_folder_and_shadows_no_name(tmp_path):
    """The server's state lives in the `Server` that `main()` builds: importing vitviz leaves the process as it was.

    Once every module is imported, `vitviz.NAME` is still the function or class that the README calls, never a
    submodule of the same name (importing `vitviz.X` sets the package's attribute X to the module)."""
    import subprocess
    import sys

    code = (
        "import importlib, pkgutil, tempfile, threading, os\n"
        "before = set(os.listdir(tempfile.gettempdir())), threading.active_count()\n"
        "import vitviz\n"
        "for m in pkgutil.walk_packages(vitviz.__path__, 'vitviz.'):\n"
        "    if not m.name.endswith('__main__'):  # it would run the command\n"
        "        importlib.import_module(m.name)\n"
        "made = sorted(set(os.listdir(tempfile.gettempdir())) - before[0])\n"
        "shadowed = [n for n in vitviz._WHERE if type(getattr(vitviz, n)) is type(vitviz)]\n"
        "print(threading.active_count() - before[1], [n for n in made if 'vitviz' in n], shadowed)\n"
    )
    env = {**__import__("os").environ, "TMPDIR": str(tmp_path), "GRADIO_ANALYTICS_ENABLED": "False"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split("\n")[-2] == "0 [] []", out


def test_no_module_imports_one_that_imports_it_back_and_the_engine_never_imports_the_app():
    """Every import in vitviz, lazy ones included, as a graph of modules (the package's own `__init__`, which
    re-exports, left out): it has no circle, and only the command line (`vitviz serve`) reaches into the app."""
    import ast
    import graphlib
    from pathlib import Path

    import vitviz

    root = Path(vitviz.__file__).parent
    names = {
        ".".join(f.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): f
        for f in root.rglob("*.py")
    }
    graph = {}
    for name, file in names.items():
        package = name.split(".") if file.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = (
                    ".".join(package[: len(package) - node.level + 1] + [node.module or ""]).strip(".")
                    if node.level
                    else node.module
                )
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[name] = {d for d in found if d in names and d not in (name, "vitviz")}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError, naming the circle
    upward = sorted(
        (m, d)
        for m, deps in graph.items()
        for d in deps
        if d.startswith("vitviz.app") and not m.startswith("vitviz.app")
    )
    assert upward == [("vitviz.cli", "vitviz.app")]
    drawn_with = set().union(*(deps for m, deps in graph.items() if m.startswith("vitviz.views.")))
    assert len(graph) > 40 and drawn_with >= {"vitviz.render", "vitviz.sentences", "vitviz.views.common"}


def test_a_server_stops_its_threads():
    from vitviz.app.server import Server

    server = Server(device="cpu").start()
    assert all(t.is_alive() for t in server.threads) and len(server.threads) == 2
    server.stop()
    assert not any(t.is_alive() for t in server.threads)


def test_each_tab_stops_only_its_own_heavy_run():
    """A new image stops the Rollout tab's check and the Attributions tab's run; each tab's Stop ends its own, and
    says so only where one was running (the Attributions tab's "Stopped." must not be taken by the other tab)."""
    from types import SimpleNamespace

    from vitviz.app.heavy import stop_run, stoppable
    from vitviz.app.server import Server
    from vitviz.app.tabs import attributions, rollout

    server, request = Server(device="cpu"), SimpleNamespace(session_hash="s")
    with stoppable(server, request, "an attribution", "", lambda *a, **k: None) as attribution:
        with stoppable(server, request, "a check", "", lambda *a, **k: None, tab="rollout") as check:
            assert rollout.stop(server, request) == rollout.STOPPED_NOTE
            attribution(0.5)  # still running
            with pytest.raises(ValueError, match="a check stopped at 50%"):
                check(0.5)
            assert not stop_run(server, request, "rollout")  # nothing left to stop there
            assert attributions.stop(server, request) == attributions.STOPPED_NOTE
            with pytest.raises(ValueError, match="an attribution stopped at 25%"):
                attribution(0.25)
    assert not server.stopped


def test_each_session_has_its_own_page_token_which_the_server_holds_until_it_has_too_many():
    from vitviz.app.server import Server

    server = Server(device="cpu")
    server.TOKENS_KEPT = 2
    mine, other = server.page_token("mine"), server.page_token("other")
    assert mine == server.page_token("mine") != other and len(mine) >= 32
    assert server.holds_page_token("mine", mine) and not server.holds_page_token("mine", other)
    assert not server.holds_page_token("mine", None) and not server.holds_page_token("nobody", mine)
    server.page_token("third")  # "other" was used least recently: forgotten
    assert not server.holds_page_token("other", other) and server.holds_page_token("mine", mine)


# ---- the server's analyses: one per (session, photo, model, size), one forward each


@pytest.fixture
def server(tmp_path):
    """A server whose "tiny" model is a tiny random DINOv2 with registers (nothing is loaded)."""
    from conftest import FAMILIES

    from vitviz.app.server import Server

    s = Server(device="cpu", cache_mb=256)
    s.models["tiny"] = FAMILIES["dinov2_registers"]()
    return s


def sha1_of(path: str) -> str:
    import hashlib
    from pathlib import Path

    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


def photo(folder, name: str, seed: int, shape=(40, 72)) -> str:
    import cv2
    from conftest import random_image

    path = folder / name
    cv2.imwrite(str(path), random_image(*shape, seed=seed))
    return str(path)


def test_an_analysis_is_made_once_per_session_photo_and_size_and_read_from_the_cache_after(server, tmp_path):
    from types import SimpleNamespace

    from vitviz import analyze

    first, copy_of_it, other = photo(tmp_path, "a.png", 1), photo(tmp_path, "b.png", 1), photo(tmp_path, "c.png", 2)
    alice, bob = SimpleNamespace(session_hash="alice"), SimpleNamespace(session_hash="bob")
    a = server.get_analysis(first, "tiny", "model default", alice)
    assert server.get_analysis(copy_of_it, "tiny", "model default", alice) is a  # the same bytes: the same photo
    assert server.get_analysis(other, "tiny", "model default", alice) is not a
    assert server.get_analysis(first, "tiny", "model default", bob) is a  # another session's same photo: shared
    small = server.get_analysis(first, "tiny", "224", alice)
    assert small is not a and max(small.pixel_values.shape[2:]) == 224
    assert np.array_equal(small.attentions, analyze(server.models["tiny"], first, longest=224).attentions)
    assert max(a.pixel_values.shape[2:]) == server.models["tiny"].default_longest
    with pytest.raises(ValueError, match=r"size must be one of \['model default', '224', .*\], got '225'"):
        server.get_analysis(first, "tiny", "225", alice)


def test_sessions_that_ask_for_the_same_photo_at_once_share_one_forward(server, tmp_path, monkeypatch):
    """A class clicks the same example: 8 sessions at once get one analysis from one forward, which the cache
    counts once; a forward that fails fails for every session waiting on it, and the next request runs again."""
    import threading
    from types import SimpleNamespace

    from vitviz.app import server as server_module

    calls, gate = [], threading.Event()

    def slow_analyze(*args, **kwargs):  # holds the forward until every session has asked
        calls.append(args)
        gate.wait(30)
        return server_module.analyze.__wrapped__(*args, **kwargs)

    slow_analyze.__wrapped__ = server_module.analyze
    monkeypatch.setattr(server_module, "analyze", slow_analyze)
    same, got = photo(tmp_path, "example.png", 7), {}
    users = [
        threading.Thread(
            target=lambda n=n: got.update(
                {n: server.get_analysis(same, "tiny", "224", SimpleNamespace(session_hash=f"student {n}"))}
            )
        )
        for n in range(8)
    ]
    for u in users:
        u.start()
    for _ in range(300):  # every session is waiting: one on the model, seven on it
        if server.forwards_under_way == 1 and len(calls) == 1 and sum(u.is_alive() for u in users) == 8:
            break
        threading.Event().wait(0.01)
    gate.set()
    for u in users:
        u.join(30)
    assert len(calls) == 1 and len({id(a) for a in got.values()}) == 1 and len(got) == 8
    assert len(server.cache) == 8 and server.cache.nbytes == got[0].nbytes and server.forwards_under_way == 0

    def broken(*args, **kwargs):
        calls.append(args)
        raise RuntimeError("out of memory")

    monkeypatch.setattr(server_module, "analyze", broken)
    other = photo(tmp_path, "other.png", 8)
    for who in ("ann", "ben"):
        with pytest.raises(RuntimeError, match="out of memory"):
            server.get_analysis(other, "tiny", "224", SimpleNamespace(session_hash=who))
    assert len(calls) == 3 and server.forwards_under_way == 0  # each failed request tried again


def test_an_analysis_key_names_the_photos_bytes_the_model_and_the_size(server, tmp_path):

    path = photo(tmp_path, "a.png", 3)
    sha = sha1_of(path)
    assert server.analysis_key(path, "tiny", "448") == f"{sha}|tiny|448" and server.digest(path) == sha
    assert server.analysis_key(None, "tiny", "448") is None and server.analysis_key("", "tiny", "448") is None
    for ask in (lambda: server.get_analysis(None, "tiny", "448", None), lambda: server.digest("")):
        with pytest.raises(ValueError, match="no image: upload one or click an example"):
            ask()
    from pathlib import Path

    server.DIGESTS_KEPT = 3  # the digests kept are bounded: the oldest go first
    more = [photo(tmp_path, f"more{i}.png", 40 + i) for i in range(3)]
    for later in more:
        server.digest(later)
    assert server.digests_kept == 3
    read = []
    real = Path.read_bytes
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(Path, "read_bytes", lambda self: read.append(self.name) or real(self))
        server.digest(more[2])  # kept: not read again
        server.digest(path)  # the first, forgotten: read again
    assert read == [Path(path).name]


def test_the_background_warm_fills_an_analysis_the_cache_holds_and_leaves_one_it_let_go(server, tmp_path):
    import weakref

    a = server.get_analysis(photo(tmp_path, "a.png", 5), "tiny", "model default", None)
    assert server.warm_step(weakref.ref(a), 1) is True and a.held().statistics == {0}
    assert server.warm_step(weakref.ref(a), 99) is False
    for i in (6, 7):  # two analyses per session: a third lets the first go
        server.get_analysis(photo(tmp_path, f"{i}.png", i), "tiny", "model default", None)
    assert not server.cache.holds(a)
    assert server.warm_step(weakref.ref(a), 2) is False and a.held().statistics == {0}


def test_the_rollout_sliders_moves_are_served_from_what_the_uploads_forward_rolled(server, tmp_path):
    """The server hands the views its `Derived` of the analysis: every move of the slider (mean fusion, the tab's
    first) reads a rollout that the one forward made, and none recomputes a layer or a rollout."""
    from vitviz.derived import Derived
    from vitviz.views.rollout import rollout_view

    a = server.get_analysis(photo(tmp_path, "a.png", 10), "tiny", "model default", None)
    assert isinstance(a, Derived)
    for percent in Derived.ROLLOUT_PERCENTS:
        picture, note = rollout_view(a, "mean", percent / 100)
        np.testing.assert_allclose(
            a.rollout("mean", percent / 100), a.analysis.rollout("mean", percent / 100), rtol=1e-4, atol=1e-7
        )
    moves = len(Derived.ROLLOUT_PERCENTS)
    assert (a.rollouts_served, a.rollouts_made, a.layers_recomputed) == (2 * moves, 0, 0)


def test_a_warm_step_that_grows_the_cache_past_its_cap_evicts_the_oldest_and_asks_for_a_trim(server, tmp_path):
    import weakref
    from types import SimpleNamespace

    old = server.get_analysis(photo(tmp_path, "a.png", 8), "tiny", "model default", SimpleNamespace(session_hash="x"))
    new = server.get_analysis(photo(tmp_path, "b.png", 9), "tiny", "model default", SimpleNamespace(session_hash="y"))
    old.settle()  # as the warm's first step does
    assert new.held().pending_roll and not new.held().rollouts  # the upload is answered first
    assert server.warm_step(weakref.ref(new), 0) and len(new.held().rollouts) == 20  # from the forward's fused heads
    assert new.layers_recomputed == 0
    # as where it did not (a model whose layers cannot be opened, an input too large to roll): the warm fuses each
    # layer it sweeps, and holds them until it rolls
    new.forget(rollouts=True, thresholds=True)
    assert old.shed() > 0  # its forward's max and min fused heads (`Derived.hold`): nothing left to shed but evict
    server.cache.max_bytes = old.nbytes + new.nbytes + 1
    server.freed.clear()
    assert server.warm_step(weakref.ref(new), 1) and server.freed.is_set()  # the fused heads grew it
    assert server.cache.holds(new) and not server.cache.holds(old)


def test_a_cached_request_sheds_what_earlier_requests_refilled_and_asks_for_a_trim(server, tmp_path):
    """A request that refills an analysis' fused heads (an export, a discard off the slider); the next request
    brings the cache back under its cap by shedding the oldest (not evicting it) and asks the janitor for a trim."""
    from types import SimpleNamespace

    x, y = SimpleNamespace(session_hash="x"), SimpleNamespace(session_hash="y")
    old = server.get_analysis(photo(tmp_path, "a.png", 8), "tiny", "model default", x)
    new = server.get_analysis(photo(tmp_path, "b.png", 9), "tiny", "model default", y)
    old.fused("mean")
    new.fused("mean")
    server.cache.max_bytes = old.nbytes + new.nbytes - old.shed_bytes + 1  # one of them must shed all it can
    server.freed.clear()
    assert server.get_analysis(photo(tmp_path, "b.png", 9), "tiny", "model default", y) is new
    assert server.freed.is_set() and server.cache.holds(old) and server.cache.nbytes <= server.cache.max_bytes
    assert old.shed_bytes == 0 and new.shed_bytes > 0  # the oldest shed, the one asked for kept whole


def test_a_depth_result_is_made_once_per_session_model_and_photo(server, tmp_path):
    from types import SimpleNamespace

    from conftest import tiny_dpt

    from vitviz.depth import wrap_depth

    server.depth_models["tiny-dpt"] = wrap_depth(tiny_dpt(), "tiny-dpt")
    first, second = photo(tmp_path, "a.png", 10, (64, 64)), photo(tmp_path, "b.png", 11, (64, 64))
    key = server.depth_key(first, "tiny-dpt", SimpleNamespace(session_hash="alice"))
    assert key == ("alice", "tiny-dpt", sha1_of(first))
    r = server.get_depth(first, "tiny-dpt", key)
    assert server.get_depth(first, "tiny-dpt", key) is r and r.depth.shape == (64, 64)
    server.freed.clear()
    other = server.get_depth(
        second, "tiny-dpt", server.depth_key(second, "tiny-dpt", SimpleNamespace(session_hash="alice"))
    )
    assert other is not r and server.freed.is_set() and not server.depth_cache.holds(r)  # one per session


def test_the_attribution_model_is_a_copy_with_its_own_lock_made_once(server):
    import torch

    original, copy_of_it = server.models["tiny"], server.get_attribution_model("tiny")
    assert server.get_attribution_model("tiny") is copy_of_it
    assert copy_of_it.net is not original.net and copy_of_it.lock is not original.lock
    for (name, a), b in zip(original.net.state_dict().items(), copy_of_it.net.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_the_cache_caps_come_from_the_arguments_or_else_the_environment_or_else_two_and_one_gib(monkeypatch):
    from vitviz.app.server import Server

    monkeypatch.delenv("VITVIZ_CACHE_MB", raising=False)
    monkeypatch.delenv("VITVIZ_DEPTH_CACHE_MB", raising=False)
    s = Server()
    assert (s.cache.max_bytes, s.depth_cache.max_bytes, s.depth_cache.per_session) == (2**31, 2**30, 1)
    monkeypatch.setenv("VITVIZ_CACHE_MB", "3")
    monkeypatch.setenv("VITVIZ_DEPTH_CACHE_MB", "5")
    assert (Server().cache.max_bytes, Server().depth_cache.max_bytes) == (3 * 2**20, 5 * 2**20)
    s = Server(cache_mb=7, depth_cache_mb=1.5)
    assert (s.cache.max_bytes, s.depth_cache.max_bytes) == (7 * 2**20, int(1.5 * 2**20))


def test_the_head_menu_offers_the_mean_every_head_at_once_and_each_head_and_refuses_others():
    from conftest import FAMILIES

    from vitviz.app.head_choice import head_arg, head_choices

    model = FAMILIES["vit"]()  # 4 heads
    heads = [(f"head {h}", h) for h in range(4)]
    assert head_choices(model) == [("mean of heads", -1), ("all heads (grid)", -2), *heads]
    assert [head_arg(v, model) for v in (None, -1, -2, 0, 3, "2")] == [None, None, "all", 0, 3, 2]
    for bad in (4, -3):
        with pytest.raises(ValueError, match=rf"head must be -1 \(mean\), -2 \(all\) or in \[0, 4\), got {bad}"):
            head_arg(bad, model)


def test_a_bound_handler_gets_the_server_first_and_shows_gradio_only_the_rest(tmp_path, monkeypatch):
    import inspect
    import tempfile

    from vitviz.app.scheduling import slots
    from vitviz.app.server import Server

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its scratch folder goes with the test's
    s = Server()

    def draw(server, image, layer=3):
        return server, image, layer

    handler = s.bind(draw)
    assert handler("x") == (s, "x", 3) and handler("x", layer=5) == (s, "x", 5)
    assert list(inspect.signature(handler).parameters) == ["image", "layer"] and handler.__name__ == "draw"
    assert s.scratch() == s.scratch() and s.scratch().is_dir() and s.scratch().name.startswith("vitviz-")
    assert slots("heavy") == {"concurrency_id": "heavy", "concurrency_limit": 1}


def test_background_work_waits_while_anyone_waits_for_an_answer():
    import threading

    from vitviz.app.scheduling import Priority

    p, done = Priority(), threading.Event()
    with p.interactive():
        with p.interactive():
            waiter = threading.Thread(target=lambda: (p.wait_for_interactive(), done.set()))
            waiter.start()
        assert not done.wait(0.2)  # one is still running
    assert done.wait(5)
    waiter.join()


# ---- clicks: each picture's handler picks what is drawn under the pointer


def test_a_click_on_a_picture_makes_the_patch_drawn_under_it_the_query(server, tmp_path):
    """The app's handlers for the Attention tab's pictures and inside a head's maps, on a wide grid: the centre of each
    corner patch and of one middle patch, as drawn, picks that patch; a click outside the picture does nothing."""

    from vitviz import render
    from vitviz.app.tabs import attention, inside
    from vitviz.app.tabs.attention import PATCH_QUERY
    from vitviz.views.common import display
    from vitviz.views.inside import INSIDE_SIDE

    path = photo(tmp_path, "a.png", 12)
    a = server.get_analysis(path, "tiny", "224", None)
    gh, gw = a.grid
    assert gw > gh
    inside_size = render.fit(display(a), INSIDE_SIDE).shape[:2]
    for pick, size in ((attention.pick_patch, display(a).shape[:2]), (inside.pick_patch, inside_size)):
        for patch in (0, gw - 1, (gh - 1) * gw, gh * gw - 1, 2 * gw + 6):
            x0, y0, x1, y1 = render.patch_box(a.grid, size, patch)
            assert pick(a, (x0 + x1) / 2, (y0 + y1) / 2) == (patch, PATCH_QUERY)
        assert pick(a, size[1] + 5, 1) is None


def test_a_click_on_the_position_map_picks_the_row_and_column_under_it(server):
    from types import SimpleNamespace

    from vitviz.app.tabs.positions import pick_position
    from vitviz.views.positions import POS_MAP_SIDE, pos_embed_map

    g0, g1 = server.models["tiny"].native_grid
    cell = POS_MAP_SIDE / g0, POS_MAP_SIDE / g1
    click = SimpleNamespace(index=(cell[1] * 2.5, cell[0] * 1.5))  # x in column 2, y in row 1
    row, col, picture = pick_position(server, "tiny", False, click)
    assert (row, col) == (1, 2)
    model = server.get_model("tiny")
    assert np.array_equal(picture, pos_embed_map(model, model.pos_embed_similarity(), 1, 2))


def test_clicks_on_the_attributions_picture_set_a_boxs_corners_in_the_photos_pixels(server, tmp_path, embedded):
    from types import SimpleNamespace

    from vitviz.app.tabs.attributions import pick_corner
    from vitviz.views.common import display

    server.models[embedded.name] = embedded
    path = photo(tmp_path, "a.png", 13, (300, 500))
    scale = 500 / display(server.get_analysis(path, embedded.name, "224", None)).shape[1]
    first, picture = pick_corner(server, path, embedded.name, "224", [], SimpleNamespace(index=(10, 20)), None)
    assert first == [[10 * scale, 20 * scale]] and picture.shape[1] == 640
    both = pick_corner(server, path, embedded.name, "224", first, SimpleNamespace(index=(100, 200)), None)[0]
    assert both == [[10 * scale, 20 * scale], [100 * scale, 200 * scale]]
    again = pick_corner(server, path, embedded.name, "224", both, SimpleNamespace(index=(5, 6)), None)[0]
    assert again == [[5 * scale, 6 * scale]]  # a third click starts a new box
    with pytest.raises(gr.Error, match="A box only applies to the embedded model's dense head"):
        pick_corner(server, path, "tiny", "model default", [], SimpleNamespace(index=(1, 1)), None)


def test_each_model_has_its_own_analysis_of_a_photo_and_a_new_one_reports_its_progress(server, tmp_path, monkeypatch):
    """A model not yet loaded is loaded once, on the server's device, saying so; the forward says so too."""
    from conftest import FAMILIES

    from vitviz.app import server as server_module

    loaded = []

    def load_model(name, device):
        loaded.append((name, device))
        return FAMILIES["vit"]()

    monkeypatch.setattr(server_module, "load_model", load_model)
    said = []

    def progress(fraction, desc):
        said.append((fraction, desc))

    path = photo(tmp_path, "a.png", 14)
    tiny = server.get_analysis(path, "tiny", "224", None, progress)
    assert said == [(0.3, "Running the ViT: one forward pass captures every layer")]
    said.clear()
    other = server.get_analysis(path, "other", "224", None, progress)
    assert other is not tiny and other.model is server.models["other"] and loaded == [("other", "cpu")]
    assert said == [(0.05, "Loading other (a hub model downloads once)"), (0.3, said[1][1])]
    assert server.get_analysis(path, "other", "224", None) is other and loaded == [("other", "cpu")]
    assert server.get_model("other") is other.model


def test_a_depth_model_is_loaded_once_on_the_servers_device(server, monkeypatch):
    from vitviz.app import server as server_module

    loaded = []
    monkeypatch.setattr(
        server_module, "load_depth_model", lambda name, device: loaded.append((name, device)) or object()
    )
    first = server.get_depth_model("dpt")
    assert server.get_depth_model("dpt") is first and loaded == [("dpt", "cpu")]


def test_the_attribution_copy_of_a_model_with_a_dense_head_has_its_own_dense_head(server, embedded):
    import torch

    server.models[embedded.name] = embedded
    copy_of_it = server.get_attribution_model(embedded.name)
    assert copy_of_it.dense_head is not None and copy_of_it.dense_head is not embedded.dense_head
    for a, b in zip(embedded.dense_head.parameters(), copy_of_it.dense_head.parameters(), strict=True):
        assert a is not b and torch.equal(a, b)
    assert next(copy_of_it.net.parameters()) is not next(embedded.net.parameters())
    with copy_of_it.lock:  # its own lock: a forward of the shared model does not wait for an attribution
        assert embedded.lock.acquire(blocking=False)
        embedded.lock.release()


def test_a_started_server_warms_each_new_analysis_in_the_background_and_stops_cleanly(
    server, tmp_path, monkeypatch, caplog
):
    """Started, the server fills every warm step of a new analysis (every layer's statistics; the mean fusion's
    thresholds came with its forward, max's and min's come from the warm) without being asked; an analysis whose
    warm fails is logged and the next one still warms; stop() ends both threads without an error in them."""
    import threading
    import time

    errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    broken = server.get_analysis(photo(tmp_path, "a.png", 15), "tiny", "224", None)
    broken.warm_step = lambda step: 1 / 0
    a = server.get_analysis(photo(tmp_path, "b.png", 16), "tiny", "224", None)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())  # before the server's threads start
    server.start()  # the two wait in its queue
    assert server.start() is server and [t.name for t in server.threads] == ["vitviz-warmer", "vitviz-janitor"]
    assert all(t.daemon for t in server.threads)
    for _ in range(200):  # swept, and every fusion rolled
        if len(a.held().statistics) == a.model.num_layers and len(a.held().thresholds) == 3:
            break
        time.sleep(0.05)
    held = a.held()
    assert sorted(held.thresholds) == ["max", "mean", "min"] and len(held.statistics) == a.model.num_layers
    if sys.platform == "linux":  # the warm runs at the lowest CPU priority; the server's other threads do not
        assert os.getpriority(os.PRIO_PROCESS, server.threads[0].native_id) == 19
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own  # `nice -n 10 pytest`'s 10
    server.stop()
    assert not any(t.is_alive() for t in server.threads) and errors == []
    assert [r.getMessage() for r in caplog.records if r.exc_info] == ["background warm, step 0"]


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's nice value is Linux's")
def test_a_new_images_forward_yields_the_cpu_to_redraws_and_brings_its_dense_map(server, tmp_path, monkeypatch):
    """The forward runs on a thread of lower CPU priority than the request's (a redraw someone waits for goes
    first on a busy CPU) and above the warm's; the dense head's map comes with it, so that no redraw waits for
    the model's lock."""
    from vitviz.app import server as server_module

    seen = []

    def analyze(*args, **kwargs):
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return vitviz.analyze(*args, **kwargs)

    monkeypatch.setattr(server_module, "analyze", analyze)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())  # `nice -n 10 pytest`'s 10
    a = server.get_analysis(photo(tmp_path, "a.png", 17), "tiny", "224", None)
    assert seen == [max(server_module.FORWARD_NICE, own)] and 0 < server_module.FORWARD_NICE < server_module.WARM_NICE
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own  # the request's own thread
    assert a.held().dense_map  # made (None: the tiny model has no dense head)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    with pytest.raises(ValueError, match="image"):  # its error still reaches the request
        server.get_analysis(str(broken), "tiny", "224", None)


def test_a_dense_head_that_fails_is_logged_and_the_analysis_still_comes(server, tmp_path, monkeypatch, caplog):
    from conftest import tiny_dense

    from vitviz.models import VitModel

    def broken(self, last_hidden, grid, size):
        raise RuntimeError("the dense head broke")

    server.models["tiny"] = tiny_dense()
    monkeypatch.setattr(VitModel, "dense_map", broken)
    a = server.get_analysis(photo(tmp_path, "a.png", 19), "tiny", "224", None)
    assert a.num_layers == server.models["tiny"].num_layers and not a.held().dense_map
    assert [r.getMessage() for r in caplog.records if r.exc_info] == ["the dense head's maps"]


def test_one_upload_runs_one_forward_of_the_model_for_every_view_of_its_output(tmp_path):
    """The model's public counter of forwards: an upload of a dense model, then every view that draws its output (the
    Output tab, the Rollout tab toward each start with its sentences, the lesson's steps on rollout and on the dense
    head) and the rollouts made after the answer, cost the one forward of the upload."""
    from conftest import tiny_dense

    from vitviz import lesson
    from vitviz.app.server import Server
    from vitviz.views.output import output_view
    from vitviz.views.rollout import rollout_truth_note, rollout_view

    s = Server(device="cpu", cache_mb=256)
    model = s.models["tiny"] = tiny_dense()
    a = s.get_analysis(photo(tmp_path, "a.png", 23), "tiny", "model default", None)
    assert model.forwards == 1
    a.settle()
    output_view(a)
    for toward in (a.output, Output("readout")):
        rollout_view(a, "max", 0.3, toward=toward)
    rollout_truth_note(a, "mean", 0.0)
    for step in (6, 8):
        lesson.lesson_step(a, step)
    assert model.forwards == 1 and a.held().dense_map


def test_a_request_without_a_session_is_the_local_session():
    from types import SimpleNamespace

    from vitviz.app.server import session_of

    assert session_of(None) == "local" and session_of(SimpleNamespace(session_hash=None)) == "local"
    assert session_of(SimpleNamespace(session_hash="abc")) == "abc"


def test_a_server_starts_with_nothing_loaded_on_its_device():
    from vitviz.app.server import Server

    s = Server()
    assert s.device == "auto" and Server(device="cpu").device == "cpu"
    assert s.models == s.depth_models == s.attribution_models == s.similarity == s.depth_files == {}
    assert not s.stopped and len(s.cache) == 0 and s.threads == ()


def test_a_picture_has_its_caption_above_it_and_a_clickable_one_no_button_over_its_corner():
    from vitviz.app.pictures import picture

    with gr.Blocks():
        clickable = picture("Overlay", scale=2, clickable=True, elem_id="overlay")
        plain = picture("Depth")
    for image, label, buttons in ((clickable, "Overlay", []), (plain, "Depth", ["fullscreen"])):
        assert (image.label, image.show_label, image.interactive, image.format) == (label, False, False, "jpeg")
        assert image.buttons == buttons
        caption = image.parent.children[0]
        assert caption.value == f"**{label}**" and caption.elem_classes == ["caption"]
        assert image.parent.min_width == 160
    assert (clickable.parent.scale, plain.parent.scale, clickable.elem_id) == (2, 1, "overlay")


def test_the_janitor_gives_memory_back_soon_after_much_was_freed():
    import threading

    from vitviz.app import server as server_module

    trims = threading.Event()
    server = server_module.Server()
    server.trim = trims.set
    janitor = threading.Thread(target=server.janitor, args=(0.05,), daemon=True)
    janitor.start()
    assert not trims.wait(0.3)  # nothing was freed
    server.freed.set()
    assert trims.wait(5) and not server.freed.is_set()  # within the period, before the server stops
    server.stop()
    janitor.join(5)
    assert not janitor.is_alive()


def test_the_janitor_gives_memory_back_once_the_server_is_quiet_after_work():
    """No eviction after a class's last requests: the janitor trims once no forward or redraw runs after some ended,
    never while one runs, and not again until another ends."""
    import threading

    from vitviz.app import server as server_module

    trims = threading.Semaphore(0)
    server = server_module.Server()
    server.trim = trims.release
    janitor = threading.Thread(target=server.janitor, args=(0.05,), daemon=True)
    janitor.start()
    assert not trims.acquire(timeout=0.3)  # nothing ran
    with server.redraws.interactive():
        with server.priority.interactive():
            pass  # a forward ended while a redraw runs: not quiet yet
        assert not trims.acquire(timeout=0.3)
    assert trims.acquire(timeout=5)  # quiet, after work
    assert not trims.acquire(timeout=0.3)  # and nothing since
    with server.priority.interactive():
        pass
    assert trims.acquire(timeout=5) and server.redraws.running == server.priority.running == 0
    server.stop()
    janitor.join(5)
    assert not janitor.is_alive()


def test_the_live_view_says_the_camera_is_off_until_a_frame_comes(server):
    from vitviz.app.tabs.live import CAMERA_OFF, frame

    assert frame(server, None, "tiny", 2, -1, ["attention"], "inferno", 0.6, "log", False, None) == (None,) * 4 + (
        CAMERA_OFF,
        None,
    )


def test_an_older_click_that_reaches_the_server_after_a_newer_one_is_not_answered(server):
    """Two clicks' requests can reach Gradio's queue in either order: the query must end on the last click."""
    from gradio.helpers import special_args

    from vitviz.app.pictures import CLICK_TAG_JS, picture

    answered = []

    def pick(server, name, evt: gr.SelectData):
        answered.append((name, evt.index))
        return evt.index[0], name

    with gr.Blocks() as demo:
        shown, name = picture("a map", clickable=True), gr.Textbox("photo")
        patch, note = gr.Number(), gr.Textbox()
        server.on_click(shown, pick, [name], [patch, note])
    [clicked] = [f for f in demo.fns.values() if f.js == CLICK_TAG_JS % 2]

    def click(tag, x):
        evt = gr.SelectData(shown, {"index": [x, 0], "value": None})
        args = special_args(clicked.fn, [tag, "photo"], None, evt)[0]  # how Gradio calls it: the event injected
        return clicked.fn(*args)

    assert click("page:2", 20) == (20, "photo")
    assert click("page:1", 10) == (gr.skip(), gr.skip())  # older than one answered: not answered
    assert click("other:1", 30) == (30, "photo")  # another page counts its own clicks
    assert click("page:3", 40) == (40, "photo")
    assert answered == [("photo", [20, 0]), ("photo", [30, 0]), ("photo", [40, 0])]
    with pytest.raises(ValueError, match="page:n"):
        click("no tag", 50)


def test_each_live_frame_is_drawn_from_itself_never_from_the_frame_before(server):
    """Two different frames in a row, past the CPU's frame interval: each answer's pictures are those of its own
    frame (`views.live.live_views` on `analyze_frame` of it), the second differs from the first, and "freeze" keeps
    it."""
    from conftest import random_image

    from vitviz.app.tabs.live import frame
    from vitviz.capture import analyze_frame
    from vitviz.views.live import live_views

    model, shown = server.models["tiny"], ["attention", "rollout"]
    frames = [random_image(48, 64, seed=21), random_image(48, 64, seed=22)]
    answers, started = [], None
    for camera in frames:
        answer = frame(server, camera, "tiny", 2, -1, shown, "inferno", 0.6, "log", False, started)
        started = answer[-1] - 1.0  # as if the last frame had come a second ago: none is dropped
        answers.append(answer)
    for camera, answer in zip(frames, answers, strict=True):
        want = live_views(analyze_frame(model, camera), 2, None, tuple(shown), "inferno", 0.6, "log")
        for got, expected in zip(answer[:3], want, strict=True):
            assert (got is None and expected is None) or np.array_equal(got, expected)
        assert answer[3] is camera
    assert not np.array_equal(answers[0][0], answers[1][0])
