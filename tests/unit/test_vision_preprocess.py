"""Bad images cost no more than their budget: a truncated, corrupt or mutated file, a
decompression bomb (a small PNG declaring gigapixels), an aspect ratio over 200, a format
outside the allowlist are each an InvalidInput naming the image, quickly; and the worker's cache
prepares the same bytes once. (Exactness against transformers: tests/parity/test_images.py.)"""

from __future__ import annotations

import struct
import time
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.helpers.images import encoded, sample_images
from textproc.errors import InvalidInput
from textproc.vision.families import ImageProcessing
from textproc.vision.preprocess import ImageCache, decode_image, prepare_image, smart_resize

SAMPLES = sample_images()
SMALL = {k: v for k, v in SAMPLES.items() if len(v) < 200_000}
PROCESSING = ImageProcessing(max_pixels=200_704)  # keep each decode small: fuzzing speed
BUDGET_S = 2.0  # any one bad image, on a loaded 2-core box


def _png_declaring(width: int, height: int) -> bytes:
    """A 1x1 PNG whose header says width x height (the CRC fixed): nothing behind it decodes."""
    data = bytearray(encoded(Image.new("L", (1, 1)), "PNG"))
    ihdr = data.index(b"IHDR")
    data[ihdr + 4:ihdr + 12] = struct.pack(">II", width, height)
    data[ihdr + 17:ihdr + 21] = struct.pack(">I", zlib.crc32(bytes(data[ihdr:ihdr + 17])))
    return bytes(data)


def _refused(data: bytes, match: str = "", **kw: object) -> InvalidInput:
    started = time.monotonic()
    with pytest.raises(InvalidInput, match=match) as info:
        prepare_image(data, "messages[0].content[1]", PROCESSING, **kw)  # type: ignore[arg-type]
    assert time.monotonic() - started < BUDGET_S
    assert info.value.param == "messages[0].content[1]"
    assert "messages[0].content[1]" in str(info.value)
    return info.value


@pytest.mark.parametrize(("width", "height"), [(15_000, 15_000), (100_000, 100_000),
                                               (2**31 - 1, 2**31 - 1)])
def test_decompression_bombs_are_refused_before_decoding(width: int, height: int) -> None:
    # 225 M pixels: over the limit (vLLM's), under Pillow's own error; the others: over both
    _refused(_png_declaring(width, height), "over the limit")


def test_pixel_values_over_the_room_are_refused_from_the_header() -> None:
    # 8000x6000 is under the pixel limit, and its pixel values would be 304 MB: refused before
    # decoding (the file behind the header is not an image at all)
    started = time.monotonic()
    with pytest.raises(InvalidInput, match="would take 304254720 bytes, over the 67108864 "
                                           "bytes left") as info:
        prepare_image(_png_declaring(8000, 6000), "img", ImageProcessing(max_pixels=12845056),
                      max_value_bytes=64 << 20)
    assert info.value.param == "img" and time.monotonic() - started < BUDGET_S


def test_pixel_limit_is_the_configured_one() -> None:
    _refused(SAMPLES["rgb_640x480.png"], "over the limit of 300000 pixels", max_pixels=300_000)
    prepare_image(SAMPLES["rgb_640x480.png"], "x", PROCESSING, max_pixels=640 * 480)


def test_corrupt_truncated_and_foreign_files() -> None:
    png = SAMPLES["rgb_640x480.png"]
    _refused(png[: len(png) // 2], "not an image this server reads")
    _refused(SAMPLES["rgb_500x375.jpg"][:300], "not an image this server reads")
    _refused(b"", "not an image")
    _refused(b"GIF89a" + b"\x00" * 20, "not an image")
    _refused(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n", "not an image")  # EPS: not allowed
    _refused(encoded(Image.new("RGB", (201 * 4, 4)), "PNG"), "aspect ratio over 200")


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(SMALL)), cut=st.floats(0, 1),
       flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=8))
def test_mutated_images_fail_cleanly(name: str, cut: float,
                                     flips: list[tuple[float, int]]) -> None:
    """Any truncation and byte mutation of a real file: a prepared image or an InvalidInput
    naming it, within the budget; never another exception."""
    data = bytearray(SMALL[name])
    for where, value in flips:
        data[int(where * (len(data) - 1))] = value
    data = data[: max(1, int(cut * len(data)))] if cut < 0.98 else data
    started = time.monotonic()
    try:
        prepared = prepare_image(bytes(data), "img", PROCESSING)
    except InvalidInput as e:
        assert e.param == "img"
    else:
        t, h, w = prepared.grid_thw
        assert prepared.pixel_values.shape[0] == t * h * w
        assert prepared.n_tokens * PROCESSING.merge_size ** 2 == t * h * w
    assert time.monotonic() - started < BUDGET_S


def test_modes_become_rgb_as_vllm_loads_them() -> None:
    rgba = Image.new("RGBA", (4, 4), (10, 20, 30, 0))  # fully transparent: white, as vLLM
    assert decode_image(encoded(rgba, "PNG"), "x").getpixel((0, 0)) == (255, 255, 255)
    assert decode_image(SAMPLES["grey_180x240.png"], "x").mode == "RGB"
    assert decode_image(SAMPLES["exif_rotated_240x120.jpg"], "x").size == (120, 240)


def test_smart_resize_bounds() -> None:
    for h, w in [(1, 1), (28, 28), (100, 150), (4000, 3000), (10, 1999)]:
        rh, rw = smart_resize(h, w, factor=28, min_pixels=3136, max_pixels=1003520)
        assert rh % 28 == 0 and rw % 28 == 0 and 3136 <= rh * rw <= 1003520


def test_cache_prepares_the_same_bytes_once() -> None:
    cache = ImageCache(max_entries=2)
    a, b, c = (SAMPLES[n] for n in ("rgb_150x100.png", "rgb_33x47.png", "grey_180x240.png"))
    first = cache.prepare(a, "p0", PROCESSING)
    assert cache.prepare(a, "p1", PROCESSING) is first
    assert (cache.hits, cache.misses) == (1, 1)
    cache.prepare(b, "p2", PROCESSING)
    cache.prepare(c, "p3", PROCESSING)  # a was least recently used: out
    cache.prepare(a, "p4", PROCESSING)
    assert (cache.hits, cache.misses) == (1, 4)
    with pytest.raises(InvalidInput):  # a bad file is not cached as anything
        cache.prepare(b"junk", "p5", PROCESSING)
