"""vitviz.app.attribution_controls: the Attributions tab's controls come from the methods' records, and its
handlers take one settings record."""

from __future__ import annotations

import inspect

import gradio as gr
import pytest
from conftest import random_image, tiny_vit

import vitviz
import vitviz.attributions
from vitviz import methods
from vitviz.app import attribution_controls as controls
from vitviz.outputs import Output


def shown(updates) -> list[bool]:
    return [u["visible"] for u in updates]


def test_each_option_shows_where_the_chosen_method_reads_it():
    values = ("blurred", 32, 0, 11)  # baseline, steps, samples, block: controls.OPTIONS' order
    assert [o.name for o in controls.OPTIONS] == ["baseline", "n_steps", "noise_samples", "block"]
    assert shown(controls.fit_options("Integrated Gradients", *values)) == [True, True, True, False]
    assert shown(controls.fit_options("Grad-CAM on one block", *values)) == [False, False, False, True]
    assert shown(controls.fit_options("Occlusion (one patch at a time)", *values)) == [True, False, False, False]
    assert shown(controls.fit_options("Saliency (|gradient|)", *values)) == [False] * 4


def test_a_methods_own_range_label_and_default_reach_its_control(monkeypatch):
    """SmoothGrad's copies start at 1, where IG's NoiseTunnel samples start at 0 (off): its control follows it."""
    smooth = methods.REGISTRY["smoothgrad"]
    monkeypatch.setitem(controls.METHOD_BY_LABEL, smooth.label, smooth.key)
    samples = controls.fit_options(smooth.label, "blurred", 32, 0, 11)[2]
    assert samples["visible"] and samples["label"] == "SmoothGrad: noisy copies"
    assert (samples["minimum"], samples["maximum"], samples["value"]) == (1, 16, 8)  # 0 is outside: its default
    assert controls.fit_options(smooth.label, "blurred", 32, 5, 11)[2]["value"] == 5  # inside: kept
    ig = controls.fit_options("Integrated Gradients", "blurred", 32, 5, 11)[2]
    assert (ig["minimum"], ig["label"]) == (0, "NoiseTunnel samples (0 = off)")


def test_the_target_list_offers_the_dense_map_over_the_image_in_a_few_words(embedded, coffee):
    a = vitviz.analyze(embedded, coffee, longest=224)
    choices = controls.target_choices(a)
    assert choices == [("the dense map where salient", "default"), ("the dense map over the image", "image")]
    assert all(len(label) <= 30 for label, _ in choices)  # none cut off in the list
    s = controls.Settings.of("Saliency (|gradient|)", "image", "blurred", 8, 0, 11, [])
    assert s.output_options(a, coffee) == {"output": Output("dense", region="image")}
    boxed = controls.Settings.of("Saliency (|gradient|)", "image", "blurred", 8, 0, 11, [[0, 0], [50, 40]])
    assert boxed.output_options(a, coffee)["output"].box == (0.0, 0.0, 50.0, 40.0)  # a box drawn wins
    image = random_image(32, 32)
    classifier = vitviz.analyze(tiny_vit(), image)
    offered = [v for _, v in controls.target_choices(classifier)]
    assert offered == controls.TARGETS[: len(offered)]  # a classifier's top classes
    second = vitviz.attributions.targets(classifier.model, image)[1][1]
    for target, index in (("default", None), ("top-2", second)):
        # a box and a text mean nothing to a classifier without a dense head or a text tower: its class is followed
        s = controls.Settings.of("Saliency (|gradient|)", target, "blurred", 8, 0, 1, [[0, 0], [9, 9]], text="a dog")
        assert s.output_options(classifier, image) == {"output": Output("class", index=index)}
    salient = controls.Settings.of("Saliency (|gradient|)", "default", "blurred", 8, 0, 11, [])
    assert salient.output_options(a, coffee) == {"output": Output("dense")}
    with pytest.raises(ValueError, match="target must be one of"):
        controls.Settings.of("Saliency (|gradient|)", "top-9", "blurred", 8, 0, 11, []).output_options(a, coffee)


def test_an_endpoint_hands_its_handler_one_settings_record_and_keeps_the_api_names():
    got = {}

    def handler(server, where, s, display=None, request=None, progress=None):
        got.update(where=where, s=s, display=display)
        return "drawn"

    fn = controls.endpoint(handler, ["cmap", "alpha", "colour_scale", "text"], {"text": ""})
    values = ["a.png", "tiny", "224", "Grad-CAM on one block", "top-2", "black", 16, 2, 3, [[1, 2], [3, 4]]]
    assert fn("server", *values, "viridis", 0.5, "log", " a dog ", None, None) == "drawn"
    assert got["where"] == ("a.png", "tiny", "224") and got["display"] == controls.Display("viridis", 0.5, "log")
    options = {"baseline": "black", "n_steps": 16, "nt_samples": 2, "layer": 3}
    assert got["s"] == controls.Settings("grad_cam", "top-2", options, ((1, 2), (3, 4)), "a dog")
    names = list(inspect.signature(fn).parameters)
    assert names[:11] == ["server", "image", "model_name", "size", "method_label", "target", "baseline", "n_steps",
                          "noise_samples", "block", "points"]  # fmt: skip
    assert inspect.signature(fn).parameters["text"].default == ""
    assert inspect.signature(fn).parameters["request"].annotation is gr.Request
    with pytest.raises(ValueError, match="method must be one of"):
        controls.Settings.of("LIME", "default", "blurred", 8, 0, 11, [])
