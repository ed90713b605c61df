"""Images made at test time with Pillow (no photos in the repo): sizes, aspect ratios, modes,
an EXIF orientation, and a vision-language model directory around the real Qwen3 tokenizer."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["sample_images", "encoded", "vision_model_dir", "QWEN2_VL_TEMPLATE"]

# Qwen2-VL-7B-Instruct's chat template (its tokenizer_config.json / chat_template.json)
QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _noise(width: int, height: int, seed: int, channels: int = 3) -> np.ndarray:
    # smooth gradients plus noise: resampling has edges and flat areas to get right
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = (x * 255 // max(1, width - 1) + y * 127 // max(1, height - 1)) % 256
    noise = rng.integers(0, 64, size=(height, width, channels))
    return ((base[..., None] + noise) % 256).astype(np.uint8)


def encoded(image: Image.Image, fmt: str, **kw: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kw)
    return out.getvalue()


def sample_images() -> dict[str, bytes]:
    """name -> encoded file: several sizes and aspect ratios, RGBA / palette (with and without
    transparency) / greyscale / LA / CMYK modes, JPEG and PNG and WebP, an EXIF rotation."""
    out: dict[str, bytes] = {}
    for i, (w, h) in enumerate([(150, 100), (640, 480), (33, 47), (1200, 90), (28, 28),
                                (1000, 750)]):
        out[f"rgb_{w}x{h}.png"] = encoded(Image.fromarray(_noise(w, h, i)), "PNG")
    out["rgb_500x375.jpg"] = encoded(Image.fromarray(_noise(500, 375, 7)), "JPEG", quality=90)
    out["rgb_300x200.webp"] = encoded(Image.fromarray(_noise(300, 200, 8)), "WEBP")
    rgba = _noise(200, 160, 9, channels=4)
    rgba[:40, :, 3] = 0  # a transparent band
    out["rgba_200x160.png"] = encoded(Image.fromarray(rgba, "RGBA"), "PNG")
    out["grey_180x240.png"] = encoded(Image.fromarray(_noise(180, 240, 10, 1)[..., 0], "L"), "PNG")
    la = _noise(120, 90, 11, channels=2)
    out["la_120x90.png"] = encoded(Image.fromarray(la, "LA"), "PNG")
    palette = Image.fromarray(_noise(160, 120, 12)).convert("P", palette=Image.Palette.ADAPTIVE)
    out["palette_160x120.png"] = encoded(palette, "PNG")
    out["palette_transparent_160x120.png"] = encoded(palette, "PNG", transparency=0)
    out["palette_160x120.gif"] = encoded(palette, "GIF")
    out["cmyk_140x100.jpg"] = encoded(Image.fromarray(_noise(140, 100, 13)).convert("CMYK"),
                                      "JPEG")
    rotated = Image.fromarray(_noise(240, 120, 14))
    exif = rotated.getexif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to display
    out["exif_rotated_240x120.jpg"] = encoded(rotated, "JPEG", exif=exif.tobytes())
    return out


def vision_model_dir(root: Path, tokenizer_dir: Path, *, model_type: str = "qwen2_5_vl",
                     preprocessor: dict[str, object] | None = None) -> Path:
    """A Qwen2.5-VL-shaped model directory (config.json with a vision_config, the processor's
    preprocessor_config.json, Qwen2-VL's chat template) around a Qwen tokenizer's files."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(tokenizer_dir / "tokenizer.json", root / "tokenizer.json")
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = QWEN2_VL_TEMPLATE
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    vocab = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in vocab["added_tokens"]}
    (root / "config.json").write_text(json.dumps({
        "model_type": model_type, "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "vision_config": {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
        "image_token_id": ids["<|image_pad|>"], "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"], "eos_token_id": ids["<|im_end|>"],
        "max_position_embeddings": 32768}))
    (root / "preprocessor_config.json").write_text(json.dumps(preprocessor or {
        "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
        "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"}))
    return root
