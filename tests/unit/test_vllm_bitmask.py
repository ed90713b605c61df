"""engine_vllm's bitmask apply against the plain rule: a logit stays iff its token's bit is set.

Every path is reached (few words allowing anything, few forbidding anything, the bit select in
between), on widths that are and are not a multiple of 32. The comparison with xgrammar's own
kernel on the same masks runs with the real engine (tests/integration/test_real_engine.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_vllm.bitmask import apply_row


def _reference(row: np.ndarray, words: np.ndarray) -> np.ndarray:
    allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[: row.shape[0]].astype(bool)
    return np.where(allowed, row, np.float32(-np.inf)).astype(np.float32)


def _check(row: np.ndarray, words: np.ndarray) -> None:
    expected = _reference(row, words)
    got = row.copy()
    apply_row(got, words)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.int32), expected.view(np.int32))  # bit for bit


@st.composite
def _masks(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 4000))
    n_words = (n + 31) // 32 + draw(st.integers(0, 2))  # the model's padding past the vocabulary
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    base = draw(st.sampled_from(["none", "all", "random"]))
    if base == "none":
        words = np.zeros(n_words, dtype=np.int32)
    elif base == "all":
        words = np.full(n_words, -1, dtype=np.int32)
    else:
        words = rng.integers(-2**31, 2**31, n_words, dtype=np.int64).astype(np.int32)
    changed = draw(st.integers(0, n_words))  # words given arbitrary bits: from few to all
    at = rng.integers(0, n_words, changed)
    words[at] = rng.integers(-2**31, 2**31, changed, dtype=np.int64).astype(np.int32)
    row = rng.standard_normal(n).astype(np.float32)
    row[rng.integers(0, n, n // 10)] = np.float32(-np.inf)  # an earlier processor's -inf stay
    return row, words


@settings(max_examples=300, deadline=None)
@given(_masks())
def test_apply_row_keeps_exactly_the_allowed_logits(case: tuple[np.ndarray, np.ndarray]) -> None:
    _check(*case)


@pytest.mark.parametrize("allowed", [[], [0], [151935], [5, 6, 7, 200, 70000], list(range(0, 151936, 7))])
def test_apply_row_on_a_qwen3_sized_row(allowed: list[int]) -> None:
    n = 151936
    rng = np.random.default_rng(len(allowed))
    for negate in (False, True):  # the listed ids allowed, or the listed ids forbidden
        bits = np.zeros(n, dtype=np.uint8)
        bits[allowed] = 1
        if negate:
            bits ^= 1
        words = np.packbits(bits, bitorder="little").view(np.int32).copy()
        _check(rng.standard_normal(n).astype(np.float32), words)


def test_a_mask_narrower_than_the_logits_is_refused() -> None:
    with pytest.raises(ValueError, match="a mask of 32 tokens for 33 logits"):
        apply_row(np.zeros(33, dtype=np.float32), np.zeros(1, dtype=np.int32))
