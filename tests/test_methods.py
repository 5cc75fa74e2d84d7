"""vitviz.methods: the registry of attribution methods, and SmoothGrad, the method added through it."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch
import transformers as tf
from conftest import TINY, random_image, tiny_vit

import vitviz
from vitviz import methods
from vitviz.attributions import METHODS, SIGNED, attribute, model_passes, target_function
from vitviz.outputs import output_for


def test_every_method_is_one_record_found_by_its_module_and_the_lists_derive_from_them():
    assert list(methods.REGISTRY)[:7] == list(METHODS)  # the tab's order
    assert {"rollout", "smoothgrad"} <= set(methods.REGISTRY) - set(METHODS)  # not offered in the tab's list
    assert set(SIGNED) == {k for k, m in methods.REGISTRY.items() if m.signed}
    for key, m in methods.REGISTRY.items():
        assert m.key == key and m.label and callable(m.map)
        assert all(methods.declared()[o.keyword].name == o.name for o in m.options)  # one name an option
    with pytest.raises(ValueError, match="unknown attribution method 'lime': use one of integrated_gradients"):
        methods.get("lime")


def test_an_options_range_and_default_come_from_the_methods_own_record():
    model, image = tiny_vit(), random_image(32, 32, seed=3)
    with pytest.raises(ValueError, match="nt_samples must be between 1 and 256, got 0"):
        attribute(model, image, "smoothgrad", nt_samples=0)  # SmoothGrad's copies start at 1
    assert attribute(model, image, "integrated_gradients", n_steps=4, nt_samples=0).delta is not None  # IG's at 0
    assert model_passes("smoothgrad", None, None, (4, 4)) == 8  # its own default
    assert model_passes("smoothgrad", 99, 3, (4, 4)) == 3  # the steps are IG's, not its
    assert model_passes("integrated_gradients", None, None, (4, 4)) == 32 + 2


def test_smoothgrad_is_the_mean_of_input_times_gradient_over_the_same_noisy_copies():
    """(x + e_k) * grad f(x + e_k), averaged over k, with the noise drawn as NoiseTunnel draws it (one copy at a
    time, Gaussian of the given deviation), in float64; and with no noise, Input × Gradient itself."""
    model, image = tiny_vit(), random_image(40, 56, seed=8)
    torch.manual_seed(0)
    r = attribute(model, image, "smoothgrad", nt_samples=3, nt_stdev=0.2, longest=56, target=2)
    x, score, _, _ = target_function(model, image, output_for(model, 2), longest=56)
    torch.manual_seed(0)
    total = np.zeros(x.shape, np.float64)
    for _ in range(3):
        noisy = (x + torch.normal(0, torch.full(x.shape, 0.2))).requires_grad_()
        (grad,) = torch.autograd.grad(score(noisy).sum(), noisy)
        total += noisy.detach().double().numpy() * grad.double().numpy()
    np.testing.assert_allclose(r.raw, total / 3, rtol=1e-4, atol=1e-6 * np.abs(total).max())
    assert r.method == "smoothgrad" and r.delta is None and r.raw.shape == (1, 3, 40, 56)
    still = attribute(model, image, "smoothgrad", nt_samples=2, nt_stdev=0.0, longest=56, target=2)
    plain = attribute(model, image, "input_x_gradient", longest=56, target=2)
    np.testing.assert_allclose(still.raw, plain.raw, rtol=1e-5, atol=1e-7)


def test_an_option_checks_a_value_and_names_what_it_accepts():
    assert methods.BASELINE.checked("black") == "black"
    with pytest.raises(ValueError) as raised:
        methods.BASELINE.checked("grey")
    assert str(raised.value) == "unknown baseline 'grey': use one of blurred, black, mean colour"
    assert methods.STEPS.checked(512) == 512 and methods.STEPS.checked("1") == 1 and methods.STEPS.checked(None) is None
    for bad in (0, 513):
        with pytest.raises(ValueError) as raised:
            methods.STEPS.checked(bad)
        assert str(raised.value) == f"n_steps must be between 1 and 512, got {bad}"
    assert methods.BLOCK.checked(99) == 99  # its model's own limit, which Grad-CAM checks
    with pytest.raises(ValueError) as raised:
        methods.BLOCK.checked(-1)
    assert str(raised.value) == "layer must be between 0 and its model's last, got -1"
    assert replace(methods.STEPS, default=0.5, low=0.0, high=1.0).checked("0.25") == 0.25  # a float option


def test_an_unknown_option_is_named_with_the_methods_own():
    model, image = tiny_vit(), random_image(32, 32, seed=3)
    with pytest.raises(ValueError) as raised:
        attribute(model, image, "integrated_gradients", n_step=16)
    said = "unknown option 'n_step' for the method 'integrated_gradients': its options are baseline, n_steps, "
    assert str(raised.value) == said + "nt_samples, nt_stdev"
    with pytest.raises(ValueError) as raised:
        attribute(model, image, "saliency", temperature=2)
    assert str(raised.value) == "unknown option 'temperature' for the method 'saliency': it takes no options"
    # another method's option is checked as that method declares it, and left out: one set runs over every method
    with pytest.raises(ValueError, match="^n_steps must be between 1 and 512, got 0$"):
        attribute(model, image, "saliency", n_steps=0)
    plain = attribute(model, image, "saliency").raw
    np.testing.assert_array_equal(attribute(model, image, "saliency", n_steps=8, layer=1).raw, plain)


# Given to every method at once: a value of each option that any method declares, none of them its default
GIVEN = {"baseline": "black", "n_steps": 3, "nt_samples": 2, "nt_stdev": 0.05, "layer": 1}


def test_each_method_is_given_exactly_the_options_its_record_declares(monkeypatch):
    """The Job holds the method's own options, the given values checked; the others' stay out of it."""
    assert set(GIVEN) == set(methods.declared())  # a new option gets a value here
    assert all(GIVEN[o.keyword] != o.default for m in methods.REGISTRY.values() for o in m.options)
    model, image = tiny_vit(), random_image(32, 32, seed=5)
    for key, record in methods.REGISTRY.items():
        jobs = []

        def spy(job, jobs=jobs):
            jobs.append(job)
            return np.zeros((1, 3, *job.x.shape[2:]), np.float32), None

        monkeypatch.setitem(methods.REGISTRY, key, replace(record, map=spy))
        attribute(model, image, key, **GIVEN)
        assert jobs[0].options == {o.keyword: GIVEN[o.keyword] for o in record.options}, key
        attribute(model, image, key)
        assert jobs[1].options == {o.keyword: o.default for o in record.options}, key


def spy_on(monkeypatch, cls) -> list[dict]:
    """What each call of Captum's `cls.attribute` was given, by keyword, the call itself made as it is."""
    calls = []

    def spy(call):
        def spied(self, *args, **kwargs):
            calls.append(kwargs)
            return call(self, *args, **kwargs)

        return spied

    spied = spy(cls.attribute)
    spied.__wrapped__ = spy(cls.attribute.__wrapped__)  # NoiseTunnel calls the undecorated one
    monkeypatch.setattr(cls, "attribute", spied)
    return calls


def test_each_methods_options_reach_captum(monkeypatch):
    """Every option that a method declares reaches the Captum call it names (or, Grad-CAM's block, the block that
    is hooked): this list of (method, option) pairs is the records', no more and no less."""
    from captum.attr import IntegratedGradients, NoiseTunnel, Occlusion

    reached = set()
    model, image = tiny_vit(), random_image(32, 32, seed=6)
    x, _, _, _ = target_function(model, image, output_for(model))
    black = methods.absent_input("black", image, x, model)

    ig = spy_on(monkeypatch, IntegratedGradients)
    attribute(model, image, "integrated_gradients", n_steps=5, baseline="black")
    assert ig[-1]["n_steps"] == 5 and torch.equal(ig[-1]["baselines"], black)
    reached |= {("integrated_gradients", "n_steps"), ("integrated_gradients", "baseline")}
    tunnel = spy_on(monkeypatch, NoiseTunnel)
    for key in ("integrated_gradients", "smoothgrad"):
        attribute(model, image, key, n_steps=2, nt_samples=3, nt_stdev=0.07)
        assert (tunnel[-1]["nt_samples"], tunnel[-1]["stdevs"]) == (3, 0.07), key
        reached |= {(key, "nt_samples"), (key, "nt_stdev")}
    occlusion = spy_on(monkeypatch, Occlusion)
    attribute(model, image, "occlusion", baseline="black")
    assert torch.equal(occlusion[-1]["baselines"], black)
    reached.add(("occlusion", "baseline"))
    hooked = []
    for i, block in enumerate(model.blocks):
        register = block.register_forward_pre_hook
        monkeypatch.setattr(
            block, "register_forward_pre_hook", lambda *a, i=i, r=register, **k: hooked.append(i) or r(*a, **k)
        )
    attribute(model, image, "grad_cam", layer=1)
    attribute(model, image, "grad_cam")
    assert hooked == [1, model.num_layers - 1]
    reached.add(("grad_cam", "layer"))
    assert reached == {(k, o.keyword) for k, m in methods.REGISTRY.items() for o in m.options}


def relu_vit() -> vitviz.VitModel:
    """A tiny ViT whose MLPs use ReLU modules (a ViT's are GELU): where Guided Backprop's rule acts."""
    torch.manual_seed(0)
    cfg = tf.ViTConfig(**TINY, hidden_act="relu", num_labels=5, id2label={i: f"class {i}" for i in range(5)})
    return vitviz.wrap(tf.ViTForImageClassification(cfg), "tiny-vit-relu")


class _Guided(torch.autograd.Function):
    """ReLU whose backward passes only a positive gradient where the input was positive (Springenberg et al.)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad.clamp(min=0) * (x > 0)


class _GuidedReLU(torch.nn.Module):
    def forward(self, x):
        return _Guided.apply(x)


def gradient_by_hand(model: vitviz.VitModel, image, guided: bool) -> np.ndarray:
    """d output / d input, with every ReLU module made guided (on a copy of the model) or as it is."""
    if guided:
        model = replace(model, net=copy.deepcopy(model.net))
        for name, module in list(model.net.named_modules()):
            if isinstance(module, torch.nn.ReLU):
                parent, _, attr = name.rpartition(".")
                setattr(model.net.get_submodule(parent), attr, _GuidedReLU())
    x, score, _, _ = target_function(model, image, output_for(model, 2))
    x = x.clone().requires_grad_()
    (grad,) = torch.autograd.grad(score(x).sum(), x)
    return grad.numpy()


def test_guided_backprop_stops_negative_gradients_at_each_relu_of_the_module_it_is_given():
    """Captum's GuidedBackprop hooks the ReLU modules of `Job.module`, which holds the model's: on a ReLU ViT its
    map is the guided gradient by hand (not the plain one); on a GELU ViT, with no ReLU to hook, the plain one."""
    model, image = relu_vit(), random_image(32, 32, seed=9)
    assert any(isinstance(m, torch.nn.ReLU) for m in model.net.modules())
    r = attribute(model, image, "guided_backprop", target=2)
    guided, plain = gradient_by_hand(model, image, True), gradient_by_hand(model, image, False)
    assert r.raw.shape == (1, 3, 32, 32) and r.delta is None and r.method == "guided_backprop"
    np.testing.assert_allclose(r.raw, guided, rtol=1e-4, atol=1e-6 * np.abs(guided).max())
    assert np.abs(guided - plain).max() > 0.1 * np.abs(plain).max()  # the rule changed the map
    gelu = tiny_vit()
    r = attribute(gelu, image, "guided_backprop", target=2)
    np.testing.assert_allclose(r.raw, gradient_by_hand(gelu, image, False), rtol=1e-5, atol=1e-8)
    assert "guided_backprop" in methods.REGISTRY and "guided_backprop" not in METHODS  # not in the tab's list
