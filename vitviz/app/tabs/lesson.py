"""Lesson: the ViT step by step on the current image, with Back and Next; `?step=N` opens step N. Its last step is
an exercise: click the head you think matters most, then see every head's importance measured (a heavy run)."""

from __future__ import annotations

import json

import gradio as gr

from ... import lesson, render, tabs
from ...render import large_labels
from ..context import Context, view_tab
from ..heavy import stop_run
from ..pictures import picture
from ..scheduling import slots
from ..server import Server, user_errors
from .depth import depth_of
from .whatif import importance_time, measured_importance

LAST = len(lesson.ALL_STEPS)
KEPT_PHOTOS = 8  # the photos whose guess (and measured grid) a session keeps
STOPPED_NOTE = (
    "**Stopped.** The measurement of every head's importance ended at its next layer and kept nothing; click a "
    "tile to run it again."
)
DEPTH_RUN = "lesson-depth"  # the dense step's depth run: its own heavy run beside the guess's ("lesson")
DEPTH_STOPPED_NOTE = (
    "**Stopped.** The depth model's run for this step ended at its encoder's next layer and kept nothing; show the "
    "step again to run it."
)
# A deep link selects the Lesson's tab in the browser (its button's click), and lands on the lesson itself, not on
# the image panel above it (on a projector, a screen higher). Not from Python: a request whose output is the tab bar
# makes Gradio's page copy the whole tab bar's props at every loading status of every later request,
# which every upload then waits for (docs/benchmarks.md).
OPEN_LESSON = """() => { if (!new URLSearchParams(location.search).has('step')) return;
  [...document.querySelectorAll('[role=tab]')].find(b => b.textContent.trim() === TITLE)?.click();
  let tries = 0;
  const wait = setInterval(() => {  // once the step's picture is in, the page has its full height
    const img = document.querySelector('#lesson-picture img');
    if ((img && img.complete) || ++tries > 60) {
      clearInterval(wait);
      document.getElementById('lesson-title')?.scrollIntoView({block: 'start'});
    }
  }, 250); }""".replace("TITLE", json.dumps(tabs.label("lesson")))


def open_link(request: gr.Request):
    """A link with ?step=N opens the lesson at step N: a teacher can put one step on a slide."""
    asked = request.query_params.get("step") if request is not None else None
    if asked is None:
        return gr.skip()
    if not asked.isdigit() or not 1 <= int(asked) <= LAST:
        gr.Warning(f"?step= must be a number from 1 to {LAST}, got {asked!r}: the lesson starts at step 1.")
        asked = "1"
    return int(asked)


def guess_step(server: Server, a, guess: lesson.Guess | None) -> lesson.Step:
    """The guessing step (title, picture, text; its head tiles take no colour setting): the guess and its grid
    where they are, and before the grid, what measuring it costs on this server."""
    title, shown, text = lesson.lesson_step(a, lesson.GUESS, guess=guess)
    if guess is None or guess.grid is None:
        text += f" On this server that takes {importance_time(server, a)}."
    return title, shown, text


def kept_with(guesses: dict, key: str, guess: lesson.Guess) -> dict:
    """The session's guesses by photo (analysis key) with `guess` for `key`, the oldest let go past KEPT_PHOTOS."""
    kept = {k: g for k, g in (guesses or {}).items() if k != key}
    return dict(list({**kept, key: guess}.items())[-KEPT_PHOTOS:])


def guessed(
    server: Server, image, model_name, size, step, guesses, large, evt: gr.SelectData, request: gr.Request = None
):
    """A click on the guessing step's head tiles: (the guesses with this photo's, the step's picture and text). The
    photo's grid, where it was measured, stays: a new guess is revealed at once."""
    tile = None
    if image and int(step) == lesson.GUESS:
        a = server.get_analysis(image, model_name, size, request)
        with large_labels(large):
            tile = render.head_tile_at(a.model.num_layers, a.model.num_heads, *evt.index)
    if tile is None:
        return gr.skip(), gr.skip(), gr.skip()
    key = server.analysis_key(image, model_name, size)
    was = (guesses or {}).get(key)
    guess = lesson.Guess(*tile, None if was is None else was.grid)
    with large_labels(large):
        return kept_with(guesses, key, guess), *guess_step(server, a, guess)[1:]


@user_errors
def measure_guess(
    server: Server, image, model_name, size, step, guesses, large, request: gr.Request = None, progress=gr.Progress()
):
    """The guess revealed: every head's importance measured on this photo (a heavy run of the Lesson's, stopped by
    a new photo, Clear or another step), kept with the guess; nothing off the guessing step, or where the photo's
    grid is kept already."""
    key = server.analysis_key(image, model_name, size)
    guess = (guesses or {}).get(key)
    if not image or int(step) != lesson.GUESS or guess is None or guess.grid is not None:
        return gr.skip(), gr.skip(), gr.skip()
    a = server.get_analysis(image, model_name, size, request)
    guess = lesson.Guess(guess.layer, guess.head, measured_importance(server, a, "zero", request, progress, "lesson"))
    with large_labels(large):
        return kept_with(guesses, key, guess), *guess_step(server, a, guess)[1:]


def stop(server: Server, request: gr.Request) -> str:
    """Stop this session's measurement for the guess, or its dense step's depth, at its next layer (a new photo,
    Clear, the page closed), and say which."""
    depth, guess = stop_run(server, request, DEPTH_RUN), stop_run(server, request, "lesson")
    return DEPTH_STOPPED_NOTE if depth else STOPPED_NOTE if guess else gr.skip()


def build(ctx: Context) -> None:
    @user_errors
    def draw(
        image, model_name, size, step, guesses, cmap, alpha, colour_scale, request: gr.Request, progress=gr.Progress()
    ):
        """(the step's title, its picture, its sentences). The dense-decoding step shows the depth model's map when
        the app was started with one (--depth-model), a run that a new photo, Clear or a closed page stops as the
        Depth tab's is; the guessing step this photo's guess, revealed once its grid is measured."""
        server = ctx.server
        a = server.get_analysis(image, model_name, size, request)
        step = int(step)
        if step != lesson.GUESS:  # another step drawn: the guess's measurement under way ends at its next layer
            stop_run(server, request, "lesson")
        if step == lesson.GUESS:  # a guess whose measurement was stopped is asked again
            guess = (guesses or {}).get(server.analysis_key(image, model_name, size))
            title, shown, text = guess_step(server, a, guess if guess and guess.grid else None)
            return f"### Step {step} of {LAST} · {title}", shown, text
        depth = None
        if step == lesson.DENSE and ctx.depth_model is not None:
            depth = depth_of(server, image, ctx.depth_model, request, progress, tab=DEPTH_RUN)
        title, shown, text = lesson.lesson_step(a, step, cmap, float(alpha), colour_scale, depth)
        return f"### Step {step} of {LAST} · {title}", shown, text

    with view_tab(
        "lesson",
        (
            f"A path through the ViT in {len(lesson.STEPS)} steps, on your image, in the order of the chapter: "
            "tokens, position embeddings, attention, layers, the readout token, dense decoding; then an exercise: "
            "guess which head matters most, and see it measured. Every picture and number is computed on your "
            "image. To show one step on a slide, link to it with `?step=N` after the app's address."
        ),
    ) as tab:
        # On a projector: the picture on the left, the title, the buttons and the text on its right
        title = gr.Markdown(label="Step title", elem_id="lesson-title", elem_classes=["vitviz-head"])
        with gr.Row(elem_classes=["vitviz-controls"]):
            back = gr.Button("◀ Back", elem_id="lesson-back", min_width=100)
            step = gr.Slider(1, LAST, value=1, step=1, precision=0, label="Step", elem_id="lesson-step")
            forward = gr.Button("Next ▶", elem_id="lesson-next", variant="primary", min_width=100)
        with gr.Row(elem_classes=["vitviz-pair"]):
            with gr.Column(scale=3, min_width=160, elem_classes=["vitviz-main"]):
                shown = picture(label="This step on your image", clickable=True, elem_id="lesson-picture")
            with gr.Column(scale=2, min_width=280, elem_classes=["vitviz-beside"]):
                text = gr.Markdown(label="Step text", elem_id="lesson-text")
        guesses = gr.State({})  # {analysis key: lesson.Guess}: each photo's guess, its grid once measured
    draws = ctx.view(
        tab,
        draw,
        [*ctx.where, step, guesses, ctx.cmap, ctx.alpha, ctx.scale],
        [title, shown, text],
        [step.change],
        api_name="lesson",
    )
    clicked = ctx.server.on_click(shown, guessed, [*ctx.where, step, guesses, ctx.large], [guesses, shown, text])
    measuring = clicked.then(
        ctx.server.bind(measure_guess),
        [*ctx.where, step, guesses, ctx.large],
        [guesses, shown, text],
        api_visibility="private",
        show_progress_on=[shown],
        **slots("heavy"),
    )
    ctx.stop_with_the_photo(stop, text, [measuring, *draws])  # the guess's measurement, the dense step's depth
    back.click(lambda s: max(1, int(s) - 1), step, step, api_visibility="private", queue=False)
    forward.click(lambda s: min(LAST, int(s) + 1), step, step, api_visibility="private", queue=False)
    ctx.demo.load(open_link, None, step, api_visibility="private", queue=False)
    ctx.demo.load(None, None, None, js=OPEN_LESSON, api_visibility="private", queue=False)
