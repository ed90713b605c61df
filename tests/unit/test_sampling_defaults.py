"""A model's generation_config.json as the sampling defaults of the requests that set none:
vLLM's keys and precedence (the request's value, then the file's, then the engine's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from textproc.errors import InvalidInput
from textproc.options import SamplingOptions
from textproc.service.sampling_defaults import SamplingDefaults, load_sampling_defaults

# Qwen3's own file (its sampling keys), plus a default max_new_tokens and keys vLLM ignores
QWEN3 = {"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
         "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
         "transformers_version": "4.51.0"}


def _defaults(tmp_path: Path, content: object) -> SamplingDefaults:
    data = content if isinstance(content, bytes) else (
        content if isinstance(content, str) else json.dumps(content)).encode()
    (tmp_path / "generation_config.json").write_bytes(data)
    return load_sampling_defaults(tmp_path)


def test_the_sampling_keys_and_max_new_tokens_are_read_the_rest_ignored(tmp_path: Path) -> None:
    d = _defaults(tmp_path, {**QWEN3, "max_new_tokens": 100, "min_p": 0, "repetition_penalty": 1.05,
                             "presence_penalty": 1.5, "frequency_penalty": -0.5, "length_penalty": 2.0})
    assert d.params == {"repetition_penalty": 1.05, "presence_penalty": 1.5, "frequency_penalty": -0.5,
                        "temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0}
    assert d.max_tokens == 100 and not d.is_empty
    # null is "not set", as vLLM drops None values
    d = _defaults(tmp_path, {"temperature": None, "top_p": 0.5, "max_new_tokens": None})
    assert d.params == {"top_p": 0.5} and d.max_tokens is None


def test_request_values_win_and_unset_keys_come_from_the_file(tmp_path: Path) -> None:
    d = _defaults(tmp_path, QWEN3)
    unset = SamplingOptions(params={"seed": 7})
    assert d.apply(unset).params == {"seed": 7, "temperature": 0.6, "top_k": 20, "top_p": 0.95}
    assert unset.params == {"seed": 7}  # the request's own value is not modified
    # a value the request set wins, even one equal to the engine's neutral default; None is unset
    given = SamplingOptions(max_tokens=5, params={"temperature": 1.0, "top_k": None})
    applied = d.apply(given)
    assert applied.params == {"temperature": 1.0, "top_k": 20, "top_p": 0.95}
    assert applied.max_tokens == 5
    every = SamplingOptions(params={"temperature": 0.0, "top_k": -1, "top_p": 1.0})
    assert d.apply(every) is every


def test_max_new_tokens_is_the_default_max_tokens_capped_by_the_room(tmp_path: Path) -> None:
    d = _defaults(tmp_path, {"max_new_tokens": 64})
    assert d.params == {} and d.max_tokens == 64
    assert d.max_tokens_for(room=1000) == 64
    assert d.max_tokens_for(room=10) == 10  # a long prompt: what the context leaves, no error
    assert SamplingDefaults().max_tokens_for(room=10) == 10


def test_a_missing_file_or_one_without_sampling_keys_is_no_defaults(tmp_path: Path) -> None:
    assert load_sampling_defaults(tmp_path).is_empty
    assert load_sampling_defaults(tmp_path / "no-such-dir").is_empty
    # the tiny test model's file: token ids only
    d = _defaults(tmp_path, {"bos_token_id": 1, "eos_token_id": [2, 3], "transformers_version": "5"})
    assert d.is_empty
    plain = SamplingOptions(params={"seed": 1})
    assert d.apply(plain) is plain


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", r"generation_config\.json is not valid JSON .*--generation-config none"),
    ("[0.6]", r"generation_config\.json must hold a JSON object, got \[0\.6\]"),
    ({"temperature": "0.6"}, r"temperature='0\.6' at \$\.temperature in .*generation_config\.json "
                             r"is not a finite number"),
    ({"top_p": True}, r"top_p=True at \$\.top_p .* is not a finite number"),
    ({"top_k": 20.5}, r"top_k=20\.5 at \$\.top_k .* is not an integer"),
    ({"max_new_tokens": 0}, r"max_new_tokens=0 at \$\.max_new_tokens .*allowed: an integer >= 1"),
    (b"\xff\xfe{", r"cannot read .*generation_config\.json"),
], ids=["not-json", "not-object", "string-value", "bool-value", "float-top-k",
        "zero-max-new-tokens", "not-utf8"])
def test_a_malformed_file_is_a_clear_error(tmp_path: Path, content: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        _defaults(tmp_path, content)
