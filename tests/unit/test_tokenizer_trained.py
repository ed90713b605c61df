"""Parity with HF ``tokenizers`` on tokenizers trained in the test (ids and decoded text)."""

from __future__ import annotations

import pytest

from tests.unit.test_tokenizer_support import assert_parity, mixed_texts, trained_obj


@pytest.mark.parametrize("kind", ["qwen", "gpt2", "gpt2_prefix"])
def test_byte_level_bpe_matches_reference(kind: str) -> None:
    assert_parity(trained_obj(kind), mixed_texts(11, 400), add_special_tokens=(False, True), label=kind)


def test_qwen_style_long_word_and_whitespace() -> None:
    texts = ["a" * 5000, "ab" * 3000 + " " * 300 + "\n" * 50, "x" + "\t \n" * 200, "🙂" * 500, ""]
    assert_parity(trained_obj("qwen"), texts, label="qwen-long")
