"""Decoding and input preparation: every upload becomes RGB uint8, or a clear ValueError."""

from __future__ import annotations

import io
import struct
import time
import warnings
import zlib

import cv2
import numpy as np
import pytest
from conftest import random_image, tiny_vit
from PIL import Image

import vitviz
from vitviz.preprocess import input_size, load_image, prepare_input


def encode(arr: np.ndarray, fmt: str = "PNG", **kwargs) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def test_png_jpeg_and_path_decode_to_rgb(tmp_path):
    arr = random_image(20, 30)
    assert np.array_equal(load_image(encode(arr)), arr)
    path = tmp_path / "x.png"
    path.write_bytes(encode(arr))
    assert np.array_equal(load_image(path), arr)
    assert np.array_equal(load_image(str(path)), arr)
    red = np.zeros((16, 16, 3), np.uint8)
    red[..., 0] = 255
    decoded = load_image(encode(red, "JPEG", quality=95))
    assert decoded[..., 0].min() > 240 and decoded[..., 2].max() < 15  # RGB, not BGR


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied(orientation):
    """Every EXIF orientation lands as Pillow's own exif_transpose puts it."""
    from PIL import ImageOps

    arr = random_image(20, 30)
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(arr, "PNG", exif=exif)
    expected = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    assert np.array_equal(load_image(data), expected)


def test_grayscale_rgba_palette_and_16bit_become_rgb():
    gray = np.arange(200, dtype=np.uint8).reshape(10, 20)
    assert np.array_equal(load_image(encode(gray)), np.repeat(gray[..., None], 3, axis=2))
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[0, 0] = (10, 20, 30, 255)  # opaque pixel keeps its colour
    assert tuple(load_image(encode(rgba))[0, 0]) == (10, 20, 30)
    assert tuple(load_image(encode(rgba))[1, 1]) == (255, 255, 255)  # transparent -> white
    palette = Image.fromarray(random_image(8, 8)).convert("P", palette=Image.ADAPTIVE, colors=4)
    buf = io.BytesIO()
    palette.save(buf, format="PNG")
    assert np.array_equal(load_image(buf.getvalue()), np.asarray(palette.convert("RGB")))
    deep = (np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000).astype(np.uint16)
    ok, png16 = cv2.imencode(".png", deep)
    decoded = load_image(png16.tobytes())
    assert decoded.dtype == np.uint8 and decoded.shape == (8, 8, 3)
    np.testing.assert_allclose(decoded[..., 0], deep * 255.0 / 65535, atol=1)
    assert np.array_equal(load_image(Image.fromarray(rgba)), load_image(encode(rgba)))


def test_not_an_image():
    with pytest.raises(ValueError, match="not an image"):
        load_image(b"hello, this is a text file")
    with pytest.raises(ValueError, match="empty"):
        load_image(b"")
    with pytest.raises(ValueError, match="no image file"):
        load_image("/nonexistent/cat.jpg")
    with pytest.raises(ValueError, match="cannot read an image"):
        load_image(12345)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_truncated_file(fmt):
    data = encode(random_image(64, 64), fmt)
    with pytest.raises(ValueError, match="truncated"):
        load_image(data[: len(data) // 2])


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height: a decompression bomb's calling card."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_absurd_dimensions_are_refused_before_decoding():
    start = time.perf_counter()
    with pytest.raises(ValueError, match="too large"):
        load_image(png_header_only(100_000, 100_000))
    assert time.perf_counter() - start < 2.0
    with pytest.raises(ValueError, match="too large"):
        load_image(np.zeros((10_000, 10_000), np.uint8)[:, :, None].repeat(1, axis=2))


@pytest.mark.parametrize("side", [10_000, 30_000])  # Pillow warns over 89 megapixels and refuses over 179
def test_a_decompression_bomb_gets_the_apps_own_message_with_its_limit(side):
    """Not Pillow's words ("could be decompression bomb DOS attack") nor its limit: the 40 megapixels the README
    states, even where warnings are errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError) as raised:
            load_image(png_header_only(side, side))
    message = str(raised.value)
    assert message.startswith("image is too large: ")
    assert "over the limit of 40,000,000 pixels (40 megapixels" in message
    assert "DOS" not in message and "bomb" not in message


def test_image_smaller_than_one_patch():
    with pytest.raises(ValueError, match="5 px high × 40 px wide is smaller than one 8×8 px patch"):
        vitviz.analyze(tiny_vit(), random_image(5, 40))


def test_input_size_keeps_aspect_and_lands_on_patches():
    assert input_size(400, 600, 14, 448) == (294, 448)
    assert input_size(600, 400, 14, 448) == (448, 294)
    assert input_size(10, 1000, 14, 448) == (14, 448)
    h, w = input_size(333, 517, 16, 224)
    assert h % 16 == 0 and w % 16 == 0 and abs(h / w - 333 / 517) < 16 / 224


def test_prepare_input_normalises_the_whole_image():
    img = random_image(60, 90)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    x = prepare_input(img, (60, 90), 10, mean, std)
    assert x.shape == (1, 3, 60, 90) and x.dtype == np.float32
    for c in range(3):  # each channel with its own mean and std: an RGB/BGR swap fails here
        expected = (img[..., c] / 255.0 - mean[c]) / std[c]
        np.testing.assert_allclose(x[0, c], expected, atol=1e-5)
    with pytest.raises(ValueError, match="multiple of the patch size"):
        prepare_input(img, (61, 90), 10, mean, std)


def test_a_real_but_unreadable_image_says_what_it_is(tmp_path):
    """A float64 TIFF is an image Pillow cannot open: the message names the format and the reason."""
    path = tmp_path / "float.tiff"
    assert cv2.imwrite(str(path), np.random.default_rng(0).random((10, 10)))
    assert message(load_image, path) == (
        "float.tiff is a TIFF file that cannot be read: it holds 10 rows × 10 columns of pixels of 1 float64 "
        "sample(s), and vitviz reads 8- and 16-bit integer images only; save it as an 8-bit PNG or JPEG"
    )


def test_arrays_of_every_kind_become_rgb_uint8():
    """What a notebook passes: float in [0, 1] or [0, 255], uint16, int, 2-D, one channel, gray + alpha and
    RGBA, each to the RGB uint8 an independent conversion gives."""
    rng = np.random.default_rng(3)
    rgb = rng.random((5, 7, 3))
    np.testing.assert_array_equal(load_image(rgb), np.round(rgb * 255).astype(np.uint8))
    np.testing.assert_array_equal(load_image(rgb * 255), np.round(rgb * 255).astype(np.uint8))  # already 0..255
    np.testing.assert_array_equal(load_image(np.full((2, 2, 3), 1.0)), 255)  # 1.0 is full scale
    np.testing.assert_array_equal(load_image(np.full((2, 2, 3), -3.0)), 0)  # clipped, not wrapped
    np.testing.assert_array_equal(load_image(np.full((2, 2, 3), 300.0)), 255)
    deep = rng.integers(0, 65536, (5, 7, 3)).astype(np.uint16)
    np.testing.assert_array_equal(load_image(deep), (deep.astype(np.uint64) * 255 // 65535).astype(np.uint8))
    wide = np.array([[-5, 0, 100, 255, 999]], np.int32)
    np.testing.assert_array_equal(load_image(wide)[..., 0], [[0, 0, 100, 255, 255]])
    gray = rng.integers(0, 256, (4, 6), dtype=np.uint8)
    for g in (gray, gray[..., None]):
        np.testing.assert_array_equal(load_image(g), np.repeat(gray[..., None], 3, axis=2))
    alpha = np.array([[0, 128, 255]], np.uint8)
    colour = np.array([[[10, 200, 40]] * 3], np.uint8)
    a = alpha[..., None] / 255.0
    expected = np.round(colour * a + 255 * (1 - a)).astype(np.uint8)
    np.testing.assert_array_equal(load_image(np.concatenate([colour, alpha[..., None]], axis=2)), expected)
    la = np.stack([np.full((1, 3), 60, np.uint8), alpha], axis=2)
    np.testing.assert_array_equal(load_image(la)[..., 1], np.round(60 * a[..., 0] + 255 * (1 - a[..., 0])))
    out = load_image(rgb[:, ::-1])  # a view with negative strides comes back contiguous
    assert out.flags["C_CONTIGUOUS"] and out.dtype == np.uint8 and out.shape == (5, 7, 3)
    for bad in (np.zeros((4, 4, 5)), np.zeros(4), np.zeros((2, 2, 2, 2))):
        with pytest.raises(ValueError, match="an image array must be"):
            load_image(bad)


@pytest.mark.parametrize("mode", ["I;16", "I", "1"])
def test_pil_images_of_other_modes_become_rgb(mode):
    """16- and 32-bit integer images scale to 8 bits; a 1-bit image becomes black and white."""
    if mode == "1":
        bits = random_image(6, 9)[..., 0] > 128
        im = Image.fromarray(bits)
        assert im.mode == "1"
        np.testing.assert_array_equal(load_image(im), np.repeat(np.where(bits, 255, 0)[..., None], 3, axis=2))
        return
    values = (np.arange(54).reshape(6, 9) * 1200).astype(np.uint16)
    im = Image.fromarray(values).convert(mode) if mode == "I" else Image.fromarray(values)
    assert im.mode == mode
    np.testing.assert_array_equal(load_image(im)[..., 0], (values.astype(np.uint64) * 255 // 65535))


def message(fn, *args) -> str:
    with pytest.raises(ValueError) as caught:
        fn(*args)
    return str(caught.value)


def test_every_refusal_says_exactly_what_is_wrong(tmp_path, monkeypatch):
    """The whole message a user reads, for each kind of bad input: a message that only contains the right
    words could still be garbled around them."""
    assert message(load_image, b"hello") == "the uploaded data is not an image (unrecognised file format)"
    assert message(load_image, b"") == "the uploaded data is empty, not an image"
    assert message(load_image, tmp_path / "gone.jpg") == f"no image file at {tmp_path / 'gone.jpg'}"
    assert message(load_image, 3.5) == "cannot read an image from a float"
    (tmp_path / "cut.png").write_bytes(encode(random_image(64, 64))[:200])
    assert message(load_image, tmp_path / "cut.png") == "cut.png is a truncated PNG file: its end is missing"
    assert message(load_image, np.zeros((3, 3, 6))) == (
        "an image array must be HxW or HxWxC with C in 1..4 and some pixels, got (3, 3, 6)"
    )
    assert message(load_image, np.zeros((0, 5, 3))).endswith("and some pixels, got (0, 5, 3)")
    monkeypatch.setattr(vitviz.preprocess, "MAX_PIXELS", 2_500_000)
    assert message(load_image, np.zeros((1000, 2501), np.uint8)) == (
        "image is too large: 1000 px high × 2501 px wide, over the limit of 2,500,000 pixels (2.5 megapixels; "
        "VITVIZ_MAX_PIXELS sets it)"
    )
    three = tmp_path / "three.tiff"  # three float64 channels: neither Pillow nor vitviz reads them
    assert cv2.imwrite(str(three), np.random.default_rng(0).random((4, 6, 3)))
    assert message(load_image, three) == (
        "three.tiff is a TIFF file that cannot be read: it holds 4 rows × 6 columns of pixels of 3 float64 "
        "sample(s), and vitviz reads 8- and 16-bit integer images only; save it as an 8-bit PNG or JPEG"
    )
    damaged = b"II*\x00" + b"\x00" * 60  # a TIFF signature and nothing readable behind it
    assert message(load_image, damaged) == (
        "the uploaded data is a TIFF file that cannot be read: it is damaged, or uses a variant that neither "
        "Pillow nor OpenCV reads"
    )
    small = random_image(6, 20)
    assert message(prepare_input, small, (8, 24), 8, (0, 0, 0), (1, 1, 1)) == (
        "image is too small: 6 px high × 20 px wide is smaller than one 8×8 px patch"
    )
    assert message(prepare_input, random_image(16, 16), (16, 20), 8, (0, 0, 0), (1, 1, 1)) == (
        "input size 20x16 is not a multiple of the patch size 8"
    )


def test_the_pixel_limit_is_a_limit_not_a_threshold(monkeypatch):
    """Exactly MAX_PIXELS passes, one more is refused: for arrays, PIL images and encoded files alike."""
    monkeypatch.setattr(vitviz.preprocess, "MAX_PIXELS", 12 * 10)
    assert load_image(np.zeros((10, 12), np.uint8)).shape == (10, 12, 3)
    assert load_image(Image.fromarray(np.zeros((10, 12, 3), np.uint8))).shape == (10, 12, 3)
    assert load_image(encode(np.zeros((10, 12, 3), np.uint8))).shape == (10, 12, 3)
    for too_many in (np.zeros((11, 12), np.uint8), Image.fromarray(np.zeros((10, 13), np.uint8))):
        with pytest.raises(ValueError, match="too large"):
            load_image(too_many)
    with pytest.raises(ValueError, match="too large: 10 px high × 13 px wide"):
        load_image(encode(np.zeros((10, 13, 3), np.uint8)))


def test_an_image_of_exactly_one_patch_is_enough():
    x = prepare_input(random_image(8, 8), (8, 8), 8, (0, 0, 0), (1, 1, 1))
    assert x.shape == (1, 3, 8, 8)
    with pytest.raises(ValueError, match="smaller than one"):
        prepare_input(random_image(8, 7), (8, 8), 8, (0, 0, 0), (1, 1, 1))
    with pytest.raises(ValueError, match="not a multiple"):
        prepare_input(random_image(16, 16), (12, 16), 8, (0, 0, 0), (1, 1, 1))  # the height alone is off


def test_shrinking_averages_pixels_and_enlarging_is_cubic():
    """A one-pixel checkerboard halved is flat grey (area averaging: every output pixel is the mean of a
    2x2 block); a cubic shrink would alias it. Enlarging follows the cubic kernel, whose overshoot at an edge
    a box filter cannot make (uint8 clips the undershoot below 0)."""
    board = (np.indices((32, 32)).sum(0) % 2 * 255).astype(np.uint8)[..., None].repeat(3, axis=2)
    halved = prepare_input(board, (16, 16), 8, (0, 0, 0), (1, 1, 1))
    np.testing.assert_allclose(halved, 127.5 / 255, atol=1 / 255)
    edge = np.zeros((16, 16, 3), np.uint8)
    edge[:, 8:] = 200
    grown = prepare_input(edge, (32, 32), 8, (0, 0, 0), (1, 1, 1))[0, 0, 0] * 255
    assert grown.max() > 210  # cubic overshoot past the step's 200
    np.testing.assert_allclose(grown[:8], 0, atol=1e-4)
    np.testing.assert_allclose(grown[-8:], 200, atol=1e-3)


def jpeg(arr: np.ndarray, **params) -> bytes:
    flags = [cv2.IMWRITE_JPEG_PROGRESSIVE, params.get("progressive", 0), cv2.IMWRITE_JPEG_RST_INTERVAL, 4]
    return cv2.imencode(".jpg", cv2.cvtColor(arr, cv2.COLOR_RGB2BGR), flags)[1].tobytes()


def test_a_cut_is_told_from_data_after_the_end():
    """A JPEG or PNG is cut when its structure stops before the end marker, wherever the cut falls. Data after
    the end is no cut: a phone's motion photo appends a video to its JPEG. The end marker of a thumbnail in
    the EXIF block, or bytes in a comment that look like one, are not the image's end."""
    arr = random_image(96, 128)
    for data in (jpeg(arr), jpeg(arr, progressive=1), encode(arr, "PNG")):
        fmt = "PNG" if data.startswith(b"\x89PNG") else "JPEG"
        video = b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 20  # with 0xFF bytes in it, as a video has
        np.testing.assert_array_equal(load_image(data + video), load_image(data))
        for cut in (len(data) - 1, len(data) - 2, len(data) // 2, 300):
            with pytest.raises(ValueError, match=f"truncated {fmt} file"):
                load_image(data[:cut])
    marker = jpeg(arr).find(b"\xff\xdb")  # fill bytes, or stray bytes, before a marker: read on, as libjpeg does
    for extra in (b"\xff", b"\xff\xff", b"\x00\x17"):
        padded = jpeg(arr)[:marker] + extra + jpeg(arr)[marker:]
        np.testing.assert_array_equal(load_image(padded), load_image(jpeg(arr)))
    np.testing.assert_array_equal(load_image(jpeg(arr)[:-2] + b"\xff\xff\xd9"), load_image(jpeg(arr)))  # before EOI
    thumbnail = jpeg(random_image(16, 16))
    app1 = b"Exif\x00\x00" + thumbnail  # the segment's body, skipped by its length, EOI marker and all
    main = jpeg(arr)
    with_thumbnail = main[:2] + b"\xff\xe1" + (len(app1) + 2).to_bytes(2, "big") + app1 + main[2:]
    np.testing.assert_array_equal(load_image(with_thumbnail), load_image(main))
    with pytest.raises(ValueError, match="truncated JPEG"):
        load_image(with_thumbnail[: len(with_thumbnail) - 400])
    comment = b"\xff\xfe\x00\x04\xff\xd9"  # a comment segment whose two bytes look like the end marker
    app0 = 4 + int.from_bytes(main[4:6], "big")  # where the segment after APP0 starts
    with pytest.raises(ValueError, match="truncated JPEG"):
        load_image((main[:app0] + comment + main[app0:])[:-400])


def test_other_formats_decode_without_an_end_check(tmp_path):
    arr = random_image(12, 20)
    for ext in (".bmp", ".tiff", ".webp"):
        params = [cv2.IMWRITE_WEBP_QUALITY, 101] if ext == ".webp" else []  # lossless
        data = cv2.imencode(ext, cv2.cvtColor(arr, cv2.COLOR_RGB2BGR), params)[1].tobytes()
        np.testing.assert_array_equal(load_image(data), arr, err_msg=ext)


def test_a_png_whose_pixels_cannot_be_decoded_is_called_damaged():
    """Its header and end are whole, so Pillow opens it and no cut shows, but its pixel data is short."""
    data = png_header_only(10, 10)
    assert message(load_image, data) == "the uploaded data could not be decoded as PNG: the file is damaged"


def test_pil_images_keep_transparency_and_every_16_bit_layout():
    palette = Image.fromarray(random_image(4, 4)).convert("P", palette=Image.ADAPTIVE, colors=4)
    palette.info["transparency"] = 0  # palette entry 0 is transparent
    got, colours = load_image(palette), np.asarray(palette.convert("RGB"))
    index = np.asarray(palette)
    np.testing.assert_array_equal(got[index == 0], 255)  # on white
    np.testing.assert_array_equal(got[index != 0], colours[index != 0])
    la = Image.fromarray(
        np.stack([np.full((2, 3), 50, np.uint8), np.array([[0, 255, 255], [255, 255, 0]], np.uint8)], 2)
    )
    assert la.mode == "LA"
    np.testing.assert_array_equal(load_image(la)[..., 0], [[255, 50, 50], [50, 50, 255]])
    values = (np.arange(12, dtype=np.uint16).reshape(3, 4) * 5000 + 65535 - 55000).astype(np.uint16)
    for mode in ("I;16B", "I;16L"):
        im = Image.frombytes(mode, (4, 3), values.astype(">u2" if mode == "I;16B" else "<u2").tobytes())
        np.testing.assert_array_equal(load_image(im)[..., 1], values.astype(np.uint64) * 255 // 65535, err_msg=mode)
    wide = Image.fromarray(np.array([[-7, 0, 1, 65535, 70000]], np.int32))
    assert wide.mode == "I"
    np.testing.assert_array_equal(load_image(wide)[0, :, 0], [0, 0, 0, 255, 255])  # clipped, never wrapped


def test_arrays_keep_their_full_scale_and_come_back_as_uint8():
    np.testing.assert_array_equal(load_image(np.full((1, 2), 65535, np.uint16)), 255)
    np.testing.assert_array_equal(load_image(np.full((1, 2), 1.5)), 2)  # over 1: already 0..255, rounded
    for arr, expected in (
        (np.array([[300, -1]], np.int32), [255, 0]),  # clipped
        (np.zeros((1, 2, 4), np.uint8), [255, 255]),  # fully transparent: white
        (np.array([[0.0, 0.5]], np.float32), [0, 128]),  # 0..1: full scale
    ):
        got = load_image(arr)
        assert got.dtype == np.uint8, arr.dtype
        np.testing.assert_array_equal(got[0, :, 0], expected)


@pytest.mark.filterwarnings("ignore:Corrupt EXIF data")
def test_a_malformed_exif_block_keeps_the_stored_orientation(monkeypatch):
    good = jpeg(random_image(10, 14))
    app1 = b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\xff\xff"  # a TIFF header whose directory says 65535 entries
    broken = good[:2] + b"\xff\xe1" + (len(app1) + 2).to_bytes(2, "big") + app1 + good[2:]
    np.testing.assert_array_equal(load_image(broken), load_image(good))

    def unreadable(_image):
        raise SyntaxError("not a TIFF file")  # what Pillow raises for some damaged EXIF blocks

    monkeypatch.setattr(Image.Image, "getexif", unreadable)
    decoded = cv2.imdecode(np.frombuffer(good, np.uint8), cv2.IMREAD_COLOR)
    np.testing.assert_array_equal(load_image(good), cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB))  # as stored


def test_a_cut_multi_picture_jpeg_is_called_truncated():
    """Pillow calls a JPEG that lists further pictures (phones' HDR gain maps, depth maps) "MPO"."""
    first, second = Image.fromarray(random_image(32, 48)), Image.fromarray(random_image(32, 48, seed=1))
    buf = io.BytesIO()
    first.save(buf, "MPO", save_all=True, append_images=[second])
    data = buf.getvalue()
    assert Image.open(io.BytesIO(data)).format == "MPO"
    assert load_image(data).shape == (32, 48, 3)
    with pytest.raises(ValueError, match="truncated MPO file"):
        load_image(data[: len(data) // 4])


@pytest.mark.parametrize(
    "ext, fmt, count",
    [("tiff", "TIFF", 3), ("gif", "GIF", 3), ("webp", "WEBP", 3), ("png", "PNG", 3), ("mpo", "MPO", 1)],
)
def test_pictures_in_counts_the_pages_or_frames_written_and_load_image_reads_the_first(tmp_path, ext, fmt, count):
    """Three pictures of different greys written as one file: a TIFF's pages, a GIF's, WebP's or PNG's frames
    count 3, and `load_image` reads the first; an MPO (a phone's JPEG with its depth or HDR versions) counts 1."""
    from vitviz.preprocess import pictures_in

    pages = [Image.fromarray(np.full((30, 40, 3), 40 + 80 * i, np.uint8)) for i in range(3)]
    path = tmp_path / f"pages.{ext}"
    pages[0].save(path, format=fmt, save_all=True, append_images=pages[1:])
    assert pictures_in(path) == (fmt, count)
    assert abs(load_image(path).astype(float).mean() - 40) < 3  # the first (lossy formats move it a little)


def test_pictures_in_a_file_that_is_no_image_is_one_and_load_image_says_why(tmp_path):
    from vitviz.preprocess import pictures_in

    path = tmp_path / "notes.png"
    path.write_bytes(b"not a picture")
    assert pictures_in(path) == (None, 1)
    with pytest.raises(ValueError, match="not an image"):
        load_image(path)
