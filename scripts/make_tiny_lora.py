"""Make a small seeded LoRA adapter for the tiny Qwen3 model (``make_tiny_model.py``) with
``peft`` (run with the engine's Python, which has torch, transformers and peft):

    .venv-vllm/bin/python scripts/make_tiny_lora.py --model .cache/models/qwen3-tiny \
        --out .cache/models/qwen3-tiny-lora

Rank 8 on every attention and MLP projection, both LoRA matrices random from a fixed seed
(peft's default leaves B at zero, an adapter that changes nothing), wide enough that a greedy
answer with the adapter differs from the base model's. Idempotent: an existing adapter with the
same settings is left alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SETTINGS = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj",
                                                          "o_proj", "gate_proj", "up_proj",
                                                          "down_proj"]}
SEED = 4321
SCALE = 0.5  # the matrices' std: the adapter moves the greedy answer
STAMP = "textproc-tiny-lora.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    out: Path = args.out
    stamp = {"settings": SETTINGS, "seed": SEED, "scale": SCALE}
    if (out / STAMP).is_file() and json.loads((out / STAMP).read_text()) == stamp:
        print(f"{out}: up to date")
        return 0
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(**SETTINGS, lora_dropout=0.0, bias="none",
                                                  task_type="CAUSAL_LM"))
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in sorted(peft_model.named_parameters()):
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * SCALE)
    out.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(out, safe_serialization=True)
    # vLLM reads the base model's path from the adapter config only for its listing: point it
    # at the model directory as given
    config = json.loads((out / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(args.model)
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))
    (out / STAMP).write_text(json.dumps(stamp))
    size = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    print(f"{out}: LoRA rank {SETTINGS['r']} for {args.model.name}, seed {SEED}, {size:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
