"""An encoded image file -> the pixel patches, grid and token count the model's processor gives.

Owns the two halves of what ``vllm serve`` does to an image of a Qwen2-VL family model: the
loading of vLLM's ``ImageMediaIO.load_bytes`` (Pillow's readers from the same allowlist of
formats, the pixel count checked from the header before anything decodes, EXIF orientation
applied, transparency composited onto white, then RGB) and transformers'
``Qwen2VLImageProcessor`` (PIL backend: ``smart_resize`` to multiples of patch * merge within
min/max pixels, the resample of the config on the 8-bit image, rescale in float64 then float32,
normalise in float32, patches of C * T * P * P values in merge order). The exactness test runs
both references on generated images (``tests/parity/test_images.py``).

Every failure of a client's image is an ``InvalidInput`` naming the image's place in the body
(``param``): a format outside the allowlist, a truncated or corrupt file, more pixels than
``max_pixels`` (decompression bombs: checked before decoding), an aspect ratio over 200.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import struct
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from textproc.errors import InvalidInput
from textproc.vision.families import ImageProcessing

__all__ = ["ALLOWED_FORMATS", "MAX_IMAGE_PIXELS", "PreparedImage", "ImageCache", "decode_image",
           "prepare_image", "smart_resize", "value_bytes"]

# vLLM's list (vllm/multimodal/image.py): Pillow readers that decode in-process (no EPS /
# Ghostscript, no stub drivers)
ALLOWED_FORMATS = ("AVIF", "BLP", "BMP", "CUR", "DCX", "DDS", "DIB", "FITS", "FLI", "FTEX", "GBR",
                   "GIF", "ICNS", "ICO", "IM", "IMT", "IPTC", "JPEG", "JPEG2000", "MCIDAS", "MSP",
                   "PCD", "PCX", "PIXAR", "PNG", "PPM", "PSD", "QOI", "SGI", "SPIDER", "SUN",
                   "TGA", "TIFF", "WEBP", "XBM", "XPM", "XVTHUMB")
MAX_IMAGE_PIXELS = 178_956_970  # vLLM's VLLM_MAX_IMAGE_PIXELS default (Pillow's own limit)
MAX_ASPECT_RATIO = 200  # smart_resize's


@dataclass(frozen=True)
class PreparedImage:
    """One image ready for the model: ``pixel_values`` (float32, num_patches x C*T*P*P),
    ``grid_thw`` (t, h, w in patches), ``n_tokens`` (the placeholders it takes in the prompt:
    t*h*w / merge_size^2) and ``digest`` (sha256 of the file's bytes, hex)."""

    pixel_values: np.ndarray
    grid_thw: tuple[int, int, int]
    n_tokens: int
    digest: str


def smart_resize(height: int, width: int, *, factor: int, min_pixels: int,
                 max_pixels: int) -> tuple[int, int]:
    """transformers' ``smart_resize``: both sides multiples of ``factor``, the area within
    [min_pixels, max_pixels], the aspect ratio kept as closely as that allows.

    >>> smart_resize(100, 150, factor=28, min_pixels=3136, max_pixels=1003520)
    (112, 140)
    """
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def decode_image(data: bytes, param: str, *, max_pixels: int = MAX_IMAGE_PIXELS,
                 check_size: Callable[[int, int], None] | None = None) -> Image.Image:
    """The RGB image of an encoded file, loaded as vLLM loads it (see the module docstring);
    ``check_size(width, height)`` runs on the header's size before anything decodes."""
    try:
        with warnings.catch_warnings():
            # Pillow warns (and at twice its limit raises) on big images: the check below is ours
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image: Image.Image = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
            width, height = image.size
            if width * height > max_pixels:
                raise InvalidInput(
                    f"{param} is an image of {width}x{height} pixels ({width * height}), over "
                    f"the limit of {max_pixels} pixels", param=param)
            if width < 1 or height < 1:
                raise InvalidInput(f"{param} is an image of {width}x{height} pixels", param=param)
            if check_size is not None:
                check_size(width, height)
            with contextlib.suppress(Exception):  # a broken EXIF block leaves the image as is
                image = ImageOps.exif_transpose(image)
            image.load()
            return _rgb(image)
    except InvalidInput:
        raise
    except Image.DecompressionBombError as e:  # Pillow's own check, at twice its limit
        raise InvalidInput(f"{param} is an image over the limit of {max_pixels} pixels ({e})",
                           param=param) from e
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error,
            MemoryError) as e:
        # Pillow's readers raise these on truncated and corrupt files (UnidentifiedImageError is
        # an OSError)
        raise InvalidInput(f"{param} is not an image this server reads ({type(e).__name__}: "
                           f"{str(e)[:120]}); send PNG, JPEG, WebP, GIF, BMP or TIFF",
                           param=param) from e


def _rgb(image: Image.Image) -> Image.Image:
    """vLLM's ``convert_image_mode(image, "RGB")``: transparency composited onto white."""
    if image.mode == "RGB":
        return image
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        if image.mode != "RGBA":
            image = image.convert("RGBA")
        out = Image.new("RGB", image.size, (255, 255, 255))
        out.paste(image, mask=image.split()[3])
        return out
    return image.convert("RGB")


def value_bytes(width: int, height: int, p: ImageProcessing) -> int:
    """The bytes of the float32 pixel values an image of this size becomes (its orientation
    does not change it: ``smart_resize`` is symmetric)."""
    if not p.do_resize:
        resized_h, resized_w = height, width
    else:
        resized_h, resized_w = smart_resize(height, width, factor=p.patch_size * p.merge_size,
                                            min_pixels=p.min_pixels, max_pixels=p.max_pixels)
    patches = (resized_h // p.patch_size) * (resized_w // p.patch_size)
    return 4 * patches * 3 * p.temporal_patch_size * p.patch_size * p.patch_size


def prepare_image(data: bytes, param: str, processing: ImageProcessing, *,
                  max_pixels: int = MAX_IMAGE_PIXELS, max_value_bytes: int | None = None,
                  digest: str = "") -> PreparedImage:
    """Decode, resize, rescale, normalise and patch one image file (transformers' processor,
    PIL backend, bit for bit). ``max_value_bytes``: an image whose pixel values would be
    larger is refused from its header's size, before it decodes."""
    p = processing

    def check_size(width: int, height: int) -> None:
        if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
            raise InvalidInput(f"{param} is an image of {width}x{height} pixels, an aspect "
                               f"ratio over {MAX_ASPECT_RATIO}; the model's processor refuses "
                               "it", param=param)
        if max_value_bytes is not None and value_bytes(width, height, p) > max_value_bytes:
            raise InvalidInput(
                f"{param} is an image of {width}x{height} pixels, whose pixel values would take "
                f"{value_bytes(width, height, p)} bytes, over the {max_value_bytes} bytes left "
                "in the request's frame (--max-frame-bytes); send a smaller image", param=param)

    image = decode_image(data, param, max_pixels=max_pixels, check_size=check_size)
    width, height = image.size
    factor = p.patch_size * p.merge_size
    if p.do_resize:
        new_h, new_w = smart_resize(height, width, factor=factor, min_pixels=p.min_pixels,
                                    max_pixels=p.max_pixels)
        if (new_h, new_w) != (height, width):
            image = image.resize((new_w, new_h), resample=Image.Resampling(p.resample))
    pixels = np.asarray(image).transpose(2, 0, 1)  # H, W, C uint8 -> C, H, W
    values: np.ndarray
    if p.do_rescale:
        values = (pixels.astype(np.float64) * p.rescale_factor).astype(np.float32)
    else:
        values = pixels.astype(np.float32)
    if p.do_normalize:
        mean = np.asarray(p.image_mean, dtype=np.float32)[:, None, None]
        std = np.asarray(p.image_std, dtype=np.float32)[:, None, None]
        values = (values - mean) / std
    patches, grid_h, grid_w = _patchify(values, p)
    n_tokens = grid_h * grid_w // (p.merge_size * p.merge_size)
    return PreparedImage(patches, (1, grid_h, grid_w), n_tokens,
                         digest or hashlib.sha256(data).hexdigest())


def _patchify(values: np.ndarray, p: ImageProcessing) -> tuple[np.ndarray, int, int]:
    # C, H, W -> (gh/m, gw/m, m, m) patches of C x T x P x P, the frame repeated T times
    channels, height, width = values.shape
    size, merge, temporal = p.patch_size, p.merge_size, p.temporal_patch_size
    grid_h, grid_w = height // size, width // size
    patches = values.reshape(channels, grid_h // merge, merge, size, grid_w // merge, merge, size)
    patches = patches.transpose(1, 4, 2, 5, 0, 3, 6)
    patches = np.broadcast_to(patches[:, :, :, :, :, None],
                              (*patches.shape[:5], temporal, *patches.shape[5:]))
    flat = np.ascontiguousarray(patches).reshape(grid_h * grid_w,
                                                 channels * temporal * size * size)
    return flat, grid_h, grid_w


class ImageCache:
    """Prepared images by the sha256 of their file's bytes, least recently used out first;
    a repeated image (the same bytes) is prepared once per worker."""

    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, PreparedImage] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def prepare(self, data: bytes, param: str, processing: ImageProcessing, *,
                max_pixels: int = MAX_IMAGE_PIXELS,
                max_value_bytes: int | None = None) -> PreparedImage:
        """``prepare_image``'s answer, from the cache when these bytes were seen (a cached
        image over ``max_value_bytes`` is the caller's to refuse)."""
        key = hashlib.sha256(data).hexdigest()
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return hit
        self.misses += 1
        prepared = prepare_image(data, param, processing, max_pixels=max_pixels,
                                 max_value_bytes=max_value_bytes, digest=key)
        self._entries[key] = prepared
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return prepared
