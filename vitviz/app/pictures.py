"""Server-drawn pictures: how a view shows one, and how clicks on it reach the server in order
(`Server.on_click` wires them; static/pick.js is their browser side)."""

from __future__ import annotations

import threading
from collections import OrderedDict

import gradio as gr


def picture(label: str, scale: int = 1, clickable: bool = False, caption: str | None = None, **kwargs) -> gr.Image:
    """An output image with its caption above it, not on it: Gradio's label box would cover the top patch
    row and the colorbar's top value. The label still names the API output. JPEG: it encodes many times
    faster than WebP, Gradio's default (docs/benchmarks.md). clickable: a picture whose patches are clicked has no
    fullscreen button, which would sit over its top-right patch and take that click, and a click on it while
    its next picture loads waits for that picture (static/pick.js, loaded by `layout.build`)."""
    with gr.Column(scale=scale, min_width=160):
        gr.Markdown(f"**{caption or label}**", elem_classes=["caption"])  # caption: the label with its HTML
        buttons, classes = ([], ["vitviz-pick"]) if clickable else (["fullscreen"], [])
        shown = gr.Image(
            label=label,
            show_label=False,
            interactive=False,
            format="jpeg",
            buttons=buttons,
            elem_classes=classes,
            **kwargs,
        )
        if clickable:  # the tag of a click on it (`Server.on_click`): an input nobody sees
            shown.click_tag = gr.Textbox(visible=False)
        return shown


class ClickOrder:
    """The newest click that each page has had answered, per group of outputs: an older click that reaches the
    server after a newer one (their requests race each other into Gradio's queue) is not answered, so the
    query ends on the last click. A click is tagged "page:n" in the browser (CLICK_TAG_JS), n counting up.
    static/pick.js sends a page's clicks one at a time; this guards the order where it stops waiting (an answer
    slower than 15 s)."""

    def __init__(self, pages: int = 10_000) -> None:
        self._newest: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._pages = pages
        self._lock = threading.Lock()

    def answer(self, group: str, tag: str) -> bool:
        """Whether the click `tag` ("page:n") is newer than every click of its page answered for `group`."""
        page, _, n = str(tag).rpartition(":")
        if not page or not n.isdigit():
            raise ValueError(f'a click is tagged "page:n", got {tag!r}')
        key, n = (page, group), int(n)
        with self._lock:
            if n <= self._newest.get(key, 0):
                return False
            self._newest[key] = n
            self._newest.move_to_end(key)
            while len(self._newest) > self._pages:
                self._newest.popitem(last=False)
            return True


# A click's tag, from static/pick.js (loaded by `layout.build`), which sends a page's clicks one at a time.
CLICK_TAG_JS = "(...values) => [window.vitvizPick.tag(), ...values.slice(1, %d)]"
CLICK_DONE_JS = "() => window.vitvizPick.done()"
