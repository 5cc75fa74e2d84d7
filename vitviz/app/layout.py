"""The whole app: the photo panel on the left, one tab per view on the right."""

from __future__ import annotations

import importlib

import gradio as gr

from ..tabs import TABS
from . import site
from .explorer import STATIC
from .internals import check_gradio, name_refusals, narrow_progress, write_pictures_whole
from .photo import build_photo_panel
from .server import Server, user_error

INTRO = """# vitviz: see inside a Vision Transformer
Drop in a photo. A ViT cuts it into patches, turns each patch into a **token**, adds a **position
embedding**, puts a **readout (CLS) token** in front, and passes the tokens through pre-norm layers of
**multi-head self-attention**. Each tab shows one part of that, on *your* image."""
# The page's style (vitviz/static/app.css): the panel, the projector mode and a phone's order; views add their own
PAGE_CSS = (STATIC / "app.css").read_text()

# One module per view, named as its tab, in the tabs' order: each builds its tab and wires its own events.
VIEWS = [importlib.import_module(f".tabs.{tab.id}", __package__) for tab in TABS]
CSS = "\n".join([PAGE_CSS, *(getattr(view, "CSS", "") for view in VIEWS)])  # a view may bring its own


def build(server: Server, default_model: str, depth_model: str | None = None) -> gr.Blocks:
    """The app, serving from `server`. depth_model: a depth model to load now (a local folder works offline)."""
    check_gradio()
    write_pictures_whole()
    model = server.get_model(default_model)
    if depth_model is not None:
        server.get_depth_model(depth_model)
    with gr.Blocks(title="vitviz: see inside a Vision Transformer", delete_cache=(1800, 3600)) as demo:
        gr.Markdown(INTRO, elem_id="intro")
        gr.Markdown(site.LINK, elem_id="site-link")
        with gr.Row():
            with gr.Column(scale=1, min_width=300, elem_id="photo-panel"):
                ctx = build_photo_panel(demo, server, model, depth_model)
            # Below ~1100 px (a 1024x768 projector) the views wrap under the image panel at full width,
            # so that every tab shows and the pictures are large.
            with gr.Column(scale=3, min_width=760, elem_id="views-panel"):
                with gr.Tabs(overflow_behavior="wrap"):  # every tab in sight, none behind "..."
                    for view in VIEWS:
                        view.build(ctx)
                ctx.route()
        demo.load(None, js=(STATIC / "pick.js").read_text(), api_visibility="private", queue=False)
    name_refusals(demo, user_error)
    narrow_progress(demo)
    return demo
