"""The Gradio app: `python app.py [--host H] [--port P] [--share] [--model M] [--device D] [--depth-model M]`.

One module per view, named as its tab in `vitviz.tabs` (which lists them in order), each holding its layout,
handlers and events; `session` holds what they share, `source` the image panel, `internals` every reach into
Gradio's internals, and `layout.build` composes them. Gradio is imported only once the arguments parse.
"""

from __future__ import annotations

import argparse
import logging
import os


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description="vitviz: see inside a Vision Transformer")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument(
        "--share",
        action="store_true",
        help="also open a public gradio.live link: anyone who has it can use the app (no login)",
    )
    parser.add_argument("--model", default="dinov2-small", help="catalogue name, hub id or local folder")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument(
        "--depth-model", default=None, help="DPT or Depth Anything: hub id or local save_pretrained folder (offline)"
    )
    parser.add_argument(
        "--max-upload-mb",
        type=float,
        default=float(os.environ.get("VITVIZ_MAX_UPLOAD_MB", 25)),
        help="refuse larger uploads (default 25, or $VITVIZ_MAX_UPLOAD_MB)",
    )
    parser.add_argument(
        "--max-queue",
        type=int,
        default=int(os.environ.get("VITVIZ_MAX_QUEUE", 64)),
        help="requests that may wait at once; more are refused with 'queue is full' (default 64)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, prog: str | None = None, block: bool = True, server=None):
    """Serve the app; with block=False return the running Blocks at once (the benchmark serves it from its
    own process; `close()` stops it). server: a `session.Server` to serve from (a test's or the benchmark's,
    holding its own model objects); by default a new one on --device."""
    args = parse_args(argv, prog)
    from .. import memory

    memory.tune_malloc()  # before any worker thread starts
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    logging.basicConfig(level=logging.INFO)
    import gradio as gr

    from .. import ASSETS
    from . import qk, session
    from .explorer import routes
    from .layout import CSS, build
    from .site import HostedSite

    server = (server or session.Server(device=args.device)).start()
    site = HostedSite().start()  # the static site at /site/, written in the background
    demo = build(server, args.model, args.depth_model)
    # Concurrency groups: "forward" (new images), "draw" (views from the cache) and "heavy"
    # (attributions, depth) each have their own slots, so slow work never queues before a new image.
    demo.queue(default_concurrency_limit=2, max_size=args.max_queue).launch(
        server_name=args.host,
        server_port=args.port,
        share=args.share,
        theme=gr.themes.Soft(),
        css=CSS,
        allowed_paths=[str(ASSETS)],
        max_file_size=int(args.max_upload_mb * 2**20),
        prevent_thread_lock=not block,
        quiet=not block,
        # the Explorer's layers, the Q·K view's UMAP, the static site
        app_kwargs={"routes": routes(server) + qk.routes(server) + site.routes()},
    )
    return demo
