"""9 · Attributions: which pixels drive an output (Captum, relevancy), beside attention rollout."""

from __future__ import annotations

import os
import threading

import gradio as gr
import numpy as np

from .. import render, views
from ..analysis import Analysis
from ..attributions import BASELINES, METHODS, attribute, attribution_size, input_analysis, model_passes, targets
from ..maps import DEFAULT_SCALE
from .session import (
    FREED,
    PRIORITY,
    REDRAWS,
    analysis_key,
    get_analysis,
    get_attribution_model,
    picture,
    session_of,
    slots,
    user_errors,
)
from .source import Context, view_tab

METHOD_BY_LABEL = {label: key for key, label in METHODS.items()}
# Images through the model (forward and backward), counted at 224x224, that one request may cost: about
# 2 minutes on a 2-core CPU. The UI's maximum, 128 steps x 16 NoiseTunnel samples, would take half an hour.
BUDGET = int(os.environ.get("VITVIZ_ATTRIBUTION_BUDGET", 600))
TARGETS = ["default", "top-2", "top-3", "top-4", "top-5"]  # the default is the top class for a classifier


def parse_box(points) -> tuple[float, float, float, float] | None:
    """Two clicked corners [[x, y], [x, y]] in original-image pixels -> (x0, y0, x1, y1); none or one: no box."""
    if not points or len(points) < 2:
        return None
    try:
        (xa, ya), (xb, yb) = [(float(x), float(y)) for x, y in points[:2]]
    except (TypeError, ValueError):
        raise ValueError(f"box must be two corners [[x0, y0], [x1, y1]] in image pixels, got {points!r}") from None
    return min(xa, xb), min(ya, yb), max(xa, xb), max(ya, yb)


def box_picture(a: Analysis, points) -> np.ndarray:
    base = views.display(a)
    box = parse_box(points)
    return base if box is None else render.draw_box(base, box, base.shape[1] / a.image.shape[1])


@user_errors
def setup(image, model_name, size, points, request: gr.Request):
    """The targets this model offers on this image, the box picker and the Grad-CAM block range."""
    a = get_analysis(image, model_name, size, request)
    choices = [(label, value) for (label, _), value in zip(targets(a.model, image), TARGETS, strict=False)]
    last = a.model.num_layers - 1
    return gr.Dropdown(choices=choices, value=TARGETS[0]), box_picture(a, points), gr.Slider(maximum=last, value=last)


@user_errors
def pick_corner(image, model_name, size, points, evt: gr.SelectData, request: gr.Request):
    """Clicks on the picture set the box's corners: the first click starts a box, the second ends it."""
    a = get_analysis(image, model_name, size, request)
    if a.model.decoder is None:
        raise ValueError("A box only applies to the embedded model's dense head; this model's target is one class.")
    scale = a.image.shape[1] / views.display(a).shape[1]
    point = [evt.index[0] * scale, evt.index[1] * scale]
    points = [point] if not points or len(points) >= 2 else [points[0], point]
    return points, box_picture(a, points)


@user_errors
def clear_box(image, model_name, size, request: gr.Request):
    return [], None if not image else box_picture(get_analysis(image, model_name, size, request), [])


@user_errors
def run(image, model_name, size, method_label, target, baseline, n_steps, noise_samples, block, points, cmap, alpha,
        colour_scale=DEFAULT_SCALE, request: gr.Request = None, progress=gr.Progress()):  # fmt: skip
    """Attribute the chosen output with the chosen method; rollout and relevancy beside it. Also returns the
    result itself, kept for the session so that a display setting recolours it without running it again."""
    a = get_analysis(image, model_name, size, request)
    method = METHOD_BY_LABEL.get(method_label, method_label)
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS.values())}, got {method_label!r}")
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    rank = TARGETS.index(target)
    h, w = attribution_size(a.model, *a.image.shape[:2])
    p = a.model.patch_size
    cost = model_passes(method, int(n_steps), int(noise_samples), (h // p, w // p)) * h * w / 224**2
    if cost > BUDGET:
        raise ValueError(
            f"{METHODS[method]} with {int(n_steps)} steps and {int(noise_samples)} NoiseTunnel samples needs "
            f"{cost:.0f} passes through the model (at 224×224), over this server's limit of {BUDGET} "
            "(VITVIZ_ATTRIBUTION_BUDGET): lower the steps or the samples"
        )
    model = get_attribution_model(model_name)
    options = dict(
        target=None if rank == 0 or a.model.labels is None else targets(a.model, image)[rank][1],
        box=parse_box(points) if a.model.decoder is not None else None,
    )
    progress(0.0, desc=f"{METHODS[method]}: running the model")
    passes = f"{METHODS[method]}: forward and backward passes"
    stopped = _STOPPED[session_of(request)] = threading.Event()  # this run's; Stop sets the latest one

    def report(fraction: float) -> None:
        if stopped.is_set():  # Stop pressed, or the page closed: end at this batch, not minutes later
            raise ValueError(f"{METHODS[method]} stopped at {fraction:.0%}")
        progress(fraction, desc=passes)
        PRIORITY.wait_for_interactive()  # between batches, let other users' new images through

    try:
        r = attribute(model, image, method, n_steps=int(n_steps), baseline=baseline, nt_samples=int(noise_samples),
                      layer=int(block), internal_batch_size=4, progress=report, **options)  # fmt: skip
        rel = r if method == "relevancy" else attribute(model, image, "relevancy", **options)
    finally:
        FREED.set()  # its gradients' memory goes back to the system within seconds, not at the next eviction
        if _STOPPED.get(session_of(request)) is stopped:  # a session keeps no event once its run is over
            del _STOPPED[session_of(request)]
    same = input_analysis(model, image).rollout("mean", 0.0)  # rollout on the attribution's own input
    kept = (analysis_key(image, model_name, size), views.attribution_inputs(a, r, rel, same))
    shown, roll, rel_img = views.attribution_pictures(kept[1], cmap, float(alpha), colour_scale)
    size = f"{r.grid[1] * a.model.patch_size}×{r.grid[0] * a.model.patch_size} px"
    lines = [f"**{METHODS[method]}** · **target:** {r.target} = {r.score:.4g} · input {size}, the same for the "
             f"rollout and relevancy beside it · {r.seconds:.1f} s"]  # fmt: skip
    if r.delta is not None:
        total = float(r.raw.sum())
        lines.append(
            f"**Convergence delta** (Integrated Gradients): {r.delta:.3g}, that is "
            f"{abs(r.delta) / max(abs(total), 1e-12):.1%} of the attributions' sum {total:.4g}. "
            "Near 0 means the attributions add up to f(image) − f(baseline); if it is large, raise the steps."
        )
    return shown, roll, rel_img, "\n\n".join(lines), kept


@user_errors
def recolour(kept, key, cmap, alpha, colour_scale):
    """The kept result's three pictures in the current colormap, opacity and colour scale, drawn from what
    it kept (no model, no analysis); nothing when the result belongs to another image (a new image clears
    it) or there is none."""
    if kept is None or kept[0] != key:
        return gr.skip(), gr.skip(), gr.skip()
    with REDRAWS.interactive():  # milliseconds: the background warm waits for it
        return views.attribution_pictures(kept[1], cmap, float(alpha), colour_scale)


_STOPPED: dict[str, threading.Event] = {}


STOPPED_NOTE = "**Stopped.** The attribution ended at its next batch and kept nothing; press Compute to run it again."


def stop(request: gr.Request) -> str:
    """Stop this session's attribution at its next batch (the Stop button, a new or cleared image, the page
    closed), and say so."""
    stopped = _STOPPED.pop(session_of(request), None)
    if stopped is None:
        return gr.skip()
    stopped.set()
    return STOPPED_NOTE


def stop_on_unload(request: gr.Request) -> None:
    stop(request)


def new_image(request: gr.Request):
    """A new or cleared image: a running attribution stops (and says so); the result and the box go."""
    said = stop(request)
    return [], None, None, None, said if isinstance(said, str) else "", None


def drop_stale(kept, key):
    """A result that finished for another image than the one now shown is not shown (a new image stops a run,
    but one may end in the same instant)."""
    if kept is not None and kept[0] != key:
        return None, None, None, "", None
    return (gr.skip(),) * 5


def build(ctx: Context) -> None:
    last = ctx.model.num_layers - 1
    with view_tab(
        "9 · Attributions",
        (
            "Attention shows where tokens *look*; an attribution shows "
            "which pixels *drive an output*. Gradient methods (Captum) ask how the output "
            "changes when pixels change; occlusion hides one patch at a time; *relevancy* "
            "(Chefer et al. 2021) weighs each layer's attention by its gradient. Compare the "
            "three pictures: where attention rollout and the attributions disagree, attention "
            "was not the whole story. A classifier's target is a class; the embedded model's "
            "is its dense head's output, over the image or inside a box you draw."
        ),
        id="attributions",
        elem_id="attributions-tab",
    ) as tab:
        with gr.Row():
            method = gr.Dropdown(
                list(METHODS.values()), value=METHODS["integrated_gradients"], label="Method", elem_id="method"
            )
            target = gr.Dropdown([(t, t) for t in TARGETS], value=TARGETS[0], label="Target")
            baseline = gr.Radio(list(BASELINES), value=BASELINES[0], label="Baseline (absent)")
        with gr.Row():
            steps = gr.Slider(4, 128, value=32, step=4, precision=0, label="Integrated Gradients: steps")
            noise = gr.Slider(0, 16, value=0, step=1, precision=0, label="NoiseTunnel samples (0 = off)")
            block = gr.Slider(0, last, value=last, step=1, precision=0, label="Grad-CAM: block")
            with gr.Column(min_width=140):
                button = gr.Button("Compute attribution", variant="primary")
                halt = gr.Button("Stop", variant="stop", size="sm")
        with gr.Row():
            box_img = picture(label="Box for the dense head: click two corners", scale=1)
            with gr.Column(scale=2):
                clear = gr.Button("Clear the box (whole image)", size="sm")
                summary = gr.Markdown(elem_id="attr-summary", label="Summary")
        with gr.Row():
            shown = picture(label="Attribution", elem_id="attribution")
            roll = picture(label="Attention rollout")
            rel = picture(label="Relevancy (Chefer et al.)")
        box = gr.JSON([], visible=False, label="Box")  # a component, so that the API can pass a box
        kept = gr.State(None)  # this session's last result, recoloured when a display setting changes
    results = [shown, roll, rel, summary, kept]
    ctx.view(tab, setup, [*ctx.where, box], [target, box_img, block])
    running = button.click(
        run,
        [*ctx.where, method, target, baseline, steps, noise, block, box, ctx.cmap, ctx.alpha, ctx.scale],
        results,
        api_name="attribute",
        **slots("heavy"),
    )
    # A display setting recolours the kept result; so does the end of a run, for settings changed during it.
    recolouring = dict(api_visibility="private", show_progress="minimal", **slots("draw"))
    inputs = [kept, ctx.key, ctx.cmap, ctx.alpha, ctx.scale]
    gr.on([c.change for c in (ctx.cmap, ctx.alpha, ctx.scale)], recolour, inputs, [shown, roll, rel],
          trigger_mode="always_last", **recolouring)  # fmt: skip
    running.success(drop_stale, [kept, ctx.key], results, api_visibility="private", queue=False).success(
        recolour, inputs, [shown, roll, rel], **recolouring
    )
    halt.click(stop, None, summary, cancels=[running], api_visibility="private", queue=False)
    # A result belongs to one image: a new or cleared image stops a run and clears the result and the box.
    ctx.key.change(new_image, None, [box, *results], cancels=[running], api_visibility="private", queue=False)
    ctx.demo.unload(stop_on_unload)
    box_img.select(pick_corner, [*ctx.where, box], [box, box_img], api_visibility="private")
    clear.click(clear_box, ctx.where, [box, box_img], api_visibility="private")
