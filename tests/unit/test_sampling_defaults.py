"""A model's generation_config.json as the sampling defaults of the requests that set none:
vLLM's keys and precedence (the request's value, then the file's, then the engine's); its
eos_token_id as the ids that end a request, by vLLM's rules (ignore_eos, --generation-config
none, no file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from textproc.errors import InvalidInput
from textproc.options import SamplingOptions
from textproc.service.sampling_defaults import (
    GenerationConfig,
    SamplingDefaults,
    load_generation_config,
    load_sampling_defaults,
    stop_token_ids,
)

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
    ("{not json", r"generation_config\.json is not valid JSON .*eos_token_id is read with either "
                  r"--generation-config"),
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


def _write(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj))


def test_eos_token_id_is_an_id_or_a_list_read_in_either_mode(tmp_path: Path) -> None:
    _write(tmp_path / "generation_config.json", QWEN3)
    auto = load_generation_config(tmp_path)
    assert auto.eos_token_ids == (151645, 151643) and auto.eos_source.endswith("generation_config.json")
    assert auto.defaults.params["temperature"] == 0.6
    # --generation-config none (vLLM's "vllm"): no sampling defaults, the same eos ids, as
    # vLLM's input processor reads the model's file in both modes
    none = load_generation_config(tmp_path, sampling=False)
    assert none.defaults.is_empty and none.eos_token_ids == (151645, 151643)
    _write(tmp_path / "generation_config.json", {"eos_token_id": 7, "temperature": "hot"})
    assert load_generation_config(tmp_path, sampling=False).eos_token_ids == (7,)  # keys not checked
    for value, ids in ((None, ()), ([], ()), ([3, 3, 1], (3, 1))):
        _write(tmp_path / "generation_config.json", {"eos_token_id": value})
        assert load_generation_config(tmp_path).eos_token_ids == ids


def test_the_end_ids_are_the_tokenizers_eos_and_the_files(tmp_path: Path) -> None:
    config = GenerationConfig(eos_token_ids=(151645, 151643))
    assert config.end_ids(151645) == [151643, 151645]  # the tokenizer's EOS is one of them
    assert config.end_ids(None) == [151643, 151645]
    assert GenerationConfig(eos_token_ids=(9,)).end_ids(2) == [2, 9]
    assert GenerationConfig().end_ids(2) == [2] and GenerationConfig().end_ids(None) == []


def test_stop_ids_follow_vllm_ignore_eos_drops_only_the_eos_ids() -> None:
    ends = [2, 9]
    assert stop_token_ids(ends, [], ignore_eos=False) == [2, 9]
    assert stop_token_ids(ends, [5, 2], ignore_eos=False) == [2, 5, 9]
    # ignore_eos: the model's EOS ids (the tokenizer's and the file's) stop nothing; ids the
    # request names itself still stop it, EOS among them (vLLM's stop_token_ids)
    assert stop_token_ids(ends, [], ignore_eos=True) == []
    assert stop_token_ids(ends, [5, 2], ignore_eos=True) == [2, 5]
    assert stop_token_ids([], [5], ignore_eos=False) == [5]


def test_no_generation_config_takes_config_json_eos_as_vllm_does(tmp_path: Path) -> None:
    """vLLM derives a generation config from config.json when the model has none
    (transformers' GenerationConfig.from_model_config): its eos_token_id, top level or the text
    config's; its sampling keys are not read. Neither file: no ids (the tokenizer's EOS alone)."""
    assert load_generation_config(tmp_path) == GenerationConfig()
    _write(tmp_path / "config.json", {"eos_token_id": [151645, 128], "temperature": 0.3})
    config = load_generation_config(tmp_path)
    assert config.eos_token_ids == (151645, 128) and config.eos_source.endswith("config.json")
    assert config.defaults.is_empty
    _write(tmp_path / "config.json", {"eos_token_id": None, "text_config": {"eos_token_id": 4}})
    assert load_generation_config(tmp_path).eos_token_ids == (4,)
    _write(tmp_path / "config.json", {"model_type": "x"})
    assert load_generation_config(tmp_path).eos_token_ids == ()
    # a generation_config.json without eos_token_id: no ids, config.json is not consulted
    _write(tmp_path / "config.json", {"eos_token_id": 4})
    _write(tmp_path / "generation_config.json", {"temperature": 0.5})
    assert load_generation_config(tmp_path).eos_token_ids == ()


@pytest.mark.parametrize(("file", "content", "message"), [
    ("generation_config.json", {"eos_token_id": "<|im_end|>"},
     r"eos_token_id='<\|im_end\|>' at \$\.eos_token_id in .*generation_config\.json; allowed: a "
     r"token id \(an integer >= 0\), a list of them, or null; fix the file"),
    ("generation_config.json", {"eos_token_id": [151645, -1]}, r"eos_token_id=\[151645, -1\] at"),
    ("generation_config.json", {"eos_token_id": True}, r"eos_token_id=True at"),
    ("generation_config.json", {"eos_token_id": [1.0]}, r"eos_token_id=\[1\.0\] at"),
    ("config.json", {"text_config": {"eos_token_id": {"id": 1}}},
     r"at \$\.text_config\.eos_token_id in .*config\.json"),
    ("config.json", "{", r"config\.json is not valid JSON"),
], ids=["name", "negative", "bool", "float", "config-json-object", "config-json-not-json"])
def test_a_malformed_eos_token_id_is_an_error_in_either_mode(tmp_path: Path, file: str,
                                                             content: object, message: str) -> None:
    (tmp_path / file).write_text(content if isinstance(content, str) else json.dumps(content))
    for sampling in (True, False):
        with pytest.raises(InvalidInput, match=message):
            load_generation_config(tmp_path, sampling=sampling)
