"""``textproc text``: JSON lines with real results on the qwen3 and mistral fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.models import model_dir
from textproc.core import demo


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    assert demo.main(list(argv)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_demo_on_qwen3(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _run(capsys, "--model-dir", str(model_dir("qwen3")), "--bytes", "20000")
    by_name = {line["demo"]: line for line in lines}
    assert list(by_name) == ["encode", "decode_emoji", "stop_string", "chat_prompt", "parsed_answer"]
    enc = by_name["encode"]
    assert enc["tokens"] > 1000 and enc["textproc_tokens_per_s"] > 0
    refs = {r["name"]: r for r in enc["references"]}
    assert refs["tokenizers"]["identical_ids"] is True
    assert refs["tiktoken"]["identical_ids"] is True  # qwen3 ships its rank file
    emoji = by_name["decode_emoji"]
    assert emoji["per_token_replacements"] > 0  # decoding token by token breaks characters
    assert emoji["incremental_replacements"] == 0 and emoji["incremental_equals_decode"]
    assert "".join(emoji["incremental_deltas"]) == emoji["text"]
    stop = by_name["stop_string"]
    assert stop["finish_reason"] == "stop" and stop["matched_stop"] == "\n\nUser:"
    assert "".join(d["out"] for d in stop["deltas"]) == "The answer is 42."
    chat = by_name["chat_prompt"]
    assert chat["template"] == "model" and chat["tail"].endswith("<|im_start|>assistant\n")
    parsed = by_name["parsed_answer"]
    assert parsed["finish_reason"] == "tool_calls"
    call = parsed["merged"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris", "unit": "c"}
    assert parsed["merged"]["reasoning_content"].strip().startswith("The user wants")


def test_demo_on_sentencepiece_vocabulary(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _run(capsys, "--model-dir", str(model_dir("mistral")), "--bytes", "5000", "--only", "encode",
                 "--only", "emoji", "--only", "parse")
    enc, emoji, parsed = lines
    refs = {r["name"]: r for r in enc["references"]}
    assert refs["tokenizers"]["identical_ids"] is True
    assert "skipped" in refs["tiktoken"]  # no rank file: skipped with a note
    assert emoji["incremental_equals_decode"] and emoji["incremental_replacements"] == 0
    assert parsed["merged"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_missing_vocabulary_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--model-dir", str(tmp_path)]) == 2
    assert "no tokenizer.json in" in capsys.readouterr().err


def test_cli_dispatches_text(capsys: pytest.CaptureFixture[str]) -> None:
    from textproc.cli import main

    assert main(["text", "--model-dir", str(model_dir("gpt2")), "--only", "stop"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["demo"] == "stop_string" and line["finish_reason"] == "stop"
