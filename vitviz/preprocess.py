"""Image decoding and model-input preparation, written with OpenCV and NumPy.

Everything a user can upload passes through `load_image`, which either returns an RGB
uint8 array or raises a `ValueError` that names the problem. The model input is then
made by `prepare_input`: a resize that keeps the aspect ratio and lands on multiples of
the patch size, so the token grid is always (h/p, w/p) from pixels.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

ImageInput = str | os.PathLike | bytes | np.ndarray | Image.Image

# 40 megapixels: a 8000x5000 photo passes, a decompression bomb does not.
MAX_PIXELS = int(os.environ.get("VITVIZ_MAX_PIXELS", 40_000_000))

# EXIF orientation tag values -> the NumPy operations that undo them.
_EXIF_ORIENTATION = {
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: np.swapaxes(a, 0, 1),
    6: lambda a: np.rot90(a, -1),
    7: lambda a: np.swapaxes(a[::-1, ::-1], 0, 1),  # transverse
    8: lambda a: np.rot90(a, 1),
}


def load_image(src: ImageInput) -> np.ndarray:
    """Decode `src` (path, encoded bytes, PIL image or array) to RGB uint8 [H,W,3].

    EXIF orientation is applied; grayscale, RGBA (composited on white), palette and
    16-bit images become 8-bit RGB. Raises ValueError naming the problem for files that
    are not images, truncated files and images over `MAX_PIXELS`.
    """
    if isinstance(src, np.ndarray):
        return _to_rgb8(src)
    if isinstance(src, Image.Image):
        _check_pixel_count(*src.size)
        return _to_rgb8(np.asarray(_pil_to_array_mode(src)))
    if isinstance(src, (bytes, bytearray)):
        return _decode(bytes(src), "the uploaded data")
    if isinstance(src, (str, os.PathLike)):
        path = Path(src)
        if not path.is_file():
            raise ValueError(f"no image file at {path}")
        return _decode(path.read_bytes(), path.name)
    raise ValueError(f"cannot read an image from a {type(src).__name__}")


def pictures_in(path: str | os.PathLike) -> tuple[str | None, int]:
    """(format, how many pictures) of an image file, from its header: a TIFF's pages, an animated GIF's, WebP's or
    PNG's frames, of which `load_image` reads the first alone. An MPO (a phone's JPEG) counts 1: its other pictures
    are the first one's depth or HDR versions, not other photos. A file Pillow cannot open: (None, 1)."""
    try:
        with Image.open(path) as header:
            return header.format, 1 if header.format == "MPO" else int(getattr(header, "n_frames", 1))
    except Exception:  # `load_image` says what is wrong with it
        return None, 1


def _pil_to_array_mode(im: Image.Image) -> Image.Image:
    """A PIL image in a mode `_to_rgb8` reads: palettes keep their transparency, 16- and 32-bit integers
    become 16-bit (clipped to 0..65535), LA and RGBA stay, and every other mode becomes RGB (the rare
    premultiplied La, RGBa and PA lose their alpha)."""
    if im.mode == "P":
        return im.convert("RGBA")
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        return Image.fromarray(np.clip(np.asarray(im), 0, 65535).astype(np.uint16))
    return im if im.mode in ("LA", "RGBA") else im.convert("RGB")


def _check_pixel_count(width: int, height: int) -> None:
    if width * height > MAX_PIXELS:
        raise _too_large(f"{height} px high × {width} px wide")


def _too_large(size: str) -> ValueError:
    return ValueError(
        f"image is too large: {size}, over the limit of {MAX_PIXELS:,} pixels ({MAX_PIXELS / 1e6:g} megapixels; "
        "VITVIZ_MAX_PIXELS sets it)"
    )


def _decode(data: bytes, what: str) -> np.ndarray:
    if not data:
        raise ValueError(f"{what} is empty, not an image")
    try:
        # PIL reads only the header here: size, format and EXIF, no pixels.
        with Image.open(io.BytesIO(data)) as header:
            width, height = header.size
            fmt = header.format
            orientation = _exif_orientation(header)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):  # the warning, where warnings are errors
        # Pillow's own check, at sizes far over ours, names its limit, not this app's: ours is said instead.
        raise _too_large(f"{what} holds over {Image.MAX_IMAGE_PIXELS:,} pixels") from None
    except Exception:
        kind = _sniff(data)
        if kind is None:
            raise ValueError(f"{what} is not an image (unrecognised file format)") from None
        if _is_truncated(data, kind):  # cut inside its header
            raise ValueError(f"{what} is a truncated {kind} file: its end is missing") from None
        raise ValueError(f"{what} is a {kind} file that cannot be read: {_why_unreadable(data)}") from None
    _check_pixel_count(width, height)
    if _is_truncated(data, fmt):
        raise ValueError(f"{what} is a truncated {fmt} file: its end is missing")
    # IMREAD_UNCHANGED keeps alpha and 16-bit depth; orientation is applied below.
    arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if arr is None:
        raise ValueError(f"{what} could not be decoded as {fmt}: the file is damaged")
    arr = _to_rgb8(arr, bgr=True)
    return np.ascontiguousarray(_EXIF_ORIENTATION.get(orientation, lambda a: a)(arr))


_MAGIC = {
    b"\xff\xd8\xff": "JPEG",
    b"\x89PNG": "PNG",
    b"GIF8": "GIF",
    b"BM": "BMP",
    b"II*\x00": "TIFF",
    b"MM\x00*": "TIFF",
    b"RIFF": "WebP",
}


def _sniff(data: bytes) -> str | None:
    """The image format that the file's first bytes announce, if any."""
    return next((kind for magic, kind in _MAGIC.items() if data.startswith(magic)), None)


def _why_unreadable(data: bytes) -> str:
    arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if arr is None:
        return "it is damaged, or uses a variant that neither Pillow nor OpenCV reads"
    channels = 1 if arr.ndim == 2 else arr.shape[2]
    return (
        f"it holds {arr.shape[0]} rows × {arr.shape[1]} columns of pixels of {channels} {arr.dtype} sample(s), "
        "and vitviz reads 8- and 16-bit integer images only; save it as an 8-bit PNG or JPEG"
    )


def _exif_orientation(header: Image.Image) -> int:
    try:
        return int(header.getexif().get(0x0112) or 1)
    except Exception:  # a cut or malformed EXIF block: keep the stored orientation
        return 1


def _is_truncated(data: bytes, fmt: str | None) -> bool:
    """Whether a JPEG or PNG stops before its end marker: decoders fill a cut JPEG with grey and say
    nothing. The file's structure is walked from the start, so data after the end (a phone's motion photo
    appends a video to its JPEG) is not taken for a cut, nor an embedded thumbnail's end for the image's."""
    if fmt in ("JPEG", "MPO"):  # MPO: a JPEG that lists more pictures after it (phones' HDR and depth photos)
        return not _jpeg_ends(data)
    if fmt == "PNG":
        return not _png_ends(data)
    return False


def _jpeg_ends(data: bytes) -> bool:
    """Whether the JPEG's markers, read from its start, reach its end (EOI) marker."""
    i = 2  # after SOI
    while (found := _MARKER.search(data, i)) is not None:  # the next marker, past scan data and junk
        i = found.start()
        if data[i + 1] == 0xD9:
            return True
        # A segment, skipped by its length: an EXIF thumbnail's own end marker inside it is never read.
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return False


# 0xFF and a byte that makes it a marker with a length, or EOI: not a stuffed 0, TEM, a restart marker, SOI
# or another 0xFF (a fill byte). Searched in C: a scan's data can be megabytes.
_MARKER = re.compile(rb"\xff[^\x00\x01\xd0-\xd8\xff]")


def _png_ends(data: bytes) -> bool:
    """Whether the PNG's chunks, each by its length, reach an IEND chunk."""
    i = 8  # after the signature
    while i + 12 <= len(data):  # room for a chunk's length, type and CRC
        length, kind = int.from_bytes(data[i : i + 4], "big"), data[i + 4 : i + 8]
        if kind == b"IEND":
            return True
        i += 12 + length
    return False


def _to_rgb8(arr: np.ndarray, bgr: bool = False) -> np.ndarray:
    """Any 2-D/3-D integer or float image (BGR channel order if `bgr`) -> RGB uint8 [H,W,3]."""
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (1, 2, 3, 4)) or arr.size == 0:
        raise ValueError(f"an image array must be HxW or HxWxC with C in 1..4 and some pixels, got {arr.shape}")
    _check_pixel_count(arr.shape[1], arr.shape[0])
    if arr.dtype == np.uint16:
        arr = (arr.astype(np.uint32) * 255 // 65535).astype(np.uint8)
    elif arr.dtype.kind == "f":
        scale = 255.0 if arr.max() <= 1.0 else 1.0
        arr = np.clip(arr * scale, 0, 255).round().astype(np.uint8)
    elif arr.dtype != np.uint8:
        arr = np.clip(arr, 0, 255).astype(np.uint8)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    c = arr.shape[2]
    if c in (2, 4):  # composite the alpha channel on white
        alpha = arr[:, :, -1:].astype(np.float32) / np.float32(255)  # float32: a 40 MP image stays ~0.5 GB
        arr = (arr[:, :, :-1] * alpha + np.float32(255) * (1 - alpha)).round().astype(np.uint8)
        c -= 1
    if c == 1:
        arr = np.repeat(arr, 3, axis=2)
    elif bgr:
        arr = arr[:, :, ::-1]
    return np.ascontiguousarray(arr)


def input_size(height: int, width: int, patch: int, longest: int) -> tuple[int, int]:
    """Model input (h, w): aspect ratio kept, longest side about `longest`, multiples of `patch`."""
    scale = longest / max(height, width)
    h = max(patch, int(round(height * scale / patch)) * patch)
    w = max(patch, int(round(width * scale / patch)) * patch)
    return h, w


def prepare_input(
    image: np.ndarray,
    size: tuple[int, int],
    patch: int,
    mean: tuple[float, float, float],
    std: tuple[float, float, float],
) -> np.ndarray:
    """RGB uint8 [H,W,3] -> normalised model input float32 [1,3,h,w].

    The whole image is resized to `size` = (h, w), no crop, so token (i, j) covers the
    same fraction of the original image as of the input.
    """
    height, width = image.shape[:2]
    if height < patch or width < patch:
        raise ValueError(
            f"image is too small: {height} px high × {width} px wide is smaller than one {patch}×{patch} px patch"
        )
    h, w = size
    if h % patch or w % patch:
        raise ValueError(f"input size {w}x{h} is not a multiple of the patch size {patch}")
    shrinking = h * w < height * width
    resized = cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC)
    x = (resized.astype(np.float32) / 255.0 - np.float32(mean)) / np.float32(std)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])
