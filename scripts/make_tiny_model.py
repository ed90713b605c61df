"""Make a small Qwen3-architecture model with seeded random weights (run with the engine's
Python, which has torch and transformers): a real transformer for a real engine to run, with
the real Qwen3 tokenizer files beside it.

    .venv-vllm/bin/python scripts/make_tiny_model.py --tokenizer-dir .cache/models/qwen3 \
        --out .cache/models/qwen3-tiny

The text it writes is noise (random weights); what textproc must prove against a real engine
(the same ids, prompts, logprobs, constraints and streaming as the engine's own server) does
not depend on the text being good. vLLM's CPU attention refuses head_dim 16, so the heads are
64 wide. Idempotent: an existing model with the same settings is left alone.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

SETTINGS = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 40960,
    "vocab_size": 151936,  # Qwen3's embedding rows (the tokenizer has 151,669 ids)
    "bos_token_id": 151643,
    "eos_token_id": 151645,  # <|im_end|>
    "tie_word_embeddings": True,
    "rope_theta": 1000000.0,
    "torch_dtype": "float32",
    # wider than the default 0.02: greedy decoding then follows the context (0.02 repeats one
    # token whatever the prompt), and the top logits sit far enough apart to pick the same id
    # whatever the batch's arithmetic order
    "initializer_range": 0.2,
}
SEED = 1234
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
STAMP = "textproc-tiny.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    out: Path = args.out
    stamp = {"settings": SETTINGS, "seed": SEED}
    if (out / STAMP).is_file() and json.loads((out / STAMP).read_text()) == stamp:
        print(f"{out}: up to date")
        return 0
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(SEED)
    config = Qwen3Config(**{k: v for k, v in SETTINGS.items() if k != "torch_dtype"})
    model = Qwen3ForCausalLM(config).to(torch.float32)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    # EOS only: no sampling defaults, so every server samples what the request says
    GenerationConfig(bos_token_id=151643, eos_token_id=[151645, 151643]).save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copyfile(args.tokenizer_dir / name, out / name)
    (out / STAMP).write_text(json.dumps(stamp))
    size = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    print(f"{out}: Qwen3 tiny model, seed {SEED}, {size:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
