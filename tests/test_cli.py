"""The `vitviz` command through subprocesses, on the bundled photos and on folders with bad files."""

from __future__ import annotations

import ast
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import ASSETS

import vitviz
from vitviz import cli, stats

ROOT = Path(__file__).resolve().parent.parent


def vitviz_cli(*args: str, cwd: Path | None = None, before: Path | None = None, **env: str):
    """`python -m vitviz ARGS`, from `cwd`, with `env` added: this checkout's vitviz, installed or not. before: a
    folder whose modules come before the installed ones (a stand-in for Ray)."""
    paths = [str(p) for p in (before, ROOT) if p is not None] + [os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, paths)), **env)
    return subprocess.run([sys.executable, "-m", "vitviz", *args], capture_output=True, text=True, cwd=cwd, env=env)


def timed(command, *args, **kwargs) -> tuple[subprocess.CompletedProcess, float]:
    """(command(*args, **kwargs), the seconds it took)."""
    start = time.perf_counter()
    return command(*args, **kwargs), time.perf_counter() - start


def one_line(run: subprocess.CompletedProcess, code: int) -> str:
    """The one line on stderr of a run that failed with exit code `code`, with no traceback."""
    lines = run.stderr.strip().splitlines()
    assert run.returncode == code and len(lines) == 1 and "Traceback" not in run.stderr, (run.returncode, run.stderr)
    return lines[0]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    """A tiny random ViT in save_pretrained layout: a model that loads in a second."""
    from conftest import tiny_vit

    folder = tmp_path_factory.mktemp("models") / "vit"
    tiny_vit().net.save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """The four bundled photos, a text file called .jpg and a JPEG cut in half."""
    folder = tmp_path_factory.mktemp("mixed")
    for photo in sorted(ASSETS.glob("*.jpg")):
        shutil.copy(photo, folder)
    (folder / "notes.jpg").write_text("not an image")
    (folder / "half.jpg").write_bytes((ASSETS / "coffee.jpg").read_bytes()[:5000])
    return folder


def test_help_answers_without_loading_torch():
    code = "import sys, vitviz.cli\ntry:\n    vitviz.cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
    code += "print(sorted(m for m in ('torch', 'gradio', 'transformers', 'cv2') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "serve,analyze,stats" in out and out.strip().endswith("[]")
    assert vitviz_cli("--version").stdout.strip() == f"vitviz {vitviz.__version__}"
    assert "--max-upload-mb" in vitviz_cli("serve", "--help").stdout


@pytest.mark.slow
def test_analyze_writes_every_map_and_skips_a_bad_file_by_name(embedded, mixed, tmp_path):
    out = tmp_path / "out"
    run = vitviz_cli(
        "analyze",
        str(mixed / "chelsea.jpg"),
        str(mixed / "notes.jpg"),
        "--out",
        str(out),
        "--layers",
        "0,11",
        "--heads",
        "0,3",
    )
    assert run.returncode == 1, run.stderr  # something was skipped
    assert "skipped" in run.stderr and "notes.jpg" in run.stderr and "not an image" in run.stderr
    files = sorted(p.name for p in (out / "chelsea").iterdir())
    assert files == [
        "arrays.npz",
        "attention_layer00.png",
        "attention_layer11.png",
        "dense.png",
        "pca.png",
        "rollout.png",
        "summary.json",
        "tokens.png",
    ]
    a = vitviz.analyze(embedded, ASSETS / "chelsea.jpg")
    arrays = np.load(out / "chelsea" / "arrays.npz")
    np.testing.assert_array_equal(arrays["attentions"], a.attentions[[0, 11]])
    np.testing.assert_allclose(arrays["rollout"], a.rollout("mean"), rtol=1e-5)
    assert tuple(arrays["grid"]) == a.grid and arrays["pixel_values"].shape == a.pixel_values.shape
    summary = json.loads((out / "chelsea" / "summary.json").read_text())
    assert [summary[k] for k in ("grid_rows", "grid_cols", "input_width", "input_height")] == [21, 32, 448, 294]
    assert summary["prefix_tokens"] == ["CLS"]
    np.testing.assert_allclose(summary["mean_attention_distance_px"], a.mean_attention_distance, atol=1e-3)
    np.testing.assert_allclose(summary["attention_entropy_nats"], a.attention_entropy, atol=1e-4)
    raw = sum(arrays[k].nbytes for k in arrays.files) / 1e6  # said before it is written, on stderr
    assert f"chelsea/arrays.npz: {raw:.0f} MB before compression (the attention of 2 layers, 673 tokens)" in run.stderr
    assert "loading dinov2-small: 100%" in run.stderr and "chelsea.jpg: forward" in run.stderr
    sheet = cv2.imread(str(out / "chelsea" / "attention_layer11.png"))
    assert sheet.shape[1] > 3 * 280  # heads 0 and 3 and their mean, side by side


def test_analyze_names_a_bad_layer():
    run = vitviz_cli("analyze", str(ASSETS / "chelsea.jpg"), "--out", "unused", "--layers", "3,12")
    assert run.returncode == 2 and "--layers [12] out of range: this model has 12 layers" in run.stderr


HEAVY = ("torch", "transformers", "gradio", "cv2")
CHELSEA = str(ASSETS / "chelsea.jpg")


def usage(args: list[str], cwd: Path) -> tuple[int, str, list[str], float]:
    """`vitviz ARGS` in a fresh interpreter: (exit code, stderr, the heavy modules it imported, seconds in main)."""
    code = (
        "import sys, time, vitviz.cli\nstart = time.perf_counter()\n"
        f"try:\n    rc = vitviz.cli.main({args!r})\nexcept SystemExit as exc:\n    rc = exc.code\n"
        f"print(rc, time.perf_counter() - start, sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, check=True)
    rc, seconds, heavy = run.stdout.strip().splitlines()[-1].split(" ", 2)
    return int(rc), run.stderr, ast.literal_eval(heavy), float(seconds)


@pytest.mark.parametrize(
    "args, message",
    [
        (["stats", "--out", "unused"], "stats needs images"),
        (["stats", "nothing-here-*.jpg", "--out", "unused"], "nothing-here-*.jpg: no such file"),
        (["stats", ".", "--shard", "3/2", "--out", "unused"], "--shard must be i/n with 0 <= i < n, got '3/2'"),
        (["stats", ".", "--shard", "x", "--out", "unused"], "--shard must be i/n"),
        (["stats", ".", "--batch", "0", "--out", "unused"], "argument --batch: must be a whole number of at least 1"),
        (["stats", ".", "--workers", "2", "--out", "unused"], "--workers goes with --ray"),
        (["stats", "--merge", "missing.csv", "--out", "unused"], "--merge: no such file: missing.csv"),
        (["analyze", "x.jpg", "--out", "o"], "x.jpg: no such file, folder or matching pattern"),
        (["analyze", CHELSEA, "--out", "o", "--model", "./no/such/folder"], "--model ./no/such/folder: no such folder"),
        (["analyze", CHELSEA, "--out", "o", "--model", "not-a-model"], "unknown model 'not-a-model'"),
        (["analyze", CHELSEA, "--out", "o", "--heads", "one"], "--heads must be 'all' or numbers"),
        (["analyze", CHELSEA, "--out", "o", "--layers", "1-3"], "--layers must be 'all' or numbers"),
        (["analyze", CHELSEA, "--out", "o", "--size", "-5"], "argument --size: must be a whole number"),
        (["analyze", CHELSEA, "--out", "o", "--bogus"], "unrecognized arguments: --bogus"),
        (["analyze", CHELSEA, "--out", "photo.jpg"], "--out photo.jpg: a file, not a folder"),
        (["analyze", "empty-folder", "--out", "o"], "no image files in empty-folder"),
        (["explore", ".", "--html", "x.html"], "explore: .: a folder, not a file; name the file inside it"),
        (["stats", ".", "--out", "photo.jpg"], "--out photo.jpg: a file, not a folder"),
        (["check", "not-a-model"], "MODEL not-a-model: unknown model"),
        (["check", "./no/such/folder"], "MODEL ./no/such/folder: no such folder"),
        (["check", "owner/model", "--image", "missing.jpg"], "--image: no such file: missing.jpg"),
        (["faithfulness", "nothing-here"], "nothing-here: no such file"),
        (["faithfulness", ".", "--steps", "0"], "argument --steps: must be a whole number"),
        (["faithfulness", ".", "--model", "./no/such/folder"], "--model ./no/such/folder: no such folder"),
        (["serve", "--port", "x"], "argument --port: invalid int value"),
        (["serve", "--model", "./no/such/folder"], "--model ./no/such/folder: no such folder"),
        (["serve", "--depth-model", "./no/such/folder"], "--depth-model ./no/such/folder: no such folder"),
        (["serve", "--auth", "teacher"], "argument --auth: takes USER:PASS, a user name and a password joined by"),
        (["serve", "--auth", ":s3cret"], "argument --auth: takes USER:PASS"),
        (["serve", "--auth", "teacher:"], "argument --auth: takes USER:PASS"),
    ],
)
def test_every_usage_error_exits_2_at_once_with_a_message(args, message, tmp_path):
    """Before torch, transformers, gradio or OpenCV is imported, let alone a model loaded."""
    (tmp_path / "photo.jpg").write_bytes((ASSETS / "coffee.jpg").read_bytes())  # "." holds an image
    (tmp_path / "empty-folder").mkdir()
    rc, stderr, heavy, seconds = usage(args, tmp_path)
    assert rc == 2 and message in stderr and "Traceback" not in stderr, stderr
    assert heavy == [] and seconds < 1.0


@pytest.mark.parametrize(
    "args, message",
    [
        (["faithfulness", CHELSEA, "--methods", "lime"], "--methods: unknown lime"),
        (["faithfulness", CHELSEA, "--replacement", "noise"], "--replacement must be one of blur, mean, black"),
    ],
)
def test_a_method_or_replacement_unknown_exits_2_before_the_model_loads(args, message, tmp_path):
    """The method names live beside torch (vitviz.METHODS), so these take an import, but no model."""
    run = vitviz_cli(*args, cwd=tmp_path)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr
    assert "loading" not in run.stderr


def test_check_names_its_model_argument_offline(tmp_path):
    """`vitviz check HUB_ID` takes the model as MODEL: its message names that, not another command's --model."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "vitviz", "check", "vitviz-tests/no-such-model"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "MODEL vitviz-tests/no-such-model: cannot download vitviz-tests/no-such-model: no network" in run.stderr
    assert "--model" not in run.stderr and "give a local folder" in run.stderr


def test_the_embedded_models_name_is_the_librarys():
    assert cli.DEFAULT_MODEL == vitviz.DEFAULT_MODEL
    assert set(cli.asked_by_name()) <= {*vitviz.METHODS, "guided_backprop"}


def test_faithfulness_runs_occlusion_and_a_repeating_map_only_when_asked_by_name():
    """Occlusion is slow; Guided Backprop's map is the gradient on a GELU ViT (test_methods): a default table
    leaves both out, and either runs when it is named."""
    from vitviz.deletion import MAPS

    every = [*vitviz.METHODS, *MAPS]
    assert cli.faithfulness_methods(None) == [m for m in every if m not in ("occlusion", "guided_backprop")]
    assert cli.faithfulness_methods("guided_backprop") == ["guided_backprop"]
    assert cli.faithfulness_methods("all") == every
    assert cli.faithfulness_methods("occlusion,rollout") == ["occlusion", "rollout"]


@pytest.mark.app
def test_serve_says_it_is_loading_before_it_loads(tmp_path):
    """The first line comes before gradio or the model is imported, and each stretch of a start says what it does
    (a first start's imports compile every module: a minute or more), the site's background build included."""
    env = dict(
        os.environ,
        GRADIO_ANALYTICS_ENABLED="False",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=str(ROOT),
        VITVIZ_SITE_DIR=str(tmp_path / "site"),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "vitviz", "serve", "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        lines = [proc.stderr.readline() for _ in range(4)]
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert lines[0].startswith("vitviz: loading dinov2-small, then serving on http://127.0.0.1:0/")
    assert lines[1].startswith("vitviz: importing Gradio, torch and transformers (a first start compiles them")
    assert lines[2].startswith("vitviz: writing the class's site in the background")
    assert lines[3] == "vitviz: loading dinov2-small and building the page…\n"


def test_check_shows_its_progress_and_an_unreadable_image_is_a_failure_at_run_time(tmp_path, capsys):
    """rc 1, not 2: the arguments were right, the file was not an image."""
    from conftest import tiny_vit

    tiny_vit().net.save_pretrained(tmp_path / "vit", safe_serialization=True)
    argv = ["check", str(tmp_path / "vit"), "--device", "cpu", "--size", "48"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert f"loading {tmp_path / 'vit'}: 100%" in err and "check coffee.jpg: vitviz against transformers: 100%" in err
    (tmp_path / "notes.jpg").write_text("not an image")
    assert cli.main([*argv, "--image", str(tmp_path / "notes.jpg")]) == 1
    assert "notes.jpg: notes.jpg is not an image" in capsys.readouterr().err


@pytest.mark.slow
def test_analyze_without_arrays_writes_the_pictures_and_a_summary_with_named_axes(
    embedded, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(vitviz, "load_model", lambda name, device: embedded)
    argv = ["analyze", CHELSEA, "--out", str(tmp_path), "--layers", "11", "--heads", "0", "--no-arrays"]
    assert cli.main(argv) == 0
    files = sorted(p.name for p in (tmp_path / "chelsea").iterdir())
    assert files == ["attention_layer11.png", "dense.png", "pca.png", "rollout.png", "summary.json", "tokens.png"]
    summary = json.loads((tmp_path / "chelsea" / "summary.json").read_text())
    assert (summary["input_width"], summary["input_height"]) == (448, 294)
    assert (summary["grid_rows"], summary["grid_cols"]) == (21, 32) and "grid" not in summary
    out, err = capsys.readouterr()
    assert "chelsea.jpg: pictures" in err and "1/1" in err and "arrays.npz" not in err + out
    assert out.strip().endswith("(5 pictures)")


@pytest.mark.slow
def test_faithfulness_table_equals_the_python_api_and_names_a_bad_file(embedded, mixed):
    from vitviz.deletion import faithfulness

    run = vitviz_cli(
        "faithfulness",
        str(mixed / "chelsea.jpg"),
        str(mixed / "notes.jpg"),
        "--methods",
        "saliency,rollout",
        "--steps",
        "4",
        "--random",
        "2",
    )
    assert run.returncode == 1 and run.stderr.count("skipped") == 1 and "notes.jpg" in run.stderr
    assert "saliency chelsea.jpg" in run.stderr and "rollout chelsea.jpg" in run.stderr and "4/4" in run.stderr
    assert "Traceback" not in run.stderr
    rows = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()[2:4]}
    assert set(rows) == {"saliency", "rollout"}
    for method, row in rows.items():
        f = faithfulness(embedded, ASSETS / "chelsea.jpg", method, steps=4, random_orders=2)
        expected = [f.deletion_auc, f.insertion_auc, f.random_auc]
        np.testing.assert_allclose([float(v) for v in row[:3]], expected, atol=1e-4)
        assert row[3] == f"{int(f.verdict == 'faithful')}/1"
    assert "1 image; target: the dense head's " in run.stdout  # its words: attributions.describe's


def test_stats_on_a_folder_without_a_readable_image_names_each_file(tmp_path):
    (tmp_path / "notes.jpg").write_text("not an image")
    (tmp_path / "half.jpg").write_bytes((ASSETS / "coffee.jpg").read_bytes()[:5000])
    run = vitviz_cli("stats", str(tmp_path), "--out", str(tmp_path / "out"))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "notes.jpg" in run.stderr and "half.jpg" in run.stderr and "none of the 2 files could be read" in run.stderr


@pytest.mark.slow
def test_stats_equal_the_analyses_and_shards_merge_exactly(embedded, mixed, tmp_path):
    run = vitviz_cli("stats", str(mixed), "--out", str(tmp_path / "all"), "--batch", "2")
    assert run.returncode == 1 and "notes.jpg" in run.stderr and "half.jpg" in run.stderr and "truncated" in run.stderr
    assert "4 images" in run.stdout
    table = stats.read_csv(tmp_path / "all" / "stats.csv")
    per_image = [vitviz.analyze(embedded, p) for p in sorted(ASSETS.glob("*.jpg"))]
    distances = np.stack([a.mean_attention_distance for a in per_image])
    entropies = np.stack([a.attention_entropy for a in per_image])
    assert table.images == 4
    np.testing.assert_allclose(table.distance_mean, distances.mean(0), rtol=5e-3, atol=0.05)
    np.testing.assert_allclose(table.distance_std, distances.std(0), atol=0.1)
    np.testing.assert_allclose(table.entropy_mean, entropies.mean(0), atol=5e-3)
    with open(tmp_path / "all" / "stats.csv", newline="") as f:  # one header row: any CSV reader takes it
        rows = list(csv.DictReader(f))
    assert len(rows) == 12 * 6 and {r["model"] for r in rows} == {"dinov2-small"} and rows[7]["layer"] == "1"
    assert float(rows[7]["distance_mean_px"]) == pytest.approx(table.distance_mean[1, 1], rel=1e-5)
    # Three shards of six files hold 2, 1 and 1 readable photos: merged by their image counts, not equally.
    counts = []
    for i in range(3):
        vitviz_cli("stats", str(mixed), "--out", str(tmp_path / f"shard{i}"), "--shard", f"{i}/3")
        counts.append(stats.read_csv(tmp_path / f"shard{i}" / "stats.csv").images)
    assert sorted(counts) == [1, 1, 2]
    merged = tmp_path / "merged"
    run = vitviz_cli(
        "stats", "--merge", *(str(tmp_path / f"shard{i}" / "stats.csv") for i in range(3)), "--out", str(merged)
    )
    assert run.returncode == 0, run.stderr
    again = stats.read_csv(merged / "stats.csv")
    assert again.images == 4
    np.testing.assert_allclose(again.distance_mean, table.distance_mean, rtol=1e-4)
    np.testing.assert_allclose(again.distance_std, table.distance_std, rtol=1e-3, atol=1e-3)
    assert (merged / "stats.png").stat().st_size > 10_000 and "plotly" in (merged / "stats.html").read_text()[
        :5_000_000
    ]


def test_batching_does_not_change_the_statistics(embedded, tmp_path):
    files = []
    for photo in sorted(ASSETS.glob("*.jpg")):  # one size, so that the four go through in one batch
        files.append(tmp_path / f"{photo.stem}.png")
        cv2.imwrite(str(files[-1]), cv2.resize(cv2.imread(str(photo)), (320, 240), interpolation=cv2.INTER_AREA))
    one, _ = stats.over_images(embedded, files, 224, batch=1)
    four, _ = stats.over_images(embedded, files, 224, batch=4)
    assert one.images == four.images == 4 and one.distance_std.max() > 1  # four different photos
    np.testing.assert_allclose(four.distance_mean, one.distance_mean, rtol=1e-4)
    np.testing.assert_allclose(four.entropy_std, one.entropy_std, rtol=1e-3, atol=1e-5)


def test_serve_refuses_a_hub_id_it_cannot_have_offline_in_one_line(tmp_path):
    run, seconds = timed(vitviz_cli, "serve", "--model", "vitviz-tests/no-such-model", cwd=tmp_path, HF_HUB_OFFLINE="1")
    line = one_line(run, 2)
    assert line.startswith("vitviz: --model vitviz-tests/no-such-model: cannot download") and "local folder" in line
    assert seconds < 10  # before torch, gradio or the model (it took 29 s)


def test_app_py_refuses_a_missing_model_folder_before_anything_loads(tmp_path):
    missing = tmp_path / "nonexistent"
    run, seconds = timed(
        subprocess.run,
        [sys.executable, str(ROOT / "app.py"), "--model", str(missing)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert one_line(run, 2).startswith(f"vitviz: --model {missing}: no such folder: {missing} (a model folder")
    assert seconds < 10


@pytest.mark.app
@pytest.mark.parametrize("login", [[], ["--auth", "teacher:s3cret"]], ids=["no login", "login"])
def test_serve_share_warns_in_one_line_that_the_link_is_public_or_says_that_a_login_guards_it(tmp_path, login):
    """Before the model loads: the warning (or, with --auth, the line that says the link is guarded), then the
    loading line (without --share, the loading line is first: test_serve_says_it_is_loading_before_it_loads)."""
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    env.pop("VITVIZ_AUTH", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "vitviz", "serve", "--share", "--port", "0", *login],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        warning, loading = proc.stderr.readline(), proc.stderr.readline()
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    if login:
        assert warning == cli.SHARE_GUARDED + "\n" and "guarded by --auth's login" in warning
    else:
        assert warning == cli.SHARE_WARNING + "\n" and "public" in warning and "no login" in warning
    assert loading.startswith("vitviz: loading dinov2-small")


def test_analyze_reads_every_image_before_the_model_loads(tmp_path):
    (tmp_path / "empty.png").write_bytes(b"")
    run, seconds = timed(vitviz_cli, "analyze", "empty.png", "--out", "out", cwd=tmp_path)
    assert one_line(run, 1) == "vitviz: skipped empty.png: empty.png is empty, not an image"
    assert seconds < 10 and not (tmp_path / "out").exists()  # no model loaded (it took 42 s), no folder made


def test_analyze_takes_a_folders_images(tiny_folder, tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("chelsea", "coffee"):
        shutil.copy(ASSETS / f"{name}.jpg", photos)
    (photos / "notes.txt").write_text("not an image, and not taken: not an image's suffix")
    run = vitviz_cli(
        "analyze",
        str(photos),
        "--out",
        str(tmp_path / "out"),
        "--model",
        str(tiny_folder),
        "--device",
        "cpu",
        "--no-arrays",
    )
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["chelsea", "coffee"]
    assert (tmp_path / "out" / "coffee" / "summary.json").is_file()


WHOLE = [  # what analyze writes for a tiny ViT: 3 layers, no dense head
    "arrays.npz",
    "attention_layer00.png",
    "attention_layer01.png",
    "attention_layer02.png",
    "pca.png",
    "rollout.png",
    "summary.json",
    "tokens.png",
]


def test_ctrl_c_in_analyze_leaves_no_half_written_folder(tiny_folder, tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(20):
        shutil.copy(ASSETS / "chelsea.jpg", photos / f"photo{i:02d}.jpg")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = ["analyze", str(photos), "--out", str(out), "--model", str(tiny_folder), "--device", "cpu"]
    # Ctrl-C's SIGINT as a terminal sends it: a shell's background job (as `.ci/run &` is) ignores SIGINT, and a
    # child inherits that, so the child is given the default back
    proc = subprocess.Popen(
        [sys.executable, "-m", "vitviz", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not (out.is_dir() and any(out.iterdir())) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # until the first image's folder is being written
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    said = [line for line in stderr.splitlines() if line.startswith("vitviz: interrupted")]
    assert len(said) == 1 and stderr.endswith(said[0] + "\n") and said[0].endswith(", none half-written")
    left = sorted(out.iterdir()) if out.exists() else []  # a folder made for nothing is removed too
    assert [p.name for p in left if p.name.startswith(".")] == []
    for folder in left:
        assert sorted(f.name for f in folder.iterdir()) == WHOLE


RAY_TIMES_OUT = """def is_initialized():
    return False


def init(**kwargs):  # what Ray 2.60's ray.init raises when its node does not start in time
    raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                    "failed to startup or the GCS has become overloaded.")


def shutdown():
    pass
"""


def test_stats_ray_that_times_out_is_one_line(tmp_path):
    """A stand-in for Ray whose start times out as Ray's does (after 178 s, the real one)."""
    (tmp_path / "standin" / "ray" / "data").mkdir(parents=True)
    (tmp_path / "standin" / "ray" / "__init__.py").write_text(RAY_TIMES_OUT)
    (tmp_path / "standin" / "ray" / "data" / "__init__.py").write_text("")
    run = vitviz_cli("stats", CHELSEA, "--ray", "--out", "out", cwd=tmp_path, before=tmp_path / "standin")
    line = one_line(run, 1)
    assert line.startswith("vitviz: --ray: a local Ray did not start (The current node timed out during startup.")
    assert line.endswith("see Ray's logs in /tmp/ray/session_latest/logs, or run without --ray")


def test_stats_ray_without_ray_says_so_before_the_model_loads(tmp_path):
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "ray.py").write_text("raise ImportError(\"No module named 'ray'\")\n")  # not installed
    run, seconds = timed(
        vitviz_cli, "stats", CHELSEA, "--ray", "--out", "out", cwd=tmp_path, before=tmp_path / "standin"
    )
    assert one_line(run, 2) == 'vitviz: --ray needs Ray Data: pip install "vitviz[ray]"'
    assert seconds < 10  # the model loaded first, for 45 s


@pytest.mark.parametrize(
    "args, message",
    [
        (["importance", "missing.jpg"], "IMAGE: no such file: missing.jpg"),
        (["importance", CHELSEA, "--out", "grid.txt"], "--out grid.txt: name a .json or .csv file"),
        (["importance", CHELSEA, "--out", "no/such/grid.json"], "no folder no/such to write it in"),
        (["importance", CHELSEA, "--mode", "half"], "argument --mode: invalid choice: 'half'"),
        (["importance", CHELSEA, "--model", "./no/such/folder"], "--model ./no/such/folder: no such folder"),
    ],
)
def test_importance_usage_errors_exit_2_before_the_model_loads(args, message, tmp_path):
    rc, stderr, heavy, _ = usage(args, tmp_path)
    assert rc == 2 and message in stderr and "Traceback" not in stderr, stderr
    assert heavy == []


def test_importance_of_a_file_that_is_not_an_image_fails_in_one_line(tmp_path):
    (tmp_path / "notes.jpg").write_text("not an image")
    assert "notes.jpg is not an image" in one_line(vitviz_cli("importance", "notes.jpg", cwd=tmp_path), 1)


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_importance_writes_the_python_apis_grid(embedded, tmp_path, monkeypatch, capsys, suffix):
    monkeypatch.setattr(vitviz, "load_model", lambda name, device: embedded)
    out = tmp_path / f"grid{suffix}"
    assert cli.main(["importance", CHELSEA, "--size", "56", "--out", str(out), "--mode", "mean"]) == 0
    grid = vitviz.importance(embedded, CHELSEA, mode="mean", longest=56)
    if suffix == ".json":
        record = json.loads(out.read_text())
        np.testing.assert_allclose(record["after"], grid.after, atol=1e-6)
        assert record["mode"] == "mean" and record["forwards"] == grid.forwards
        assert (record["input_height"], record["input_width"]) == (42, 56)
    else:
        rows = list(csv.DictReader(out.open()))
        assert len(rows) == 72 and (rows[9]["layer"], rows[9]["head"]) == ("1", "3")
        np.testing.assert_allclose([float(r["change"]) for r in rows], grid.change.ravel(), atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    err = capsys.readouterr().err
    assert f"about {grid.forwards:.0f} forwards' work at 56×42 px" in err and f"wrote {out}" in err


def test_importance_interrupted_leaves_no_file(embedded, tmp_path, monkeypatch):
    import vitviz.head_importance

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(vitviz, "load_model", lambda name, device: embedded)
    monkeypatch.setattr(vitviz.head_importance, "importance", interrupted)
    assert cli.main(["importance", CHELSEA, "--size", "56", "--out", str(tmp_path / "grid.json")]) == 130
    assert list(tmp_path.iterdir()) == []


def test_importance_interrupted_while_writing_leaves_no_partial_file(embedded, tmp_path, monkeypatch):
    import vitviz.cli.importance

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(vitviz, "load_model", lambda name, device: embedded)
    monkeypatch.setattr(vitviz.cli.importance.os, "replace", interrupted)
    assert cli.main(["importance", CHELSEA, "--size", "28", "--out", str(tmp_path / "grid.csv")]) == 130
    assert list(tmp_path.iterdir()) == []
