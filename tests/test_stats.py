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
    rc = cli.main(
        [
            "analyze",
            str(photo),
            "--out",
            str(tmp_path / "out"),
            "--model",
            str(tmp_path / "model"),
            "--device",
            "cpu",
            "--size",
            "56",
        ]
    )
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


@pytest.mark.slow  # a local Ray cluster: 21 s on 2 cores
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
    spread, ray_skipped = ray_stats.over_images(
        "dinov2-small", files, 224, 2, workers=2, device="cpu", on_skip=lambda p, reason: named.append((p, reason))
    )
    assert (skipped, ray_skipped, spread.images, alone.images) == (1, 1, 6, 6)
    assert named == [(str(folder / "broken.jpg"), "broken.jpg is a truncated JPEG file: its end is missing")]
    for field in ("distance_mean", "distance_std", "entropy_mean", "entropy_std"):
        # each image's values are float32 from a forward of its batch, and the workers batch other images together:
        # a standard deviation, small beside its mean, moves by the mean's float32 rounding (1e-6 of it on this CPU)
        scale = np.abs(getattr(alone, field.replace("std", "mean"))).max()
        np.testing.assert_allclose(
            getattr(spread, field), getattr(alone, field), rtol=1e-6, atol=1e-6 * scale, err_msg=field
        )
    assert np.ptp(alone.distance_mean) > 1  # heads differ: the comparison is not of constants

    capsys.readouterr()
    for out, extra in (("alone", []), ("ray", ["--ray", "--workers", "2"])):
        rc = cli.main(
            [
                "stats",
                str(folder),
                "--out",
                str(tmp_path / out),
                "--size",
                "224",
                "--batch",
                "2",
                "--device",
                "cpu",
                *extra,
            ]
        )
        assert rc == 1  # a file was skipped
        assert f"skipped {folder / 'broken.jpg'}" in capsys.readouterr().err
    ray, alone = ((tmp_path / name / "stats.csv").read_text().splitlines() for name in ("ray", "alone"))
    assert ray[0] == alone[0] and len(ray) == len(alone) > 1  # the same columns and rows
    for got, want in zip(ray[1:], alone[1:], strict=True):  # written to 6 digits: equal to their last one
        g, w = got.split(","), want.split(",")
        assert g[:3] == w[:3]  # the model, layer and head
        np.testing.assert_allclose(np.array(g[3:], float), np.array(w[3:], float), rtol=2e-5)


def per_image(model, files, longest) -> np.ndarray:
    """[images,2,L,H] each readable image's own analysis: mean attention distance and entropy."""
    import cv2

    rows = []
    for f in files:
        image = cv2.imread(str(f))
        if image is not None:
            a = vitviz.analyze(model, image[..., ::-1].copy(), longest=longest)
            rows.append(np.stack([a.mean_attention_distance, a.attention_entropy]).astype(np.float64))
    return np.stack(rows)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Five photos of two sizes, interleaved, and a broken file among them."""
    import cv2

    folder = tmp_path_factory.mktemp("photos")
    files = []
    for i, (h, w) in enumerate([(40, 56), (24, 56), (40, 56), (24, 56), (56, 40)]):  # two heights of one width
        files.append(folder / f"{i}.png")
        cv2.imwrite(str(files[-1]), random_image(h, w, seed=30 + i))
    (folder / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    (folder / "empty.png").write_bytes(b"")
    return [*files[:2], folder / "broken.jpg", *files[2:], folder / "empty.png"]


def test_the_table_over_images_is_the_mean_and_spread_of_their_own_analyses(photos):
    """Three input sizes interleaved (two of one width), batches of 2 that do not divide the groups: each (layer,
    head)'s mean and standard deviation (ddof 0) over the images equal NumPy's over the photos' own analyses;
    the two unreadable files are named and counted."""
    model, skipped = FAMILIES["dinov2"](), []
    table, count = stats.over_images(
        model, photos, 56, batch=2, on_skip=lambda p, e: skipped.append((p, e)), progress_bar=False
    )
    assert count == 2 and [p for p, _ in skipped] == [photos[2], photos[-1]]
    assert all(isinstance(e, ValueError) for _, e in skipped)
    values = per_image(model, photos, 56)
    assert table.images == 5 and table.model == model.name
    expected = {"distance": values[:, 0], "entropy": values[:, 1]}
    for name, v in expected.items():
        np.testing.assert_allclose(getattr(table, f"{name}_mean"), v.mean(0), rtol=3e-3, atol=1e-4)
        np.testing.assert_allclose(getattr(table, f"{name}_std"), v.std(0), rtol=3e-3, atol=1e-4)
    assert table.distance_std.min() > 0  # five different photos: a spread, not one photo five times
    alone, _ = stats.over_images(model, photos, 56, batch=1, progress_bar=False)
    np.testing.assert_allclose(alone.distance_mean, table.distance_mean, rtol=1e-4)
    with pytest.raises(ValueError, match="batch must be at least 1, got 0"):
        stats.over_images(model, photos, 56, batch=0, progress_bar=False)
    with pytest.raises(ValueError, match="^no image could be read$"):
        stats.over_images(model, [photos[2]], 56, progress_bar=False)


def test_the_progress_bar_counts_images(photos, capsys, monkeypatch):
    from tqdm import tqdm

    monkeypatch.setattr(tqdm, "monitor_interval", 0)  # no monitor thread left behind in a forked test process
    stats.over_images(FAMILIES["vit"](), photos, 56, batch=2)
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert bar.startswith("attention statistics: 100%") and "7/7" in bar and "image/s" in bar


@pytest.mark.parametrize("bar", [True, False])
def test_the_progress_counts_each_file_once_as_its_batch_ends(photos, monkeypatch, bar):
    """A recorder stands in for tqdm's bar (whose lock hangs in a forked test process): one bar over the 7 files,
    on by default, each unreadable file counted when it is skipped, each batch of 2 when it runs, the batches left
    over at the end."""
    import tqdm.auto

    made = []

    class Recorder:
        def __init__(self, **kwargs):
            self.kwargs, self.counts = kwargs, []
            made.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n=1):
            self.counts.append(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorder)
    options = {} if bar else {"progress_bar": False}
    stats.over_images(FAMILIES["vit"](), photos, 56, batch=2, **options)
    (recorder,) = made
    assert recorder.kwargs == {"total": 7, "unit": "image", "desc": "attention statistics", "disable": not bar}
    assert recorder.counts == [1, 2, 2, 1, 1]  # broken.jpg; the two 40 px, the two 24 px; empty.png; the 56 px one


def test_sums_add_up_and_come_back_from_a_table():
    rng = np.random.default_rng(3)
    values = rng.normal(20, 5, (7, 2, 3, 4))
    whole = stats.Sums.of("m", values)
    assert whole.images == 7
    np.testing.assert_allclose(whole.total, values.sum(0))
    np.testing.assert_allclose(whole.squares, (values**2).sum(0))
    parts = stats.Sums.of("m", values[:3]) + stats.Sums.of("m", values[3:])
    table = parts.table()
    np.testing.assert_allclose(table.distance_mean, values[:, 0].mean(0))
    np.testing.assert_allclose(table.distance_std, values[:, 0].std(0))
    np.testing.assert_allclose(table.entropy_mean, values[:, 1].mean(0))
    np.testing.assert_allclose(table.entropy_std, values[:, 1].std(0))
    back = stats.Sums.of_table(table)
    assert back.images == 7 and back.model == "m"
    np.testing.assert_allclose(back.total, whole.total)
    np.testing.assert_allclose(back.squares, whole.squares)
    with pytest.raises(ValueError, match="different models: m, n"):
        parts + stats.Sums.of("n", values)
    same = stats.Sums.of("m", np.repeat(values[:1], 4, 0)).table()  # equal values: a spread of exactly 0
    assert not same.distance_std.any() and not same.entropy_std.any()


def test_shards_of_unequal_sizes_merge_to_the_table_of_all_their_images():
    rng = np.random.default_rng(4)
    values = rng.normal(20, 0.3, (6, 2, 3, 4))  # spreads below 1
    shards = [stats.Sums.of("m", values[a:b]).table() for a, b in ((0, 3), (3, 4), (4, 6))]
    merged, whole = stats.merge(shards), stats.Sums.of("m", values).table()
    assert merged.images == 6 and merged.model == "m"
    for k in ("distance_mean", "distance_std", "entropy_mean", "entropy_std"):
        np.testing.assert_allclose(getattr(merged, k), getattr(whole, k), rtol=1e-10, err_msg=k)
    with pytest.raises(ValueError, match=r"different models: \['m', 'n'\]"):
        stats.merge([shards[0], stats.Sums.of("n", values).table()])


def test_the_csv_reads_back_with_the_standard_readers_and_the_files_show_the_table(tmp_path):
    import csv

    import cv2

    rng = np.random.default_rng(5)
    table = stats.Sums.of("tiny", rng.normal(20, 5, (4, 2, 3, 2))).table()
    stats.write(table, tmp_path / "deep" / "out")
    stats.write(table, tmp_path / "out")
    stats.write(table, tmp_path / "out")  # again, into the same folder
    with open(tmp_path / "out" / "stats.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == stats.COLUMNS and len(rows) == 6
    assert rows[5]["model"] == "tiny" and (rows[5]["layer"], rows[5]["head"], rows[5]["images"]) == ("2", "1", "4")
    assert float(rows[5]["entropy_std_nats"]) == pytest.approx(table.entropy_std[2, 1], rel=1e-5)
    back = stats.read_csv(tmp_path / "out" / "stats.csv")
    assert back.model == "tiny" and back.images == 4
    for k in ("distance_mean", "distance_std", "entropy_mean", "entropy_std"):
        np.testing.assert_allclose(getattr(back, k), getattr(table, k), rtol=1e-5, err_msg=k)
    png = cv2.imread(str(tmp_path / "out" / "stats.png"))[..., ::-1]
    np.testing.assert_array_equal(png, vitviz.render.layer_head_grid(table.distance_mean, "viridis"))
    html = (tmp_path / "out" / "stats.html").read_text()
    assert "tiny: mean attention distance over 4 images" in html
    assert len(html) > 1_000_000 and '<script src="https://cdn.plot.ly' not in html  # plotly.js inside: offline
    (tmp_path / "bad.csv").write_text("model,layer\ntiny,0\n")
    with pytest.raises(ValueError, match="is not a vitviz stats.csv .one model, columns model, layer, head, "):
        stats.read_csv(tmp_path / "bad.csv")
    single = stats.Sums.of("one", rng.normal(20, 5, (3, 2, 1, 1))).table()  # one layer, one head: one data row
    stats.write(single, tmp_path / "single")
    back = stats.read_csv(tmp_path / "single" / "stats.csv")
    assert back.model == "one" and back.images == 3 and back.distance_mean.shape == (1, 1)
    lines = stats.summary_table(table).splitlines()
    d, e = table.distance_mean[1], table.entropy_mean[1]
    assert lines[:2] == ["tiny, 4 images", "layer  distance px (heads' min-max)  entropy nats"] and len(lines) == 5
    assert lines[3] == f"{1:5d}  {d.mean():7.1f} ({d.min():6.1f}-{d.max():6.1f})      {e.mean():6.2f}"
