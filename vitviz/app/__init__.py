"""The Gradio app: `python app.py [--host H] [--port P] [--share] [--auth USER:PASS] [--model M] [--device D]
[--depth-model M]`.

One module per view in `tabs/`, named as its tab in `vitviz.tabs` (which lists them in order), each holding its
layout, handlers and events. Beside them the plumbing: `server` holds what they share (the `Server`), `context` the
components every view reads and the wiring of one view (`Context.view`), `photo` the photo panel, `internals` every
reach into Gradio's internals, and `layout.build` composes them. Gradio is imported only once the arguments parse.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description="vitviz: see inside a Vision Transformer")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument(
        "--share",
        action="store_true",
        help="also open a public gradio.live link: anyone who has it can use the app (unless --auth asks a login)",
    )
    parser.add_argument(
        "--auth",
        type=login,
        default=os.environ.get("VITVIZ_AUTH"),
        metavar="USER:PASS",
        help="ask a login for the page and every route (default: $VITVIZ_AUTH, which, unlike the command line, the "
        "machine's other users cannot read in its list of processes)",
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
        help="requests that may wait at once; more are refused, told their place and an estimate (default 64)",
    )
    return parser.parse_args(argv)


# The theme's fonts: the system's. Soft's Google fonts would be the page's one request to another site (and its
# Content-Security-Policy allows none: `access.CONTENT_SECURITY_POLICY`).
SYSTEM_FONTS = ("ui-sans-serif", "system-ui", "sans-serif")


def say(text: str) -> None:
    """One line on stderr: what the start does now, so that a first start's minutes are never silent."""
    print(f"vitviz: {text}", file=sys.stderr, flush=True)


def login(text: str) -> tuple[str, str]:
    """argparse's type for `--auth USER:PASS`: (user, password), both non-empty, split at the first colon."""
    user, colon, password = text.partition(":")
    if not colon or not user.strip() or not password:
        raise argparse.ArgumentTypeError("takes USER:PASS, a user name and a password joined by a colon")
    return user.strip(), password


def main(argv: list[str] | None = None, prog: str | None = None, block: bool = True, server=None):
    """Serve the app; with block=False return the running Blocks at once (the benchmark serves it from its
    own process; `close()` stops it). server: a `server.Server` to serve from (a test's or the benchmark's,
    holding its own model objects); by default a new one on --device."""
    args = parse_args(argv, prog)
    from .. import blas, memory

    memory.tune_malloc()  # before any worker thread starts
    blas.one_thread()
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    logging.basicConfig(level=logging.INFO)
    say("importing Gradio, torch and transformers (a first start compiles them: a minute or two)…")
    import gradio as gr
    from starlette.middleware import Middleware

    from .. import ASSETS
    from .access import Access, Guard, from_own_page
    from .explorer import routes
    from .internals import allow_origins, say_when_full
    from .layout import CSS, build
    from .scheduling import queue_full
    from .server import EXAMPLES, Server
    from .site import HostedSite
    from .tabs import qk

    server = (server or Server(device=args.device)).start()
    site = HostedSite().start()  # the static site at /site/, written in the background
    if not site.ready.is_set():
        say("writing the class's site in the background (/site/ says so until it is there)…")
    # Gradio serves every file in its cache folder to whoever names it; its default, tempdir/gradio, is shared by
    # every Gradio app of the machine. This server's is its own (readable by this user alone), set before any
    # component is made: each reads it when it is.
    files = server.scratch() / "gradio"
    os.environ["GRADIO_TEMP_DIR"], os.environ["GRADIO_EXAMPLES_CACHE"] = str(files), str(files / "examples")
    say(f"loading {args.model} and building the page…")
    demo = build(server, args.model, args.depth_model)
    max_upload = int(args.max_upload_mb * 2**20)
    guard = Middleware(Guard, access=Access(login=args.auth is not None, upload_bytes=max_upload))
    allow_origins(from_own_page)
    # Concurrency groups: "forward" (new images), "draw" (views from the cache) and "heavy"
    # (attributions, depth) each have their own slots, so slow work never queues before a new image.
    demo.queue(default_concurrency_limit=2, max_size=args.max_queue)
    say_when_full(demo, queue_full)
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        share=args.share,
        auth=args.auth,
        theme=gr.themes.Soft(font=SYSTEM_FONTS, font_mono=("ui-monospace", "monospace")),
        css=CSS,
        # the example photos alone: never the weights beside them (`blocked_paths` wins over the others)
        allowed_paths=list(EXAMPLES),
        blocked_paths=[str(p) for p in sorted(ASSETS.iterdir()) if str(p) not in EXAMPLES],
        max_file_size=max_upload,
        state_session_capacity=server.STATES_KEPT,
        # Python answers every request, so that the guard sees each: no Node server in front, no file workers beside
        ssr_mode=False,
        num_workers=0,
        prevent_thread_lock=not block,
        quiet=not block,
        # the Explorer's layers, the Q·K view's UMAP and the static site; every request through vitviz's guard
        # (`access.Guard`)
        app_kwargs={"routes": routes(server) + qk.routes(server) + site.routes(), "middleware": [guard]},
    )
    return demo
