"""Live: the browser's camera, analysed frame by frame; "freeze" makes a frame the image of every view."""

from __future__ import annotations

import json
import time

import cv2
import gradio as gr
import numpy as np

from ...capture import analyze_frame
from ...render import large_labels
from ...sentences import grid_words, pixel_words
from ...views.live import LIVE_LAYERS, live_views
from ..context import Context, view_tab
from ..head_choice import MEAN_OF_HEADS_VALUE, head_choices
from ..pictures import picture
from ..server import Server, user_errors

STREAM_EVERY_S = 0.1  # how often the browser sends a frame; a busy server keeps only the newest one
# On a CPU a stream could take every core: at most 5 frames a second per stream leaves the other users a
# share. A GPU keeps up with the camera.
CPU_FRAME_INTERVAL_S = 0.2
STREAM_LIMIT_S = 300  # one stream's share of the server, then the camera stops (press record again)
LIVE_SLOTS = 2  # streams served at once; more wait in the queue, and never hold a slot of the other views
FROZEN_KEEP = 64  # frozen frames kept on disk, newest first: each one is an upload the views may read
CAMERA_OFF = (  # what the empty pictures wait for (the stream sends no frame: None)
    "**The camera is off.** Click the camera's box to let the page use it (the browser asks once), then press "
    "the record button under it: each frame then fills the pictures below."
)
NO_CAMERA = (
    "**No camera was found.** This browser reports none on this device (browsers offer one only to pages served "
    "over https or from this machine), so this tab has nothing to show; every other tab works on your photos."
)
# Run in the browser when the tab opens: only the browser knows its cameras. What the note says is kept where
# one is found (it may be counting frames).
FIND_CAMERA_JS = f"""async (said) => {{
    const devices = navigator.mediaDevices?.enumerateDevices ? await navigator.mediaDevices.enumerateDevices() : [];
    return devices.some((device) => device.kind === "videoinput") ? said : {json.dumps(NO_CAMERA)};
}}"""


@user_errors
def frame(server: Server, camera, model_name, layer, head, shown, cmap, alpha, colour_scale, large_text, started):
    """One camera frame: (attention, rollout, dense head, the frame for "freeze", server time, when this
    frame started). A frame that comes too soon after the last one on a CPU is dropped."""
    if camera is None:
        return None, None, None, None, CAMERA_OFF, None
    start = time.perf_counter()
    model = server.get_model(model_name)
    if model.device.type == "cpu" and started is not None and start - started < CPU_FRAME_INTERVAL_S:
        return (gr.skip(),) * 6
    a = analyze_frame(model, camera)
    which = None if head in (None, MEAN_OF_HEADS_VALUE) else int(head)
    layer = min(int(layer), a.model.num_layers - 1)
    with large_labels(large_text):
        pictures = live_views(a, layer, which, tuple(shown), cmap, float(alpha), colour_scale)
    ms = (time.perf_counter() - start) * 1000
    h, w = a.pixel_values.shape[2:]
    text = f"input {pixel_words(h, w)}, {grid_words(*a.grid)} of patches · {ms:.0f} ms on the server for this frame"
    return *pictures, camera, text, start


@user_errors
def freeze(server: Server, last: np.ndarray | None) -> str:
    """The last analysed frame as an upload: every view opens on it."""
    if last is None:
        raise ValueError("no frame yet: start the camera first (the record button under the camera picture)")
    with server.files_lock:
        path = server.scratch() / f"frame-{time.time_ns()}.png"
        cv2.imwrite(str(path), cv2.cvtColor(np.asarray(last, np.uint8), cv2.COLOR_RGB2BGR))
        for old in sorted(server.scratch().glob("frame-*.png"))[:-FROZEN_KEEP]:
            old.unlink(missing_ok=True)
    return str(path)


# On a projector the camera, its controls and the three pictures fit on one screen under the tab bar: a shorter
# camera, and beside it layer, head and Freeze, then what to draw; the note under the pictures once the camera
# shows, above them while it says how to start it or that there is none.
CSS = """body.vitviz-large #live-tab > .column {
  display: grid; grid-template-columns: repeat(4, minmax(0, 1fr)); gap: 6px 14px; align-items: start; }
body.vitviz-large #live-tab > .column > :where(*) { grid-column: 1 / -1; }
body.vitviz-large #live-tab :is(.row:has(> .column > #live-camera), .column:has(> #live-camera), #live-controls,
  #live-controls > .row, #live-controls > .row > .form) { display: contents; }
body.vitviz-large #live-camera { grid-column: 1; grid-row: 1 / 3; height: auto !important; }
body.vitviz-large #live-camera .image-container { height: 160px !important; }
body.vitviz-large #live-controls > .row > .form > * { grid-row: 1; }
body.vitviz-large #freeze { grid-column: 4; grid-row: 1; }
body.vitviz-large #live-controls > :has(> #live-draw) { grid-column: 2 / 5; grid-row: 2; }
body.vitviz-large #live-draw [data-testid="block-info"] { display: none; }  /* its boxes say what they draw */
body.vitviz-large #live-info { order: 1; grid-column: 1 / -1; }
body.vitviz-large #live-tab:not(:has(#live-camera .streaming-bar)) #live-info { order: 0; grid-area: 3 / 1 / 4 / -1; }
body.vitviz-large :is(#live-attention, #live-rollout, #live-dense) img {
  object-fit: contain; max-height: calc(var(--vitviz-tab-h) - 220px); }"""


def build(ctx: Context) -> None:
    m = ctx.model
    with view_tab(
        "live",
        (
            "Point the camera at something and watch the attention move. Each frame is resized to the "
            "model's square input (224×224 for the embedded model, the size its dense head was trained at, "
            "whatever the input size chosen for uploads) and analysed on its own; when the "
            "server is busy, older frames are dropped, never queued. *Freeze* turns the current frame "
            "into the image of every other view."
        ),
        elem_id="live-tab",
    ) as tab:
        with gr.Row():
            with gr.Column():
                camera = gr.Image(
                    sources=["webcam"], streaming=True, type="numpy", label="Camera", elem_id="live-camera", height=300
                )
                info = gr.Markdown(CAMERA_OFF, elem_id="live-info")
            with gr.Column(elem_id="live-controls"):
                with gr.Row():
                    layer = gr.Slider(
                        0,
                        m.num_layers - 1,
                        value=m.num_layers - 1,
                        step=1,
                        precision=0,
                        label="Layer",
                        min_width=160,
                        elem_id="live-layer",
                    )
                    head = gr.Dropdown(
                        [c for c in head_choices(m) if c[1] != -2],
                        value=MEAN_OF_HEADS_VALUE,
                        label="Head",
                        min_width=160,
                        elem_id="live-head",
                    )
                shown = gr.CheckboxGroup(list(LIVE_LAYERS), value=list(LIVE_LAYERS), label="Draw", elem_id="live-draw")
                freeze_button = gr.Button("Freeze: analyse this frame in every view", elem_id="freeze")
        with gr.Row():
            attention = picture(label="The readout's attention", elem_id="live-attention")
            rollout = picture(label="Rollout", elem_id="live-rollout")
            dense = picture(label="Dense head", elem_id="live-dense")
        last, started = gr.State(None), gr.State(None)
    camera.stream(
        ctx.server.bind(frame),
        [camera, ctx.model_name, layer, head, shown, ctx.cmap, ctx.alpha, ctx.scale, ctx.large, started],
        [attention, rollout, dense, last, info, started],
        stream_every=STREAM_EVERY_S,
        time_limit=STREAM_LIMIT_S,
        concurrency_limit=LIVE_SLOTS,
        concurrency_id="live",
        show_progress="hidden",
        api_visibility="private",
    )
    freeze_button.click(ctx.server.bind(freeze), last, ctx.image, api_visibility="private")
    tab.select(None, None, ctx.shown, js="() => 'live'", api_visibility="private", queue=False)
    tab.select(None, info, info, js=FIND_CAMERA_JS, api_visibility="private", queue=False)
