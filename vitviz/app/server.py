"""The `Server`, what every view shares: the caches, the model getters, the analysis key and the error wrapper.

Views never run a model themselves: they ask `get_analysis` for the cached capture of the
session's image, which runs one forward pass only when the cache has none.
"""

from __future__ import annotations

import atexit
import copy
import hashlib
import hmac
import logging
import os
import queue
import secrets
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import wraps
from pathlib import Path

import gradio as gr
from gradio.events import Dependency

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
)
from ..bands import RandomBands
from ..cache import AnalysisCache
from ..derived import Derived
from .head_choice import ALL_HEADS_VALUE, MEAN_OF_HEADS_VALUE, head_arg, head_choices  # noqa: F401 (views' import)
from .internals import component_key, take_as
from .pictures import CLICK_DONE_JS, CLICK_TAG_JS, ClickOrder
from .scheduling import (  # noqa: F401 (views' import)
    BATCH_MAX,
    FORWARD_NICE,
    SLOTS,
    WARM_NICE,
    HeavyRuns,
    Priority,
    batcher,
    slots,
)

log = logging.getLogger("vitviz")
EXAMPLES = [str(example(name)) for name in EXAMPLE_NAMES]
DEFAULT_SIZE = "model default"
SIZES = [DEFAULT_SIZE, "224", "336", "448", "518", "672"]
NO_IMAGE = "no image: upload one or click an example"


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
        except gr.Error:  # said already (a ValueError too: caught first, not said twice)
            raise
        except (ValueError, ModelUnavailableError) as exc:
            raise user_error(str(exc), fn.__name__) from None
        except Exception as exc:  # keep serving; say what happened
            log.exception("unexpected error")
            raise gr.Error(f"vitviz hit an unexpected error: {type(exc).__name__}: {exc}") from None

    return wrapper


@dataclass(eq=False)
class Pending:
    """A forward under way, which several sessions wait for: its analysis or its error, once `done`."""

    done: threading.Event = field(default_factory=threading.Event)
    result: Derived | None = None
    error: BaseException | None = None


def session_of(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "local"


class Server:
    """Everything the app holds while it serves, as FastAPI apps keep `app.state`: the models (and the attribution
    copies), the analysis and depth caches, the priorities, each session's stop event for its heavy work and its
    page token for vitviz's routes, and the background threads. Built in `main()` and carried on every view's
    `Context`; tests build their own. Nothing starts before `start()`: importing vitviz starts no thread, makes no
    folder and changes no global.

    Views never run a model themselves: they ask `get_analysis` for the cached capture of the session's
    image, which runs one forward pass only when the cache has none.
    """

    DIGESTS_KEPT = 4096  # uploads' SHA-1s remembered, the oldest forgotten first
    TOKENS_KEPT = 10_000  # sessions' page tokens remembered, the least recently used forgotten first
    # sessions whose Gradio state is kept, the least recently used dropped: each holds its own copy of the page's
    # config (0.56 MiB), and Gradio's default of 10,000 kept a closed page's for good (5.5 GiB at the full count)
    STATES_KEPT = 200

    def __init__(
        self,
        device: str = "auto",
        cache_mb: float | None = None,
        depth_cache_mb: float | None = None,
        batch_ms: str | None = None,
    ):
        cache_mb = float(os.environ.get("VITVIZ_CACHE_MB", 2048)) if cache_mb is None else cache_mb
        depth_mb = float(os.environ.get("VITVIZ_DEPTH_CACHE_MB", 1024)) if depth_cache_mb is None else depth_cache_mb
        self.device = device
        self.batcher = batcher(os.environ.get("VITVIZ_BATCH_MS", "auto") if batch_ms is None else batch_ms, device)
        self.cache = AnalysisCache(max_bytes=int(cache_mb * 2**20))
        self.depth_cache = AnalysisCache(max_bytes=int(depth_mb * 2**20), per_session=1)
        self.models: dict[str, VitModel] = {}
        self.depth_models: dict[str, DepthModel] = {}
        self.attribution_models: dict[str, VitModel] = {}
        self.similarity: dict[str, object] = {}  # each model's position-embedding similarity, computed once
        self.bands = RandomBands()  # the checks' random orders, one band per photo, model and output
        self.priority = Priority()  # new images' forward passes: attributions and the warm wait for them
        self.redraws = Priority()  # redraws from the cache: only the warm waits for them (an attribution would starve)
        self.clicks = ClickOrder()  # the newest click answered on each page's clickable pictures
        self.freed = threading.Event()  # much memory was freed (an eviction, an attribution's end): trim soon
        self.stopped: dict[tuple[str, str], threading.Event] = {}  # (session, tab): the heavy run that Stop ends
        self.heavy = HeavyRuns()  # the heavy runs' recent rates and those under way: the buttons' times (scheduling)
        self._models_lock = threading.Lock()
        self._digests: OrderedDict[tuple, str] = OrderedDict()
        self._digests_lock = threading.Lock()
        self._page_tokens: OrderedDict[str, str] = OrderedDict()  # session -> the secret its page sends (`page_token`)
        self._page_tokens_lock = threading.Lock()
        self._forwards: dict[str, Pending] = {}  # analysis key -> the forward under way for it
        self._forwards_lock = threading.Lock()
        self._forward_threads = ThreadPoolExecutor(
            BATCH_MAX, thread_name_prefix="vitviz-forward", initializer=memory.lower_priority, initargs=(FORWARD_NICE,)
        )
        self._to_warm: queue.SimpleQueue = queue.SimpleQueue()  # (when queued, weak reference to an analysis)
        self._exiting = threading.Event()
        self._threads: list[threading.Thread] = []
        self._scratch: Path | None = None
        self.trim = memory.trim  # what the janitor calls (a test gives its own)
        self.files_lock = threading.RLock()  # the files in scratch(): frozen frames, depth downloads
        self.depth_files: OrderedDict[tuple, Path] = OrderedDict()  # a depth result's key -> its downloads' folder

    def start(self) -> Server:
        """Start the background warm and the memory janitor; they stop at exit (or at `stop()`)."""
        if self._threads:
            return self
        for target, name in ((self._warmer, "vitviz-warmer"), (self.janitor, "vitviz-janitor")):
            thread = threading.Thread(target=target, daemon=True, name=name)
            thread.start()
            self._threads.append(thread)
        atexit.register(self.stop)
        return self

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        """The background threads `start` started (the warmer, then the janitor)."""
        return tuple(self._threads)

    @property
    def forwards_under_way(self) -> int:
        """How many photos' forwards run now (each shared by every session that waits for it)."""
        return len(self._forwards)

    @property
    def digests_kept(self) -> int:
        return len(self._digests)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Let the warm step under way end: a thread killed inside torch aborts the whole process
        ("terminate called without an active exception", exit status 134)."""
        self._exiting.set()
        self._forward_threads.shutdown(wait=False, cancel_futures=True)  # a forward under way ends first
        self._to_warm.put((0.0, lambda: None))  # wakes a warmer that waits for work
        for thread in self._threads:
            thread.join(timeout_s)

    def scratch(self) -> Path:
        """This server's folder for files it makes (frozen camera frames, depth downloads), made on first use."""
        with self.files_lock:
            if self._scratch is None:
                self._scratch = Path(tempfile.mkdtemp(prefix="vitviz-"))
            return self._scratch

    def bind(self, fn: Callable) -> Callable:
        """fn(server, *args) as a handler that Gradio calls with *args (its signature without `server`)."""

        @wraps(fn)
        def handler(*args, **kwargs):
            return fn(self, *args, **kwargs)

        return take_as(handler, fn, drop=1)

    def on_click(self, picture: gr.Image, fn: Callable, inputs: Sequence, outputs: Sequence) -> Dependency:
        """Answer clicks on `picture` (made by `picture(clickable=True)`) with fn(server, *inputs, evt:
        gr.SelectData, ...) -> outputs: one at a time, and never an older click after a newer one for the same
        outputs (`ClickOrder`). A click's answer is quick and its progress shows only as a timer, so nothing
        covers the picture for the next click. Returned: the click's listener, for what follows its answer."""
        tag = picture.click_tag  # made by `picture(clickable=True)`
        group, skip = "-".join(str(component_key(o)) for o in outputs), tuple(gr.skip() for _ in outputs)
        handler = self.bind(fn)

        @wraps(handler)
        def clicked(click: str, *args, **kwargs):
            if not self.clicks.answer(group, click):
                return skip if len(skip) > 1 else skip[0]
            return handler(*args, **kwargs)

        take_as(clicked, handler, first=["click"])
        answered = picture.select(
            clicked,
            [tag, *inputs],
            list(outputs),
            js=CLICK_TAG_JS % (len(inputs) + 1),
            trigger_mode="multiple",
            concurrency_id="pick",
            concurrency_limit=1,
            show_progress="minimal",
            api_visibility="private",
        )
        answered.then(None, js=CLICK_DONE_JS, queue=False, api_visibility="private")
        return answered

    def get_model(self, name: str, progress: gr.Progress | None = None) -> VitModel:
        model = self.models.get(name)  # a loaded model never waits for another one's load
        if model is not None:
            return model
        with self._models_lock:
            if name not in self.models:
                if progress is not None:
                    progress(0.05, desc=f"Loading {name} (a hub model downloads once)")
                model = load_model(name, device=self.device)
                if self.batcher:  # where uploads are batched (a GPU), the first class's need not set it up
                    try:
                        self.batcher.warm(model)
                    except Exception:  # an optimisation: an upload that needs what failed here says why
                        log.exception("warming %s", name)
                self.models[name] = model  # shared once warm
            return self.models[name]

    def get_attribution_model(self, name: str) -> VitModel:
        """A copy of the model for attributions, with its own lock: a minutes-long attribution never holds the
        lock that other users' analyses wait for (and its hooks never touch their forward passes)."""
        model = self.get_model(name)
        with self._models_lock:
            if name not in self.attribution_models:
                with model.lock:  # a forward running now has hooks on the modules: they must not be copied
                    dense_head = None if model.dense_head is None else copy.deepcopy(model.dense_head)
                    net = copy.deepcopy(model.net)
                self.attribution_models[name] = replace(model, net=net, dense_head=dense_head, lock=threading.RLock())
            return self.attribution_models[name]

    def get_depth_model(self, name: str) -> DepthModel:
        with self._models_lock:
            if name not in self.depth_models:
                self.depth_models[name] = load_depth_model(name, device=self.device)
            return self.depth_models[name]

    def digest(self, image: str | None) -> str:
        """SHA-1 of an uploaded file, read and hashed once per upload (uploads are never rewritten in place)."""
        if not image:
            raise ValueError(NO_IMAGE)
        stat = Path(image).stat()
        key = (image, stat.st_size, stat.st_mtime_ns)
        with self._digests_lock:
            if key in self._digests:
                return self._digests[key]
        value = hashlib.sha1(Path(image).read_bytes()).hexdigest()
        with self._digests_lock:
            self._digests[key] = value
            while len(self._digests) > self.DIGESTS_KEPT:
                self._digests.popitem(last=False)
        return value

    def page_token(self, session: str) -> str:
        """The secret of `session`'s page for the routes that vitviz adds (the Explorer's layers, the Q·K view's
        UMAP), made here on first use: sent in a view's meta and back in a request header, never in a URL. The session
        hash alone is in the URLs, and an analysis key is the SHA-1 of a photo that others may have too."""
        with self._page_tokens_lock:
            token = self._page_tokens.get(session)
            if token is None:
                token = self._page_tokens[session] = secrets.token_urlsafe(24)
                while len(self._page_tokens) > self.TOKENS_KEPT:
                    self._page_tokens.popitem(last=False)
            self._page_tokens.move_to_end(session)
            return token

    def holds_page_token(self, session: str, token: str | None) -> bool:
        """Whether `token` is `session`'s page token (compared in constant time); never for a session without one."""
        with self._page_tokens_lock:
            kept = self._page_tokens.get(session)
        return kept is not None and token is not None and hmac.compare_digest(kept.encode(), token.encode())

    def analysis_key(self, image: str | None, model_name: str, size: str) -> str | None:
        """What identifies an analysis within a session (None without an image): views redraw when it changes."""
        return None if not image else f"{self.digest(image)}|{model_name}|{size}"

    def get_analysis(
        self,
        image: str | None,
        model_name: str,
        size: str,
        request: gr.Request | None,
        progress: gr.Progress | None = None,
    ) -> Derived:
        """The cached analysis of this session's image, with what is derived from it kept (`Derived`), or one
        forward pass to make it."""
        if size not in SIZES:
            raise ValueError(f"size must be one of {SIZES}, got {size!r}")
        if not image:
            raise ValueError(NO_IMAGE)
        photo = self.analysis_key(image, model_name, size)
        key = (session_of(request), photo)
        a = self.cache.get(key)
        if a is not None:
            if self.cache.enforce_cap():  # the last requests refilled what shed analyses recompute
                self.freed.set()
            return a
        # A class that clicks the same example shares one analysis: another session's, or the forward under way.
        a = self.cache.find((photo,)) or self._forward_once(photo, image, model_name, size, progress)
        if self.cache.put(key, a):
            self.freed.set()
        return a

    def _forward_once(self, photo: str, image: str, model_name: str, size: str, progress) -> Derived:
        """One forward for the analysis key `photo`, however many sessions ask for it at once: the first runs it,
        the others wait for its analysis (or its error)."""
        with self._forwards_lock:
            pending = self._forwards.get(photo)
            first = pending is None
            if first:
                pending = self._forwards[photo] = Pending()
        if first:
            try:
                model = self.get_model(model_name, progress)
                if progress is not None:
                    progress(0.3, desc="Running the ViT: one forward pass captures every layer")
                longest = None if size == DEFAULT_SIZE else int(size)
                with self.priority.interactive():
                    pending.result = self._forward_threads.submit(self._forward, model, image, longest).result()
                # its rollouts right after its answer, on a forward's thread: in a class, before the next uploads'
                # analyses push the fused heads that make them out of the cache
                self._forward_threads.submit(pending.result.settle)
                log.info("forward: a new analysis of %s at %s", model_name, size)  # the classroom benchmark counts
                self._to_warm.put((time.monotonic(), weakref.ref(pending.result)))
            except BaseException as exc:
                pending.error = exc
            finally:
                with self._forwards_lock:
                    del self._forwards[photo]
                pending.done.set()
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.result

    def _forward(self, model: VitModel, image: str, longest: int | None) -> Derived:
        """A new image's analysis, on a forward thread (see `FORWARD_NICE`), in a `Derived` that makes the rollout
        slider's rollouts from the forward's own weights (`roll`: no move recomputes attention for them) after the
        upload's answer, on a forward's thread or by the first request that needs them (`later`), and
        with the dense head's map on the forward's own tokens (`dense`: no forward of its own): the rollout's note
        and the output view read it, and a redraw must never wait for the model's lock, which the next uploads'
        forwards hold one after the other. A dense head that fails is logged, and the view that needs it says so."""
        if self.batcher:  # its analyses roll when first needed
            return self.batcher.analyze(model, image, longest, roll=True, dense=True)
        return analyze(model, image, longest, roll=True, dense=True, later=True)

    def depth_key(self, image: str | None, depth_name: str, request: gr.Request | None) -> tuple:
        return session_of(request), depth_name, self.digest(image)

    def get_depth(self, image: str | None, depth_name: str, key: tuple, progress=None) -> DepthResult:
        """The cached depth result for `key` (from depth_key), or one forward pass of the depth model, which calls
        progress(fraction) after each encoder layer (`estimate_depth`: what it raises ends the pass)."""
        r = self.depth_cache.get(key)
        if r is None:
            r = estimate_depth(self.get_depth_model(depth_name), image, progress=progress)
            if self.depth_cache.put(key, r):
                self.freed.set()
        return r

    def _warmer(self, delay_s: float = 0.3) -> None:
        """One background thread fills each new analysis' warm steps (see `Derived.warm_step`) in turn,
        starting `delay_s` after the analysis was made, which leaves its shown view time to draw first, so that
        switching tabs or moving a slider finds them ready. A step that fails is logged and that analysis left.
        It runs at the lowest CPU priority: it takes the cores only when no forward or redraw wants them."""
        memory.lower_priority(WARM_NICE)
        while not self._exiting.is_set():
            queued, ref = self._to_warm.get()
            time.sleep(max(0.0, queued + delay_s - time.monotonic()))
            step = 0
            try:
                while self.warm_step(ref, step):
                    step += 1
            except Exception:  # the warm is an optimisation: the view that needs it computes it itself
                log.exception("background warm, step %d", step)
            self.freed.set()  # the fused layers that it let go (~100 MB at 448 px): trim soon

    def warm_step(self, ref: weakref.ref, step: int) -> bool:
        """Wait while a new image is analysed or a view redrawn, then run one step, if the cache still holds the
        analysis. Only a weak reference is held while waiting: a thread per analysis, each holding it while it
        waited, could keep analyses alive that the cache had let go."""
        self.priority.wait_for_interactive()
        self.redraws.wait_for_interactive()
        a = ref()
        if a is None or not self.cache.holds(a) or self._exiting.is_set():
            return False
        done = a.warm_step(step)
        if self.cache.enforce_cap():  # the step grew an analysis the cache holds: back under the cap
            self.freed.set()
        return done

    def janitor(self, period_s: float = 10.0) -> None:
        """At most once per period, give back what was freed (see `memory.trim`): after `freed` is set, and once no
        forward or redraw runs after some ended since the last trim. The second is a server that went quiet: the
        last requests of a class free their temporaries with no eviction after them, and glibc kept those pages
        until the next class (docs/benchmarks.md). A full collection is slow with Gradio loaded: once per eviction
        would slow every new image."""
        trimmed = self._works_ended()
        while not self._exiting.wait(period_s):
            ended, quiet = self._works_ended(), self.priority.running == 0 and self.redraws.running == 0
            if self.freed.is_set() or (quiet and ended != trimmed):
                self.freed.clear()
                trimmed = ended
                self.trim()

    def _works_ended(self) -> int:
        return self.priority.ended + self.redraws.ended
