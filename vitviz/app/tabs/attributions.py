"""Attributions: which pixels drive an output (Captum, relevancy), beside attention rollout."""

from __future__ import annotations

import gradio as gr
import numpy as np

from ... import methods, plots, render, sanity, sentences
from ...analysis import Analysis
from ...attributions import METHODS, attribute, input_analysis, patch_scores
from ...deletion import RANDOM_ORDERS, band_note, end_note, faithfulness, passes
from ...maps import DEFAULT_SCALE
from ...odds import LEVEL, needed
from ...views import common
from ...views.attributions import attribution_inputs, attribution_pictures
from ..attribution_controls import (
    DEFAULT_METHOD,
    MODEL_RANGED,
    OPTIONS,
    TARGETS,
    Display,
    Kept,
    Settings,
    endpoint,
    fit_options,
    model_ranges,
    option_control,
    parse_box,
    target_choices,
)
from ..context import Context, view_tab
from ..heavy import cost, expected, stop_run, stoppable, within_budget
from ..pictures import picture
from ..scheduling import slots
from ..server import Server, user_errors

# The maps the tab shows beside the chosen one, toward the same output (the chosen one is not made twice)
ROLLOUT, RELEVANCY = methods.get("rollout"), methods.get("relevancy")

# On a projector the three maps come right under the controls, on one screen with them; the box to draw and the
# summary follow them.
CSS = """body.vitviz-large #attr-results ~ * { order: 2; }
body.vitviz-large #attr-box-row { order: 1; }"""


def box_picture(a: Analysis, points) -> np.ndarray:
    base = common.display(a)
    box = parse_box(points)
    return base if box is None else render.draw_box(base, box, base.shape[1] / a.image.shape[1])


@user_errors
def setup(a, points, request: gr.Request):
    """The targets this model offers on this image, the box picker, the range of each option whose range is the
    model's (`MODEL_RANGED`: Grad-CAM's block) and the text target (shown for a model with a text tower)."""
    return (
        gr.Dropdown(choices=target_choices(a), value=TARGETS[0]),
        box_picture(a, points),
        *model_ranges(a.model),
        gr.Textbox(visible=a.model.has_text),
    )


COMPUTE, CHECK, SANITY = (
    "Compute attribution",
    "Check faithfulness: hide the top patches",
    "Sanity check: randomise the model from the top",
)


def _buttons(server: Server, a: Analysis, s: Settings, where: tuple) -> tuple:
    """Compute, Check faithfulness and Sanity check, each saying how long it takes on this image here: the check
    less once a check on this photo and output kept its random orders (`Server.bands`)."""
    image, model = where[0], server.attribution_models.get(where[1])
    kept = server.bands.holds(model, image, **s.output_options(a, image))
    orders = 0 if kept else RANDOM_ORDERS
    curves = lambda grid: passes(maps=3, random_orders=orders) + 2  # noqa: E731  and the rollout's and relevancy's maps
    sanity = lambda grid: (a.model.num_layers + 1) * s.passes(grid)  # noqa: E731
    return (
        gr.Button(f"{COMPUTE} ({expected(server, a, gradient=s.passes)})"),
        gr.Button(f"{CHECK} ({expected(server, a, gradient=s.passes, forward=curves)})"),
        gr.Button(f"{SANITY} ({expected(server, a, gradient=sanity)})"),
    )


@user_errors
def relabel(server: Server, where: tuple, s: Settings, request: gr.Request = None, progress=None):
    """The buttons' expected times, for a new image, method or options."""
    if not where[0]:
        return (gr.skip(),) * 3
    return _buttons(server, server.get_analysis(*where, request), s, where)


@user_errors
def pick_corner(server: Server, image, model_name, size, points, evt: gr.SelectData, request: gr.Request):
    """Clicks on the picture set the box's corners: the first click starts a box, the second ends it."""
    a = server.get_analysis(image, model_name, size, request)
    if a.model.dense_head is None:
        raise ValueError("A box only applies to the embedded model's dense head; this model's target is one class.")
    scale = a.image.shape[1] / common.display(a).shape[1]
    point = [evt.index[0] * scale, evt.index[1] * scale]
    points = [point] if not points or len(points) >= 2 else [points[0], point]
    return points, box_picture(a, points)


@user_errors
def clear_box(server: Server, image, model_name, size, request: gr.Request):
    return [], None if not image else box_picture(server.get_analysis(image, model_name, size, request), [])


@user_errors
def run(
    server: Server,
    where: tuple,
    s: Settings,
    display: Display = Display(),
    request: gr.Request = None,
    progress=gr.Progress(),
):
    """Attribute the chosen output with the chosen method; rollout and relevancy beside it. Also returns the
    result itself (`Kept`), kept for the session so that a display setting recolours it without running it
    again."""
    image = where[0]
    a = server.get_analysis(*where, request)
    target = s.output_options(a, image)
    within_budget(a, s.passes, s.described())
    model = server.get_attribution_model(where[1])
    progress(0.0, desc=f"{s.label}: running the model")
    work = ("gradient", cost(a, s.passes))
    with stoppable(server, request, s.label, f"{s.label}: forward and backward passes", progress, work=work) as report:
        r = attribute(model, image, s.method, progress=report, **s.attribute_options(), **target)
        rel = r if s.record is RELEVANCY else attribute(model, image, RELEVANCY.key, **target)
    same = input_analysis(model, image).rollout("mean", 0.0, r.output)  # on its input, toward its output
    kept = Kept(
        server.analysis_key(*where), attribution_inputs(a, r, rel, same), s, patch_scores(r.raw, a.model.patch_size)
    )
    shown, roll, rel_img = attribution_pictures(kept.inputs, display.cmap, float(display.alpha), display.scale)
    size = f"{r.grid[0] * a.model.patch_size} px high × {r.grid[1] * a.model.patch_size} px wide"
    lines = [
        f"**{s.label}** · **target:** {r.target} = {r.score:.4g} · input {size}, the same for the "
        f"rollout and relevancy beside it · {r.seconds:.1f} s"
    ]
    if r.delta is not None:
        total = float(r.raw.sum())
        lines.append(
            f"**Convergence delta** (Integrated Gradients): {r.delta:.3g}, that is "
            f"{abs(r.delta) / max(abs(total), 1e-12):.1%} of the attributions' sum {total:.4g}. "
            "Near 0 means the attributions add up to f(image) − f(baseline); if it is large, raise the steps."
        )
    return shown, roll, rel_img, "\n\n".join(lines), kept


@user_errors
def check_faithfulness(
    server: Server,
    where: tuple,
    s: Settings,
    kept: Kept | None = None,
    request: gr.Request = None,
    progress=gr.Progress(),
):
    """Deletion and insertion curves of the chosen method's map and of the two maps beside it (the rollout and
    the relevancy), on this image and this target, against random orders: a figure and a sentence for each map.
    The map the tab shows (`kept`, the session's last attribution) is used as it is when it was made on this
    image with these settings."""
    image = where[0]
    a = server.get_analysis(*where, request)
    target = s.output_options(a, image)
    shown = kept is not None and kept.key == server.analysis_key(*where) and kept.settings == s
    beside = [m for m in (ROLLOUT, RELEVANCY) if m is not s.record]  # the other maps the tab shows
    maps = 1 + len(beside)
    curves = passes(maps=maps)
    what = f"The faithfulness of {s.label} and of the maps beside it"
    within_budget(a, lambda grid: (0 if shown else s.passes(grid)) + curves + len(beside), what)
    model = server.get_attribution_model(where[1])
    name = f"The faithfulness check of {s.label}"
    with stoppable(server, request, name, f"{name}: hiding patches", progress) as report:
        # one band of random orders for the three maps: they explain one output, so they are ranked alike (and it
        # is kept: a later check of another method or its options on this output reuses it)
        share = passes(maps=0) / passes(maps=maps)
        band = server.bands.get(model, image, progress=lambda done: report(done * share), **target)
        rest = lambda i: lambda done: report(share + (1 - share) * (i + done) / maps)  # noqa: E731
        results = [
            faithfulness(
                model,
                image,
                s.method,
                scores=kept.scores if shown else None,
                band=band,
                progress=rest(0),
                **s.attribute_options(),
                **target,
            ),
            *(
                faithfulness(model, image, other.key, band=band, progress=rest(i), **target)
                for i, other in enumerate(beside, 1)
            ),
        ]
    names = [s.label, *(m.label for m in beside)]
    made = ["The map shown above", *(f"Map {r.map_seconds:.1f} s" for r in results[1:])]
    if not shown:
        made[0] = f"Map {results[0].map_seconds:.1f} s (press Compute first to check the map shown instead)"
    size = tuple(g * a.model.patch_size for g in band.grid)
    forward_said = sentences.attribution_check_forward(size, a.pixel_values.shape[2:], band.output.name(a.model))
    lines = [
        f"**{name}.** {r.sentence(why_end=False)} {m}, curves {r.seconds:.1f} s."
        for name, r, m in zip(names, results, made, strict=True)
    ]
    text = "\n\n".join(filter(None, [forward_said, band_note(band), *lines, end_note(results)]))
    return plots.faithfulness_curves(results, names), text


@user_errors
def check_sanity(
    server: Server,
    where: tuple,
    s: Settings,
    display: Display = Display(),
    request: gr.Request = None,
    progress=gr.Progress(),
):
    """The map after randomising the last 1, 2, ... layers of a copy of the model: one tile per step, captioned
    with its rank correlation with the original map, and a sentence. display: the endpoint's display settings,
    kept in its API; the tiles share no colour scale."""
    a = server.get_analysis(*where, request)
    target = s.output_options(a, where[0])
    steps = a.model.num_layers + 1
    maps = lambda grid: steps * s.passes(grid)  # noqa: E731
    within_budget(a, maps, f"The sanity check of {s.label} ({steps} maps)")
    model = server.get_attribution_model(where[1])
    name = f"The sanity check of {s.label}"
    work = ("gradient", cost(a, maps))
    with stoppable(server, request, name, f"{name}: one map per randomised layer", progress, work=work) as report:
        result = sanity.sanity_check(model, where[0], s.method, progress=report, **s.attribute_options(), **target)
    pairs = zip(result.randomised, result.correlation, strict=True)
    titles = ["the model" if k == 0 else f"{k} random<br>ρ {rho:.2f}" for k, rho in pairs]
    tiles = plots.map_grid(result.maps, titles, shared=False)
    figure = plots.sanity_correlation(result.randomised, result.correlation, s.label)
    return figure, tiles, f"**{s.label}.** {result.sentence()} {result.seconds:.0f} s."


@user_errors
def recolour(server: Server, kept: Kept | None, key, cmap, alpha, colour_scale, large_text):
    """The kept result's three pictures in the current colormap, opacity and colour scale, drawn from what
    it kept (no model, no analysis); nothing when the result belongs to another image (a new image clears
    it) or there is none."""
    if kept is None or kept.key != key:
        return gr.skip(), gr.skip(), gr.skip()
    with server.redraws.interactive(), render.large_labels(large_text):  # the warm waits for it
        return attribution_pictures(kept.inputs, cmap, float(alpha), colour_scale)


STOPPED_NOTE = "**Stopped.** The attribution ended at its next batch and kept nothing; press Compute to run it again."


def stop(server: Server, request: gr.Request) -> str:
    """Stop this session's attribution at its next batch (the Stop button; a new, cleared or resized photo, another
    model, the page closed: `Context.stop_with_the_photo`), and say so."""
    return STOPPED_NOTE if stop_run(server, request) else gr.skip()


def new_image(summary: str | None):
    """A new image: the result and the box go, and the summary too, unless it says that a run was stopped (the
    stop answers before the new photo's analysis does)."""
    return [], None, None, None, summary if summary == STOPPED_NOTE else "", None


def drop_stale(kept, key):
    """A result that finished for another image than the one now shown is not shown (a new image stops a run,
    but one may end in the same instant)."""
    if kept is not None and kept.key != key:
        return None, None, None, "", None
    return (gr.skip(),) * 5


def build(ctx: Context) -> None:
    own = {o.keyword for o in methods.REGISTRY[DEFAULT_METHOD].options}
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
        with gr.Row():  # each list wide enough for its longest name: on a phone, one under the other
            method = gr.Dropdown(
                list(METHODS.values()), value=METHODS[DEFAULT_METHOD], label="Method", min_width=320, elem_id="method"
            )
            target = gr.Dropdown(
                [(t, t) for t in TARGETS],
                value=TARGETS[0],
                label="Target",
                scale=2,
                min_width=320,
                elem_id="attr-target",
            )
        text = gr.Textbox(
            label="Text target (a model with a text tower): which pixels make this photo match it?",
            value="",
            placeholder="a photo of a dog",
            visible=ctx.model.has_text,
            elem_id="text-target",
        )
        with gr.Row(elem_id="attr-options"):
            options = [option_control(o, ctx.model, o.keyword in own) for o in OPTIONS]
            with gr.Column(min_width=140):
                button = gr.Button(COMPUTE, variant="primary")
                halt = gr.Button("Stop", variant="stop", size="sm")
        with gr.Row(elem_id="attr-results"):  # the maps first: on the first screen after Compute
            shown = picture(label="Attribution", elem_id="attribution")
            roll = picture(label="Rollout, toward the same output")
            rel = picture(label="Relevancy (Chefer et al.)")
        with gr.Row(elem_id="attr-box-row"):
            box_img = picture(label="Box for the dense head: click two corners", scale=1, clickable=True)
            with gr.Column(scale=2):
                clear = gr.Button("Clear the box (whole image)", size="sm")
                summary = gr.Markdown(elem_id="attr-summary", label="Summary")
        with gr.Row():
            faithful = gr.Button(CHECK, elem_id="check-faithfulness")
        gr.Markdown(
            "How far to trust the map on **this** image: hide its most relevant patches first (showing a blur of "
            "the image there) and follow the target. A faithful map makes it fall faster than random orders do: "
            f"its area must be below {needed(RANDOM_ORDERS)} of {RANDOM_ORDERS} random orders (p ≤ {LEVEL:g}), "
            "drawn once for this photo and target, the same for every map and setting.",
            elem_classes=["caption"],
        )
        curves = gr.Plot(label="Faithfulness: deletion and insertion curves", elem_id="faithfulness-plot")
        verdict = gr.Markdown(elem_id="faithfulness-note", label="Faithfulness")
        randomising = gr.Button(SANITY, size="sm", elem_id="check-sanity")
        gr.Markdown(
            "Does the map depend on what the model learned? The layers of a copy of the model get random "
            "weights, the last first, and the map is made again after each (Adebayo et al. 2018). Each tile says "
            "how many of the last layers are random, and ρ, the map's rank correlation with the original: a map "
            "that stays near 1 while the weights turn random shows the input, not the model. The verdict ranks the "
            f"last map's ρ against {sanity.SHIFTS} copies of that map shifted across the grid: it fails when it beats "
            f"{needed(sanity.SHIFTS)} of them (p ≤ {LEVEL:g}).",
            elem_classes=["caption"],
        )
        cascade_plot = gr.Plot(label="Sanity check: rank correlation as the layers turn random", elem_id="sanity-plot")
        cascade = gr.Plot(label="Sanity check: the map as the layers turn random", elem_id="sanity-maps")
        cascade_note = gr.Markdown(elem_id="sanity-note", label="Sanity check")
        box = gr.JSON([], visible=False, label="Box")  # a component, so that the API can pass a box
        kept = gr.State(None)  # this session's last result, recoloured when a display setting changes
    results = [shown, roll, rel, summary, kept]
    ranged = [c for o, c in zip(OPTIONS, options, strict=True) if o in MODEL_RANGED]
    ctx.view(tab, setup, [*ctx.where, box], [target, box_img, *ranged, text])
    bind = ctx.server.bind
    controls = [*ctx.where, method, target, *options, box]
    relabelled = dict(api_visibility="private", show_progress="hidden")
    # a method's change fits its options, then relabels: one listener with a request per event (test_ui)
    method.change(fit_options, [method, *options], options, api_visibility="private", queue=False).then(
        bind(endpoint(relabel)), controls, [button, faithful, randomising], **relabelled
    )
    labels = [button, faithful, randomising]
    ctx.on_new_analysis(tab, bind(endpoint(relabel)), controls, labels, **relabelled)
    gr.on([o.change for o in options], bind(endpoint(relabel)), controls, labels, **relabelled)
    # the summary says at once which run is under way, and no longer shows the last one's
    button.click(
        lambda label: f"**Running {label}…** Its summary comes here when it is done.",
        [method],
        summary,
        api_visibility="private",
        queue=False,
    )
    display = ["cmap", "alpha", "colour_scale", "text"]
    running = button.click(
        bind(endpoint(run, display, {"colour_scale": DEFAULT_SCALE, "text": ""})),
        [*controls, ctx.cmap, ctx.alpha, ctx.scale, text],
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
        bind(endpoint(check_faithfulness, ["kept", "text"], {"kept": None, "text": ""})),
        [*controls, kept, text],
        [curves, verdict],
        api_name="faithfulness",
        **slots("heavy"),
    )
    checking.then(bind(endpoint(relabel)), controls, labels, **relabelled)  # its random orders are kept now
    cascading = randomising.click(
        bind(endpoint(check_sanity, display, {"colour_scale": DEFAULT_SCALE, "text": ""})),
        [*controls, ctx.cmap, ctx.alpha, ctx.scale, text],
        [cascade_plot, cascade, cascade_note],
        api_name="sanity",
        **slots("heavy"),
    )
    heavy = [running, checking, cascading]
    halt.click(bind(stop), None, summary, cancels=heavy, api_visibility="private", queue=False)
    ctx.stop_with_the_photo(stop, summary, heavy)
    # A result belongs to one image: a new image clears the result and the box.
    ctx.key.change(new_image, summary, [box, *results], api_visibility="private", queue=False, show_progress="hidden")
    ctx.on_new_analysis(
        tab,
        lambda: (None, "", None, None, ""),
        [],
        [curves, verdict, cascade_plot, cascade, cascade_note],
        api_visibility="private",
    )
    box_img.select(bind(pick_corner), [*ctx.where, box], [box, box_img], api_visibility="private")
    clear.click(bind(clear_box), ctx.where, [box, box_img], api_visibility="private")
