"""Attention: one layer's attention of a query (the readout or a clicked patch), per head or averaged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr

from ... import sentences, tabs
from ...ablation import ablate
from ...models import VitModel
from ...render import large_labels
from ...views.attention import WEIGHT, WEIGHT_VALUE, attention_view
from ...views.common import patch_at_display
from ...views.whatif import whatif_views
from .. import explorer
from ..context import PHONE, Clicks, Context, view_tab
from ..head_choice import ALL_HEADS_VALUE, MEAN_OF_HEADS_VALUE, head_arg, head_choices
from ..pictures import picture
from ..scheduling import slots
from ..server import Server, user_errors
from .whatif import longest_of, said_and_output

READOUT_QUERY, PATCH_QUERY = "readout", "a patch (click one in a picture)"  # the API's values
# What the radio shows: inside a head has three clickable pictures, none of them "on the left" on a phone.
QUERY_CHOICES = [
    ("the readout (CLS, where there is one)", READOUT_QUERY),
    ("a patch: click one on a picture", PATCH_QUERY),
]
SHARED, PER_HEAD = "shared across heads", "per head"
PHONE_COLUMNS = f"() => ({PHONE} ? 1 : 0)"


ALL_HEADS_LAYOUT = f"""(head) => {{
  document.getElementById('attention-pictures')?.classList.toggle('all-heads', head === {ALL_HEADS_VALUE});
  return [];
}}"""
# The picker on its own line at 40 %, the all-heads sheet under it at the full width (Gradio's columns set
# their flex inline, hence !important).
CSS = """#attention-pictures.all-heads { flex-wrap: wrap; }
#attention-pictures.all-heads > div:first-child { flex: 0 0 40% !important; }
#attention-pictures.all-heads > div:last-child { flex: 1 0 100% !important; }"""


def query_of(mode: str, patch: int | None) -> str | int:
    return "readout" if mode == READOUT_QUERY or patch is None or patch < 0 else int(patch)


@dataclass(frozen=True)
class Query:
    """The attention asked for, as the controls set it: a layer, a head (`head_choice`: an index, the mean or all
    heads) and the query, the readout or a patch (`query_of`)."""

    layer: int
    head: int
    query_mode: str
    patch: int | None


@user_errors
def draw(a, asked: Query, measure, cmap, alpha, grid_scale, colour_scale, columns, request: gr.Request):
    """(overlay, query picker, the layer in numbers): the query's attention in one layer, one head, the
    mean or all heads (in `columns` columns, 0: by the number of heads)."""
    layer, head = asked.layer, asked.head
    query = query_of(asked.query_mode, asked.patch)
    gh, gw = a.grid
    if query != "readout" and not 0 <= query < gh * gw:
        raise ValueError(
            f"patch must be -1 (the readout) or in [0, {gh * gw}) for this grid of {gh} rows × {gw} columns, "
            f"got {query}"
        )
    shared, which = grid_scale != PER_HEAD, head_arg(head, a.model)
    overlay, picker = attention_view(
        a, int(layer), which, query, cmap, float(alpha), shared, colour_scale, measure, int(columns or 0)
    )
    return overlay, picker, sentences.attention_note(a, int(layer), which, query)


def controls_fitter(choices: Callable[[VitModel], list], fallback: int, token_query: bool = False) -> Callable:
    """The `prepare` step of a view with a layer, a head and a query patch, for heads from `choices`.
    token_query: the view needs a query token in the layers, which a pool readout (SigLIP's probe) is not: there
    the query becomes the centre patch."""

    @user_errors
    def fit_controls(server: Server, image, model_name, size, layer, head, patch, request: gr.Request):
        """A new analysis: the layer range and heads of its model, and the readout if the query patch is off
        its grid."""
        if not image:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        a = server.get_analysis(image, model_name, size, request)
        m, patches = a.model, a.grid[0] * a.grid[1]
        last, patch_ok = m.num_layers - 1, patch < patches
        if token_query and len(m.readout.tokens) != 1 and not 0 <= patch < patches:
            centre = (a.grid[0] // 2) * a.grid[1] + a.grid[1] // 2
            gr.Info(f"{m.name} reads out from {m.readout.name}, not from a token: the query is the centre patch.")
            return (
                gr.Slider(maximum=last, value=min(layer, last)),
                gr.Dropdown(choices=choices(m), value=head if head < m.num_heads else fallback),
                centre,
                PATCH_QUERY,
            )
        return (
            gr.Slider(maximum=last, value=layer if layer <= last else last),
            gr.Dropdown(choices=choices(m), value=head if head < m.num_heads else fallback),
            gr.skip() if patch_ok else -1,
            gr.skip() if patch_ok else READOUT_QUERY,
        )

    return fit_controls


fit_controls = controls_fitter(head_choices, MEAN_OF_HEADS_VALUE)


# The Explorer's layer and head (its state, `window.vitviz.explorer`) in place of the button's `shown` input
SHOWN_HEAD = """(image, model, size, shown, ...rest) => {
  const s = window.vitviz?.explorer?.state();
  return [image, model, size, s ? {layer: s.layer, head: s.head} : null, ...rest];
}"""


@user_errors
def switch_off_shown(
    server: Server, image, model_name, size, shown, cmap, alpha, colour_scale, large, request: gr.Request = None
):
    """The Explorer's head (`shown`: {layer, head}) switched off (zeroed), beside the model as it is: (the results
    shown, what is off, the difference in words and numbers, top-5 before and after, dense map before and after;
    `whatif.said_and_output`)."""
    if not image:
        raise ValueError("no photo yet: upload one, then switch off a head")
    if not shown or int(shown["layer"]) < 0:
        raise ValueError("the Explorer has not drawn a layer yet: wait for its first one, then switch its head off")
    a = server.get_analysis(image, model_name, size, request)
    w = ablate(a.model, a.image, heads=[(int(shown["layer"]), int(shown["head"]))], longest=longest_of(a), baseline=a)
    with large_labels(large):
        output = whatif_views(w, cmap, float(alpha), colour_scale, views=("output",))["output"]
    # each part shown where it has something to show: a column's visibility would make it a request's output, whose
    # children the page would copy at every status (test_ui)
    return tuple(gr.update(value=v, visible=v is not None) for v in said_and_output(w, output))


def patch_locator(locate: Callable) -> Callable:
    """A click's pick (see `Context.view`'s clicks): the patch under the pointer made the query, as (patch, the
    query mode), or None off the patches; `locate(a, x, y)` knows the picture."""

    def pick_patch(a, x: float, y: float) -> tuple[int, str] | None:
        patch = locate(a, x, y)
        return None if patch is None else (patch, PATCH_QUERY)

    return pick_patch


pick_patch = patch_locator(patch_at_display)


def build(ctx: Context) -> None:
    m = ctx.model
    with view_tab(
        "attention",
        (
            "In self-attention every token takes a weighted average of all tokens. **Move the pointer over the "
            "photo** (or drag a finger): the patch under it is the *query*, and each map shows how much it takes "
            "from every patch, in each head of this layer. Your browser computes every map from the model's own "
            "queries and keys, so it follows at once."
        ),
    ) as tab:
        shown = explorer.build(ctx)
        switch_off = gr.Button(
            "Switch off the head shown: what does the output do without it?", elem_id="explorer-switch-off"
        )
        shown_head = gr.JSON(None, visible=False)  # the Explorer's {layer, head}, set in the page (`SHOWN_HEAD`)
        with gr.Column():  # each part hidden until a head is switched off
            off = gr.Markdown(elem_id="explorer-off", label="Switched off", visible=False)
            said = gr.Markdown(elem_id="explorer-said", label="The difference", visible=False)
            with gr.Row(elem_classes=["vitviz-pair"]):
                top_before = gr.Label(num_top_classes=5, label="Top-5, as it is", visible=False)
                top_after = gr.Label(num_top_classes=5, label="Top-5, with the head off", visible=False)
            with gr.Row(elem_classes=["vitviz-pair"]):
                dense_before = picture(label="Output, as it is", elem_id="explorer-dense-before", visible=False)
                dense_after = picture(label="Output, with the head off", elem_id="explorer-dense-after", visible=False)
            results = [off, said, top_before, top_after, dense_before, dense_after]
        with gr.Accordion("Pictures drawn by the server (the API's /attention, for notebooks and scripts)", open=False):
            with gr.Row():
                last = m.num_layers - 1
                layer = gr.Slider(0, last, value=last, step=1, precision=0, label="Layer", elem_id="layer")
                head = gr.Dropdown(head_choices(m), value=MEAN_OF_HEADS_VALUE, label="Head", elem_id="head")
                query_mode = gr.Radio(QUERY_CHOICES, value=READOUT_QUERY, label="Query")
                patch = gr.Number(value=-1, precision=0, label="Query patch (index)", minimum=-1, elem_id="patch")
                grid_scale = gr.Radio([SHARED, PER_HEAD], value=SHARED, label="Colour scale of the all-heads grid")
                measure = gr.Radio(
                    [WEIGHT, WEIGHT_VALUE],
                    value=WEIGHT,
                    label="Show",
                    info=f"weight × value norm: ‖α·W_O v‖, what each key passes on (tab {tabs.number('inside')})",
                )
            with gr.Row(elem_id="attention-pictures"):
                picker = picture(label="Click a patch to make it the query", clickable=True, elem_id="picker")
                overlay = picture(label="Attention of the query (one square per patch)", elem_id="attention")
            # All heads: the sheet gets a line of its own at the full width (tiles >= 200 px at 1400 and on a
            # projector), under a smaller picker. In the browser only: the API's outputs stay as they are.
            head.change(None, head, None, js=ALL_HEADS_LAYOUT)
            gr.Markdown(sentences.legend("query", "clip"), elem_classes=["legend"])
            note = gr.Markdown(label="This layer in numbers", elem_id="attention-note")
            # The all-heads sheet's columns: one on a phone, where a row of three would show tiles 110 px wide
            columns = gr.Number(0, precision=0, minimum=0, maximum=16, visible=False, label="Columns of the sheet")
    ctx.demo.load(None, None, columns, js=PHONE_COLUMNS, api_visibility="private", queue=False)
    ctx.view(tab, explorer.draw, [*ctx.where, ctx.cmap, ctx.alpha, ctx.scale], [shown], api_name="explorer")
    switch_off.click(
        ctx.server.bind(switch_off_shown),
        [*ctx.where, shown_head, ctx.cmap, ctx.alpha, ctx.scale, ctx.large],
        results,
        js=SHOWN_HEAD,
        api_visibility="private",
        **slots("forward"),
    )
    ctx.on_new_analysis(
        tab,
        lambda: (gr.update(visible=False),) * len(results),
        None,
        results,
        api_visibility="private",
        show_progress="hidden",
    )
    ctx.view(
        tab,
        draw,
        [*ctx.where, layer, head, query_mode, patch, measure, ctx.cmap, ctx.alpha, grid_scale, ctx.scale, columns],
        [overlay, picker, note],
        [layer.change, head.change, query_mode.input, patch.input, measure.change, grid_scale.change],
        api_name="attention",
        prepare=(ctx.server.bind(fit_controls), [*ctx.where, layer, head, patch], [layer, head, patch, query_mode]),
        clicks=Clicks([picker], pick_patch, [patch, query_mode]),
    )
