"""The Gradio app: layout and event wiring only. Numbers come from the engine, pictures from views."""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from functools import wraps
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
import numpy as np  # noqa: E402

from . import (  # noqa: E402
    CATALOGUE,
    DEFAULT_DEPTH_MODEL,
    DEFAULT_MODEL,
    DEPTH_CATALOGUE,
    DepthModel,
    DepthResult,
    ModelUnavailableError,
    VitModel,
    analyze,
    estimate_depth,
    load_depth_model,
    load_model,
    plots,
    render,
    views,
)
from .analysis import Analysis  # noqa: E402
from .attribute import BASELINES, METHODS, attribute, targets  # noqa: E402
from .cache import AnalysisCache  # noqa: E402
from .depth import save_depth  # noqa: E402
from .maps import HEAD_FUSIONS  # noqa: E402
from .models import hub_reachable  # noqa: E402
from .render import COLORMAPS  # noqa: E402

log = logging.getLogger("vitviz")
ASSETS = Path(__file__).resolve().parent.parent / "assets"
EXAMPLES = [str(ASSETS / name) for name in ("chelsea.jpg", "coffee.jpg", "astronaut.jpg", "rocket.jpg")]
SIZES = ["model default", "224", "336", "448", "518", "672"]
MEAN_OF_HEADS, ALL_HEADS = "mean of heads", "all heads (grid)"
CLS_QUERY, PATCH_QUERY = "CLS token", "a patch (click the picture on the left)"

CACHE = AnalysisCache(max_bytes=int(os.environ.get("VITVIZ_CACHE_MB", 2048)) * 2**20)
DEPTH_CACHE = AnalysisCache(max_bytes=int(os.environ.get("VITVIZ_DEPTH_CACHE_MB", 1024)) * 2**20, per_session=1)
_MODELS: dict[str, VitModel] = {}
_DEPTH_MODELS: dict[str, DepthModel] = {}
_MODELS_LOCK = threading.Lock()
_DEVICE = "auto"

INTRO = """# vitviz: see inside a Vision Transformer
Drop in a photo. A ViT cuts it into patches, turns each patch into a **token**, adds a **position
embedding**, puts a **readout (CLS) token** in front, and passes the tokens through pre-norm layers of
**multi-head self-attention**. Each tab below shows one part of that, on *your* image."""


def user_errors(fn):
    """Turn the engine's errors into messages in the browser; the server and other sessions go on."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, ModelUnavailableError) as exc:
            raise gr.Error(str(exc)) from None
        except gr.Error:
            raise
        except Exception as exc:  # keep serving; say what happened
            log.exception("unexpected error")
            raise gr.Error(f"vitviz hit an unexpected error: {type(exc).__name__}: {exc}") from None

    return wrapper


def get_model(name: str, progress: gr.Progress | None = None) -> VitModel:
    with _MODELS_LOCK:
        if name not in _MODELS:
            if progress is not None:
                progress(0.05, desc=f"Loading {name} (a hub model downloads once)")
            _MODELS[name] = load_model(name, device=_DEVICE)
        return _MODELS[name]


def get_depth_model(name: str) -> DepthModel:
    with _MODELS_LOCK:
        if name not in _DEPTH_MODELS:
            _DEPTH_MODELS[name] = load_depth_model(name, device=_DEVICE)
        return _DEPTH_MODELS[name]


def _digest(image: str | None) -> str:
    if not image:
        raise ValueError("no image: upload one or click an example")
    return hashlib.sha1(Path(image).read_bytes()).hexdigest()


def get_analysis(
    image: str | None, model_name: str, size: str, request: gr.Request | None, progress: gr.Progress | None = None
) -> Analysis:
    """The cached analysis of this session's image, or one forward pass to make it."""
    key = (_session(request), model_name, _digest(image), size)
    a = CACHE.get(key)
    if a is None:
        model = get_model(model_name, progress)
        if progress is not None:
            progress(0.3, desc="Running the ViT: one forward pass captures every layer")
        a = analyze(model, image, longest=None if size == SIZES[0] else int(size))
        CACHE.put(key, a)
    return a


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "local"


def depth_key(image: str | None, depth_name: str, request: gr.Request | None) -> tuple:
    return _session(request), depth_name, _digest(image)


def get_depth(image: str | None, depth_name: str, key: tuple) -> DepthResult:
    """The cached depth result for `key` (from depth_key), or one forward pass of the depth model."""
    r = DEPTH_CACHE.get(key)
    if r is None:
        r = estimate_depth(get_depth_model(depth_name), image)
        DEPTH_CACHE.put(key, r)
    return r


def _head(choice: str) -> int | str | None:
    if choice == MEAN_OF_HEADS:
        return None
    if choice == ALL_HEADS:
        return views.ALL_HEADS
    return int(choice.split()[-1])


def _query(mode: str, patch: float | None) -> str | int:
    return "cls" if mode == CLS_QUERY or patch is None or patch < 0 else int(patch)


def status_text(a: Analysis) -> str:
    m = a.model
    h, w = a.pixel_values.shape[2:]
    where = "GPU (" + str(m.device) + ")" if m.device.type == "cuda" else "CPU"
    return (
        f"**{m.name}** on **{where}** · input {w}×{h} px · grid {a.grid[0]}×{a.grid[1]} patches of "
        f"{m.patch_size} px · {a.attentions.shape[-1]} tokens · {m.num_layers} layers × {m.num_heads} heads"
    )


@user_errors
def attention(image, model_name, size, layer, head, query_mode, patch, cmap, alpha, scale, request: gr.Request):
    """Attention of the query (CLS or a patch) in one layer: one head, the mean, or all heads."""
    a = get_analysis(image, model_name, size, request)
    query = _query(query_mode, patch)
    a.query_index(query)  # validates the patch index
    overlay, picker = views.attention_view(
        a, int(layer), _head(head), query, cmap, float(alpha), scale == "shared across heads"
    )
    return overlay, picker


@user_errors
def rollout(image, model_name, size, fusion, discard, cmap, alpha, request: gr.Request):
    """Attention rollout with head fusion and discard ratio."""
    a = get_analysis(image, model_name, size, request)
    return views.rollout_view(a, fusion, float(discard), cmap, float(alpha))


@user_errors
def pos_embed(model_name, row, col, cmap):
    """Position-embedding similarity: the grid of grids and one position's map, large."""
    sim = _similarity(get_model(model_name))
    return plots.pos_embed_grid(sim), pos_embed_position(model_name, row, col, cmap)


@user_errors
def pos_embed_position(model_name, row, col, cmap):
    """One position's similarity map, large; the grid of grids stays as it is."""
    model = get_model(model_name)
    g = model.native_grid[0]
    return views.pos_embed_map(model, _similarity(model), min(int(row), g - 1), min(int(col), g - 1), cmap)


_SIMILARITY: dict[str, np.ndarray] = {}


def _similarity(model: VitModel) -> np.ndarray:
    if model.name not in _SIMILARITY:
        _SIMILARITY[model.name] = model.pos_embed_similarity()
    return _SIMILARITY[model.name]


@user_errors
def analyze_image(
    image,
    model_name,
    size,
    layer,
    head,
    query_mode,
    patch,
    cmap,
    alpha,
    scale,
    fusion,
    discard,
    request: gr.Request,
    progress=gr.Progress(),
):
    """Analyse an image (one forward pass) and draw every view."""
    a = get_analysis(image, model_name, size, request, progress)
    progress(0.8, desc="Drawing the views")
    layer = min(int(layer), a.model.num_layers - 1)
    if head not in head_choices(a.model):
        head = MEAN_OF_HEADS
    patch = -1 if patch is None or patch >= a.grid[0] * a.grid[1] else patch
    att, picker = attention(image, model_name, size, layer, head, query_mode, patch, cmap, alpha, scale, request)
    grid_img, tokens_md = views.tokens_view(a)
    dist, ent, norms, pca = views.heads_views(a, cmap)
    top5, saliency = views.output_view(a, cmap, alpha)
    return (
        views.display(a),
        status_text(a),
        grid_img,
        tokens_md,
        att,
        picker,
        views.display(a),
        rollout(image, model_name, size, fusion, discard, cmap, alpha, request),
        dist,
        ent,
        norms,
        pca,
        gr.Label(value=top5 or None, visible=bool(top5)),
        gr.Image(value=saliency, visible=saliency is not None),
        gr.Slider(maximum=a.model.num_layers - 1, value=layer),
        gr.Dropdown(choices=head_choices(a.model), value=head),
        patch,
    )


DEPTH_HELP = (
    "**Depth needs a DPT model's weights, which this machine cannot download.** Connect to the internet once "
    "and press *Estimate depth* (the weights are kept for next time), or start the app with "
    "`python app.py --depth-model PATH`, where PATH is a folder saved with `save_pretrained` (safetensors)."
)
DEPTH_OUT_COUNT = 11
ENCODER_ALPHA = 0.6  # the depth opacity slider is for depth; attention keeps the image visible
_DOWNLOADS: OrderedDict[tuple, Path] = OrderedDict()
_DOWNLOADS_LOCK = threading.Lock()


def depth_downloads(r: DepthResult, image: str, key: tuple) -> list[str]:
    """16-bit PNG and .npy of the depth, written once per result; old ones are deleted."""
    with _DOWNLOADS_LOCK:
        if key not in _DOWNLOADS:
            folder = Path(tempfile.mkdtemp(prefix="vitviz-depth-"))
            save_depth(r.depth, folder, Path(image).stem)
            _DOWNLOADS[key] = folder
            while len(_DOWNLOADS) > 32:
                shutil.rmtree(_DOWNLOADS.popitem(last=False)[1], ignore_errors=True)
        return [str(f) for f in sorted(_DOWNLOADS[key].iterdir())]


def depth_status(r: DepthResult) -> str:
    m, a = r.model, r.encoder
    h, w = r.pixel_values.shape[2:]
    where = "GPU" if m.device.type == "cuda" else "CPU"
    shape = "square, as DPT's own ViT needs" if m.square else "aspect kept"
    return (
        f"**{m.name}** on **{where}** ({str(m.dtype).removeprefix('torch.')}) · input {w}×{h} px ({shape}) · "
        f"encoder grid {a.grid[0]}×{a.grid[1]} patches of {m.patch_size} px · "
        f"{a.model.num_layers} layers × {a.model.num_heads} heads"
    )


@user_errors
def depth(image, depth_name, cmap, alpha, layer, head, request: gr.Request, progress=gr.Progress(track_tqdm=True)):
    """Estimate depth and draw the depth view: overlay, 3-D cloud, decoder stages, encoder attention."""
    progress(0.1, desc=f"Depth with {depth_name} (a hub model downloads once)")
    try:
        key = depth_key(image, depth_name, request)
        r = get_depth(image, depth_name, key)
    except ModelUnavailableError as exc:
        return (f"{exc}\n\n{DEPTH_HELP}",) + (None,) * 6 + (gr.skip(), gr.skip(), None, False)
    encoder = r.encoder.model
    layer = min(int(layer), encoder.num_layers - 1)
    head = head if head in head_choices(encoder) else MEAN_OF_HEADS
    original, overlay = views.depth_view(r, cmap, float(alpha))
    return (
        depth_status(r),
        original,
        overlay,
        plots.depth_cloud(r.depth, r.encoder.image),
        *views.decoder_stage_views(r),
        views.attention_view(r.encoder, layer, _head(head), "cls", cmap, ENCODER_ALPHA)[0],
        gr.Slider(maximum=encoder.num_layers - 1, value=layer),
        gr.Dropdown(choices=head_choices(encoder), value=head),
        depth_downloads(r, image, key),
        True,
    )


def depth_follow(image, depth_name, cmap, alpha, layer, head, depth_on, request: gr.Request):
    """A new image redraws the depth view when the user has opened it, and otherwise waits."""
    if not depth_on:
        return (gr.skip(),) * DEPTH_OUT_COUNT
    return depth(image, depth_name, cmap, alpha, layer, head, request)


@user_errors
def depth_colors(image, depth_name, cmap, alpha, depth_on, request: gr.Request):
    """The depth overlay in another colormap or opacity (from the cache)."""
    if not depth_on:
        return gr.skip()
    r = get_depth(image, depth_name, depth_key(image, depth_name, request))
    return views.depth_view(r, cmap, float(alpha))[1]


@user_errors
def depth_attention(image, depth_name, layer, head, cmap, depth_on, request: gr.Request):
    """The depth encoder's CLS attention in one layer: one head, the mean, or all heads."""
    if not depth_on:
        return gr.skip()
    r = get_depth(image, depth_name, depth_key(image, depth_name, request))
    return views.attention_view(r.encoder, int(layer), _head(head), "cls", cmap, ENCODER_ALPHA)[0]


METHOD_BY_LABEL = {label: key for key, label in METHODS.items()}
DEFAULT_TARGET = "default"


def _box(points: list | None) -> tuple[float, float, float, float] | None:
    if not points or len(points) < 2:
        return None
    (xa, ya), (xb, yb) = points[:2]
    return min(xa, xb), min(ya, yb), max(xa, xb), max(ya, yb)


@user_errors
def attribution_setup(image, model_name, size, points, request: gr.Request):
    """The Attributions tab opened: the targets to offer and the box picker."""
    a = get_analysis(image, model_name, size, request)
    choices = [(label, DEFAULT_TARGET if t is None else str(t)) for label, t in targets(a.model, image)]
    return (
        gr.Dropdown(choices=choices, value=choices[0][1]),
        box_picker(a, points),
        gr.Slider(maximum=a.model.num_layers - 1, value=a.model.num_layers - 1),
    )


def box_picker(a: Analysis, points: list | None) -> np.ndarray:
    base = views.display(a)
    box = _box(points)
    return base if box is None else render.draw_box(base, box, base.shape[1] / a.image.shape[1])


@user_errors
def pick_box_corner(image, model_name, size, points, evt: gr.SelectData, request: gr.Request):
    """Clicks on the picture set the box's corners: the first click starts a box, the second ends it."""
    a = get_analysis(image, model_name, size, request)
    if a.model.decoder is None:
        raise gr.Error("A box only applies to the embedded model's dense head; this model's target is one class.")
    scale = a.image.shape[1] / views.display(a).shape[1]
    point = [evt.index[0] * scale, evt.index[1] * scale]
    points = [point] if not points or len(points) >= 2 else [points[0], point]
    return points, box_picker(a, points)


@user_errors
def clear_box(image, model_name, size, request: gr.Request):
    return [], box_picker(get_analysis(image, model_name, size, request), [])


@user_errors
def attribution(
    image,
    model_name,
    size,
    method_label,
    target,
    baseline,
    n_steps,
    noise_samples,
    block,
    points,
    cmap,
    alpha,
    request: gr.Request,
    progress=gr.Progress(),
):
    """Attribute the chosen output with the chosen method; rollout and relevancy beside it."""
    a = get_analysis(image, model_name, size, request)
    method = METHOD_BY_LABEL.get(method_label, method_label)
    options = dict(
        target=None if target in (None, DEFAULT_TARGET) else int(target),
        box=_box(points) if a.model.decoder is not None else None,
    )
    progress(0.0, desc=f"{METHODS.get(method, method)}: running the model")
    r = attribute(
        a.model,
        image,
        method,
        n_steps=int(n_steps),
        baseline=baseline,
        nt_samples=int(noise_samples),
        layer=int(block),
        progress=lambda f: progress(f, desc=f"{METHODS[method]}: forward and backward passes"),
        **options,
    )
    rel = r if method == "relevancy" else attribute(a.model, image, "relevancy", **options)
    shown, roll, rel_img = views.attribution_views(a, r, rel, cmap, float(alpha))
    lines = [f"**Target:** {r.target} = {r.score:.4g} · input {r.grid[1] * a.model.patch_size}×"
             f"{r.grid[0] * a.model.patch_size} px · {r.seconds:.1f} s"]  # fmt: skip
    if r.delta is not None:
        total = float(r.raw.sum())
        lines.append(
            f"**Convergence delta** (Integrated Gradients): {r.delta:.3g}, that is "
            f"{abs(r.delta) / max(abs(total), 1e-12):.1%} of the attributions' sum {total:.4g}. "
            "Near 0 means the attributions add up to f(image) − f(baseline); if it is large, raise the steps."
        )
    return shown, roll, rel_img, "\n\n".join(lines)


def head_choices(model: VitModel) -> list[str]:
    return [MEAN_OF_HEADS, ALL_HEADS] + [f"head {h}" for h in range(model.num_heads)]


def pick_example(evt: gr.SelectData) -> str:
    return EXAMPLES[evt.index]


@user_errors
def pick_patch(image, model_name, size, evt: gr.SelectData, request: gr.Request):
    """A click on the picture picks the query patch."""
    a = get_analysis(image, model_name, size, request)
    x, y = evt.index
    patch = views.patch_at_display(a, x, y)
    if patch is None:
        return gr.skip(), gr.skip()
    return patch, PATCH_QUERY


@user_errors
def pick_position(model_name, evt: gr.SelectData):
    """A click on the large similarity map picks the position to show."""
    model = get_model(model_name)
    row, col = views.position_at(model, evt.index[0], evt.index[1])
    return row, col


def change_model(name: str, current: str, progress=gr.Progress(track_tqdm=True)):
    """Load another model; offline, say so within seconds and keep the current one."""
    try:
        model = get_model(name, progress)
    except (ModelUnavailableError, ValueError, OSError) as exc:
        gr.Warning(f"{name} is not available: {exc} Keeping {current}.")
        return current, current, gr.skip(), gr.skip()
    g = model.native_grid[0]
    return name, name, gr.Slider(maximum=g - 1, value=g // 2), gr.Slider(maximum=g - 1, value=g // 2)


def build(default_model: str = DEFAULT_MODEL, depth_model: str | None = None) -> gr.Blocks:
    """The app. depth_model: a depth model to load now (a local folder works offline)."""
    model = get_model(default_model)
    g = model.native_grid[0]
    names = list(CATALOGUE)
    if default_model not in names:
        names.insert(0, default_model)
    depth_names = list(DEPTH_CATALOGUE)
    if depth_model is not None:
        get_depth_model(depth_model)
        if depth_model not in depth_names:
            depth_names.insert(0, depth_model)
    with gr.Blocks(title="vitviz: see inside a Vision Transformer", delete_cache=(1800, 3600)) as demo:
        current_model = gr.State(default_model)
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=1, min_width=300):
                # A File, not an Image: Gradio would decode an Image upload itself, and vitviz's own
                # decoder is what names the problem with a bad upload.
                image = gr.File(value=EXAMPLES[0], type="filepath", label="Drop or choose an image", height=90)
                preview = gr.Image(label="Your image", interactive=False, height=260)
                gallery = gr.Gallery(
                    [(p, Path(p).stem) for p in EXAMPLES],
                    columns=4,
                    height=120,
                    allow_preview=False,
                    label="Examples: click one",
                    elem_id="examples",
                )
                model_dd = gr.Dropdown(
                    [(f"{n}: {CATALOGUE.get(n, 'local folder')}", n) for n in names],
                    value=default_model,
                    label="Model",
                )
                size_dd = gr.Dropdown(SIZES, value=SIZES[0], label="Input size (longest side, pixels)")
                status = gr.Markdown(elem_id="status")
            with gr.Column(scale=3):
                with gr.Tabs():
                    with gr.Tab("1 · Tokens"):
                        gr.Markdown(
                            "**What am I looking at?** The picture cut into the square patches the ViT reads. "
                            "Each patch becomes one token; the numbers show the order of the token sequence."
                        )
                        tokens_md = gr.Markdown()
                        tokens_img = gr.Image(label="Patches and scan order", interactive=False, height=460)
                    with gr.Tab("2 · Attention"):
                        gr.Markdown(
                            "**What am I looking at?** In self-attention every token takes a weighted average "
                            "of all tokens. Pick a *query* token (the CLS readout token, or click a patch): "
                            "bright patches are the ones it takes most from, in this layer and head. "
                            "Early layers look nearby; deep layers look at whole objects."
                        )
                        with gr.Row():
                            layer = gr.Slider(
                                0,
                                model.num_layers - 1,
                                value=model.num_layers - 1,
                                step=1,
                                label="Layer",
                                elem_id="layer",
                            )
                            head = gr.Dropdown(head_choices(model), value=MEAN_OF_HEADS, label="Head")
                            query_mode = gr.Radio([CLS_QUERY, PATCH_QUERY], value=CLS_QUERY, label="Query")
                            patch = gr.Number(
                                value=-1, precision=0, label="Query patch (index)", minimum=-1, elem_id="patch"
                            )
                        with gr.Row():
                            cmap = gr.Dropdown(list(COLORMAPS), value="inferno", label="Colormap")
                            alpha = gr.Slider(0, 1, value=0.6, step=0.05, label="Opacity")
                            scale = gr.Radio(
                                ["shared across heads", "per head"], value="shared across heads", label="Colour scale"
                            )
                        with gr.Row():
                            picker = gr.Image(
                                label="Click a patch to make it the query", interactive=False, elem_id="picker"
                            )
                            att_img = gr.Image(
                                label="Attention of the query (nearest: one square per patch)",
                                interactive=False,
                                elem_id="attention",
                            )
                    with gr.Tab("3 · Rollout"):
                        gr.Markdown(
                            "**What am I looking at?** Attention *rollout* follows attention through all layers "
                            "at once: it multiplies the layers' attention (plus the skip connection) to estimate "
                            "how much each patch flows into the CLS token at the end. Bright = more. "
                            "A few isolated bright dots are often the model's high-norm 'artifact' tokens "
                            "(tab 5): real, but not the object; a discard ratio or max fusion shows more."
                        )
                        with gr.Row():
                            fusion = gr.Radio(list(HEAD_FUSIONS), value="mean", label="Fuse the heads of a layer by")
                            discard = gr.Slider(0, 0.95, value=0.0, step=0.05, label="Discard the weakest fraction")
                        with gr.Row():
                            original = gr.Image(label="Your image", interactive=False)
                            roll_img = gr.Image(label="Rollout (bilinear)", interactive=False)
                    with gr.Tab("4 · Positions"):
                        gr.Markdown(
                            "**What am I looking at?** The model learned one vector per patch position. "
                            "Each small square shows how similar one position's vector is to all others "
                            "(cosine, 1 = same). Nearby positions, same rows and same columns come out similar: "
                            "the model learned the 2-D layout by itself. This belongs to the model, not your image."
                        )
                        with gr.Row():
                            pos_row = gr.Slider(0, g - 1, value=g // 2, step=1, label="Position row")
                            pos_col = gr.Slider(0, g - 1, value=g // 2, step=1, label="Position column")
                        with gr.Row():
                            pos_grid = gr.Plot(label="Grid of grids")
                            pos_map = gr.Image(
                                label="Similarity of the chosen position (click to choose)", interactive=False
                            )
                    with gr.Tab("5 · Heads"):
                        gr.Markdown(
                            "**What am I looking at?** *Mean attention distance*: how far, in pixels, each head "
                            "looks on average; *entropy*: how spread out its attention is. *Token norms* mark "
                            "high-norm 'artifact' tokens (green boxes) that some ViTs use as scratch space. "
                            "*PCA*: the final patch features squeezed to three colours; same colour = similar."
                        )
                        with gr.Row():
                            dist_plot = gr.Plot(label="Attention distance")
                            ent_plot = gr.Plot(label="Attention entropy")
                        with gr.Row():
                            norm_img = gr.Image(label="Output token norms (outliers boxed)", interactive=False)
                            pca_img = gr.Image(label="PCA of patch features as RGB", interactive=False)
                    with gr.Tab("6 · Output"):
                        gr.Markdown(
                            "**What am I looking at?** What the model outputs. A classifier reads the CLS token "
                            "and gives its top-5 classes. The embedded model has a small dense head that decodes "
                            "the patch tokens into an 'importance' map over the image."
                        )
                        top5 = gr.Label(num_top_classes=5, label="Top-5 classes", visible=False)
                        saliency = gr.Image(label="Dense head output", interactive=False, visible=False)
                    with gr.Tab("7 · Depth", elem_id="depth-tab") as depth_tab:
                        gr.Markdown(
                            "**What am I looking at?** A *Dense Prediction Transformer* (DPT) decodes ViT tokens "
                            "into a picture-shaped output: here, depth. It takes the tokens of four encoder "
                            "layers, *reassembles* each set into a feature map registered to the image (the "
                            "readout token is folded into every patch token, tokens go back to their patch "
                            "positions, a 1×1 convolution projects them, and they are resampled to a scale *s*), "
                            "then *fuses* (combines) the maps from coarse to fine. The result is **relative "
                            "inverse depth**: bright means near, and the scale is unknown, so compare places "
                            "within one picture, not numbers between pictures."
                        )
                        depth_note = gr.Markdown(
                            DEPTH_HELP if depth_model is None and not hub_reachable() else "", elem_id="depth-note"
                        )
                        with gr.Row():
                            depth_dd = gr.Dropdown(
                                [(f"{n}: {DEPTH_CATALOGUE.get(n, 'local folder')}", n) for n in depth_names],
                                value=depth_model or DEFAULT_DEPTH_MODEL,
                                label="Depth model",
                                scale=3,
                            )
                            depth_btn = gr.Button("Estimate depth", variant="primary", scale=1)
                        with gr.Row():
                            depth_cmap = gr.Dropdown(list(COLORMAPS), value="magma", label="Colormap")
                            depth_alpha = gr.Slider(0, 1, value=1.0, step=0.05, label="Opacity")
                        with gr.Row():
                            depth_original = gr.Image(label="Your image", interactive=False)
                            depth_img = gr.Image(
                                label="Relative inverse depth (bright = near)", interactive=False, elem_id="depth"
                            )
                        depth_plot = gr.Plot(label="3-D view")
                        gr.Markdown(
                            "#### Inside the decoder\nEach map shows its first three principal components as "
                            "colours (same colour = similar features); one square is one cell of the map. "
                            "*Reassemble* maps come from the encoder's tokens at four scales; *fusion* maps "
                            "merge them, coarsest first, each one twice as fine as the last."
                        )
                        depth_stages = gr.Gallery(
                            label="Reassemble 1-4, then fusion 1-4", columns=4, height="auto", object_fit="contain"
                        )
                        depth_table = gr.Markdown()
                        gr.Markdown(
                            "#### The depth model's own encoder\nThe CLS (readout) token's attention in the "
                            "DPT's ViT, as in tab 2."
                        )
                        with gr.Row():
                            depth_layer = gr.Slider(0, 11, value=11, step=1, label="Encoder layer")
                            depth_head = gr.Dropdown([MEAN_OF_HEADS, ALL_HEADS], value=MEAN_OF_HEADS, label="Head")
                        depth_att = gr.Image(label="Encoder attention of the CLS token", interactive=False, height=480)
                        depth_files = gr.File(label="Download the depth: .npy (float32) and 16-bit PNG")
                        depth_on = gr.State(False)
                    with gr.Tab("8 · Attributions", elem_id="attributions-tab") as attr_tab:
                        gr.Markdown(
                            "**What am I looking at?** Attention shows where tokens *look*; an attribution shows "
                            "which pixels *drive an output*. Gradient methods (Captum) ask how the output "
                            "changes when pixels change; occlusion hides one patch at a time; *relevancy* "
                            "(Chefer et al. 2021) weighs each layer's attention by its gradient. Compare the "
                            "three pictures: where attention rollout and the attributions disagree, attention "
                            "was not the whole story. A classifier's target is a class; the embedded model's "
                            "is its dense head's output, over the image or inside a box you draw."
                        )
                        with gr.Row():
                            method_dd = gr.Dropdown(
                                list(METHODS.values()), value=METHODS["integrated_gradients"], label="Method"
                            )
                            target_dd = gr.Dropdown([("default", DEFAULT_TARGET)], value=DEFAULT_TARGET, label="Target")
                            baseline_radio = gr.Radio(list(BASELINES), value=BASELINES[0], label="Baseline (absent)")
                        with gr.Row():
                            steps = gr.Slider(4, 128, value=32, step=4, label="Integrated Gradients: steps")
                            noise = gr.Slider(0, 16, value=0, step=1, label="NoiseTunnel samples (0 = off)")
                            block = gr.Slider(0, model.num_layers - 1, value=model.num_layers - 1, step=1,
                                              label="Grad-CAM: block")  # fmt: skip
                            attr_btn = gr.Button("Compute attribution", variant="primary")
                        with gr.Row():
                            box_img = gr.Image(
                                label="Box for the dense head: click two corners", interactive=False, scale=1
                            )
                            with gr.Column(scale=2):
                                clear_btn = gr.Button("Clear the box (whole image)", size="sm")
                                attr_md = gr.Markdown(elem_id="attr-summary")
                        with gr.Row():
                            attr_img = gr.Image(label="Attribution", interactive=False, elem_id="attribution")
                            attr_roll = gr.Image(label="Attention rollout", interactive=False)
                            attr_rel = gr.Image(label="Relevancy (Chefer et al.)", interactive=False)
                        box_points = gr.JSON([], visible=False)  # a component, so the API can pass a box

        where = [image, model_dd, size_dd]
        att_in = where + [layer, head, query_mode, patch, cmap, alpha, scale]
        depth_in = [image, depth_dd, depth_cmap, depth_alpha, depth_layer, depth_head]
        depth_out = [
            depth_note,
            depth_original,
            depth_img,
            depth_plot,
            depth_stages,
            depth_table,
            depth_att,
            depth_layer,
            depth_head,
            depth_files,
            depth_on,
        ]
        roll_in = [image, model_dd, size_dd, fusion, discard, cmap, alpha]
        all_in = att_in + [fusion, discard]
        all_out = [
            preview,
            status,
            tokens_img,
            tokens_md,
            att_img,
            picker,
            original,
            roll_img,
            dist_plot,
            ent_plot,
            norm_img,
            pca_img,
            top5,
            saliency,
            layer,
            head,
            patch,
        ]

        demo.load(analyze_image, all_in, all_out, api_visibility="private")
        demo.load(pos_embed, [model_dd, pos_row, pos_col, cmap], [pos_grid, pos_map], api_name="position_embeddings")
        image.change(analyze_image, all_in, all_out, api_name="analyze").then(
            depth_follow, depth_in + [depth_on], depth_out, api_visibility="private"
        ).then(clear_box, where, [box_points, box_img], api_visibility="private")
        size_dd.change(analyze_image, all_in, all_out, api_visibility="private")
        model_dd.change(
            change_model,
            [model_dd, current_model],
            [model_dd, current_model, pos_row, pos_col],
            api_visibility="private",
        ).then(analyze_image, all_in, all_out, api_visibility="private").then(
            pos_embed, [model_dd, pos_row, pos_col, cmap], [pos_grid, pos_map], api_visibility="private"
        )
        # One listener per view; a slider drag renders only its last position, from the cache.
        gr.on(
            [c.change for c in (layer, head, query_mode, patch, cmap, alpha, scale)],
            attention,
            att_in,
            [att_img, picker],
            api_name="attention",
            trigger_mode="always_last",
            show_progress="minimal",
        )
        gr.on(
            [c.change for c in (fusion, discard, cmap, alpha)],
            rollout,
            roll_in,
            roll_img,
            api_name="rollout",
            trigger_mode="always_last",
            show_progress="minimal",
        )
        gr.on([depth_btn.click, depth_tab.select, depth_dd.change], depth, depth_in, depth_out, api_name="depth")
        gr.on(
            [depth_cmap.change, depth_alpha.change],
            depth_colors,
            [image, depth_dd, depth_cmap, depth_alpha, depth_on],
            depth_img,
            api_visibility="private",
            trigger_mode="always_last",
            show_progress="minimal",
        )
        gr.on(
            [depth_layer.change, depth_head.change],
            depth_attention,
            [image, depth_dd, depth_layer, depth_head, depth_cmap, depth_on],
            depth_att,
            api_name="depth_attention",
            trigger_mode="always_last",
            show_progress="minimal",
        )
        attr_tab.select(attribution_setup, where + [box_points], [target_dd, box_img, block], api_visibility="private")
        attr_btn.click(
            attribution,
            where + [method_dd, target_dd, baseline_radio, steps, noise, block, box_points, cmap, alpha],
            [attr_img, attr_roll, attr_rel, attr_md],
            api_name="attribute",
        )
        box_img.select(pick_box_corner, where + [box_points], [box_points, box_img], api_visibility="private")
        clear_btn.click(clear_box, where, [box_points, box_img], api_visibility="private")
        gallery.select(pick_example, None, image, api_visibility="private")
        picker.select(pick_patch, [image, model_dd, size_dd], [patch, query_mode], api_visibility="private")
        gr.on(
            [pos_row.change, pos_col.change],
            pos_embed_position,
            [model_dd, pos_row, pos_col, cmap],
            pos_map,
            api_name="position_map",
            trigger_mode="always_last",
            show_progress="minimal",
        )
        pos_map.select(pick_position, [model_dd], [pos_row, pos_col], api_visibility="private")
    return demo


def main(argv: list[str] | None = None) -> None:
    global _DEVICE
    parser = argparse.ArgumentParser(description="vitviz: see inside a Vision Transformer")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="also open a public gradio.live link")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="catalogue name, hub id or local folder")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument(
        "--depth-model", default=None, help="DPT or Depth Anything: hub id or local save_pretrained folder (offline)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    _DEVICE = args.device
    demo = build(args.model, args.depth_model)
    demo.queue(default_concurrency_limit=4).launch(
        server_name=args.host,
        server_port=args.port,
        share=args.share,
        theme=gr.themes.Soft(),
        allowed_paths=[str(ASSETS)],
    )
