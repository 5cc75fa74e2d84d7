"""The `vitviz` command through subprocesses, on the bundled photos and on folders with bad files."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from conftest import ASSETS

import vitviz
from vitviz import stats

ROOT = Path(__file__).resolve().parent.parent


def vitviz_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m vitviz ARGS`, from `cwd`: this checkout's vitviz, installed or not."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "vitviz", *args], capture_output=True, text=True, cwd=cwd, env=env)


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
    run = vitviz_cli("analyze", str(mixed / "chelsea.jpg"), str(mixed / "notes.jpg"), "--out", str(out),
                     "--layers", "0,11", "--heads", "0,3")  # fmt: skip
    assert run.returncode == 1, run.stderr  # something was skipped
    assert "skipped" in run.stderr and "notes.jpg" in run.stderr and "not an image" in run.stderr
    files = sorted(p.name for p in (out / "chelsea").iterdir())
    assert files == ["arrays.npz", "attention_layer00.png", "attention_layer11.png", "dense.png", "pca.png",
                     "rollout.png", "summary.json", "tokens.png"]  # fmt: skip
    a = vitviz.analyze(embedded, ASSETS / "chelsea.jpg")
    arrays = np.load(out / "chelsea" / "arrays.npz")
    np.testing.assert_array_equal(arrays["attentions"], a.attentions[[0, 11]])
    np.testing.assert_allclose(arrays["rollout"], a.rollout("mean"), rtol=1e-5)
    assert tuple(arrays["grid"]) == a.grid and arrays["pixel_values"].shape == a.pixel_values.shape
    summary = json.loads((out / "chelsea" / "summary.json").read_text())
    assert summary["grid"] == [21, 32] and summary["input_size"] == [448, 294] and summary["prefix_tokens"] == ["CLS"]
    np.testing.assert_allclose(summary["mean_attention_distance_px"], a.mean_attention_distance, atol=1e-3)
    np.testing.assert_allclose(summary["attention_entropy_nats"], a.attention_entropy, atol=1e-4)
    sheet = cv2.imread(str(out / "chelsea" / "attention_layer11.png"))
    assert sheet.shape[1] > 3 * 280  # heads 0 and 3 and their mean, side by side


def test_analyze_names_a_bad_layer():
    run = vitviz_cli("analyze", str(ASSETS / "chelsea.jpg"), "--out", "unused", "--layers", "3,12")
    assert run.returncode == 2 and "--layers [12] out of range: this model has 12 layers" in run.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["stats", "--out", "unused"], "stats needs images"),
        (["stats", "nothing-here-*.jpg", "--out", "unused"], "nothing-here-*.jpg: no such file"),
        (["stats", ".", "--shard", "3/2", "--out", "unused"], "--shard must be i/n with 0 <= i < n, got '3/2'"),
        (["stats", ".", "--shard", "x", "--out", "unused"], "--shard must be i/n"),
        (["stats", "--merge", "missing.csv", "--out", "unused"], "--merge: "),
        (["analyze", "x.jpg", "--out", "o", "--model", "./no/such/folder"], "no such folder: no/such/folder"),
        (["analyze", "x.jpg", "--out", "o", "--model", "not-a-model"], "unknown model 'not-a-model'"),
        (["analyze", "x.jpg", "--out", "o", "--heads", "one"], "--heads must be 'all' or numbers"),
        (["analyze", "x.jpg", "--out", "o", "--bogus"], "unrecognized arguments: --bogus"),
        (["faithfulness", ".", "--methods", "lime"], "--methods: unknown lime"),
        (["faithfulness", ".", "--replacement", "noise"], "--replacement must be one of blur, mean, black"),
    ],
)
def test_every_usage_error_exits_2_with_a_message_and_no_traceback(args, message, tmp_path):
    run = vitviz_cli(*args, cwd=tmp_path)
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert message in run.stderr and "Traceback" not in run.stderr


@pytest.mark.slow
def test_faithfulness_table_equals_the_python_api_and_names_a_bad_file(embedded, mixed):
    from vitviz.deletion import faithfulness

    run = vitviz_cli("faithfulness", str(mixed / "chelsea.jpg"), str(mixed / "notes.jpg"), "--methods",
                     "saliency,rollout", "--steps", "4", "--random", "2")  # fmt: skip
    assert run.returncode == 1 and "notes.jpg" in run.stderr and "Traceback" not in run.stderr
    rows = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()[2:4]}
    assert set(rows) == {"saliency", "rollout"}
    for method, row in rows.items():
        f = faithfulness(embedded, ASSETS / "chelsea.jpg", method, steps=4, random_orders=2)
        expected = [f.deletion_auc, f.insertion_auc, f.random_auc]
        np.testing.assert_allclose([float(v) for v in row[:3]], expected, atol=1e-4)
        assert row[3] == f"{int(f.verdict == 'faithful')}/1"
    assert "1 image; target: the dense head's mean output over the whole image" in run.stdout


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
    run = vitviz_cli("stats", "--merge", *(str(tmp_path / f"shard{i}" / "stats.csv") for i in range(3)),
                     "--out", str(merged))  # fmt: skip
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
