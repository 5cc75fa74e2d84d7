"""vitviz as a package: the wheel and the sdist carry what they must, and a wheel installed into a fresh
venv outside the repository serves the app and runs the CLI."""

from __future__ import annotations

import os
import re
import site
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

import vitviz

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], check=True, capture_output=True)
    return out


def test_the_wheel_and_sdist_carry_the_examples_licence_and_tests(built):
    wheel = zipfile.ZipFile(next(built.glob("*.whl")))
    names = set(wheel.namelist())
    version = vitviz.__version__
    for photo in ("chelsea", "coffee", "astronaut", "rocket"):
        assert f"vitviz/assets/{photo}.jpg" in names
    assert "vitviz/assets/README.md" in names and f"vitviz-{version}.dist-info/licenses/LICENSE" in names
    assert "vitviz/app/tabs/live.py" in names and "vitviz/app/tabs/lesson.py" in names
    assert "vitviz/views/common.py" in names and "vitviz/views/whatif.py" in names
    for script in ("attention.js", "explorer.js", "explorer.css"):  # the Explorer runs them in the browser
        assert f"vitviz/static/{script}" in names
    assert "vitviz/static/app.css" in names  # the app's page style, read when the app is built
    assert "vitviz/assets/dinov2-small-imgfocus.safetensors" in names  # the embedded model, converted
    dev = [n for n in names if n.startswith(("benchmarks/", "tools/", "tests/")) or "bench" in n or "loadtest" in n]
    assert dev == []  # the benchmarks, the load test and the harness stay in the repository
    assert "vitviz = vitviz.cli:main" in wheel.read(f"vitviz-{version}.dist-info/entry_points.txt").decode()
    sdist = set(tarfile.open(next(built.glob("*.tar.gz"))).getnames())
    for needed in (
        "app.py",
        "LICENSE",
        "requirements.txt",
        "tests/conftest.py",
        "tests/app_server.py",
        "vitviz/assets/chelsea.jpg",
    ):
        assert f"vitviz-{version}/{needed}" in sdist, needed


def test_every_subpackage_is_packaged():
    """Each folder of vitviz with an __init__.py is in pyproject's packages: a missing one installs a vitviz that
    fails at import (vitviz.methods did)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "vitviz").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


def test_the_library_takes_ranges_that_hold_the_apps_pins():
    """The wheel's metadata gives ranges; requirements.txt pins one version of each, inside its range."""
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later

    ranges = {
        Requirement(r).name: Requirement(r)
        for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    pins = [
        Requirement(line)
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert sorted(ranges) == sorted(p.name for p in pins)
    for pin in pins:
        version = next(iter(pin.specifier)).version
        assert ranges[pin.name].specifier.contains(version), (pin, ranges[pin.name])
        assert not any(spec.operator == "==" for spec in ranges[pin.name].specifier), ranges[pin.name]


def venv_with_the_wheel(built: Path, tmp_path: Path, hide: Sequence[str] = ()) -> tuple[Path, dict[str, str]]:
    """A fresh venv that gets only the wheel; its dependencies come from this environment through a .pth file
    (nothing is downloaded), less the modules in `hide`, which cannot be imported there. Returns (the venv, the
    environment to run it in)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    target = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    wheel = next(built.glob("*.whl"))
    # Without PYTHONPATH: with the repository on it, pip found the vitviz.egg-info that building left there
    # "already satisfied" and installed nothing.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        env=env,
    )
    # The dependencies only after the wheel: pip would otherwise find a vitviz installed in this environment
    # (the README's first command installs one) "already satisfied" and not install the wheel at all.
    (Path(target) / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    if hide:  # a None in sys.modules makes an import fail, as for a module not installed
        (Path(target) / "hidden.pth").write_text(f"import sys; sys.modules.update(dict.fromkeys({list(hide)!r}))\n")
    env.update(GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1")
    return venv, env


def test_a_wheel_in_a_fresh_venv_serves_the_app_and_runs_the_cli(built, tmp_path):
    """Everything runs from a folder outside the repository."""
    venv, env = venv_with_the_wheel(built, tmp_path)
    python = venv / "bin" / "python"
    away = tmp_path / "elsewhere"
    away.mkdir()
    where = subprocess.run(
        [python, "-c", "import vitviz; print(vitviz.__file__, vitviz.example())"],
        cwd=away,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(venv) in where and str(ROOT) not in where
    run = subprocess.run(
        [venv / "bin" / "vitviz", "analyze", where.split()[1], "--out", "maps", "--layers", "11"],
        cwd=away,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert (away / "maps" / "chelsea" / "attention_layer11.png").exists()
    run = subprocess.run([venv / "bin" / "vitviz", "site", "site"], cwd=away, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr  # the page, the runtime and the graphs, from the wheel's own files
    for name in ("index.html", "vitviz.js", "model.onnx", "runtime/ort-wasm-simd-threaded.wasm", "runtime/LICENSE"):
        assert (away / "site" / name).is_file(), name
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [venv / "bin" / "vitviz", "serve", "--port", str(port), "--device", "cpu"],
        cwd=away,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, "vitviz serve exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as page:
                    assert page.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "vitviz serve did not answer in 120 s"
                time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(10)


def extras_only(wheel: Path) -> list[str]:
    """The modules that only the wheel's extras bring (`Requires-Dist: ...; extra == "..."`), by their import names."""
    from importlib.metadata import packages_distributions

    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    needs = [Requirement(line.split(":", 1)[1]) for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    base = {r.name.lower() for r in needs if r.marker is None}
    extras = {r.name.lower() for r in needs if r.marker is not None and "extra" in str(r.marker)} - base
    modules = [m for m, dists in packages_distributions().items() if {d.lower() for d in dists} & extras]
    assert {"anywidget", "ray", "umap"} <= set(modules), modules
    return sorted(modules)


def test_the_readmes_first_python_block_runs_on_a_base_install(built, tmp_path):
    """The README's main Python block in a fresh venv holding the wheel and its base dependencies alone: the
    modules that only an extra brings (anywidget, Ray, UMAP) cannot be imported there, as in a `pip install .`."""
    hidden = extras_only(next(built.glob("*.whl")))
    venv, env = venv_with_the_wheel(built, tmp_path, hide=hidden)
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Python API") : readme.index("## Models")]
    block = section.split("```python")[1].split("```")[0]
    check = (
        f"\nimport sys\nprint(sorted(m for m in {hidden!r} if sys.modules.get(m, 0) is None), vitviz.__file__)\n"
        "try:\n    vitviz.explore(a)\nexcept ImportError as exc:\n    print(exc)\n"
    )
    run = subprocess.run(
        [venv / "bin" / "python", "-c", block + check], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    *_, seen, refused = run.stdout.splitlines()
    hidden_still, where = seen.rsplit(" ", 1)
    assert hidden_still == str(hidden) and where.startswith(str(venv))  # the wheel's vitviz, every extra hidden
    pinned = re.search(r"^anywidget==(\S+)", (ROOT / "requirements-test.txt").read_text(), re.M)[1]
    assert f'".[notebook]" anywidget=={pinned}' in readme  # the notebook's line pins the anywidget tested
    assert f"pip install anywidget=={pinned} " in refused  # and so does the widget's refusal


def test_the_readmes_python_blocks_run_as_written(tmp_path):
    """Both Python blocks of the README's "Python API", pasted; the depth block gets a tiny DPT folder."""
    import numpy as np
    from conftest import tiny_dpt

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Python API") : readme.index("## Models")]
    blocks = [b.split("```")[0] for b in section.split("```python")[1:]]
    assert len(blocks) == 2
    tiny_dpt().save_pretrained(tmp_path / "dpt")
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    exec(
        compile(blocks[1].replace('"Intel/dpt-hybrid-midas"', repr(str(tmp_path / "dpt"))), "README.md", "exec"), scope
    )
    a, d, r, depth = scope["a"], scope["d"], scope["r"], scope["depth"]
    own = [k for k in scope["b"].held().rollouts if len(k) == 2]  # toward its own output; ("readout", ...) besides
    assert len(own) == 20  # "the slider's 20 rollouts of the mean fusion come with it"
    np.testing.assert_allclose(d.weights, a.attentions[6, 3, 0].astype(np.float32), atol=2e-3)
    assert r.map.shape == scope["vitviz"].load_image(scope["vitviz"].example("coffee")).shape[:2]
    assert depth.depth.shape == a.image.shape[:2]
    show = scope["vitviz"].show
    assert show(depth, "stages").size[0] > 0 and show(a, "inside", layer=6, head=3).size[0] > 0
    for view in ("inside", "distance"):  # an option a view does not take is refused, not ignored
        with pytest.raises(ValueError, match="does not take"):
            show(a, view, fusion="max")


def test_the_quickstart_notebook_runs_top_to_bottom(monkeypatch):
    """docs/quickstart.ipynb with nbclient, offline, in a fresh kernel: any cell error fails the test."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "docs" / "quickstart.ipynb", as_version=4)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's vitviz
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "docs")}}
    ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 5  # the pictures are there, inline
    widgets = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widgets) == 1  # the Explorer's widget, made by its kernel (its page is tested in test_widget.py)
