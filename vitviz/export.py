"""The Explorer as one offline HTML file: the same engine as the app's (vitviz/static), with the meta and every
chosen layer's queries and keys embedded as base64 float32, so that it opens from file:// with no server and no
network, on a phone too. float32 because float16 missed the weights by 1.1e-2 (see `vitviz.explorer`); base64 adds
a third: about 1.1 MB a layer for the embedded model at 224 px, 4.2 MB at 448 px.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from . import explorer, qk
from .maps import DEFAULT_SCALE

HELP = (
    "<b>Move the pointer over the photo</b>: the patch under it is the <i>query</i>, and each map shows how much "
    "of its attention every patch gets. Click to pin it, click again to unpin; with the photo clicked, ← → change "
    "the layer and ↑ ↓ the head. On a touch screen, drag a finger: the query stays where you lift it."
)
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 12px auto; max-width: 1280px;
  padding: 0 12px; color: #222; background: #fff; }}
h1 {{ font-size: 1.3em; margin: 0 0 4px; }}
.vx-help {{ margin: 0 0 10px; font-size: 15px; }}
{css}
</style></head>
<body><h1>{title}</h1><p class="vx-help">{help}</p><div class="vx" data-mode="attention"></div><div class="vx-qk"></div>
<script type="application/json" id="vitviz-meta">{meta}</script>
<script type="application/json" id="vitviz-layers">{layers}</script>
<script>
{script}
</script></body></html>
"""


def _json(value) -> str:
    """JSON that a <script> element holds as text: no "</" to end it early."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def explorer_html(
    image_or_analysis,
    model=None,
    *,
    size: int | None = None,
    layers: Sequence[int] | None = None,
    layer: int | None = None,
    cmap: str = explorer.DEFAULT_CMAP,
    opacity: float = explorer.DEFAULT_OPACITY,
    scale: str = DEFAULT_SCALE,
    progress: Callable[[int], None] | None = None,
    with_qk: bool = True,
) -> str:
    """The page's text. layers: those embedded (default every layer; another is said to be missing when asked);
    layer: the one it opens on (default the last embedded); progress(layer) after each layer is encoded; with_qk:
    the Q·K view under the Explorer, from the same embedded queries and keys (PCA only: UMAP needs a server)."""
    a = explorer.analysis_of(image_or_analysis, model, size)
    chosen = list(range(a.model.num_layers)) if layers is None else sorted({int(x) for x in layers})
    if not chosen:
        raise ValueError("layers is empty: name at least one layer to embed")
    for x in chosen:
        a._check_layer_head(x, None)
    start = chosen[-1] if layer is None else layer
    if start not in chosen:
        raise ValueError(f"layer {start} is not among the embedded layers {chosen}")
    meta = {**explorer.standalone_meta(a, cmap, opacity, scale, start), "only": chosen}
    if with_qk:
        meta["qk"] = qk.extras(a, umap=False)
    data = {}
    for x in chosen:
        data[str(x)] = base64.b64encode(explorer.layer_data(a, x).tobytes()).decode()
        if progress is not None:
            progress(x)
    h, w = a.pixel_values.shape[2:]
    title = f"vitviz Explorer: {a.model.name}, {w} × {h} px, {len(chosen)} of {a.model.num_layers} layers"
    css = "\n".join((explorer.STATIC / name).read_text() for name in ("explorer.css", "qk.css"))
    return PAGE.format(
        title=html.escape(title),
        help=HELP,
        css=css,
        meta=_json(meta),
        layers=_json(data),
        script=qk.script("boot_file.js"),
    )


def export_html(image_or_analysis, path: str | Path, model=None, **options) -> Path:
    """Write the Explorer of an image (or an Analysis) to `path` as one self-contained HTML file; options as
    `explorer_html`'s. Returns the path."""
    path = Path(path)
    path.write_text(explorer_html(image_or_analysis, model, **options), encoding="utf-8")
    return path
