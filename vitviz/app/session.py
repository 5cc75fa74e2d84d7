"""What every view shares: the caches, the model getters, the analysis key and the error wrapper.

Views never run a model themselves: they ask `get_analysis` for the cached capture of the
session's image, which runs one forward pass only when the cache has none.
"""

from __future__ import annotations

import atexit
import copy
import hashlib
import logging
import os
import queue
import threading
import time
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import replace
from functools import wraps
from pathlib import Path

import gradio as gr

from .. import EXAMPLES as EXAMPLE_NAMES
from .. import (
    DepthModel,
    DepthResult,
    ModelUnavailableError,
    VitModel,
    analyze,
    estimate_depth,
    example,
    load_depth_model,
    load_model,
    memory,
    views,
)
from ..analysis import Analysis
from ..cache import AnalysisCache

log = logging.getLogger("vitviz")
EXAMPLES = [str(example(name)) for name in EXAMPLE_NAMES]
DEFAULT_SIZE = "model default"
SIZES = [DEFAULT_SIZE, "224", "336", "448", "518", "672"]
MEAN_OF_HEADS, ALL_HEADS = -1, -2  # the head dropdown's values besides head indices

CACHE = AnalysisCache(max_bytes=int(os.environ.get("VITVIZ_CACHE_MB", 2048)) * 2**20)
DEPTH_CACHE = AnalysisCache(max_bytes=int(os.environ.get("VITVIZ_DEPTH_CACHE_MB", 1024)) * 2**20, per_session=1)
_MODELS: dict[str, VitModel] = {}
_DEPTH_MODELS: dict[str, DepthModel] = {}
_MODELS_LOCK = threading.Lock()
DEVICE = {"name": "auto"}  # set once by the command line, before the first model loads


def user_error(message: str, where: str) -> gr.Error:
    """The error a user sees for their own mistake: one line in the server's log, no traceback anywhere."""
    log.info("user error in %s: %s", where, message)
    return gr.Error(message, print_exception=False)


def user_errors(fn):
    """Turn the engine's errors into messages in the browser; the server and other sessions go on."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, ModelUnavailableError) as exc:
            raise user_error(str(exc), fn.__name__) from None
        except gr.Error:
            raise
        except Exception as exc:  # keep serving; say what happened
            log.exception("unexpected error")
            raise gr.Error(f"vitviz hit an unexpected error: {type(exc).__name__}: {exc}") from None

    return wrapper


def name_refusals(demo: gr.Blocks) -> None:
    """Gradio refuses some arguments itself, before any handler runs, without saying which: "Value 99 is
    greater than maximum value 11", "Value: -1 is not in the list of choices". Prefix each input's refusals
    with the API parameter it feeds ("layer: Value 99 is greater ..."). Call once, after every event is wired."""
    for fn in demo.fns.values():
        for component, name in zip(fn.inputs, fn.input_parameter_names or (), strict=False):  # None: unnamed
            if name and "preprocess" not in vars(component):
                component.preprocess = _naming(component.preprocess, name)


def _naming(preprocess, name: str):
    @wraps(preprocess)
    def named(payload):
        try:
            return preprocess(payload)
        except gr.Error as exc:
            raise user_error(f"{name}: {exc.message}", "the arguments' checks") from None

    return named


def get_model(name: str, progress: gr.Progress | None = None) -> VitModel:
    with _MODELS_LOCK:
        if name not in _MODELS:
            if progress is not None:
                progress(0.05, desc=f"Loading {name} (a hub model downloads once)")
            _MODELS[name] = load_model(name, device=DEVICE["name"])
        return _MODELS[name]


class Priority:
    """Work that someone waits for goes first: background work pauses between its steps while one runs."""

    def __init__(self) -> None:
        self._running = 0
        self._changed = threading.Condition()

    @contextmanager
    def interactive(self):
        with self._changed:
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def wait_for_interactive(self, timeout: float = 60.0) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._running == 0, timeout)


PRIORITY = Priority()  # new images' forward passes: attributions and the warm wait for them
REDRAWS = Priority()  # redraws from the cache: only the warm waits for them (an attribution would starve)
_ATTRIBUTION_MODELS: dict[str, VitModel] = {}


def get_attribution_model(name: str) -> VitModel:
    """A copy of the model for attributions, with its own lock: a minutes-long attribution never holds the
    lock that other users' analyses wait for (and its hooks never touch their forward passes)."""
    model = get_model(name)
    with _MODELS_LOCK:
        if name not in _ATTRIBUTION_MODELS:
            with model.lock:  # a forward running now has hooks on the modules: they must not be copied
                decoder = None if model.decoder is None else copy.deepcopy(model.decoder)
                net = copy.deepcopy(model.net)
            _ATTRIBUTION_MODELS[name] = replace(model, net=net, decoder=decoder, lock=threading.RLock())
        return _ATTRIBUTION_MODELS[name]


def get_depth_model(name: str) -> DepthModel:
    with _MODELS_LOCK:
        if name not in _DEPTH_MODELS:
            _DEPTH_MODELS[name] = load_depth_model(name, device=DEVICE["name"])
        return _DEPTH_MODELS[name]


_DIGESTS: OrderedDict[tuple, str] = OrderedDict()
_DIGESTS_LOCK = threading.Lock()


def digest(image: str | None) -> str:
    """SHA-1 of an uploaded file, read and hashed once per upload (uploads are never rewritten in place)."""
    if not image:
        raise ValueError("no image: upload one or click an example")
    stat = Path(image).stat()
    key = (image, stat.st_size, stat.st_mtime_ns)
    with _DIGESTS_LOCK:
        if key in _DIGESTS:
            return _DIGESTS[key]
    value = hashlib.sha1(Path(image).read_bytes()).hexdigest()
    with _DIGESTS_LOCK:
        _DIGESTS[key] = value
        while len(_DIGESTS) > 4096:
            _DIGESTS.popitem(last=False)
    return value


def session_of(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "local"


def analysis_key(image: str | None, model_name: str, size: str) -> str | None:
    """What identifies an analysis within a session (None without an image): views redraw when it changes."""
    return None if not image else f"{digest(image)}|{model_name}|{size}"


def get_analysis(
    image: str | None, model_name: str, size: str, request: gr.Request | None, progress: gr.Progress | None = None
) -> Analysis:
    """The cached analysis of this session's image, or one forward pass to make it."""
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    key = (session_of(request), analysis_key(image, model_name, size))
    a = CACHE.get(key)
    if a is None:
        model = get_model(model_name, progress)
        if progress is not None:
            progress(0.3, desc="Running the ViT: one forward pass captures every layer")
        with PRIORITY.interactive():
            a = analyze(model, image, longest=None if size == DEFAULT_SIZE else int(size))
        if CACHE.put(key, a):
            FREED.set()
        _TO_WARM.put((time.monotonic(), weakref.ref(a)))
    return a


FREED = threading.Event()  # much memory was freed (an eviction, an attribution's end): trim soon
_TO_WARM: queue.SimpleQueue = queue.SimpleQueue()  # (when queued, weak reference to an analysis)


def _warmer(delay_s: float = 0.3) -> None:
    """One background thread fills each new analysis' warm steps (see `Analysis.warm_step`) in turn,
    starting `delay_s` after the analysis was made, which leaves its shown view time to draw first, so that
    switching tabs or moving a slider finds them ready. A step that fails is logged and that analysis left."""
    while not _EXITING.is_set():
        queued, ref = _TO_WARM.get()
        time.sleep(max(0.0, queued + delay_s - time.monotonic()))
        step = 0
        try:
            while _warm_step(ref, step):
                step += 1
        except Exception:  # the warm is an optimisation: the view that needs it computes it itself
            log.exception("background warm, step %d", step)


def _warm_step(ref: weakref.ref, step: int) -> bool:
    """Wait while a new image is analysed or a view redrawn, then run one step, if the cache still holds the
    analysis. Only a weak reference is held while waiting: a thread per analysis, each holding it while it
    waited, could keep analyses alive that the cache had let go."""
    PRIORITY.wait_for_interactive()
    REDRAWS.wait_for_interactive()
    a = ref()
    if a is None or not CACHE.holds(a) or _EXITING.is_set():
        return False
    done = a.warm_step(step)
    if CACHE.enforce_cap():  # the step grew an analysis the cache holds: back under the cap
        FREED.set()
    return done


_EXITING = threading.Event()
_WARMER = threading.Thread(target=_warmer, daemon=True, name="vitviz-warmer")
_WARMER.start()


@atexit.register
def _stop_warming(timeout_s: float = 5.0) -> None:
    """At exit, let the warm step under way end: a thread killed inside torch aborts the whole process
    ("terminate called without an active exception", exit status 134)."""
    _EXITING.set()
    _TO_WARM.put((0.0, lambda: None))  # wakes a warmer that waits for work
    _WARMER.join(timeout_s)


def _janitor(period_s: float = 10.0) -> None:
    """At most once per period after FREED is set, give back what was freed (see `memory.trim`).
    A full collection takes 0.2 to 0.4 s with Gradio loaded: once per eviction would slow every new image."""
    while True:
        FREED.wait()
        time.sleep(period_s)
        FREED.clear()
        memory.trim()


threading.Thread(target=_janitor, daemon=True, name="vitviz-janitor").start()


def depth_key(image: str | None, depth_name: str, request: gr.Request | None) -> tuple:
    return session_of(request), depth_name, digest(image)


def get_depth(image: str | None, depth_name: str, key: tuple) -> DepthResult:
    """The cached depth result for `key` (from depth_key), or one forward pass of the depth model."""
    r = DEPTH_CACHE.get(key)
    if r is None:
        r = estimate_depth(get_depth_model(depth_name), image)
        if DEPTH_CACHE.put(key, r):
            FREED.set()
    return r


def head_choices(model: VitModel) -> list[tuple[str, int]]:
    return [("mean of heads", MEAN_OF_HEADS), ("all heads (grid)", ALL_HEADS)] + [
        (f"head {h}", h) for h in range(model.num_heads)
    ]


def head_arg(head: int | None, model: VitModel) -> int | str | None:
    """The head dropdown's value -> what `views.attention_view` takes (an index, None or ALL_HEADS)."""
    if head is None or head == MEAN_OF_HEADS:
        return None
    if head == ALL_HEADS:
        return views.ALL_HEADS
    if not 0 <= int(head) < model.num_heads:
        raise ValueError(f"head must be -1 (mean), -2 (all) or in [0, {model.num_heads}), got {head}")
    return int(head)


def picture(label: str, scale: int = 1, **kwargs) -> gr.Image:
    """An output image with its caption above it, not on it: Gradio's label box would cover the top patch
    row and the colorbar's top value. The label still names the API output. JPEG: it encodes in 2 ms
    where WebP, Gradio's default, takes 40 to 60 ms."""
    with gr.Column(scale=scale, min_width=160):
        gr.Markdown(f"**{label}**", elem_classes=["caption"])
        return gr.Image(
            label=label, show_label=False, interactive=False, format="jpeg", buttons=["fullscreen"], **kwargs
        )


# Each kind of work has its own concurrency slots: a new image's forward pass never waits behind
# minutes of attributions or depth, and cheap redraws never wait behind either.
SLOTS = {"forward": 2, "draw": 4, "heavy": 1}


def slots(kind: str) -> dict:
    """The event-listener arguments that put an event in one group of concurrency slots."""
    return {"concurrency_id": kind, "concurrency_limit": SLOTS[kind]}
