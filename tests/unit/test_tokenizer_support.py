"""Checks of the shared tokenizer test support (tests/helpers/tokenizer_support.py)."""

from __future__ import annotations

from tests.helpers.tokenizer_support import mixed_texts


def test_mixed_texts_are_deterministic() -> None:
    assert mixed_texts(5, 3) == mixed_texts(5, 3)
    assert any("\r\n" in t for t in mixed_texts(5, 50))
