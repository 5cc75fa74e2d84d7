"""Drawing with OpenCV: colormaps, overlays, colorbars, patch grids and head grids.

Takes arrays, returns RGB uint8 images. No model here. Maps are [gh,gw] in patch units;
images are [H,W,3] in pixels of the picture being drawn on.
"""

from __future__ import annotations

import cv2
import numpy as np

# Text drawn into pictures lives in labels.py; views draw it through render, as they draw the rest
from .labels import (  # noqa: F401
    BLACK,
    FONT,
    LARGE_FONT,
    LARGE_LABEL_PX,
    font,
    grown,
    is_large,
    large_labels,
    text,
    text_height,
    text_width,
    wrap,
    wrapped,
)

COLORMAPS = {
    "inferno": cv2.COLORMAP_INFERNO,
    "viridis": cv2.COLORMAP_VIRIDIS,
    "magma": cv2.COLORMAP_MAGMA,
    "turbo": cv2.COLORMAP_TURBO,
    "jet": cv2.COLORMAP_JET,
    "gray": None,
    "diverging": None,  # blue (negative), white (0), red (positive): for signed maps, centred at 0
}
# "diverging"'s ends and centre, RGB: ColorBrewer RdBu's blue and red around its near-white (Plotly's figures too)
DIVERGING = ((33, 102, 172), (247, 247, 247), (178, 24, 43))
DISPLAY_SIDE = 640  # the longest side images are drawn at: enough for a projector, cheap to send


def fit(image: np.ndarray, longest: int = DISPLAY_SIDE) -> np.ndarray:
    """Resize RGB [H,W,3] so that its longest side is `longest` (aspect kept)."""
    h, w = image.shape[:2]
    scale = longest / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC)


def colorize(values: np.ndarray, cmap: str = "inferno", vmin: float | None = None, vmax: float | None = None):
    """[h,w] float -> RGB uint8 [h,w,3], values scaled from [vmin, vmax] (default: min, max)."""
    if cmap not in COLORMAPS:
        raise ValueError(f"unknown colormap {cmap!r}: use one of {sorted(COLORMAPS)}")
    lo = float(values.min()) if vmin is None else vmin
    hi = float(values.max()) if vmax is None else vmax
    scaled = np.clip((values - lo) / max(hi - lo, 1e-12), 0, 1)
    gray = (scaled * 255).round().astype(np.uint8)
    if cmap == "diverging":
        t = scaled[..., None] * 2 - 1  # -1 .. 1
        blue, white, red = (np.array(c, np.float64) for c in DIVERGING)
        rgb = np.where(t < 0, white + (blue - white) * -t, white + (red - white) * t)
        return rgb.round().astype(np.uint8)
    if COLORMAPS[cmap] is None:
        return np.repeat(gray[..., None], 3, axis=2)
    return cv2.applyColorMap(gray, COLORMAPS[cmap])[..., ::-1].copy()


def overlay(
    image: np.ndarray,
    values: np.ndarray,
    cmap: str = "inferno",
    alpha: float = 0.6,
    vmin: float | None = None,
    vmax: float | None = None,
    nearest: bool = True,
) -> np.ndarray:
    """Blend the colourised map `values` [gh,gw] over RGB `image` [H,W,3].

    nearest=True keeps each patch a flat square, faithful to tokens; False interpolates
    bilinearly (for rollout and dense outputs). The map covers the whole image.
    """
    h, w = image.shape[:2]
    heat = colorize(values.astype(np.float32), cmap, vmin, vmax)
    heat = cv2.resize(heat, (w, h), interpolation=cv2.INTER_NEAREST if nearest else cv2.INTER_LINEAR)
    return cv2.addWeighted(heat, alpha, image, 1.0 - alpha, 0.0)


def colorbar(
    height: int, cmap: str, vmin: float, vmax: float, width: int = 150, scale: str = "", quantity: str = ""
) -> np.ndarray:
    """A vertical colour scale [height,width,3]: its top, middle and bottom values and, under it, what it
    shows (`quantity`, in words and units) and the scale's name (at the bottom: the app's image buttons cover
    the top corner). scale "log": the bar is in log10 units and the ticks say the values themselves. Wider than
    `width` where its labels need it."""
    names = bar_names(scale, quantity, BAR_LINE)
    numbers = [bar_number(10**v if scale == "log" else v) for v in (vmin + f * (vmax - vmin) for f in (0.0, 0.5, 1.0))]
    width = max(width, 28 + max(text_width(n, 0.85, 2) for n in numbers), *(text_width(n, 0.75, 2) + 6 for n in names))
    tall, line = text_height(0.85, 2), text_height(0.75, 2) + 8  # 23 px; grown in the projector mode
    foot = len(names) * line + 6 if names else 0
    bar_h = height - foot
    ramp = np.linspace(1, 0, bar_h, dtype=np.float32)[:, None].repeat(16, axis=1)
    bar = np.full((height, width, 3), 255, np.uint8)
    bar[:bar_h, 4:20] = colorize(ramp, cmap, 0, 1)
    for i, name in enumerate(names):
        text(bar, name, (2, height - 10 - (len(names) - 1 - i) * line), 0.75, thickness=2)
    for frac, number in zip((0.0, 0.5, 1.0), numbers, strict=True):
        y = int(np.clip((1 - frac) * (bar_h - 1), round(tall * 0.7), bar_h - round(tall * 0.52)))
        text(bar, number, (24, y + round(tall * 0.4)), 0.85, thickness=2)
    return bar


BAR_LINE = 14  # the most characters on one line of a vertical colour scale's words


def bar_names(scale: str, quantity: str, limit: int | None = None, width: int | None = None) -> list[str]:
    """The lines under a colour scale: what it shows, then its scale's name, each wrapped at `limit` characters
    or at `width` pixels of the words' font."""
    fits = (lambda line: len(line) <= limit) if width is None else (lambda line: text_width(line, 0.75, 2) <= width)
    return wrapped(quantity, fits) + wrapped(SCALE_NAMES.get(scale, scale), fits)


def bar_number(v: float) -> str:
    """Compact numbers for a colorbar: 0.031, 42, 2.7e6 (never 2723656)."""
    if v != 0 and not 1e-3 <= abs(v) < 1e4:
        mantissa, exponent = f"{v:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.4g}"


# in words: "log" spans the 1st to the 99th percentile (maps.colour_scale), "robust" clips at the 99th
SCALE_NAMES = {"robust": "linear, top 1% clipped", "min-max": "linear, lowest to highest", "log": "log scale"}


MIN_BAR = 160  # the shortest vertical colour scale whose three numbers and name fit, in pixels
MIN_BAR_BELOW = 60  # the narrowest horizontal one that can be drawn at all


def pad_to(image: np.ndarray, height: int = 0, width: int = 0) -> np.ndarray:
    """`image` on white, extended down or right to at least height x width: a panorama of 60:1 is 10 px tall
    at display size, too short for a colour scale beside it."""
    h, w = image.shape[:2]
    if h >= height and w >= width:
        return image
    out = np.full((max(h, height), max(w, width), 3), 255, np.uint8)
    out[:h, :w] = image
    return out


def with_colorbar(
    image: np.ndarray, cmap: str, vmin: float, vmax: float, scale: str = "", quantity: str = ""
) -> np.ndarray:
    names = len(bar_names(scale, quantity, BAR_LINE))
    image = pad_to(image, height=grown(MIN_BAR, 0.85, 2) + max(0, names - 1) * (text_height(0.75, 2) + 8))
    bar = colorbar(image.shape[0], cmap, vmin, vmax, scale=scale, quantity=quantity)
    return np.concatenate([image, bar], axis=1)


def with_colorbar_below(
    image: np.ndarray, cmap: str, vmin: float, vmax: float, scale: str = "", quantity: str = ""
) -> np.ndarray:
    """`image` over a horizontal colour scale as wide as it: low, middle and high values, then what it shows
    (`quantity`) and the scale's name, on lines as wide as the picture. For pictures shown small, side by side:
    its text keeps the picture's own scale. The middle value is left out where the three would touch (a narrow
    picture, or the projector mode's labels)."""
    image = pad_to(image, width=MIN_BAR_BELOW)
    width = image.shape[1]
    baseline = 30 + text_height(0.8, 2)  # 52 px; the rows below grow with the labels in the projector mode
    line = text_height(0.75, 2) + 12
    names = bar_names(scale, quantity, width=width - 8)
    bar = np.full((baseline + len(names) * line + 8, width, 3), 255, np.uint8)
    bar[6:24, 6 : width - 6] = colorize(np.linspace(0, 1, width - 12, dtype=np.float32)[None].repeat(18, 0), cmap, 0, 1)
    placed = []
    for frac in (0.0, 0.5, 1.0):
        v = vmin + frac * (vmax - vmin)
        number = bar_number(10**v if scale == "log" else v)
        w = text_width(number, 0.8, 2)
        placed.append((number, int(np.clip(6 + frac * (width - 12) - frac * w, 2, width - w - 2)), w))
    (_, x0, w0), (_, x1, w1), (_, x2, _) = placed
    if x1 < x0 + w0 + 8 or x1 + w1 + 8 > x2:
        del placed[1]
    for number, x, _ in placed:
        text(bar, number, (x, baseline), 0.8, thickness=2)
    for i, name in enumerate(names):
        text(bar, name, ((width - text_width(name, 0.75, 2)) // 2, baseline + (i + 1) * line), 0.75, thickness=2)
    return np.concatenate([image, bar], axis=0)


def patch_box(grid: tuple[int, int], size: tuple[int, int], index: int) -> tuple[int, int, int, int]:
    """Pixel box (x0, y0, x1, y1) of patch `index` (row-major) on an image of `size` (h, w)."""
    (gh, gw), (h, w) = grid, size
    r, c = divmod(index, gw)
    return round(c * w / gw), round(r * h / gh), round((c + 1) * w / gw), round((r + 1) * h / gh)


def patch_at(grid: tuple[int, int], size: tuple[int, int], x: float, y: float) -> int | None:
    """Row-major patch index under pixel (x, y) of an image of `size` (h, w); None outside."""
    (gh, gw), (h, w) = grid, size
    if not (0 <= x < w and 0 <= y < h):
        return None
    return int(y * gh / h) * gw + int(x * gw / w)


QUERY = (255, 0, 255)  # the picked query patch: magenta, apart from the cyan outlines of clipped patches


def mark_patch(image: np.ndarray, grid: tuple[int, int], index: int, color=QUERY) -> np.ndarray:
    """Outline patch `index` on a copy of `image`: the picked query."""
    out = image.copy()
    x0, y0, x1, y1 = patch_box(grid, out.shape[:2], index)
    # 4 px of colour between 2 px of black on each side: visible from the back row, on any colormap
    cv2.rectangle(out, (x0, y0), (x1 - 1, y1 - 1), BLACK, 8)
    cv2.rectangle(out, (x0, y0), (x1 - 1, y1 - 1), color, 4)
    return out


def draw_grid(image: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """Patch grid lines on a copy of `image`."""
    out = image.copy()
    (gh, gw), (h, w) = grid, out.shape[:2]
    for r in range(1, gh):
        y = round(r * h / gh)
        cv2.line(out, (0, y), (w - 1, y), (255, 255, 255), 1, cv2.LINE_AA)
    for c in range(1, gw):
        x = round(c * w / gw)
        cv2.line(out, (x, 0), (x, h - 1), (255, 255, 255), 1, cv2.LINE_AA)
    return out


def tile(images: list[np.ndarray], labels: list[str], cols: int, pad: int = 6) -> np.ndarray:
    """Lay equal-size RGB images out in a grid with a caption above each."""
    h, w = images[0].shape[:2]
    rows = -(-len(images) // cols)
    tall = text_height(0.8, 2)
    cap = tall + 10  # captions big enough to read when the sheet is shown a third smaller
    sheet = np.full((rows * (h + cap + pad), cols * (w + pad) - pad, 3), 255, np.uint8)
    for i, (img, label) in enumerate(zip(images, labels, strict=True)):
        r, c = divmod(i, cols)
        y, x = r * (h + cap + pad), c * (w + pad)
        text(sheet, label, (x + 2, y + tall + 2), 0.8, thickness=2)
        sheet[y + cap : y + cap + h, x : x + w] = img
    return sheet


def mark_boxes(image: np.ndarray, grid: tuple[int, int], mask: np.ndarray, color=(0, 255, 0)) -> np.ndarray:
    """Outline every patch where the bool [gh,gw] `mask` is set."""
    out = image.copy()
    for index in np.flatnonzero(mask.ravel()):
        x0, y0, x1, y1 = patch_box(grid, out.shape[:2], int(index))
        cv2.rectangle(out, (x0, y0), (x1 - 1, y1 - 1), color, 2)
    return out


def upsample_rgb(rgb01: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """[gh,gw,3] float in [0,1] -> RGB uint8 at (h, w), nearest (one flat square per patch)."""
    img = (np.clip(rgb01, 0, 1) * 255).round().astype(np.uint8)
    return cv2.resize(img, (size[1], size[0]), interpolation=cv2.INTER_NEAREST)


def draw_box(image: np.ndarray, box: tuple[float, ...], scale: float, color=(0, 255, 255)) -> np.ndarray:
    """Outline `box` (x0, y0, x1, y1), given in original-image pixels, on an image drawn at `scale` of it."""
    out = image.copy()
    x0, y0, x1, y1 = (round(v * scale) for v in box)
    cv2.rectangle(out, (x0, y0), (x1, y1), color, 3)
    return out


def layer_head_grid(values: np.ndarray, cmap: str = "viridis", cell: int = 44) -> np.ndarray:
    """A layer x head table [L,H] as coloured cells, layers down and heads across, each cell with its
    value, the layer and head numbers at the sides, and a colorbar. In the projector mode the sides say the
    numbers alone, under a title that says what they count, so that the table keeps its width."""
    layers, heads = values.shape
    flat = [f"{v:.0f}" for v in values.ravel()]  # each cell's number, row by row
    tall = text_height(0.6)
    if is_large():
        rows, cols = [str(i) for i in range(layers)], [str(h) for h in range(heads)]
        cell = max(cell, tall + 16)
        left = max(text_width(r, 0.6) for r in rows) + 16
        col = max(text_width(n, 0.6) for n in [*cols, *flat]) + 28
        title = wrap("layers down, heads across", 0.6, left + heads * col - 12)
        top = (len(title) + 1) * (tall + 15)
        inset = (
            [(col - text_width(n, 0.6)) // 2 for n in cols],
            [(col - text_width(n, 0.6)) // 2 for n in flat],
        )
    else:
        rows, cols = [f"layer {i}" for i in range(layers)], [f"head {h}" for h in range(heads)]
        left, top, col, title = 96, 34, 2 * cell, []
        inset = [10] * heads, [22] * (layers * heads)
    img = np.full((top + layers * cell, left + heads * col, 3), 255, np.uint8)
    cells = cv2.resize(
        colorize(values.astype(np.float32), cmap), (heads * col, layers * cell), interpolation=cv2.INTER_NEAREST
    )
    img[top:, left:] = cells
    lo, hi = float(values.min()), float(values.max())
    for n, line in enumerate(title):
        text(img, line, (6, tall + 8 + n * (tall + 15)), 0.6)
    for h, name in enumerate(cols):
        text(img, name, (left + h * col + inset[0][h], top - 10), 0.6)
    for i, name in enumerate(rows):
        y = top + i * cell + cell // 2 + tall // 2
        text(img, name, (6, y), 0.6)
        for h in range(heads):
            dark = (values[i, h] - lo) / max(hi - lo, 1e-12) > 0.6  # light cells get black text
            colour = BLACK if dark else (255, 255, 255)
            text(img, flat[i * heads + h], (left + h * col + inset[1][i * heads + h], y), 0.6, colour)
    return with_colorbar(img, cmap, lo, hi)


def scan_margins(image: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """Grid lines on `image`, and the scan order in margins outside it, where no number covers a patch:
    each row's first token index on the left, the column numbers on top."""
    gh, gw = grid
    lined = draw_grid(image, grid)
    h, w = lined.shape[:2]
    tall = text_height(0.55)
    left, top = max(64, text_width(str((gh - 1) * gw), 0.55) + 12), max(30, tall + 15)
    out = np.full((top + max(h, tall + 4), w + left, 3), 255, np.uint8)  # a panorama's row keeps its number
    out[top : top + h, left:] = lined
    apart = max(26, text_width(str(gw - 1), 0.55) + 6)  # column labels at least 26 px apart, and never touching
    step = max(1, int(np.ceil(apart / (w / gw))))
    for c in range(0, gw, step):
        x = left + round((c + 0.5) * w / gw)
        text(out, str(c), (x - text_width(str(c), 0.55) // 2, top - 9), 0.55)
    rstep = max(1, int(np.ceil((tall + 7) / (h / gh))))
    for r in range(0, gh, rstep):
        y = top + round((r + 0.5) * h / gh) + tall // 2
        text(out, str(r * gw), (4, min(y, out.shape[0] - 3)), 0.55)
    return out


LABEL_DIM = 80  # a token cell's name sits on its picture darkened to 80/256, so that white text reads on a pale one


def token_strip(image: np.ndarray, grid: tuple[int, int], prefix: list[tuple[str, bool]], width: int) -> np.ndarray:
    """The token sequence as the transformer reads it, `width` wide: the prefix tokens, then the first
    patches, "...", the last patch, each with its sequence position above and "+ pos" below where a
    learned position embedding is added. prefix: [(name, has a position embedding)]. Larger labels (the
    projector mode) make fewer, wider cells, and the title wraps."""
    gh, gw = grid
    patches = gh * gw
    names = [name.replace("register ", "reg") for name, _ in prefix]
    last = len(prefix) + patches - 1
    widest = max(text_width(s, 0.5) for s in [*names, "no pos", f"#{last}", f"p{patches - 1}"]) + 6
    shown = [("prefix", i) for i in range(len(prefix))]
    room = max(2, min(9, width // max(74, widest + 6)) - len(shown) - 2)
    shown += [("patch", i) for i in range(min(room, patches))] + [("dots", -1), ("patch", patches - 1)]
    cell = min(max(66, widest), (width - 8) // len(shown) - 6)
    if cell < widest:  # its labels would spill over (large ones, several prefix tokens): the cells wrap in rows
        cell = min(widest, width - 10)
    per_row = max(1, (width - 4) // (cell + 6))
    tall = text_height(0.5)
    title = wrap("the token sequence: #position in it, and the position embedding added", 0.5, width - 8)
    top = tall + 10 + (len(title) - 1) * (tall + 8)
    pitch = cell + 2 * tall + 26  # a row of cells with their labels under them
    out = np.full((top + -(-len(shown) // per_row) * pitch, width, 3), 255, np.uint8)
    for n, line in enumerate(title):
        text(out, line, (4, tall + 2 + n * (tall + 8)), 0.5, (60, 60, 60))
    for k, (kind, i) in enumerate(shown):
        x, y = 4 + k % per_row * (cell + 6), top + k // per_row * pitch
        if kind == "dots":
            text(out, "...", (x + cell // 4, y + cell // 2 + 6), 0.8, thickness=2)
            continue
        position = i if kind == "prefix" else len(prefix) + i
        if kind == "prefix":
            out[y : y + cell, x : x + cell] = (255, 170, 60)
            label, has_pos = names[i], prefix[i][1]
        else:
            x0, y0, x1, y1 = patch_box(grid, image.shape[:2], i)
            out[y : y + cell, x : x + cell] = cv2.resize(
                image[y0:y1, x0:x1], (cell, cell), interpolation=cv2.INTER_AREA
            )
            label, has_pos = f"p{i}", True
        cv2.rectangle(out, (x, y), (x + cell - 1, y + cell - 1), BLACK, 1)
        band = out[y + cell - tall - 10 : y + cell - 1, x + 1 : x + cell - 1]  # dimmed: a pale patch's name reads
        band[:] = (band.astype(np.uint16) * LABEL_DIM // 256).astype(np.uint8)
        text(out, label, (x + 3, y + cell - 6), 0.5, thickness=3)  # white on a black outline
        text(out, label, (x + 3, y + cell - 6), 0.5, (255, 255, 255))
        text(out, f"#{position}", (x + 3, y + cell + tall + 6), 0.5)
        pos, colour = ("+ pos", (0, 110, 0)) if has_pos else ("no pos", (150, 0, 0))
        text(out, pos, (x + 3, y + cell + 2 * tall + 16), 0.5, colour)
    return out


# The head tiles' geometry (px): the layer names' margin at the left, the head names' at the top, one tile's size.
TILE_LEFT, TILE_TOP, TILE_W, TILE_H = 96, 34, 72, 38  # `head_tiles`' geometry, in its picture's pixels
BEST = (0, 170, 0)  # the tile of the head that matters most, beside a guess's magenta (`QUERY`)
TILE_TEXT = 0.55


def tile_geometry() -> tuple[int, int, int, int, list[str]]:
    """(left, top, width, height of a tile, title lines) of `head_tiles`' picture: TILE_* and no title, or in the
    projector mode tiles that hold their large numbers, the sides numbered alone under a title that says what they
    count (as `layer_head_grid`'s)."""
    if not is_large():
        return TILE_LEFT, TILE_TOP, TILE_W, TILE_H, []
    tall = text_height(TILE_TEXT)
    width = text_width("+00.0", TILE_TEXT) + 16
    title = wrap("layers down, heads across", TILE_TEXT, 6 * width)
    return text_width("00", TILE_TEXT) + 16, (len(title) + 1) * (tall + 15), width, tall + 18, title


def head_tiles(
    layers: int,
    heads: int,
    values: np.ndarray | None = None,
    chosen: tuple[int, int] | None = None,
    best: tuple[int, int] | None = None,
):
    """A layers × heads table of tiles to click, layers down and heads across: each tile coloured by its value
    [L,H] where given (signed, on the diverging scale symmetric about 0, its number printed), grey otherwise, the
    `chosen` (layer, head) outlined in magenta and the `best` one in green, inside the first where they are one.
    `head_tile_at` reads a click on it, in the same labels' mode."""
    left, top, tile_w, tile_h, title = tile_geometry()
    large, tall = bool(title), text_height(TILE_TEXT)
    img = np.full((top + layers * tile_h + 2, left + heads * tile_w + 2, 3), 255, np.uint8)
    if values is not None:
        most = max(float(np.abs(values).max()), 1e-12)
        colours = colorize(values.astype(np.float64), "diverging", -most, most)
    for n, line in enumerate(title):
        text(img, line, (6, tall + 8 + n * (tall + 15)), TILE_TEXT)
    for h in range(heads):
        text(img, str(h) if large else f"head {h}", (left + h * tile_w + 6, top - 10), TILE_TEXT)
    for i in range(layers):
        y0 = top + i * tile_h
        text(img, str(i) if large else f"layer {i}", (6, y0 + tile_h // 2 + tall // 2 - 1), TILE_TEXT)
        for h in range(heads):
            x0 = left + h * tile_w
            fill = (225, 225, 225) if values is None else tuple(int(c) for c in colours[i, h])
            cv2.rectangle(img, (x0 + 1, y0 + 1), (x0 + tile_w - 2, y0 + tile_h - 2), fill, -1)
            if values is not None:
                text(img, f"{values[i, h]:+.1f}", (x0 + 8, y0 + tile_h // 2 + tall // 2 - 1), TILE_TEXT)
    for tile, colour, inset in ((chosen, QUERY, 0), (best, BEST, 4 * (best == chosen))):
        if tile is not None:
            x0, y0 = left + tile[1] * tile_w + inset, top + tile[0] * tile_h + inset
            cv2.rectangle(img, (x0, y0), (x0 + tile_w - 1 - 2 * inset, y0 + tile_h - 1 - 2 * inset), colour, 3)
    return img


def head_tile_at(layers: int, heads: int, x: float, y: float) -> tuple[int, int] | None:
    """The (layer, head) of the tile under pixel (x, y) of `head_tiles`' picture drawn in the same labels' mode (see
    `large_labels`), or None off the tiles."""
    left, top, tile_w, tile_h, _ = tile_geometry()
    layer, head = int((y - top) // tile_h), int((x - left) // tile_w)
    inside = x >= left and y >= top and 0 <= layer < layers and 0 <= head < heads
    return (layer, head) if inside else None
