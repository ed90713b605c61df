"""Where the real vocabularies built by scripts/fetch_fixtures.py live, and how tests find them.

A test that needs a real vocabulary calls ``model_dir("qwen3")``; when the directory is
missing the test skips with the command that builds it. Names: "qwen3", "mistral", "gpt2",
and the extras "cl100k" and "deepseek". Directories hold tokenizer.json and
tokenizer_config.json (qwen3 also qwen.tiktoken, cl100k cl100k_base.tiktoken, mistral
tokenizer.model) and fixture.json (how it was built and checked).
"""

from __future__ import annotations

__all__ = ["REPO_ROOT", "CACHE_DIR", "MODELS_DIR", "FETCH_HINT", "REAL_MODELS", "TIKTOKEN_FILES",
           "available_models", "tiktoken_file", "model_dir"]

from pathlib import Path

import pytest

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


def tiktoken_file(name: str) -> Path:
    """The tiktoken rank file of ``name`` ("qwen3" or "cl100k"), or skip with a fetch hint."""
    path = model_dir(name) / TIKTOKEN_FILES[name]
    if not path.is_file():
        pytest.skip(f"rank file {path} missing; {FETCH_HINT} --force --only {name}")
    return path


def model_dir(name: str) -> Path:
    """The cached model directory ``name``, or skip the calling test with a fetch hint."""
    path = MODELS_DIR / name
    if not (path / "tokenizer.json").is_file():
        pytest.skip(f"real vocabulary {name!r} missing at {path}; {FETCH_HINT}")
    return path
