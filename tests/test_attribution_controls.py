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
    assert choices == [("the dense map on what it marks", "default"), ("the dense map over the image", "image")]
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
    assert names[:11] == [
        "server",
        "image",
        "model_name",
        "size",
        "method_label",
        "target",
        "baseline",
        "n_steps",
        "noise_samples",
        "block",
        "points",
    ]
    assert inspect.signature(fn).parameters["text"].default == ""
    assert inspect.signature(fn).parameters["request"].annotation is gr.Request
    with pytest.raises(ValueError, match="method must be one of"):
        controls.Settings.of("LIME", "default", "blurred", 8, 0, 11, [])


def fresh_controls(monkeypatch):
    """A fresh copy of the controls' module, made from the records as they are now (the real one is left as it is)."""
    import importlib.util
    import sys

    name = "vitviz.app.attribution_controls_fresh"
    spec = importlib.util.spec_from_file_location(name, controls.__file__)
    fresh = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, fresh)
    spec.loader.exec_module(fresh)
    return fresh


def test_a_new_option_in_a_record_becomes_a_control_and_an_api_parameter(monkeypatch):
    """The tab's controls, its endpoints' parameters, the settings and each method's visible controls all come
    from the records: an option added to one record shows up in each, for that method only."""
    from dataclasses import replace

    ig = methods.REGISTRY["integrated_gradients"]
    warmth = methods.Option("warmth", "warmth", "Integrated Gradients: warmth", 0.5, 0.0, 1.0, slider=(0.0, 1.0, 0.1))
    hidden = replace(warmth, keyword="chill", name="chill", offered=False)
    monkeypatch.setitem(methods.REGISTRY, ig.key, replace(ig, options=(*ig.options, warmth, hidden)))
    fresh = fresh_controls(monkeypatch)
    assert [o.name for o in fresh.OPTIONS] == ["baseline", "n_steps", "noise_samples", "warmth", "block"]
    assert fresh.CONTROLS == [
        "method_label",
        "target",
        "baseline",
        "n_steps",
        "noise_samples",
        "warmth",
        "block",
        "points",
    ]
    fn = fresh.endpoint(lambda server, where, s, request=None, progress=None: s)
    assert "warmth" in inspect.signature(fn).parameters and "chill" not in inspect.signature(fn).parameters
    values = ["blurred", 32, 0, 0.3, 11]
    assert shown(fresh.fit_options("Integrated Gradients", *values)) == [True, True, True, True, False]
    assert shown(fresh.fit_options("Saliency (|gradient|)", *values)) == [False] * 5
    s = fresh.Settings.of("Integrated Gradients", "default", *values, [])
    assert s.options["warmth"] == 0.3 and s.attribute_options()["warmth"] == 0.3
    assert s.attribute_options()["chill"] == 0.5  # not offered: at its default
    control = fresh.option_control(warmth, tiny_vit(), True)
    assert isinstance(control, gr.Slider) and control.label == "Integrated Gradients: warmth"
    assert (control.minimum, control.maximum, control.value, control.elem_id) == (0.0, 1.0, 0.5, "option-warmth")


def test_an_option_whose_range_is_the_models_goes_up_to_its_last_block():
    """Grad-CAM's block is found by its record (`most`), not by the shape of its control."""
    assert [o.name for o in controls.MODEL_RANGED] == ["block"]
    model = tiny_vit()
    (block,) = controls.model_ranges(model)
    assert (block.maximum, block.value) == (model.num_layers - 1, model.num_layers - 1)
    control = controls.option_control(methods.BLOCK, model, False)
    assert (control.minimum, control.maximum, control.value, control.visible) == (0, 2, 2, False)
