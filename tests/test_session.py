"""What every view shares: how a user's error reaches the browser and the server's log."""

from __future__ import annotations

import logging

import gradio as gr
import pytest

from vitviz.app.session import user_errors


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


def test_a_server_stops_its_threads():
    from vitviz.app.session import Server

    server = Server(device="cpu").start()
    assert all(t.is_alive() for t in server._threads) and len(server._threads) == 2
    server.stop()
    assert not any(t.is_alive() for t in server._threads)


def test_each_tab_stops_only_its_own_heavy_run():
    """A new image stops the Rollout tab's check and the Attributions tab's run; each tab's Stop ends its own, and
    says so only where one was running (the Attributions tab's "Stopped." must not be taken by the other tab)."""
    from types import SimpleNamespace

    from vitviz.app import attributions, rollout
    from vitviz.app.heavy import stop_run, stoppable
    from vitviz.app.session import Server

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
