"""What the Explorer ships to the browser, which computes and draws attention itself.

For one layer the browser gets every token's query and key in every head and each key's value norm
||W_O,h v_j||: with them a row of attention is one matrix-vector product and a softmax, so a hover, a head
or a temperature needs no trip to the server. The layer's bytes (all little-endian float32):

    q [N, H*dh] | k [N, H*dh] | value_norms [H, N]

float32 rather than float16: from float16 queries and keys the weights missed the captured ones by up to
1.1e-2 (layer 3 of the embedded model at 448 px), from float32 by 2.5e-4, which is the float16 rounding of
the capture itself. A 448 px square photo (1025 tokens, 6 heads of 64) costs 3.2 MB a layer.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch

from . import inside, maps, plots, render
from .analysis import Analysis
from .derived import Derived
from .views.common import display

LUT_COLORMAPS = ("inferno", "viridis", "magma", "turbo", "gray")  # what the browser can paint with
STATIC = Path(__file__).resolve().parent / "static"
# The browser's engine, one file per concern, in the order they are concatenated (plain JS, no build step); a
# boot file after them gives it its source: boot_gradio.js (the app), boot_widget.js, boot_file.js
ENGINE = (
    "attention.js",
    "scale.js",
    "source.js",
    "paint.js",
    "text.js",
    "inside.js",
    "controls.js",
    "pointer.js",
    "handle.js",
    "frame.js",
    "explorer.js",
)


def script(boot: str) -> str:
    """The engine's modules and the boot file `boot` as one script, which runs the Explorer in that home."""
    return "\n".join((STATIC / name).read_text() for name in (*ENGINE, boot))


@dataclass(frozen=True)
class LayerData:
    """q, k [N,H*dh] float32 of every token, heads side by side; value_norms [H,N] float32."""

    q: np.ndarray
    k: np.ndarray
    value_norms: np.ndarray

    def tobytes(self) -> bytes:
        parts = (self.q, self.k, self.value_norms)
        return b"".join(np.ascontiguousarray(p, dtype="<f4").tobytes() for p in parts)


def layer_data(a: Analysis, layer: int) -> LayerData:
    """Layer `layer`'s queries, keys and value norms, recomputed from the tokens that enter it (a few ms at
    448 px). Neither kept by the analysis nor under the model's lock: the projections' modules carry no hooks,
    and keeping every layer's would double an analysis."""
    a._check_layer_head(layer, None)
    p = inside.project(a.model, a.hidden_states[layer], layer)
    return LayerData(p.u @ p.wq.T + p.bq, p.k, p.value_norms)


def meta(a: Analysis) -> dict:
    """What the browser needs besides the layers: sizes, token names, the photo and the colormaps."""
    m = a.model
    gh, gw = a.grid
    photo = display(a)  # the display image the server-drawn views use, made once per analysis
    ok, jpeg = cv2.imencode(".jpg", photo[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 88])
    if not ok:
        raise ValueError("the photo could not be encoded for the Explorer")
    h, w = a.pixel_values.shape[2:]
    dh, scale = inside.head_geometry(m)
    return {
        "layers": m.num_layers,
        "heads": m.num_heads,
        "headWidth": dh,
        "tokens": a.num_tokens,
        "grid": [gh, gw],
        "patch": m.patch_size,
        "input": [int(w), int(h)],
        "prefix": list(m.prefix_tokens),
        # the readout as the model reads it (its tokens' rows averaged, or a probe), never guessed from names
        "readout": {"tokens": list(m.readout.tokens), "pool": m.readout.pool, "name": m.readout.name},
        "scale": scale,
        "model": m.name,
        "photo": "data:image/jpeg;base64," + base64.b64encode(jpeg.tobytes()).decode(),
        "photoSize": [int(photo.shape[1]), int(photo.shape[0])],
        "colormaps": {name: lut(name) for name in LUT_COLORMAPS},
        "headColours": list(plots.HEAD_COLOURS),
        "probe": probe_data(a),
    }


def look(cmap: str, alpha: float, scale: str) -> dict:
    """The page's display settings as the browser paints with them, the colour scale's rule included (the same
    floor and percentiles as `maps.colour_scale`): nothing about them is written again in JavaScript."""
    if scale not in maps.COLOUR_SCALES:
        raise ValueError(f"unknown colour scale {scale!r}: use one of {maps.COLOUR_SCALES}")
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"opacity must be between 0 and 1, got {alpha}")
    return {
        "cmap": cmap if cmap in LUT_COLORMAPS else "inferno",
        "alpha": float(alpha),
        "colourScale": scale,
        "scaleRule": {"floor": maps.LOG_FLOOR, "percentiles": list(maps.CLIP_PERCENTILES)},
        "scaleName": render.SCALE_NAMES[scale],
    }


DEFAULT_CMAP, DEFAULT_OPACITY = "inferno", 0.6  # the app's page opens with these (app/photo.py)


def analysis_of(image_or_analysis, model=None, size: int | None = None) -> Analysis:
    """An Analysis as given, or one forward of `model` (default: the embedded model) on an image at `size`."""
    if isinstance(image_or_analysis, Analysis | Derived):
        if model is not None or size is not None:
            raise ValueError("model and size go with an image: an Analysis already has both")
        return image_or_analysis
    from .capture import analyze
    from .models import load_model

    return analyze(model if model is not None else load_model(), image_or_analysis, longest=size)


def standalone_meta(a: Analysis, cmap: str, alpha: float, scale: str, layer: int | None = None) -> dict:
    """The meta for an Explorer outside the app (a notebook, a file): the page's settings as given, the layer it
    opens on (default the last), and a key that names this analysis among others in the same page."""
    if layer is not None:
        a._check_layer_head(layer, None)
    digest = hashlib.sha1(np.ascontiguousarray(a.pixel_values).tobytes()).hexdigest()[:16]
    start = a.model.num_layers - 1 if layer is None else int(layer)
    return {
        **meta(a),
        **look(cmap, alpha, scale),
        "session": "standalone",
        "key": f"{a.model.name}|{digest}",
        "start": start,
    }


def probe_data(a: Analysis) -> dict | None:
    """An attention-pool's readout (SigLIP): its probe's query [H*dh] and keys [N,H*dh] over the last layer's
    tokens, and value norms [H,N], each base64 little-endian float32, so that the browser computes the probe's
    attention as it computes a layer's. None for a model that reads out from tokens."""
    if not a.model.readout.pool:
        return None
    last = torch.from_numpy(np.ascontiguousarray(a.hidden_states[-1], dtype=np.float32))
    q, k, v, wo = a.model.probe_projections(last.to(a.model.device))
    norms = maps.value_norms(v, wo, a.model.num_heads)

    def b64(x: np.ndarray) -> str:
        return base64.b64encode(np.ascontiguousarray(x, dtype="<f4").tobytes()).decode()

    return {"q": b64(q), "k": b64(k), "valueNorms": b64(norms)}


def lut(cmap: str) -> str:
    """The colormap as 256 RGB triples, flat [768] bytes, in base64: the browser paints with the server's own
    colours. A string, not 768 numbers: Gradio's page copies every number of a component's value, one call each,
    whenever it gathers an event's inputs or sets its outputs."""
    rgb = render.colorize(np.arange(256, dtype=np.float32)[None], cmap, 0.0, 255.0)[0]
    return base64.b64encode(rgb.astype(np.uint8).tobytes()).decode()
