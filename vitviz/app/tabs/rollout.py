"""Rollout: attention followed back through every layer from the tokens an output reads (the model's own output by
default, or the readout token), and how far to trust it on this image, checked against that same output."""

from __future__ import annotations

import gradio as gr

from ... import plots, sentences
from ...attributions import attribution_size, input_analysis
from ...deletion import RANDOM_ORDERS, band_note, end_note, faithfulness, passes
from ...derived import Derived
from ...maps import HEAD_FUSIONS
from ...odds import LEVEL, needed
from ...outputs import FOLLOWED, followed
from ...views.rollout import rollout_truth_note, rollout_view
from ..context import Context, view_tab
from ..heavy import cost, expected, stop_run, stoppable, within_budget
from ..pictures import picture
from ..scheduling import slots
from ..server import Server, user_errors

STOPPED_NOTE = (
    "**Stopped.** The faithfulness check ended at its next batch and kept nothing; press Check to run it again."
)


def _settings(fusion, discard) -> tuple[str, float]:
    """The tab's fusion, checked, and its discard ratio as a number (maps.rollout checks its range)."""
    if fusion not in HEAD_FUSIONS:
        raise ValueError(f"fusion must be one of {HEAD_FUSIONS}, got {fusion!r}")
    return fusion, float(discard)


@user_errors
def draw(a, fusion, discard, toward, cmap, alpha, colour_scale, request: gr.Request):
    """Attention rollout toward the chosen output, with head fusion and discard ratio: (the picture, its note, what
    the rollouts can tell on this photo)."""
    fusion, discard = _settings(fusion, discard)
    picture, note = rollout_view(a, fusion, discard, cmap, float(alpha), colour_scale, followed(a.output, toward))
    return picture, note, rollout_truth_note(a, fusion, discard)


@user_errors
def check_faithfulness(
    server: Server,
    image,
    model_name,
    size,
    fusion,
    discard,
    toward="output",
    request: gr.Request = None,
    progress=gr.Progress(),
):
    """Deletion and insertion curves of the rollout with the tab's fusion and discard ratio, and of the other two
    fusions at the same ratio, each following the very output it rolls toward, against random orders: a figure
    and a sentence each. The rollouts and the output they follow are remade on the check's input (the attributions'
    one), so that the map and the curves see the same forward, and the sentence names it beside the tab's."""
    fusion, discard = _settings(fusion, discard)
    a = server.get_analysis(image, model_name, size, request)
    output = followed(a.output, toward)
    fusions = [fusion, *(f for f in HEAD_FUSIONS if f != fusion)]
    name = "The faithfulness check of the rollout"
    model = server.get_attribution_model(model_name)
    kept = server.bands.holds(model, image, output=output)
    curves = lambda grid: _curves(grid, kept)  # noqa: E731
    within_budget(a, curves, name)
    work = ("forward", cost(a, curves))
    with stoppable(server, request, name, f"{name}: hiding patches", progress, tab="rollout", work=work) as report:
        same = input_analysis(model, image)  # one forward, the three rollouts
        share = passes(maps=0) / passes(maps=len(fusions))
        # one band of random orders for the three fusions: they explain one output, so they are ranked alike (and
        # it is kept: a later check with another fusion or discard ratio reuses it)
        band = server.bands.get(model, image, output=output, progress=lambda done: report(done * share))
        results = [
            faithfulness(
                model,
                image,
                f"rollout ({f})",
                scores=same.rollout(f, discard, output),
                output=output,
                band=band,
                progress=lambda done, i=i: report(share + (1 - share) * (i + done) / len(fusions)),
            )
            for i, f in enumerate(fusions)
        ]
    names = [f"Rollout, {f} fusion" + (" (the one shown)" if f == fusion else "") for f in fusions]
    size = attribution_size(a.model, *a.image.shape[:2])
    where = sentences.check_forward(discard, size, a.pixel_values.shape[2:], output.name(a.model))
    lines = [
        f"**{n}.** {r.sentence(why_end=False)} (Curves computed in {r.seconds:.1f} s.)"
        for n, r in zip(names, results, strict=True)
    ]
    said = [where, band_note(band), *lines, end_note(results)]
    return plots.faithfulness_curves(results, names), "\n\n".join(filter(None, said))


def _curves(grid, band_kept: bool = False) -> int:
    """Images through the model of the check: one for the three rollouts, then each fusion's masked inputs, and the
    random orders' unless a band of them is kept for this photo and output (`Server.bands`)."""
    return 1 + passes(maps=len(HEAD_FUSIONS), random_orders=0 if band_kept else RANDOM_ORDERS)


CHECK = "Check faithfulness: hide the top patches"


@user_errors
def label_check(server: Server, image, model_name, size, toward="output", request: gr.Request = None):
    """The check's button, with how long it takes on this image here: less once a check on this photo and output
    kept its random orders."""
    if not image:
        return gr.skip()
    a = server.get_analysis(image, model_name, size, request)
    model = server.attribution_models.get(model_name)
    kept = server.bands.holds(model, image, output=followed(a.output, toward))
    return gr.Button(f"{CHECK} ({expected(server, a, forward=lambda grid: _curves(grid, kept))})")


def stop(server: Server, request: gr.Request) -> str:
    """Stop this session's faithfulness check at its next batch (the Stop button; a new, cleared or resized photo,
    another model, the page closed: `Context.stop_with_the_photo`), and say so."""
    return STOPPED_NOTE if stop_run(server, request, "rollout") else gr.skip()


def build(ctx: Context) -> None:
    with view_tab(
        "rollout",
        (
            "Attention *rollout* follows attention back through all layers "
            "at once: it multiplies the layers' attention (plus the skip connection) to estimate "
            "how much each patch flows into the tokens that an output reads at the end. By default that is "
            "the model's own output; the readout token (CLS) is the other choice. Bright = more. "
            "On the default log scale equal steps of colour are equal factors, so a faint background and "
            "a bright object both show. "
            "The sentence under the pictures says what the map follows and what its brightest patch is on this "
            "image; a discard ratio or max fusion shows more than the few brightest patches."
        ),
    ) as tab:
        with gr.Row():
            fusion = gr.Radio(
                list(HEAD_FUSIONS), value="mean", label="Fuse the heads of a layer by", elem_id="rollout-fusion"
            )
            percents = Derived.ROLLOUT_PERCENTS  # the rollouts that the server's cache makes at once, and keeps
            discard = gr.Slider(
                0,
                percents[-1] / 100,
                value=0.0,
                step=percents[1] / 100,
                label="Discard the weakest fraction",
                elem_id="rollout-discard",
            )
            toward = gr.Radio(
                [(label, key) for key, label in FOLLOWED.items()],
                value="output",
                label="Rollout toward",
                elem_id="rollout-toward",
            )
        with gr.Row(elem_classes=["vitviz-pair", "vitviz-second-first"]):
            # 4 : 5, the map's colour bar beside it: both pictures of one height
            original = picture(label="Your image, for comparison", scale=4)
            rollout = picture(label="Rollout (bilinear)", scale=5, elem_id="rollout")
        gr.Markdown(sentences.legend("clip"), elem_classes=["legend"])
        note = gr.Markdown(label="Brightest patch", elem_id="rollout-note")
        truth = gr.Markdown(label="What this map can tell you", elem_id="rollout-truth")
        with gr.Row():
            check = gr.Button(CHECK, variant="primary", elem_id="rollout-check")
            halt = gr.Button("Stop", variant="stop", size="sm", scale=0, min_width=100, elem_id="rollout-stop")
        gr.Markdown(
            "Does the output that rollout goes toward depend on the patches it makes bright? Hide them first "
            "(showing a blur of the image there) and follow that same output; a faithful map makes it fall faster "
            f"than random orders do: its area below {needed(RANDOM_ORDERS)} of {RANDOM_ORDERS} (p ≤ {LEVEL:g}). The "
            "three head fusions are checked, at the discard ratio above, against the same random orders.",
            elem_classes=["caption"],
        )
        curves = gr.Plot(label="Rollout: deletion and insertion", elem_id="rollout-curves")
        verdict = gr.Markdown(elem_id="rollout-faithfulness", label="Faithfulness of the rollout")
    ctx.mirror_preview(original)
    ctx.view(
        tab,
        draw,
        [*ctx.where, fusion, discard, toward, ctx.cmap, ctx.alpha, ctx.scale],
        [rollout, note, truth],
        [fusion.change, discard.change, toward.change],
        api_name="rollout",
        prepare=(ctx.server.bind(label_check), [*ctx.where, toward], [check]),
    )
    bind = ctx.server.bind
    checking = check.click(
        bind(check_faithfulness),
        [*ctx.where, fusion, discard, toward],
        [curves, verdict],
        api_name="rollout_faithfulness",
        **slots("heavy"),
    )
    relabelled = dict(api_visibility="private", show_progress="hidden")
    checking.then(bind(label_check), [*ctx.where, toward], [check], **relabelled)  # its band is kept now
    halt.click(bind(stop), None, verdict, cancels=[checking], api_visibility="private", queue=False)
    ctx.stop_with_the_photo(stop, verdict, [checking])
    # The curves belong to one image: a new image clears them. They name their own settings, so a new fusion or
    # discard ratio leaves them.
    ctx.on_new_analysis(tab, lambda: (None, ""), [], [curves, verdict], api_visibility="private")
