"""Where the fetched vocabularies live, and the toy model built when a test or a benchmark does
not need a real one.

``scripts/fetch_fixtures.py`` builds the real vocabularies under ``.cache/models/<name>`` of the
source tree: "qwen3", "mistral", "gpt2", and the extras "cl100k" and "deepseek". Each
directory holds tokenizer.json and tokenizer_config.json (qwen3 also qwen.tiktoken, cl100k
cl100k_base.tiktoken, mistral tokenizer.model) and fixture.json (how it was built and checked).
What to do when one is missing is the caller's: a test skips, a benchmark exits with the hint.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["REPO_ROOT", "CACHE_DIR", "MODELS_DIR", "FETCH_HINT", "REAL_MODELS", "TIKTOKEN_FILES",
           "available_models", "find_model", "build_toy_model"]

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache"
MODELS_DIR = CACHE_DIR / "models"
FETCH_HINT = "build it with: .venv/bin/python scripts/fetch_fixtures.py"

# name -> what it is
REAL_MODELS = {
    "qwen3": "Qwen3 byte-level BPE (151,643 ranks from dashscope's qwen.tiktoken + Qwen3 added tokens)",
    "mistral": "Mistral-7B SentencePiece BPE with byte fallback (mistral-common tokenizer.model.v1)",
    "gpt2": "GPT-2 byte-level BPE (encoder.json + vocab.bpe)",
    # extras (same script, same cache)
    "cl100k": "cl100k_base byte-level BPE (tiktoken rank file from litellm; special ids with gaps)",
    "deepseek": "DeepSeek-V3 tokenizer.json as shipped by litellm (3 Split pre-tokenizers, 1,283 added)",
}

# the rank file next to tokenizer.json for vocabularies that come from tiktoken files
TIKTOKEN_FILES = {"qwen3": "qwen.tiktoken", "cl100k": "cl100k_base.tiktoken"}


def available_models() -> list[str]:
    """Names of the real vocabularies present in the cache."""
    return [name for name in REAL_MODELS if (MODELS_DIR / name / "tokenizer.json").is_file()]


def find_model(name: str) -> Path | None:
    """The cached model directory ``name`` when it has a tokenizer.json, else None."""
    path = MODELS_DIR / name
    return path if (path / "tokenizer.json").is_file() else None


TOY_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOY_NON_SPECIAL = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
_TOY_TRAIN_TEXT = [
    "Hello world! The quick brown fox jumps over the lazy dog. " * 4,
    "def add(a, b):\n    return a + b\n\n" * 3,
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    "你好，世界。今天天气很好。我们去公园散步吧。",
    "Emoji: 😀 👍🏽 👨‍👩‍👧 🎉 — naïve café résumé",
    "user assistant system tool think reasoning answer stop STOP END",
]

# the toy template refuses unknown roles, so tests see a template raise_exception end a request
_TOY_TEMPLATE_GUARD = (
    "{%- for m in messages %}{%- if m.role not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{- raise_exception('unknown role ' + m.role) }}{%- endif %}{%- endfor %}"
)


def build_toy_model(path: Path) -> Path:
    """A Qwen-like toy tokenizer dir (tokenizer.json + tokenizer_config.json), built in ~0.1 s.

    A byte-level BPE of 600 ranks trained with HF ``tokenizers`` (the bench/test extra), Qwen's
    special tokens, ``<think>`` and ``<tool_call>`` markers and textproc's ChatML template.
    """
    # here: tokenizers is a test and bench extra, never a runtime dependency
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    from textproc.core.chat.template import CHATML_TEMPLATE  # as tokenizers: only when building

    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_TOY_TRAIN_TEXT, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in TOY_SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOY_NON_SPECIAL])
    tok.save(str(path / "tokenizer.json"))
    config = {
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "chat_template": _TOY_TEMPLATE_GUARD + CHATML_TEMPLATE,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path
