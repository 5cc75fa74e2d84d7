"""Positions: how similar the learned position embeddings are to each other (ViT paper, Fig. 7)."""

from __future__ import annotations

import gradio as gr
import numpy as np

from ... import VitModel, plots, sentences
from ...render import large_labels
from ...views.positions import pos_embed_map, position_at
from ..context import Context, view_tab
from ..pictures import picture
from ..scheduling import slots
from ..server import Server, user_errors


def similarity(server: Server, model: VitModel) -> np.ndarray:
    """[g,g,g,g] cosine similarities of the position embeddings, computed once per model."""
    if model.name not in server.similarity:
        server.similarity[model.name] = model.pos_embed_similarity()
    return server.similarity[model.name]


@user_errors
def position_map(server: Server, model_name, row, col):
    """One position's similarity map, large, on the diverging scale of a signed cosine (not the app's colormap); the
    grid of grids stays as it is."""
    model = server.get_model(model_name)
    g = model.native_grid[0]
    if not (0 <= int(row) < g and 0 <= int(col) < g):
        raise ValueError(f"row and col must be in [0, {g}) for {model.name}'s {g}×{g} grid, got ({row}, {col})")
    return pos_embed_map(model, similarity(server, model), int(row), int(col))


@user_errors
def redraw_map(server: Server, model_name, row, col, large_text):
    """A slider's move: the map of the position it sets."""
    with large_labels(large_text):
        return position_map(server, model_name, row, col)


@user_errors
def draw(model_name, row, col, server: Server, request: gr.Request):
    """The grid of grids and one position's map, large."""
    grid = plots.pos_embed_grid(similarity(server, server.get_model(model_name)))
    return grid, position_map(server, model_name, row, col)


@user_errors
def note(a, request: gr.Request) -> str:
    """Whether this photo uses the table as it is, or interpolated from which grid to which."""
    return sentences.positions_note(a)


def fit_controls(server: Server, model_name, row, col):
    """Another model: sliders over its own grid, centred if the old position is off it."""
    g = server.get_model(model_name).native_grid[0]
    inside = row < g and col < g
    return (
        gr.Slider(maximum=g - 1, value=row if inside else g // 2),
        gr.Slider(maximum=g - 1, value=col if inside else g // 2),
    )


@user_errors
def pick_position(server: Server, model_name, large_text, evt: gr.SelectData):
    """A click on the large similarity map picks the position to show: its row, its column and its map, in one
    answer (the sliders' change would draw the map once for each)."""
    row, col = position_at(server.get_model(model_name), *evt.index)
    with large_labels(large_text):
        return row, col, position_map(server, model_name, row, col)


def build(ctx: Context) -> None:
    g = ctx.model.native_grid[0]
    with view_tab(
        "positions",
        (
            "The model learned one vector per patch position. "
            "Each small square shows how similar one position's vector is to all others "
            "(cosine: red 1 = same, white 0 = unrelated, blue −1 = opposite). "
            "Nearby positions, same rows and same columns come out similar: "
            "the model learned the 2-D layout by itself. This belongs to the model, not your image."
        ),
    ) as tab:
        with gr.Row(elem_classes=["vitviz-controls"]):
            row = gr.Slider(0, g - 1, value=g // 2, step=1, precision=0, label="Position row", elem_id="pos-row")
            col = gr.Slider(0, g - 1, value=g // 2, step=1, precision=0, label="Position column", elem_id="pos-col")
        interpolated = gr.Markdown(elem_id="positions-note")
        with gr.Row():
            grid = gr.Plot(label="Grid of grids")
            with gr.Column(elem_classes=["vitviz-main"]):  # on a projector: on the left, its sliders beside it
                large = picture(
                    label="Similarity of the chosen position (click to choose)", clickable=True, elem_id="pos-large"
                )
        gr.Markdown(sentences.legend("position"), elem_classes=["legend"])
    ctx.view(tab, note, ctx.where, [interpolated])
    inputs = [ctx.model_name, row, col]
    ctx.view(
        tab,
        draw,
        inputs,
        [grid, large],
        api_name="position_embeddings",
        prepare=(ctx.server.bind(fit_controls), [ctx.model_name, row, col], [row, col]),
    )
    gr.on(
        [row.input, col.input],  # a user's move of a slider; a click sets both and draws the map itself
        ctx.server.bind(redraw_map),
        [*inputs, ctx.large],
        large,
        api_name="position_map",
        trigger_mode="always_last",
        show_progress="minimal",
        **slots("draw"),
    )
    ctx.server.on_click(large, pick_position, [ctx.model_name, ctx.large], [row, col, large])
