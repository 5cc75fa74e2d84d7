"""Attributions: which pixels drive an output (Captum, relevancy), beside attention rollout."""

from __future__ import annotations

import gradio as gr
import numpy as np

from .. import plots, render, sanity, views
from ..analysis import Analysis
from ..attributions import (
    BASELINES,
    METHODS,
    attribute,
    input_analysis,
    model_passes,
    patch_scores,
    targets,
)
from ..deletion import faithfulness, passes
from ..maps import DEFAULT_SCALE
from .heavy import cost, expected, stop_run, stoppable, within_budget
from .pictures import picture
from .session import (
    Server,
    slots,
    user_errors,
)
from .source import Context, view_tab

METHOD_BY_LABEL = {label: key for key, label in METHODS.items()}
# the most faithful method on docs/benchmarks.md's table (the lowest mean deletion area on 20 photos)
DEFAULT_METHOD = "integrated_gradients"
TARGETS = ["default", "top-2", "top-3", "top-4", "top-5"]  # the default is the top class for a classifier
# On a projector the three maps come right under the controls, on one screen with them; the box to draw and the
# summary follow them.
CSS = """body.vitviz-large #attr-results ~ * { order: 2; }
body.vitviz-large #attr-box-row { order: 1; }"""


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
def setup(a, points, request: gr.Request):
    """The targets this model offers on this image, the box picker, the Grad-CAM block range and the text target
    (shown for a model with a text tower)."""
    choices = [(label, value) for (label, _), value in zip(targets(a.model, a.image), TARGETS, strict=False)]
    last = a.model.num_layers - 1
    return (gr.Dropdown(choices=choices, value=TARGETS[0]), box_picture(a, points),
            gr.Slider(maximum=last, value=last), gr.Textbox(visible=a.model.has_text))  # fmt: skip


COMPUTE, CHECK, SANITY = ("Compute attribution", "Check faithfulness: hide the top patches",
                          "Sanity check: randomise the model from the top")  # fmt: skip


def _buttons(server: Server, a: Analysis, method_label, n_steps, noise_samples) -> tuple:
    """Compute, Check faithfulness and Sanity check, each saying how long it takes on this image here."""
    method = METHOD_BY_LABEL.get(method_label, DEFAULT_METHOD)
    n, samples = int(n_steps), int(noise_samples)
    one = lambda grid: model_passes(method, n, samples, grid)  # noqa: E731
    curves = lambda grid: 3 * passes() + 2  # noqa: E731  the map's, the rollout's and relevancy's, and their maps
    sanity = lambda grid: (a.model.num_layers + 1) * one(grid)  # noqa: E731
    return (gr.Button(f"{COMPUTE} ({expected(server, a, gradient=one)})"),
            gr.Button(f"{CHECK} ({expected(server, a, gradient=one, forward=curves)})"),
            gr.Button(f"{SANITY} ({expected(server, a, gradient=sanity)})"))  # fmt: skip


@user_errors
def relabel(server: Server, image, model_name, size, method_label, n_steps, noise_samples, request: gr.Request):
    """The buttons' expected times, for a new image, method, steps or samples."""
    if not image:
        return (gr.skip(),) * 3
    return _buttons(server, server.get_analysis(image, model_name, size, request), method_label, n_steps,
                    noise_samples)  # fmt: skip


@user_errors
def pick_corner(server: Server, image, model_name, size, points, evt: gr.SelectData, request: gr.Request):
    """Clicks on the picture set the box's corners: the first click starts a box, the second ends it."""
    a = server.get_analysis(image, model_name, size, request)
    if a.model.dense_head is None:
        raise ValueError("A box only applies to the embedded model's dense head; this model's target is one class.")
    scale = a.image.shape[1] / views.display(a).shape[1]
    point = [evt.index[0] * scale, evt.index[1] * scale]
    points = [point] if not points or len(points) >= 2 else [points[0], point]
    return points, box_picture(a, points)


@user_errors
def clear_box(server: Server, image, model_name, size, request: gr.Request):
    return [], None if not image else box_picture(server.get_analysis(image, model_name, size, request), [])


def _choices(a: Analysis, image, method_label, target, points, text="") -> tuple[str, dict]:
    """The method's key and the target options (`attribute`'s target, box and text) from the tab's controls. A
    text is the target of a model with a text tower (a full CLIP or SigLIP) when one is written."""
    method = METHOD_BY_LABEL.get(method_label, method_label)
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS.values())}, got {method_label!r}")
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    rank = TARGETS.index(target)
    return method, dict(
        target=None if rank == 0 or a.model.labels is None else targets(a.model, image)[rank][1],
        box=parse_box(points) if a.model.dense_head is not None else None,
        text=(text or "").strip() or None if a.model.has_text else None,
    )


def _method_options(baseline, n_steps, noise_samples, block) -> dict:
    """The tab's method settings as `attribute` takes them."""
    n, samples, layer = int(n_steps), int(noise_samples), int(block)
    return dict(n_steps=n, baseline=baseline, nt_samples=samples, layer=layer, internal_batch_size=4)


def _settings(method, options, baseline, n_steps, noise_samples, block) -> tuple:
    """What makes one map: the same settings on the same image give the same map."""
    return (method, options["target"], options["box"], options["text"], baseline, int(n_steps), int(noise_samples),
            int(block))  # fmt: skip


@user_errors
def run(server: Server, image, model_name, size, method_label, target, baseline, n_steps, noise_samples, block,
        points, cmap, alpha, colour_scale=DEFAULT_SCALE, text="", request: gr.Request = None,
        progress=gr.Progress()):  # fmt: skip
    """Attribute the chosen output with the chosen method; rollout and relevancy beside it. Also returns the
    result itself, kept for the session so that a display setting recolours it without running it again."""
    a = server.get_analysis(image, model_name, size, request)
    method, options = _choices(a, image, method_label, target, points, text)
    what = f"{METHODS[method]} with {int(n_steps)} steps and {int(noise_samples)} NoiseTunnel samples"
    within_budget(a, lambda grid: model_passes(method, int(n_steps), int(noise_samples), grid), what)
    model = server.get_attribution_model(model_name)
    progress(0.0, desc=f"{METHODS[method]}: running the model")
    work = ("gradient", cost(a, lambda grid: model_passes(method, int(n_steps), int(noise_samples), grid)))
    with stoppable(
        server, request, METHODS[method], f"{METHODS[method]}: forward and backward passes", progress, work=work
    ) as report:
        r = attribute(
            model,
            image,
            method,
            **_method_options(baseline, n_steps, noise_samples, block),
            progress=report,
            **options,
        )
        rel = r if method == "relevancy" else attribute(model, image, "relevancy", **options)
    same = input_analysis(model, image).rollout("mean", 0.0, r.output)  # on its input, toward its output
    made = (
        _settings(method, options, baseline, n_steps, noise_samples, block),
        patch_scores(r.raw, a.model.patch_size),
    )
    kept = (server.analysis_key(image, model_name, size), views.attribution_inputs(a, r, rel, same), made)
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
def check_faithfulness(server: Server, image, model_name, size, method_label, target, baseline, n_steps,
                       noise_samples, block, points, kept=None, text="", request: gr.Request = None,
                       progress=gr.Progress()):  # fmt: skip
    """Deletion and insertion curves of the chosen method's map and of the two maps beside it (the rollout and
    the relevancy), on this image and this target, against random orders: a figure and a sentence for each map.
    The map the tab shows (`kept`, the session's last attribution) is used as it is when it was made on this
    image with these settings."""
    a = server.get_analysis(image, model_name, size, request)
    method, options = _choices(a, image, method_label, target, points, text)
    settings = _settings(method, options, baseline, n_steps, noise_samples, block)
    shown = kept is not None and kept[0] == server.analysis_key(image, model_name, size) and kept[2][0] == settings
    beside = ["rollout"] + (["relevancy"] if method != "relevancy" else [])  # the other maps the tab shows
    curves = (1 + len(beside)) * passes()
    what = f"The faithfulness of {METHODS[method]} and of the maps beside it"
    within_budget(a, lambda grid: (0 if shown else model_passes(method, int(n_steps), int(noise_samples), grid))
                   + curves + len(beside), what)  # fmt: skip
    model = server.get_attribution_model(model_name)
    name = f"The faithfulness check of {METHODS[method]}"
    with stoppable(server, request, name, f"{name}: hiding patches", progress) as report:
        results = [
            faithfulness(
                model,
                image,
                method,
                scores=kept[2][1] if shown else None,
                **_method_options(baseline, n_steps, noise_samples, block),
                progress=report,
                **options,
            ),  # fmt: skip
            *(faithfulness(model, image, other, progress=report, **options) for other in beside),
        ]
    names = [METHODS[method], "Attention rollout", *(METHODS[m] for m in beside[1:])]
    maps = ["The map shown above", *(f"Map {r.map_seconds:.1f} s" for r in results[1:])]
    if not shown:
        maps[0] = f"Map {results[0].map_seconds:.1f} s (press Compute first to check the map shown instead)"
    text = "\n\n".join(f"**{name}.** {r.sentence()} {made}, curves {r.seconds:.1f} s."
                        for name, r, made in zip(names, results, maps, strict=True))  # fmt: skip
    return plots.faithfulness_curves(results, names), text


@user_errors
def check_sanity(server: Server, image, model_name, size, method_label, target, baseline, n_steps,
                 noise_samples, block, points, cmap, alpha, colour_scale=DEFAULT_SCALE, text="",
                 request: gr.Request = None, progress=gr.Progress()):  # fmt: skip
    """The map after randomising the last 1, 2, ... layers of a copy of the model: one tile per step, captioned
    with its rank correlation with the original map, and a sentence."""
    a = server.get_analysis(image, model_name, size, request)
    method, options = _choices(a, image, method_label, target, points, text)
    steps = a.model.num_layers + 1
    maps = lambda grid: steps * model_passes(method, int(n_steps), int(noise_samples), grid)  # noqa: E731
    within_budget(a, maps, f"The sanity check of {METHODS[method]} ({steps} maps)")
    model = server.get_attribution_model(model_name)
    name = f"The sanity check of {METHODS[method]}"
    work = ("gradient", cost(a, maps))
    with stoppable(server, request, name, f"{name}: one map per randomised layer", progress, work=work) as report:
        settings = _method_options(baseline, n_steps, noise_samples, block)
        s = sanity.sanity_check(model, image, method, progress=report, **settings, **options)
    steps = zip(s.randomised, s.correlation, strict=True)
    titles = ["the model" if k == 0 else f"{k} random<br>ρ {rho:.2f}" for k, rho in steps]
    maps = plots.map_grid(s.maps, titles, shared=False)
    figure = plots.sanity_correlation(s.randomised, s.correlation, METHODS[method])
    return figure, maps, f"**{METHODS[method]}.** {s.sentence()} {s.seconds:.0f} s."


@user_errors
def recolour(server: Server, kept, key, cmap, alpha, colour_scale, large_text):
    """The kept result's three pictures in the current colormap, opacity and colour scale, drawn from what
    it kept (no model, no analysis); nothing when the result belongs to another image (a new image clears
    it) or there is none."""
    if kept is None or kept[0] != key:
        return gr.skip(), gr.skip(), gr.skip()
    with server.redraws.interactive(), render.large_labels(large_text):  # milliseconds: the warm waits for it
        return views.attribution_pictures(kept[1], cmap, float(alpha), colour_scale)


STOPPED_NOTE = "**Stopped.** The attribution ended at its next batch and kept nothing; press Compute to run it again."


def stop(server: Server, request: gr.Request) -> str:
    """Stop this session's attribution at its next batch (the Stop button, a new or cleared image, the page
    closed), and say so."""
    return STOPPED_NOTE if stop_run(server, request) else gr.skip()


def stop_on_unload(server: Server, request: gr.Request) -> None:
    stop(server, request)


def new_image(server: Server, request: gr.Request):
    """A new or cleared image: a running attribution stops (and says so); the result and the box go."""
    said = stop(server, request)
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
        "attributions",
        (
            "Attention shows where tokens *look*; an attribution shows "
            "which pixels *drive an output*. Gradient methods (Captum) ask how the output "
            "changes when pixels change; occlusion hides one patch at a time; *relevancy* "
            "(Chefer et al. 2021) weighs each layer's attention by its gradient. Compare the "
            "three pictures: where attention rollout and the attributions disagree, attention "
            "was not the whole story. Every map here, and every check of it, explains one output, named in the "
            "summary: a classifier's class; for the embedded model its dense head's map, where it marks your "
            "photo as salient (weighted by that map), or inside a box you draw."
        ),
        elem_id="attributions-tab",
    ) as tab:
        with gr.Row():
            method = gr.Dropdown(
                list(METHODS.values()), value=METHODS[DEFAULT_METHOD], label="Method", elem_id="method"
            )
            target = gr.Dropdown([(t, t) for t in TARGETS], value=TARGETS[0], label="Target")
            baseline = gr.Radio(list(BASELINES), value=BASELINES[0], label="Baseline (absent)")
        text = gr.Textbox(
            label="Text target (a model with a text tower): which pixels make this photo match it?",
            value="",
            placeholder="a photo of a dog",
            visible=ctx.model.has_text,
            elem_id="text-target",
        )
        with gr.Row():
            steps = gr.Slider(4, 128, value=32, step=4, precision=0, label="Integrated Gradients: steps",
                              elem_id="ig-steps")  # fmt: skip
            noise = gr.Slider(0, 16, value=0, step=1, precision=0, label="NoiseTunnel samples (0 = off)")
            block = gr.Slider(0, last, value=last, step=1, precision=0, label="Grad-CAM: block")
            with gr.Column(min_width=140):
                button = gr.Button(COMPUTE, variant="primary")
                halt = gr.Button("Stop", variant="stop", size="sm")
        with gr.Row(elem_id="attr-box-row"):
            box_img = picture(label="Box for the dense head: click two corners", scale=1, clickable=True)
            with gr.Column(scale=2):
                clear = gr.Button("Clear the box (whole image)", size="sm")
                summary = gr.Markdown(elem_id="attr-summary", label="Summary")
        with gr.Row(elem_id="attr-results"):
            shown = picture(label="Attribution", elem_id="attribution")
            roll = picture(label="Attention rollout, toward the same output")
            rel = picture(label="Relevancy (Chefer et al.)")
        with gr.Row():
            faithful = gr.Button(CHECK, elem_id="check-faithfulness")
        gr.Markdown(
            "How far to trust the map on **this** image: hide its most relevant patches first (showing a blur of "
            "the image there) and follow the target. A faithful map makes it fall faster than random orders do.",
            elem_classes=["caption"],
        )
        curves = gr.Plot(label="Faithfulness: deletion and insertion curves", elem_id="faithfulness-plot")
        verdict = gr.Markdown(elem_id="faithfulness-note", label="Faithfulness")
        randomising = gr.Button(SANITY, size="sm", elem_id="check-sanity")
        gr.Markdown(
            "Does the map depend on what the model learned? The layers of a copy of the model get random "
            "weights, the last first, and the map is made again after each (Adebayo et al. 2018). Each tile says "
            "how many of the last layers are random, and ρ, the map's rank correlation with the original: a map "
            "that stays near 1 while the weights turn random shows the input, not the model.",
            elem_classes=["caption"],
        )
        cascade_plot = gr.Plot(label="Sanity check: rank correlation as the layers turn random", elem_id="sanity-plot")
        cascade = gr.Plot(label="Sanity check: the map as the layers turn random", elem_id="sanity-maps")
        cascade_note = gr.Markdown(elem_id="sanity-note", label="Sanity check")
        box = gr.JSON([], visible=False, label="Box")  # a component, so that the API can pass a box
        kept = gr.State(None)  # this session's last result, recoloured when a display setting changes
    results = [shown, roll, rel, summary, kept]
    ctx.view(tab, setup, [*ctx.where, box], [target, box_img, block, text])
    bind = ctx.server.bind
    gr.on([ctx.key.change, method.change, steps.change, noise.change], bind(relabel),
          [*ctx.where, method, steps, noise], [button, faithful, randomising], api_visibility="private",
          show_progress="hidden")  # fmt: skip
    # the summary says at once which run is under way, and no longer shows the last one's
    button.click(lambda label: f"**Running {label}…** Its summary comes here when it is done.", [method], summary,
                 api_visibility="private", queue=False)  # fmt: skip
    running = button.click(
        bind(run),
        [*ctx.where, method, target, baseline, steps, noise, block, box, ctx.cmap, ctx.alpha, ctx.scale, text],
        results,
        api_name="attribute",
        **slots("heavy"),
    )
    # A display setting recolours the kept result; so does the end of a run, for settings changed during it.
    recolouring = dict(api_visibility="private", show_progress="minimal", **slots("draw"))
    inputs = [kept, ctx.key, ctx.cmap, ctx.alpha, ctx.scale, ctx.large]
    ctx.on_display(bind(recolour), inputs, [shown, roll, rel], **recolouring)
    running.success(drop_stale, [kept, ctx.key], results, api_visibility="private", queue=False).success(
        bind(recolour), inputs, [shown, roll, rel], **recolouring
    )
    checking = faithful.click(
        bind(check_faithfulness),
        [*ctx.where, method, target, baseline, steps, noise, block, box, kept, text],
        [curves, verdict],
        api_name="faithfulness",
        **slots("heavy"),
    )
    cascading = randomising.click(
        bind(check_sanity),
        [*ctx.where, method, target, baseline, steps, noise, block, box, ctx.cmap, ctx.alpha, ctx.scale, text],
        [cascade_plot, cascade, cascade_note],
        api_name="sanity",
        **slots("heavy"),
    )
    heavy = [running, checking, cascading]
    halt.click(bind(stop), None, summary, cancels=heavy, api_visibility="private", queue=False)
    # A result belongs to one image: a new or cleared image stops a run and clears the result and the box.
    ctx.key.change(bind(new_image), None, [box, *results], cancels=heavy, api_visibility="private", queue=False)
    ctx.key.change(lambda: (None, "", None, None, ""), None, [curves, verdict, cascade_plot, cascade, cascade_note],
                   api_visibility="private", queue=False)  # fmt: skip
    ctx.demo.unload(bind(stop_on_unload))
    box_img.select(bind(pick_corner), [*ctx.where, box], [box, box_img], api_visibility="private")
    clear.click(bind(clear_box), ctx.where, [box, box_img], api_visibility="private")
