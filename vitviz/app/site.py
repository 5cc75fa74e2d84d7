"""The static site, served by the app at `/site/` so that a teacher's laptop can hand a class one link and compute
nothing for them: each student's browser runs the model (vitviz/site). The folder is written once per vitviz
version, in the background after the app starts, into the system's temporary folder or
`$VITVIZ_SITE_DIR`; until it is there, `/site/` says so."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from starlette.responses import PlainTextResponse
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from .. import __version__
from ..site.serve import HEADERS

PATH = "/site"
# a line under the intro on a laptop's screen (app.css hides it on a projector, a phone and a 1024 px screen, whose
# first screens hold the tabs and pictures with no line to spare)
LINK = f"**One link for a class:** [{PATH}/]({PATH}/) runs the model in each student's own browser."
log = logging.getLogger(__name__)


def fingerprint() -> str:
    """What the site is made of, in 12 hex digits: the page, the engine, the graphs' code and the weights' size, so
    that a folder written by another vitviz (or a changed checkout) is never served for this one."""
    from ..embedded import WEIGHTS
    from ..explorer import STATIC
    from ..site import build, graph

    digest = hashlib.sha1(str(WEIGHTS.stat().st_size).encode())
    files = [*build.PAGE.iterdir(), *STATIC.iterdir(), Path(graph.__file__), Path(build.__file__)]
    for path in sorted(p for p in files if p.is_file()):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


class HostedSite:
    """The site's folder, built by `start()` on a thread of its own; `app` is the ASGI app that serves it."""

    def __init__(self, folder: Path | None = None) -> None:
        root = Path(os.environ.get("VITVIZ_SITE_DIR") or Path(tempfile.gettempdir()) / "vitviz-site")
        self.folder = folder or root / f"{__version__}-{fingerprint()}"
        self.ready = threading.Event()
        self.error: str | None = None
        self._files = None

    def start(self) -> HostedSite:
        if (self.folder / "index.html").is_file():
            self.ready.set()
        else:
            threading.Thread(target=self._build, name="vitviz-site", daemon=True).start()
        return self

    def _build(self) -> None:
        from ..memory import lower_priority
        from ..site.build import build

        lower_priority()  # the export's CPU goes after the students' forwards, never before them
        partial = self.folder.with_name(self.folder.name + f".{os.getpid()}.partial")
        try:
            build(partial)
            partial.replace(self.folder)  # whole or not at all: another app's build may have finished first
            log.info("vitviz: the class's site is ready at %s/", PATH)
        except OSError as exc:
            if not (self.folder / "index.html").is_file():
                self.error = f"the site could not be written to {self.folder}: {exc}"
                log.warning("vitviz: %s", self.error)
                return
        except Exception as exc:  # the app keeps serving; /site/ says what went wrong
            self.error = f"the site could not be built: {exc}"
            log.exception("vitviz: the site could not be built")
            return
        finally:
            shutil.rmtree(partial, ignore_errors=True)  # a failed build's, or one that another app's finished first
        self.ready.set()

    async def app(self, scope, receive, send) -> None:
        """Static files of the folder with the site's headers (cross-origin isolation for the runtime's threads)."""
        if not self.ready.is_set():
            text = self.error or "The site is being written (about 10 s after the app starts): reload in a moment."
            await PlainTextResponse(text, status_code=503 if self.error is None else 500)(scope, receive, send)
            return
        self._files = self._files or StaticFiles(directory=str(self.folder), html=True)

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message["headers"],
                    *((k.lower().encode(), v.encode()) for k, v in HEADERS.items()),
                ]
            await send(message)

        await self._files(scope, receive, with_headers)

    def routes(self) -> list[Mount]:
        return [Mount(PATH, app=self.app)]
