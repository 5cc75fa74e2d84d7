"""The server's random orders (vitviz.bands): drawn once per photo, model and output, reused by every later check
that changes only the map, counted by the model's own forwards."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from conftest import random_image, tiny_vit

from vitviz.bands import RandomBands
from vitviz.deletion import passes, random_band
from vitviz.outputs import Output

QUICK = dict(steps=2, random_orders=3, batch=4)  # what is tested is which curves are drawn again, not how many


def test_a_band_is_drawn_once_per_photo_model_and_output_and_reused_with_no_forward():
    """The second get of the same photo (another array with the same pixels) and options returns the same band and
    runs no forward; another photo, output, seed or model (even one with the same name and weights) draws its
    own, and that band equals `random_band`'s, drawn apart."""
    model, bands = tiny_vit(), RandomBands()
    image, heard = random_image(32, 32), []
    first = bands.get(model, image, output=Output("class"), **QUICK)
    forwards = model.forwards
    again = bands.get(model, image.copy(), progress=heard.append, output=Output("class"), **QUICK)
    assert again is first and model.forwards == forwards and heard == [1.0]
    assert (bands.drawn, bands.reused) == (1, 1)
    twin = tiny_vit()
    for other_model, other_image, options in (
        (model, random_image(32, 32, seed=1), dict(output=Output("class"), **QUICK)),
        (model, image, dict(output=Output("class", index=3), **QUICK)),
        (model, image, dict(output=Output("class"), seed=1, **QUICK)),
        (twin, image, dict(output=Output("class"), **QUICK)),
    ):
        before = other_model.forwards
        other = bands.get(other_model, other_image, **options)
        assert other is not first and other_model.forwards > before
        apart = random_band(other_model, other_image, **options)
        np.testing.assert_array_equal(other.orders, apart.orders)
        np.testing.assert_allclose(other.curves, apart.curves, rtol=1e-6)
    assert (bands.drawn, bands.reused) == (5, 1)


def test_over_its_cap_the_least_recently_used_band_goes_first():
    model = tiny_vit()
    images = [random_image(32, 32, seed=s) for s in range(3)]
    probe = RandomBands()
    probe.get(model, images[0], **QUICK)
    bands = RandomBands(max_bytes=int(2.5 * probe.nbytes))  # room for two bands
    for image in (images[0], images[1], images[0], images[2]):  # the first used again: the second is older
        bands.get(model, image, **QUICK)
    assert bands.drawn == 3
    drawn = bands.drawn
    bands.get(model, images[0], **QUICK)
    bands.get(model, images[2], **QUICK)
    assert bands.drawn == drawn  # kept
    bands.get(model, images[1], **QUICK)
    assert bands.drawn == drawn + 1  # evicted


@pytest.mark.parametrize("tab", ["rollout", "attributions"])
def test_a_second_check_that_changes_only_the_map_sends_no_random_order_through_the_model(tmp_path, tab):
    """Through the app's own handlers: the Rollout tab's check with another fusion and discard ratio, and the
    Attributions tab's with another method, run exactly a band's forwards fewer than the first check (that band
    drawn apart on the same input counts them) and rank their maps against the very same random orders."""
    from vitviz.app.server import Server
    from vitviz.app.tabs import attributions, rollout

    server, path = Server(device="cpu"), tmp_path / "photo.png"
    cv2.imwrite(str(path), random_image(32, 32))
    model = tiny_vit()
    server.models[model.name] = model
    quiet = dict(request=None, progress=lambda *a, **k: None)
    where = (str(path), model.name, "224")
    if tab == "rollout":
        checks = [
            lambda f=f, d=d: rollout.check_faithfulness(server, *where, f, d, **quiet)
            for f, d in (("mean", 0), ("max", 0.5))
        ]
    else:
        settings = [attributions.Settings.of(m, "default", "blurred", 8, 0, 1, []) for m in ("saliency", "grad_cam")]
        checks = [lambda s=s: attributions.check_faithfulness(server, where, s, None, **quiet) for s in settings]
    used = server.get_attribution_model(model.name)
    counts, notes = [], []
    for check in checks:
        before = used.forwards
        _, text = check()
        counts.append(used.forwards - before)
        notes.append(text)
    before = used.forwards
    output = server.get_analysis(*where, None).output
    random_band(used, str(path), output=output)
    band_forwards = used.forwards - before
    assert band_forwards >= passes(maps=0) // 16  # the 50 orders' masked images, 16 a forward
    assert counts[0] - counts[1] == band_forwards, (counts, band_forwards)
    assert (server.bands.drawn, server.bands.reused) == (1, 1)
    note = [line for line in notes[0].split("\n\n") if line.startswith("Each map is ranked against")]
    assert note and note[0] in notes[1]  # the same orders, drawn in the same seconds
    assert notes[0] != notes[1]  # the maps differ


@pytest.mark.parametrize("tab", ["rollout", "attributions"])
def test_a_check_button_says_less_once_its_random_orders_are_kept(tmp_path, tab):
    """The faithfulness check's button reads whether this photo and output have a kept band: its expected time
    then leaves the random orders' images out, and `holds` asks without counting a reuse."""
    import re

    from vitviz.app.heavy import cost
    from vitviz.app.server import Server
    from vitviz.app.tabs import attributions, rollout

    server, path = Server(device="cpu"), tmp_path / "photo.png"
    cv2.imwrite(str(path), random_image(32, 32))
    model = tiny_vit()
    server.models[model.name] = model
    where = (str(path), model.name, "224")
    for _ in range(3):
        server.heavy.measured("forward", 0.5)  # half a second an image: the two estimates' minutes and seconds
    a = server.get_analysis(*where, None)
    if tab == "rollout":
        label = lambda: rollout.label_check(server, *where, "output", request=None).value  # noqa: E731
        output = dict(output=a.output)
    else:
        s = attributions.Settings.of("saliency", "default", "blurred", 8, 0, 1, [])
        label = lambda: attributions.relabel(server, where, s)[1].value  # noqa: E731
        output = s.output_options(a, str(path))
    said = re.compile(r"about (\d+) (s|min)")
    first = said.search(label()).groups()
    used = server.get_attribution_model(model.name)
    assert not server.bands.holds(used, str(path), **output)
    server.bands.get(used, str(path), **output)
    assert server.bands.holds(used, str(path), **output) and server.bands.reused == 0
    maps, more = (len(rollout.HEAD_FUSIONS), 1) if tab == "rollout" else (3, 2)  # the rollouts' forward, or two maps'
    before, after = (0.5 * cost(a, lambda grid, n=n: passes(maps=maps, random_orders=n) + more) for n in (50, 0))
    assert first == _duration(before) and said.search(label()).groups() == _duration(after), (before, after)
    assert after < before / 4


def _duration(seconds: float) -> tuple[str, str]:
    """As the buttons say it (`heavy._duration`), split into its number and unit."""
    return (f"{max(seconds, 1):.0f}", "s") if seconds < 90 else (f"{seconds / 60:.0f}", "min")
