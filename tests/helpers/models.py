"""How tests find the real vocabularies built by scripts/fetch_fixtures.py.

A test that needs a real vocabulary calls ``model_dir("qwen3")``; when the directory is
missing the test skips with the command that builds it. Where they live and what they are:
``textproc.testing.models``.
"""

from __future__ import annotations

__all__ = ["REPO_ROOT", "CACHE_DIR", "MODELS_DIR", "FETCH_HINT", "REAL_MODELS", "TIKTOKEN_FILES",
           "available_models", "tiktoken_file", "model_dir"]

from pathlib import Path

import pytest

from textproc.testing.models import (
    CACHE_DIR,
    FETCH_HINT,
    MODELS_DIR,
    REAL_MODELS,
    REPO_ROOT,
    TIKTOKEN_FILES,
    available_models,
    find_model,
)


def tiktoken_file(name: str) -> Path:
    """The tiktoken rank file of ``name`` ("qwen3" or "cl100k"), or skip with a fetch hint."""
    path = model_dir(name) / TIKTOKEN_FILES[name]
    if not path.is_file():
        pytest.skip(f"rank file {path} missing; {FETCH_HINT} --force --only {name}")
    return path


def model_dir(name: str) -> Path:
    """The cached model directory ``name``, or skip the calling test with a fetch hint."""
    path = find_model(name)
    if path is None:
        pytest.skip(f"real vocabulary {name!r} missing at {MODELS_DIR / name}; {FETCH_HINT}")
    return path
