"""The image processing of each vision-language model family, one declaration per family.

A declaration names the ``model_type`` values of config.json it covers, the placeholder token
its chat template writes for an image (``<|image_pad|>`` for the Qwen families: the prompt holds
it once per image, and the worker repeats it to the image's token count, as vLLM's processor
does), and its processor class's defaults in transformers; a model's preprocessor_config.json
overrides those defaults field by field, as ``from_pretrained`` does. :func:`load_vision`
reads a model directory: None for a model without a ``vision_config`` (a text model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from textproc.errors import TokenizerFileError

__all__ = ["ImageFamily", "ImageProcessing", "VisionModel", "FAMILIES", "load_vision",
           "OPENAI_CLIP_MEAN", "OPENAI_CLIP_STD"]

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # transformers' image_utils constants
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
BICUBIC = 3  # PIL.Image.Resampling.BICUBIC, the resample transformers' configs spell as 3


@dataclass(frozen=True)
class ImageProcessing:
    """What transformers' ``Qwen2VLImageProcessor`` does to an image (its fields by name)."""

    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    image_mean: tuple[float, ...] = OPENAI_CLIP_MEAN
    image_std: tuple[float, ...] = OPENAI_CLIP_STD
    rescale_factor: float = 1 / 255
    resample: int = BICUBIC
    do_resize: bool = True
    do_rescale: bool = True
    do_normalize: bool = True

    def with_file(self, config: dict[str, Any], where: str) -> ImageProcessing:
        """These defaults overridden by a preprocessor_config.json's fields (``size``'s
        ``shortest_edge`` / ``longest_edge`` are min / max pixels, and so are ``min_pixels`` /
        ``max_pixels``, which win, as in the processor's constructor)."""
        values: dict[str, Any] = {}
        size = config.get("size")
        if isinstance(size, dict):
            if "shortest_edge" in size:
                values["min_pixels"] = size["shortest_edge"]
            if "longest_edge" in size:
                values["max_pixels"] = size["longest_edge"]
        for name in ("min_pixels", "max_pixels", "patch_size", "temporal_patch_size",
                     "merge_size", "rescale_factor", "resample", "do_resize", "do_rescale",
                     "do_normalize"):
            if config.get(name) is not None:
                values[name] = config[name]
        for name in ("image_mean", "image_std"):
            if config.get(name) is not None:
                value = config[name]
                values[name] = tuple(value) if isinstance(value, list) else (value,) * 3
        out = replace(self, **values)
        ints = (out.min_pixels, out.max_pixels, out.patch_size, out.temporal_patch_size,
                out.merge_size, out.resample)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in ints[:5]) \
                or len(out.image_mean) != 3 or len(out.image_std) != 3:
            raise TokenizerFileError(f"{where}: image processor fields {short_fields(out)} are "
                                     "not positive integers with 3-channel mean and std")
        return out


def short_fields(p: ImageProcessing) -> str:
    return (f"min_pixels={p.min_pixels!r} max_pixels={p.max_pixels!r} "
            f"patch_size={p.patch_size!r} merge_size={p.merge_size!r}")


@dataclass(frozen=True)
class ImageFamily:
    """One family's declaration: config.json ``model_type`` values, placeholder, defaults."""

    name: str
    model_types: tuple[str, ...]
    processing: ImageProcessing
    image_token: str = "<|image_pad|>"  # what the chat template writes once per image


FAMILIES: tuple[ImageFamily, ...] = (
    # Qwen2VLImageProcessor's class defaults (Qwen2-VL, Qwen2.5-VL)
    ImageFamily("qwen2_vl", ("qwen2_vl", "qwen2_5_vl"), ImageProcessing()),
    # Qwen3-VL uses the same processor class; its published preprocessor_config.json sets
    # patch_size 16, mean/std 0.5 and size 65536..16777216 (read from the file when present)
    ImageFamily("qwen3_vl", ("qwen3_vl", "qwen3_vl_moe"),
                ImageProcessing(min_pixels=65536, max_pixels=16777216, patch_size=16,
                                image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5))),
)


@dataclass(frozen=True)
class VisionModel:
    """A model directory's image processing: its family, the processing and the image token."""

    family: ImageFamily
    processing: ImageProcessing
    image_token_id: int | None  # config.json's image_token_id (None: the tokenizer's id)


def load_vision(model_dir: str | Path) -> VisionModel | None:
    """The image processing of the model in ``model_dir``; None when its config.json has no
    ``vision_config``. A vision model of a family not declared here raises
    TokenizerFileError naming the model_type and the declared ones."""
    root = Path(model_dir)
    try:
        config = json.loads((root / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise TokenizerFileError(f"cannot read {root / 'config.json'}: {e}") from e
    if not isinstance(config, dict) or "vision_config" not in config:
        return None
    model_type = config.get("model_type")
    family = next((f for f in FAMILIES if model_type in f.model_types), None)
    if family is None:
        known = sorted(t for f in FAMILIES for t in f.model_types)
        raise TokenizerFileError(
            f"{root / 'config.json'}: model_type {model_type!r} has a vision_config, and no "
            f"image processing is declared for it; declared: {', '.join(known)}")
    processing = family.processing
    path = root / "preprocessor_config.json"
    if path.exists():
        try:
            file = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise TokenizerFileError(f"cannot read {path}: {e}") from e
        if isinstance(file, dict):
            processing = processing.with_file(file, str(path))
    token_id = config.get("image_token_id")
    return VisionModel(family, processing, token_id if isinstance(token_id, int) else None)
