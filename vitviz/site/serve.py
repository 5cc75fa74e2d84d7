"""`vitviz site OUT --serve`: the site's folder over HTTP on this machine, with the headers that let its runtime use
threads (cross-origin isolation: COOP same-origin, COEP require-corp) and that keep it to itself."""

from __future__ import annotations

import functools
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # the browser asks again (a 304 where nothing changed), so a rebuilt site's script never meets an older page
    "Cache-Control": "no-cache",
    # the page runs WebAssembly ('wasm-unsafe-eval'), its own scripts and workers, and sends nothing anywhere else
    "Content-Security-Policy": "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; media-src 'self' blob:; worker-src 'self' blob:; "
    "connect-src 'self'; frame-ancestors 'none'",
}
TYPES = {
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".wasm": "application/wasm",
    ".onnx": "application/octet-stream",
}


class SiteHandler(SimpleHTTPRequestHandler):
    """Static files of one folder, GET and HEAD only, with `HEADERS` on every answer."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, **TYPES}

    def end_headers(self) -> None:
        for name, value in HEADERS.items():
            self.send_header(name, value)
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class' name
        pass


def server(folder: str | Path, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """A server of `folder` bound to host:port (port 0: any free one), not yet serving."""
    folder = Path(folder)
    if not (folder / "index.html").is_file():
        raise ValueError(f"{folder} holds no site: build it first with `vitviz site {folder}`")
    handler = functools.partial(SiteHandler, directory=str(folder))
    return ThreadingHTTPServer((host, port), handler)


def serve(folder: str | Path, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve `folder` until interrupted."""
    with server(folder, host, port) as httpd:
        print(
            f"vitviz: serving the site {folder} on http://{host}:{httpd.server_address[1]}/ (Ctrl-C stops it)",
            flush=True,
        )
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            print("vitviz: stopped")
