"""textproc.service.context_length: the context length ``vllm serve`` derives from a model's
config.json. Each case's number is what vLLM 0.32 derives for that very config, and
tests/integration/test_context_length_vllm.py checks every case but the unknown family against
vLLM itself in the engine's environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.context_lengths import CASES, LLAMA
from textproc.errors import InvalidInput
from textproc.service.context_length import FAMILY_DEFAULTS, model_context_length


def _model(tmp_path: Path, config: object) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("config, expected", [(c, e) for _, c, e in CASES], ids=[n for n, _, _ in CASES])
def test_derives_what_vllm_derives(tmp_path: Path, config: dict[str, Any], expected: int) -> None:
    derived = model_context_length(_model(tmp_path, config))
    assert derived is not None and derived.tokens == expected, derived
    assert str(tmp_path / "config.json") in derived.source


def test_source_names_the_key_and_the_factor(tmp_path: Path) -> None:
    derived = model_context_length(_model(tmp_path, {**LLAMA, "max_position_embeddings": 4096,
                                                     "rope_scaling": {"type": "linear", "factor": 2.0}}))
    assert derived is not None
    assert derived.source.startswith("$.max_position_embeddings 4096 x RoPE factor 2 of ")


def test_family_defaults_are_ints() -> None:
    assert all(isinstance(v, int) and v > 0 for v in FAMILY_DEFAULTS.values())


def test_no_config_json_is_none(tmp_path: Path) -> None:
    assert model_context_length(tmp_path) is None


@pytest.mark.parametrize("text, match", [
    ("{not json", r"config\.json is not JSON"),
    ("[1, 2]", r"config\.json must be a JSON object, got \[1, 2\]"),
    ('{"max_position_embeddings": "4096"}', r"\$\.max_position_embeddings in .*config\.json must be a positive number, got '4096'"),
    ('{"max_position_embeddings": 0}', r"must be a positive number, got 0"),
    ('{"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": "x"}}',
     r"\$\.rope_parameters\.factor in .* must be a positive number, got 'x'"),
])
def test_malformed_config_names_the_file_and_key(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(InvalidInput, match=match):
        model_context_length(tmp_path)
