"""Who may use the served app, and what each of its answers carries: requests from the app's own pages only, the
login when `--auth` asks for one, a bound on one upload's total size, and the security headers.

`Guard` is an ASGI middleware that `vitviz.app.main` gives Gradio's FastAPI app (launch's `app_kwargs`), so that
every route is held to it: Gradio's own, the files it serves and the routes vitviz adds (the Explorer's layers, the
Q·K view's UMAP), which Gradio's login does not guard.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .internals import signed_in

UPLOAD_PATH = "/gradio_api/upload"
FRAMING = 64 * 2**10  # bytes an upload's multipart framing may add to its files (a file's part headers: ~200)
# What needs no login: Gradio's login page (the page, its form, its scripts, styles and fonts), and the request that
# Gradio's launch() sends itself once it serves (it runs the app's start-up events once, then does nothing).
LOGIN_PAGE = {
    ("GET", "/"),
    ("HEAD", "/"),
    ("POST", "/login"),
    ("POST", "/login/"),
    ("GET", "/favicon.ico"),
    ("GET", "/theme.css"),
    ("GET", "/gradio_api/theme.css"),
    ("GET", "/gradio_api/startup-events"),
}
LOGIN_ASSETS = ("/assets/", "/static/", "/svelte/")
# As strict as Gradio's page allows (checked in Chromium, tests/test_serve.py): Gradio 6.31 writes its config in an
# inline script and runs the app's JavaScript (its `js=` steps, gr.HTML's js_on_load) through `new Function`, so
# scripts need 'unsafe-inline' and 'unsafe-eval'; its styles are inline too. Nothing comes from another origin (the
# theme's fonts are the system's), and no other page may frame it.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline' 'unsafe-eval'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "media-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


async def drained(receive: Receive, most: int) -> None:
    """Read a refused request's body (up to `most` bytes) before answering: a client still sending when the answer
    comes and the connection closes gets a broken pipe, not the refusal's reason."""
    seen = 0
    while seen <= most:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


@dataclass(frozen=True)
class Access:
    """What `Guard` holds every request to. login: whether a login is needed (`--auth`); upload_bytes: the most that
    one upload request may send, all its files together (`--max-upload-mb`; Gradio bounds each file, not their sum),
    their multipart framing allowed for on top (`FRAMING`)."""

    login: bool = False
    upload_bytes: int = 25 * 2**20


def from_own_page(headers: Headers) -> bool:
    """Whether a request comes from one of the app's own pages, or from no page at all (a script, gradio_client):
    its Origin, where it has one, names the host it asks (or the one a proxy says it was asked as). Browsers send an
    Origin with every request from another page that could change something (a form's POST included), and with their
    own pages' POSTs."""
    origin = headers.get("origin")
    if origin is None:
        return True
    asked = {h.lower() for h in (headers.get("host"), headers.get("x-forwarded-host")) if h}
    return urlsplit(origin.lower()).netloc in asked


def needs_no_login(method: str, path: str) -> bool:
    return (method, path) in LOGIN_PAGE or (method in ("GET", "HEAD") and path.startswith(LOGIN_ASSETS))


class Guard:
    """Refuse, before any route: a request from another site's page (403), one without the login where one is needed
    (401), an upload over `Access.upload_bytes` or of an unstated size (413, 411); and give every answer that passes
    through it `SECURITY_HEADERS`. Gradio's own CORS middleware answers preflight requests before this one; with
    `internals.allow_origins(from_own_page)` it allows the app's own origin alone."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app, self.access = app, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            await drained(receive, 4 * self.access.upload_bytes)
            await refusal(scope, receive, send)
            return

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                # a route that sets one itself (the static site's stricter policy, with COEP) keeps its own
                given = message.get("headers", [])
                own = {name.lower() for name, _ in given}
                message["headers"] = [*given, *(header for header in SECURITY_HEADERS if header[0] not in own)]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def refusal(self, scope: Scope) -> PlainTextResponse | None:
        """The answer to a request that may not go on, or None."""
        headers, method, path = Headers(scope=scope), scope["method"], scope["path"]
        if not from_own_page(headers):
            return refuse(403, f"this server answers its own pages only, not a page of {headers['origin'][:100]}")
        if self.access.login and not needs_no_login(method, path) and not signed_in(scope):
            return refuse(401, "log in first: open this server's address in a browser and sign in")
        if method == "POST" and path.rstrip("/") == UPLOAD_PATH:
            size, most = headers.get("content-length"), self.access.upload_bytes
            if size is None or not size.isdigit():
                return refuse(411, "an upload must say its size (Content-Length)")
            if int(size) > most + FRAMING:
                return refuse(
                    413,
                    f"an upload may send at most {most} bytes ({most / 2**20:.1f} MB, --max-upload-mb), all its files "
                    f"together: this one sends {int(size)}; send one photo at a time",
                )
        return None


def refuse(status: int, message: str) -> PlainTextResponse:
    return PlainTextResponse(message, status_code=status, headers={k.decode(): v.decode() for k, v in SECURITY_HEADERS})
