"""The Explorer in a notebook: `vitviz.explore(image)` returns an anywidget that runs the app's own engine
(vitviz/static), which runs in JupyterLab, Notebook 7, VS Code, Colab and marimo with no CDN. The meta is a
trait, and its large parts (the photo, the Q·K view's) and each layer's bytes go to the page when it asks for them,
as one binary buffer of a custom message: a layer costs the comm nothing until it is shown, and a closed widget's
state, which a host keeps, holds no photo. Needs anywidget: pip install "vitviz[notebook]".
"""

from __future__ import annotations

import hashlib
import json
import re

try:
    import anywidget
    import traitlets
except ImportError as exc:  # anywidget is an optional extra: the rest of vitviz works without it
    raise ImportError(
        'vitviz.explore needs anywidget, the "notebook" extra: pip install anywidget==0.11.0 (the one its tests use)'
    ) from exc

from . import explorer, qk
from .maps import DEFAULT_SCALE


def ascii_module(text: str) -> str:
    """The module written in ASCII, so that the browser keeps it in one byte a character."""

    def escaped(match: re.Match) -> str:  # \\uXXXX (UTF-16 units): the same character in a string, a template,
        units = memoryview(match.group().encode("utf-16-le")).cast("H")  # a regular expression or a comment
        return "".join(f"\\u{u:04x}" for u in units)

    return re.sub(r"[^\x00-\x7f]", escaped, text)


CSS = "\n".join((explorer.STATIC / name).read_text() for name in ("explorer.css", "qk.css"))
# The engine, the Q·K view, their style sheet and their boot, one ES module that the page gets from the kernel once.
# The style sheet goes with it, not in the widget's _css, which a host keeps for every widget it has shown
CSS_KEY = hashlib.sha1(CSS.encode()).hexdigest()[:16]
ENGINE = ascii_module(
    f"const VITVIZ_CSS = {json.dumps(CSS)}, VITVIZ_CSS_KEY = {json.dumps(CSS_KEY)};\n" + qk.script("boot_widget.js")
).encode()
ENGINE_KEY = hashlib.sha1(ENGINE).hexdigest()[:16]
# The widget's own module, which anywidget imports anew for each widget (and a page never frees): a loader that
# asks the kernel for the engine once per page, imports it, and renders with it
ESM = (explorer.STATIC / "load_widget.js").read_text().replace("ENGINE_KEY", ENGINE_KEY)


class ExplorerWidget(anywidget.AnyWidget):
    """One Explorer. cmap, opacity and scale may be set again: the page repaints with them."""

    _esm = ESM
    meta = traitlets.Dict().tag(sync=True)
    cmap = traitlets.Unicode(explorer.DEFAULT_CMAP)
    opacity = traitlets.Float(explorer.DEFAULT_OPACITY)
    scale = traitlets.Unicode(DEFAULT_SCALE)

    # The meta's large parts, which the page asks for once a view (see layer_message) rather than keeping them in
    # the model's state: a host keeps a closed widget's state (JupyterLab, with its comm), and the photo alone is
    # about 70 KB
    EXTRAS = ("photo", "qk")

    def __init__(self, analysis, layer: int | None = None, with_qk: bool = True, **settings) -> None:
        super().__init__(**settings)
        self.analysis = analysis
        meta = explorer.standalone_meta(analysis, self.cmap, self.opacity, self.scale, layer)
        if with_qk:
            meta["qk"] = qk.extras(analysis, umap=False)
        self.extras = {k: meta.pop(k) for k in self.EXTRAS if k in meta}
        self.meta = meta
        self.on_msg(self._answer)

    @traitlets.observe("cmap", "opacity", "scale")
    def _restyle(self, change) -> None:
        if self.meta:
            self.meta = {**self.meta, **explorer.look(self.cmap, self.opacity, self.scale)}

    def layer_message(self, content) -> tuple[dict, list[bytes]] | None:
        """The answer to a message from the page: to {want: layer}, the layer's bytes as its one buffer, or why
        not; to {want: "engine"}, the engine's module; to {want: "extras"}, the meta's large parts as JSON; None to
        a message that asks for none of them."""
        layer = content.get("want") if isinstance(content, dict) else None
        if layer is None:
            return None
        if layer == "engine":
            return {"engine": ENGINE_KEY}, [ENGINE]
        if layer == "extras":
            return {"extras": True}, [json.dumps(self.extras).encode()]
        try:
            return {"layer": layer}, [explorer.layer_data(self.analysis, layer).tobytes()]
        except (ValueError, TypeError, IndexError) as exc:
            return {"layer": layer, "error": str(exc)}, []

    def _answer(self, _widget, content, _buffers) -> None:
        answer = self.layer_message(content)
        if answer is not None:
            self.send(answer[0], buffers=answer[1])


def explore(
    image_or_analysis,
    model=None,
    layer: int | None = None,
    *,
    size: int | None = None,
    cmap: str = explorer.DEFAULT_CMAP,
    opacity: float = explorer.DEFAULT_OPACITY,
    scale: str = DEFAULT_SCALE,
    with_qk: bool = True,
) -> ExplorerWidget:
    """The Explorer of an image (one forward of `model`, default the embedded one, at `size`) or of an Analysis,
    opening on `layer` (default the last), painted with the page's settings (the app's defaults); with_qk: the Q·K
    view under it, from the same layers (PCA, in the page)."""
    a = explorer.analysis_of(image_or_analysis, model, size)
    explorer.look(cmap, opacity, scale)  # bad settings named here, before a widget exists
    return ExplorerWidget(a, layer, with_qk, cmap=cmap, opacity=opacity, scale=scale)
