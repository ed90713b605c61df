"""Integration fixtures: the toy model directory (session) and helpers in ``service.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.service import build_toy_model


@pytest.fixture(scope="session")
def toy_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Qwen-like byte-level BPE model dir built with HF tokenizers (no fetched files)."""
    return build_toy_model(tmp_path_factory.mktemp("toy-model"))
