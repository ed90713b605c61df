"""Where the real vocabularies built by scripts/fetch_fixtures.py live, and how tests find them.

A test that needs a real vocabulary calls ``model_dir("qwen3")``; when the directory is
missing the test skips with the command that builds it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = REPO_ROOT / ".cache"
MODELS_DIR = CACHE_DIR / "models"
FETCH_HINT = "build it with: .venv/bin/python scripts/fetch_fixtures.py"

# name -> what it is
REAL_MODELS = {
    "qwen3": "Qwen3 byte-level BPE (151,643 ranks from dashscope's qwen.tiktoken + Qwen3 added tokens)",
    "mistral": "Mistral-7B SentencePiece BPE with byte fallback (mistral-common tokenizer.model.v1)",
    "gpt2": "GPT-2 byte-level BPE (encoder.json + vocab.bpe)",
}


def model_dir(name: str) -> Path:
    """The cached model directory ``name``, or skip the calling test with a fetch hint."""
    path = MODELS_DIR / name
    if not (path / "tokenizer.json").is_file():
        pytest.skip(f"real vocabulary {name!r} missing at {path}; {FETCH_HINT}")
    return path
