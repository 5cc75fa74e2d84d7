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
