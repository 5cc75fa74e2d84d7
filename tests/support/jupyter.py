"""JupyterLab for the notebook widget's test and benchmark: a server on a free loopback port with no token,
offline (no news, no update check, no extension manager), and a cell run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .harness import free_port

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def running_jupyter(folder: Path, timeout: float = 120.0) -> Iterator[str]:
    """JupyterLab serving `folder` (its log in folder/jupyter.log, its runtime and settings there too), with this
    checkout's vitviz on the kernels' path: yields its URL."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.ip=127.0.0.1",
        "--IdentityProvider.token=",
        f"--ServerApp.root_dir={folder}",
        "--LabApp.news_url=",
        "--LabApp.extension_manager=readonly",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--allow-root",
    ]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        JUPYTER_RUNTIME_DIR=str(folder / "runtime"),
        JUPYTERLAB_WORKSPACES_DIR=str(folder / "workspaces"),
        JUPYTERLAB_SETTINGS_DIR=str(folder / "settings"),
    )
    with open(folder / "jupyter.log", "w") as log:
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
        url = f"http://127.0.0.1:{port}/"
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    urllib.request.urlopen(url + "api", timeout=2).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError((folder / "jupyter.log").read_text()[-2000:]) from None
                    time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def write_notebook(path: Path, *cells: str) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def open_notebook(page, url: str, name: str) -> None:
    """The notebook open in the page, its kernel idle."""
    page.goto(f"{url}lab/tree/{name}")
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=120_000)


def run_cell(page, index: int = 0, timeout: float = 120.0) -> None:
    """Cell `index` run in place (Ctrl+Enter), until its prompt shows a new execution count. A keystroke made
    while the kernel's connection still settles is lost, or queued and then dropped (the prompt goes back to
    "[ ]:"): the cell is run again then."""
    from playwright.sync_api import TimeoutError as Timeout

    prompt = page.locator(".jp-Cell .jp-InputPrompt").nth(index)
    before = prompt.inner_text()
    ran = """([p, old]) => { const t = p.textContent.trim();
        return /^\\[\\d+\\]:$/.test(t) && t !== old ? "ran" : t === "[ ]:" || t === old ? "" : null; }"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page.locator(".jp-Cell .cm-content").nth(index).click()
        page.keyboard.press("Control+Enter")
        try:  # queued or run within 10 s, else the keystroke was lost
            page.wait_for_function(f"(a) => ({ran})(a) !== ''", arg=[prompt.element_handle(), before], timeout=10_000)
            page.wait_for_function(
                f"(a) => ({ran})(a) !== null",
                arg=[prompt.element_handle(), before],
                timeout=max(1, deadline - time.monotonic()) * 1000,
            )
        except Timeout:
            continue
        if page.evaluate(f"(a) => ({ran})(a)", [prompt.element_handle(), before]) == "ran":
            return
    raise RuntimeError(f"cell {index} did not run: its prompt is {prompt.inner_text()!r}")
