"""Text drawn into pictures: OpenCV's Hershey font, its sizes, wrapping, and the projector mode's large labels."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import cv2
import numpy as np

FONT = cv2.FONT_HERSHEY_SIMPLEX
BLACK = (0, 0, 0)

# The projector mode: every label drawn into a picture is at least LARGE_LABEL_PX tall (a digit's inked height,
# in the picture's own pixels). At 1024x768 the app shows each picture with labels at 0.7 of its size or more on
# the screen (the page's 1.25 zoom included; pairs stack in that mode), so its labels are 19 px or more there:
# the 18 px that the back row reads.
LARGE_LABEL_PX = 27
LARGE_FONT = (1.25, 2)  # the scale and thickness at which Hershey's digits are LARGE_LABEL_PX tall (ink)
_large = ContextVar("vitviz_large_labels", default=False)


@contextmanager
def large_labels(on: bool = True) -> Iterator[None]:
    """Within the block (in this thread or task), labels are drawn at the projector mode's size."""
    token = _large.set(bool(on))
    try:
        yield
    finally:
        _large.reset(token)


def is_large() -> bool:
    """Whether labels are drawn at the projector mode's size here (see `large_labels`)."""
    return _large.get()


def font(scale: float, thickness: int = 1) -> tuple[float, int]:
    """The scale and thickness a label asked for at `scale` is drawn at: as asked, or in the projector mode at
    least LARGE_FONT."""
    if not _large.get():
        return scale, thickness
    return max(scale, LARGE_FONT[0]), max(thickness, LARGE_FONT[1])


def text(image: np.ndarray, s: str, org: tuple[int, int], scale: float, colour=BLACK, thickness: int = 1) -> None:
    """Write `s` on `image` in place, anti-aliased, its baseline starting at `org` (x, y), at `font(scale)`."""
    scale, thickness = font(scale, thickness)
    cv2.putText(image, s, org, FONT, scale, colour, thickness, cv2.LINE_AA)


def text_width(s: str, scale: float, thickness: int = 1) -> int:
    return cv2.getTextSize(s, FONT, *font(scale, thickness))[0][0]


def text_height(scale: float, thickness: int = 1) -> int:
    """The height of a digit written at `font(scale, thickness)`: what a label's size is measured by."""
    return _digit_height(*font(scale, thickness))


@functools.lru_cache(maxsize=256)
def _digit_height(scale: float, thickness: int) -> int:
    """Measured once per size: a drawing asks for a few sizes many times, and 30 drawing threads share one lock."""
    return cv2.getTextSize("0", FONT, scale, thickness)[0][1]


def grown(px: int, scale: float, thickness: int = 1) -> int:
    """A length `px` laid out around labels at `scale`, grown as much as `font` grows them."""
    return round(px * text_height(scale, thickness) / _digit_height(scale, thickness))


def wrap(s: str, scale: float, width: int) -> list[str]:
    """`s` in lines of whole words, each at most `width` px wide at `font(scale)` (a longer word keeps a line)."""
    lines = [""]
    for word in s.split():
        joined = f"{lines[-1]} {word}".strip()
        if lines[-1] and text_width(joined, scale) > width:
            lines.append(word)
        else:
            lines[-1] = joined
    return lines


def wrapped(words: str, fits) -> list[str]:
    """`words` in lines, each as long as `fits(line)` allows (a longer word keeps a line)."""
    lines: list[str] = []
    for word in words.split():
        if lines and fits(lines[-1] + " " + word):
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines
