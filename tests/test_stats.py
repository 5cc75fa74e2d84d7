"""Statistics over images, on every family: each image's row equals its own analysis, in a batch of two."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FAMILIES, random_image

import vitviz
from vitviz import cli, stats


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_batch_gives_each_image_its_own_analysis_statistics(name):
    model = FAMILIES[name]()
    images = [random_image(40, 56, seed=s) for s in (20, 21)]
    analyses = [vitviz.analyze(model, im, longest=56) for im in images]
    rows = stats.batch_statistics(model, np.concatenate([a.pixel_values for a in analyses]))
    for a, row in zip(analyses, rows, strict=True):
        np.testing.assert_allclose(row[0], a.mean_attention_distance, rtol=2e-3)
        np.testing.assert_allclose(row[1], a.attention_entropy, rtol=2e-3)
    assert np.abs(rows[0] - rows[1]).max() > 1e-3  # two photos, two rows: not one image's twice


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_analyze_writes_every_family_from_its_folder(name, tmp_path):
    """`vitviz analyze` on a saved tiny model: the summary names its prefix tokens and holds its statistics."""
    model = FAMILIES[name]()
    model.net.save_pretrained(tmp_path / "model", safe_serialization=True)
    photo = tmp_path / "photo.png"
    import cv2

    cv2.imwrite(str(photo), random_image(40, 56, seed=22))
    rc = cli.main(["analyze", str(photo), "--out", str(tmp_path / "out"), "--model", str(tmp_path / "model"),
                   "--device", "cpu", "--size", "56"])  # fmt: skip
    assert rc == 0
    summary = json.loads((tmp_path / "out" / "photo" / "summary.json").read_text())
    assert summary["prefix_tokens"] == list(model.prefix_tokens)
    a = vitviz.analyze(model, cv2.imread(str(photo))[..., ::-1].copy(), longest=56)
    np.testing.assert_allclose(summary["mean_attention_distance_px"], a.mean_attention_distance, atol=1e-3)


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
    yield ray
    ray.shutdown()


def test_ray_stats_equal_the_single_process_table_and_name_the_broken_file(local_ray, tmp_path, capsys):
    """`vitviz stats --ray` on a local Ray with 2 workers, over the bundled photos, two generated ones of other
    sizes and one truncated file: the same table as `vitviz stats` (each value within 1e-6 relative), the
    same stats.csv, and the broken file named."""
    import cv2

    from vitviz import ray_stats

    folder = tmp_path / "photos"
    folder.mkdir()
    for name in vitviz.EXAMPLES:
        (folder / f"{name}.jpg").write_bytes(vitviz.example(name).read_bytes())
    cv2.imwrite(str(folder / "tall.png"), random_image(300, 120, seed=30))
    cv2.imwrite(str(folder / "wide.png"), random_image(90, 260, seed=31))
    (folder / "broken.jpg").write_bytes(vitviz.example("coffee").read_bytes()[:3000])
    files = cli.image_files([str(folder)])
    model = vitviz.load_model(device="cpu")
    alone, skipped = stats.over_images(model, files, 224, 2, progress_bar=False)
    named: list = []
    spread, ray_skipped = ray_stats.over_images("dinov2-small", files, 224, 2, workers=2, device="cpu",
                                                on_skip=lambda p, reason: named.append((p, reason)))  # fmt: skip
    assert (skipped, ray_skipped, spread.images, alone.images) == (1, 1, 6, 6)
    assert named == [(str(folder / "broken.jpg"), "broken.jpg is a truncated JPEG file: its end is missing")]
    for field in ("distance_mean", "distance_std", "entropy_mean", "entropy_std"):
        np.testing.assert_allclose(getattr(spread, field), getattr(alone, field), rtol=1e-6, err_msg=field)
    assert np.ptp(alone.distance_mean) > 1  # heads differ: the comparison is not of constants

    capsys.readouterr()
    for out, extra in (("alone", []), ("ray", ["--ray", "--workers", "2"])):
        rc = cli.main(["stats", str(folder), "--out", str(tmp_path / out), "--size", "224", "--batch", "2",
                       "--device", "cpu", *extra])  # fmt: skip
        assert rc == 1  # a file was skipped
        assert f"skipped {folder / 'broken.jpg'}" in capsys.readouterr().err
    assert (tmp_path / "ray" / "stats.csv").read_text() == (tmp_path / "alone" / "stats.csv").read_text()
