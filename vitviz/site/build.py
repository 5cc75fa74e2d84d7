"""`vitviz site OUT`: the whole ViT as a static folder that any static host serves, built from the installed package
with no network: the embedded model exported to ONNX (`graph.export`), ONNX Runtime Web's files (shipped in
vitviz/site/runtime with their licence), the Explorer's engine (vitviz/static) and the site's own page
(vitviz/site/page), with the model's facts and the page's settings from Python in one config.
"""

from __future__ import annotations

import hashlib
import html
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .. import EXAMPLES, __version__, example, explorer, lesson, plots, qk, render, sentences, tabs, trend
from ..capture import analyze
from ..embedded import HOME_SIZE, SOURCE
from ..inside import head_geometry
from ..maps import DEFAULT_SCALE
from ..preprocess import MAX_PIXELS, input_size, load_image, prepare_input
from . import graph

HERE = Path(__file__).resolve().parent
PAGE, RUNTIME = HERE / "page", HERE / "runtime"
ORT_VERSION = "1.30.0"
WASM = "ort-wasm-simd-threaded.wasm"
RUNTIME_FILES = ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", WASM, "LICENSE")
# the site's own modules, after the Explorer's engine and the Q·K view (classic scripts, one file, no build step):
# the forward, the views, then the page
SITE = (
    *("photo.js", "model.js", "rollout.js", "run.js", "pca.js"),  # a photo, the model and one forward
    *("bar.js", "picture.js", "rolloutview.js", "positions.js", "heads.js", "output.js", "trend.js", "guess.js"),
    "lesson.js",
    *("offline.js", "camera.js", "tabs.js", "pagecontrols.js", "choose.js", "loading.js", "sitehandle.js"),
    "site.js",  # the boot, last: it runs the rest
)
SIZES, DEFAULT_SIZE, PHONE_SIZE = (224, 336, 448), 448, 224  # the input's longest side, as --size means elsewhere
# the app's tabs that the site has too, labelled as the app labels them (vitviz.tabs), then the site's own lesson
# (numbered after them: the app's number would skip the tabs the site lacks) and the link to the app
SHARED_TABS = ("tokens", "attention", "inside", "qk", "rollout", "positions", "heads", "output")
TABS = (
    *((tab, tabs.label(tab)) for tab in SHARED_TABS),
    ("lesson", f"{len(SHARED_TABS) + 1} · {tabs.BY_ID['lesson'].title}"),
    ("app", "More in the Python app"),
)
APP_COMMAND = "pip install vitviz && vitviz serve"


PREVIEW = EXAMPLES[0]  # the example whose numbers are shown while the model loads, computed at PHONE_SIZE


def preview(model, out: Path) -> dict:
    """Write the precomputed example: `PREVIEW`'s forward outputs at PHONE_SIZE, as torch computes them on the
    input that the page makes of the same photo, stored as float16 one after another in `graph.OUTPUTS`' order
    (examples/<name>-<size>.bin). Returns its entry in the config: where the photo and the numbers are, and each
    array's shape. While the model loads, the page shows every view of that photo from these numbers."""
    path = example(PREVIEW)
    image = load_image(path)
    size = input_size(*image.shape[:2], model.patch_size, PHONE_SIZE)
    outputs = graph.forward(model, prepare_input(image, size, model.patch_size, model.mean, model.std))
    file = out / "examples" / f"{path.stem}-{PHONE_SIZE}.bin"
    with file.open("wb") as f:
        for name in graph.OUTPUTS:
            f.write(np.ascontiguousarray(outputs[name], "<f2").tobytes())
    return {
        "name": path.name,
        "src": f"examples/{path.name}",
        "size": PHONE_SIZE,
        "url": f"examples/{file.name}?v={digest(file)}",
        "bytes": file.stat().st_size,
        "dims": {name: list(outputs[name].shape) for name in graph.OUTPUTS},
    }


def lesson_facts(model, out: Path) -> dict:
    """What the page's lesson (page/lesson.js) takes from Python: the sentences' phrases that depend on the model
    alone, the trend test's rule, and its orderings (trend.bin: uint8 [K,L], `trend.orderings`), so that the
    browser's p-values are Python's to the last ordering."""
    a = analyze(model, example(PREVIEW), longest=PHONE_SIZE)
    orders = trend.orderings(model.num_layers)
    np.ascontiguousarray(orders, np.uint8).tofile(out / "trend.bin")
    return {
        "readout": sentences.readout_phrase(a),
        "output": sentences.output_phrase(a),
        "prefix": sentences.prefix_phrase(a),
        "family": model.family.name,
        "trendVerbs": sentences.TREND_VERBS,
        "trendRule": sentences.TREND_RULE,
        "trend": {"rho": trend.RHO, "p": trend.P, "strong": trend.STRONG, "exact": len(orders) < trend.PERMUTATIONS},
        "orderings": {"url": f"trend.bin?v={digest(out / 'trend.bin')}", "count": len(orders)},
        "insideTab": tabs.number("inside"),
        "alike": sentences.ALIKE,
        "partly": sentences.PARTLY,
        "rolloutRows": sentences.ROLLOUT_ROWS,
        "dense": {"span": sentences.DENSE_SPAN, "home": sentences.DENSE_HOME, "homeSize": HOME_SIZE},
        "steps": len(lesson.STEPS),
    }


def config(model, graphs: dict[str, tuple[int, str]]) -> dict:
    """What the page needs from Python: the model's facts, the Explorer's static meta and look (with the rollout
    sentence's rule), the Q·K view's rule,
    the graphs' outputs, the sizes and limits, and where the graphs and the runtime are. graphs: each graph's
    (bytes, digest) by name ("model", "layer", "dense"); its URL carries the digest, so that a browser that kept
    another build's graph never takes it for this one's."""
    dh, scale = head_geometry(model)
    meta = {
        "layers": model.num_layers,
        "heads": model.num_heads,
        "headWidth": dh,
        "patch": model.patch_size,
        "prefix": list(model.prefix_tokens),
        "scale": scale,
        "model": model.name,
        "probe": None,
        "readout": {"tokens": list(model.readout.tokens), "pool": model.readout.pool, "name": model.readout.name},
        "colormaps": {name: explorer.lut(name) for name in explorer.LUT_COLORMAPS},
        "headColours": list(plots.HEAD_COLOURS),
        "rolloutTruth": sentences.rollout_rule(),
        **explorer.look(explorer.DEFAULT_CMAP, explorer.DEFAULT_OPACITY, DEFAULT_SCALE),
    }
    g0, g1 = model.native_grid
    return {
        "model": {"name": model.name, "patch": model.patch_size, "mean": list(model.mean), "std": list(model.std)},
        "meta": meta,
        "qk": qk.settings(umap=False),
        "outputs": list(graph.OUTPUTS),
        "layerOutputs": list(graph.LAYER_OUTPUTS),
        **{f"{name}Url": f"{name}.onnx?v={digest}" for name, (_, digest) in graphs.items()},
        **{f"{name}Bytes": size for name, (size, _) in graphs.items()},
        "runtime": "runtime/",
        # the runtime's 14 MB .wasm, which the page fetches and keeps itself, as it does the graphs (model.js)
        "runtimeWasm": {"url": f"runtime/{WASM}?v={digest(RUNTIME / WASM)}", "bytes": (RUNTIME / WASM).stat().st_size},
        "sizes": list(SIZES),
        "defaultSize": DEFAULT_SIZE,
        "phoneSize": PHONE_SIZE,
        "displaySide": render.DISPLAY_SIDE,
        "maxPixels": MAX_PIXELS,
        "diverging": explorer.lut("diverging"),
        "positions": {"grid": [g0, g1], "width": int(model.position_embeddings().shape[1]), "url": "positions.bin"},
    }


def digest(path: Path) -> str:
    """The first 12 hex digits of the file's SHA-256."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def build_hash(out: Path, files: list[str]) -> str:
    """The first 12 hex digits of the SHA-256 over `files` (paths in `out`, a ?query and "./" ignored: "./" is
    index.html), each name and its bytes: what a cache of this build's files is named by."""
    h = hashlib.sha256()
    for file in files:
        if file != "./":
            name = file.split("?")[0]
            h.update(name.encode() + b"\0" + (out / name).read_bytes())
    return h.hexdigest()[:12]


def write_worker(out: Path, files: list[str]) -> None:
    """sw.js: the page's service worker with the site's `files` and their hash written in."""
    worker = (PAGE / "sw.js").read_text()
    written = {"const FILES = [];": json.dumps(files), 'const BUILD = "";': f'"{build_hash(out, files)}"'}
    for marker, value in written.items():
        if worker.count(marker) != 1:
            raise RuntimeError(f"vitviz/site/page/sw.js lacks its line {marker!r}")
        worker = worker.replace(marker, marker.split("=")[0] + f"= {value};")
    (out / "sw.js").write_text(worker, encoding="utf-8")


def _json(value) -> str:
    """JSON that a <script> element holds as text: no "</" to end it early."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def script() -> str:
    """The page's one script: the Explorer's engine, the Q·K view and the site's modules."""
    engine = [explorer.STATIC / name for name in (*explorer.ENGINE, *qk.VIEW)]
    return "\n".join(p.read_text() for p in (*engine, *(PAGE / name for name in SITE)))


def style() -> str:
    return "\n".join(
        (p).read_text() for p in (explorer.STATIC / "explorer.css", explorer.STATIC / "qk.css", PAGE / "site.css")
    )


def build(out: str | Path, say: Callable[[str], None] = lambda _: None) -> Path:
    """Write the site to the folder `out` (made if missing; files of a site already there are replaced). say(text)
    is told each step. Returns the folder."""
    from ..models import load_model

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} is a file: the site needs a folder")
    out.mkdir(parents=True, exist_ok=True)
    say("exporting the embedded model to ONNX (about 10 s)")
    graph.export(out)
    model = load_model(device="cpu")
    (out / "runtime").mkdir(exist_ok=True)
    for name in RUNTIME_FILES:
        shutil.copyfile(RUNTIME / name, out / "runtime" / name)
    (out / "examples").mkdir(exist_ok=True)
    buttons = []
    for path in map(example, EXAMPLES):
        shutil.copyfile(path, out / "examples" / path.name)
        src = f"examples/{path.name}"
        buttons.append(
            f'<button class="site-button site-example" type="button" data-src="{src}" data-name="{path.name}">'
            f'<img src="{src}" alt=""> {path.stem}</button>'
        )
    np.ascontiguousarray(model.position_embeddings(), "<f4").tofile(out / "positions.bin")
    graphs = {name: (out / f"{name}.onnx") for name in ("model", "layer", "dense")}
    cfg = config(model, {name: (p.stat().st_size, digest(p)) for name, p in graphs.items()})
    cfg["preview"] = preview(model, out)
    cfg["lesson"] = lesson_facts(model, out)
    tabs = "".join(
        f'<button class="site-tab" role="tab" type="button" data-tab="{i}">{html.escape(t)}</button>' for i, t in TABS
    )
    page = (PAGE / "index.html").read_text()
    fill = {
        "model_title": "DINOv2 ViT-S/14 with a small dense head",
        "model_mb": f"{sum(p.stat().st_size for p in graphs.values()) / 1e6:.0f}",
        "examples": "".join(buttons),
        "tabs": tabs,
        "app_command": APP_COMMAND,
        "version": __version__,
        "model_source": html.escape(SOURCE),
        "ort_version": ORT_VERSION,
        "config": _json(cfg),
    }
    for key, value in fill.items():
        page = page.replace("{" + key + "}", value)
    (out / "index.html").write_text(page, encoding="utf-8")
    (out / "vitviz.js").write_text(script(), encoding="utf-8")
    (out / "vitviz.css").write_text(style(), encoding="utf-8")
    # what this build wrote, not whatever else the folder holds (an older build's files, or a folder that is more)
    written = ["index.html", "vitviz.js", "vitviz.css", "positions.bin", cfg["lesson"]["orderings"]["url"]]
    written += [f"runtime/{n}" for n in RUNTIME_FILES if n != WASM]  # the page keeps the .wasm (model.js)
    files = ["./", *written, *(f"examples/{p.name}" for p in map(example, EXAMPLES)), cfg["preview"]["url"]]
    write_worker(out, files)
    (out / ".nojekyll").write_text("")  # GitHub Pages: serve the folder as it is
    say(f"wrote {out}")
    return out
