"""Lesson: the ViT step by step on the current image, with Back and Next; `?step=N` opens step N."""

from __future__ import annotations

import json

import gradio as gr

from ... import lesson, tabs
from ..context import Context, view_tab
from ..pictures import picture
from ..server import user_errors

LAST = len(lesson.STEPS)
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


def build(ctx: Context) -> None:
    @user_errors
    def draw(image, model_name, size, step, cmap, alpha, colour_scale, request: gr.Request):
        """(the step's title, its picture, its sentences). The last step shows the depth model's map when
        the app was started with one (--depth-model)."""
        server = ctx.server
        a = server.get_analysis(image, model_name, size, request)
        depth = None
        if int(step) == LAST and ctx.depth_model is not None:
            depth = server.get_depth(image, ctx.depth_model, server.depth_key(image, ctx.depth_model, request))
        title, shown, text = lesson.lesson_step(a, int(step), cmap, float(alpha), colour_scale, depth)
        return f"### Step {int(step)} of {LAST} · {title}", shown, text

    with view_tab(
        "lesson",
        (
            f"A path through the ViT in {LAST} steps, on your image, in the order of the chapter: tokens, "
            "position embeddings, attention, layers, the readout token, dense decoding. Every picture and "
            "number is computed on your image. To show one step on a slide, link to it with "
            "`?step=N` after the app's address."
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
                shown = picture(label="This step on your image", elem_id="lesson-picture")
            with gr.Column(scale=2, min_width=280, elem_classes=["vitviz-beside"]):
                text = gr.Markdown(label="Step text", elem_id="lesson-text")
    ctx.view(
        tab,
        draw,
        [*ctx.where, step, ctx.cmap, ctx.alpha, ctx.scale],
        [title, shown, text],
        [step.change],
        api_name="lesson",
    )
    back.click(lambda s: max(1, int(s) - 1), step, step, api_visibility="private", queue=False)
    forward.click(lambda s: min(LAST, int(s) + 1), step, step, api_visibility="private", queue=False)
    ctx.demo.load(open_link, None, step, api_visibility="private", queue=False)
    ctx.demo.load(None, None, None, js=OPEN_LESSON, api_visibility="private", queue=False)
