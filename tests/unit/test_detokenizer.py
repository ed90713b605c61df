"""IncrementalDetokenizer: for any split of any ids, the deltas concatenate to decode(all ids).

References: the vocabulary's own decode (equal to HF tokenizers' decode, checked here too) and
``tokenizers.decoders.DecodeStream`` (with and without prefill ids).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer
from tokenizers.decoders import DecodeStream

from tests.helpers.stream_vocab import (
    SAMPLE_TEXTS,
    byte_fallback_hf,
    byte_level_hf,
    real_vocab,
    textproc_vocab,
)
from textproc.core.detokenizer import IncrementalDetokenizer
from textproc.errors import InvalidInput

EXTRA_TEXTS = ["😀👍🏽👨‍👩‍👧", "你好，世界", " leading space", "  two", "ℵ∀∃ ≠ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "é e\u0301"]


def _vocabs() -> list[Any]:
    return [
        pytest.param("byte_level", id="toy-byte-level"),
        pytest.param("byte_fallback", id="toy-byte-fallback"),
        pytest.param("qwen3", id="qwen3"),
        pytest.param("mistral", id="mistral"),
        pytest.param("gpt2", id="gpt2"),
    ]


def _get(name: str) -> tuple[Any, HFTokenizer]:
    if name == "byte_level":
        hf = byte_level_hf()
        return textproc_vocab(hf), hf
    if name == "byte_fallback":
        hf = byte_fallback_hf()
        return textproc_vocab(hf), hf
    return real_vocab(name)


def _interesting_ids(tok: Any, hf: HFTokenizer) -> list[int]:
    ids: list[int] = []
    for text in SAMPLE_TEXTS + EXTRA_TEXTS:
        ids.extend(hf.encode(text, add_special_tokens=False).ids)
    return ids


@st.composite
def id_sequences(draw: st.DrawFn, tok: Any, hf: HFTokenizer) -> list[int]:
    """Mix of random ids (invalid UTF-8, lone bytes, specials) and runs of real encodings."""
    pool = _interesting_ids(tok, hf)
    n = tok.vocab_size
    specials = sorted(tok.special_ids)
    piece = st.one_of(
        st.lists(st.integers(0, n - 1), min_size=1, max_size=4),
        st.integers(0, max(0, len(pool) - 8)).map(lambda i: pool[i : i + 8]),
        st.sampled_from(specials).map(lambda i: [i]) if specials else st.just([0]),
    )
    if tok.byte_fallback_ids:
        bf = sorted(tok.byte_fallback_ids)
        piece = st.one_of(piece, st.lists(st.sampled_from(bf), min_size=1, max_size=5))
    parts = draw(st.lists(piece, max_size=8))
    return [i for p in parts for i in p]


def _split(draw: st.DrawFn, ids: Sequence[int]) -> list[list[int]]:
    cuts = sorted(draw(st.sets(st.integers(0, len(ids)), max_size=max(1, len(ids)))))
    out, last = [], 0
    for c in cuts + [len(ids)]:
        out.append(list(ids[last:c]))
        last = c
    return out


def _stream(d: IncrementalDetokenizer, steps: Sequence[Sequence[int]]) -> list[str]:
    return [d.feed(s) for s in steps] + [d.finish()]


@pytest.mark.parametrize("name", _vocabs())
@pytest.mark.parametrize("skip", [True, False], ids=["skip", "keep"])
@given(data=st.data())
def test_any_split_concatenates_to_decode(name: str, skip: bool, data: st.DataObject) -> None:
    tok, hf = _get(name)
    ids = data.draw(id_sequences(tok, hf))
    steps = _split(data.draw, ids)
    expected = tok.decode(ids, skip_special_tokens=skip)
    assert expected == hf.decode(ids, skip_special_tokens=skip)  # reference agrees
    d = IncrementalDetokenizer(tok, skip_special_tokens=skip, at_start=True)
    deltas = _stream(d, steps)
    assert "".join(deltas) == expected
    # after a prompt: only the leading space(s) the decoder strips at the start differ
    d2 = IncrementalDetokenizer(tok, skip_special_tokens=skip, at_start=False)
    kept = "".join(_stream(d2, steps))
    assert kept.endswith(expected)
    assert kept[: len(kept) - len(expected)] == " " * (len(kept) - len(expected))
    assert len(kept) - len(expected) <= tok.decode_strip_leading


@pytest.mark.parametrize("name", _vocabs())
@given(data=st.data())
def test_split_character_never_printed_as_replacement(name: str, data: st.DataObject) -> None:
    tok, hf = _get(name)
    text = data.draw(st.sampled_from(SAMPLE_TEXTS + EXTRA_TEXTS))
    ids = hf.encode(text, add_special_tokens=False).ids
    steps = _split(data.draw, ids)
    d = IncrementalDetokenizer(tok, at_start=True)
    deltas = _stream(d, steps)
    assert "\ufffd" not in "".join(deltas)
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("name", _vocabs())
@pytest.mark.parametrize("prefill", [False, True], ids=["fresh", "prefill"])
@given(data=st.data())
def test_matches_decode_stream(name: str, prefill: bool, data: st.DataObject) -> None:
    """DecodeStream (fresh = at_start, with prompt ids = after a prompt) on valid text."""
    tok, hf = _get(name)
    text = data.draw(st.sampled_from(SAMPLE_TEXTS + EXTRA_TEXTS))
    ids = hf.encode(text, add_special_tokens=False).ids
    prompt = hf.encode("Prompt text:", add_special_tokens=False).ids if prefill else []
    stream = DecodeStream(prompt, skip_special_tokens=True) if prefill else DecodeStream(
        skip_special_tokens=True
    )
    d = IncrementalDetokenizer.for_prompt(tok, prompt)
    assert d._strip == (0 if prefill else tok.decode_strip_leading)
    ref: list[str] = []
    mine: list[str] = []
    for token_id in ids:
        chunk = stream.step(hf, token_id)
        ref.append(chunk or "")
        mine.append(d.feed([token_id]))
    mine.append(d.finish())
    assert "".join(mine) == "".join(ref)
    if not tok.byte_fallback_ids:
        # byte-level: never behind DecodeStream at any step (it holds a whole token whose
        # bytes complete one character and start the next; we release the complete one)
        for k in range(len(ref)):
            assert "".join(mine[: k + 1]).startswith("".join(ref[: k + 1])), k


@pytest.mark.parametrize("name", ["byte_level", "qwen3", "gpt2"])
def test_emoji_split_across_byte_tokens(name: str) -> None:
    tok, hf = _get(name)
    ids = hf.encode("😀 ok", add_special_tokens=False).ids
    assert len(ids) >= 2
    d = IncrementalDetokenizer(tok)
    deltas = [d.feed([i]) for i in ids] + [d.finish()]
    assert "".join(deltas) == "😀 ok"
    assert all("\ufffd" not in x for x in deltas)
    first_nonempty = next(i for i, x in enumerate(deltas) if x)
    assert deltas[first_nonempty].startswith("😀")


def test_invalid_bytes_replaced_where_decode_puts_them_byte_level() -> None:
    tok, hf = _get("byte_level")
    ids = {b: hf.token_to_id(c) for c, b in _byte_chars().items()}
    seq = [ids[0xF0], ids[0x9F], ids[0x41], ids[0xFF], ids[0xE4], ids[0xBD]]
    d = IncrementalDetokenizer(tok)
    out = [d.feed([i]) for i in seq]
    assert out == ["", "", "\ufffdA", "\ufffd", "", ""]  # F0 9F is one maximal subpart
    assert d.is_holding
    assert d.finish() == "\ufffd"
    assert "".join(out) + "\ufffd" == hf.decode(seq)


def test_byte_fallback_invalid_run_one_replacement_per_token() -> None:
    tok, hf = _get("byte_fallback")
    b = {x: hf.token_to_id(f"<0x{x:02X}>") for x in range(256)}
    eos = hf.token_to_id("</s>")
    word = hf.encode("Hello", add_special_tokens=False).ids
    # a complete character followed by an invalid byte in the same run: all U+FFFD
    seq = [b[0xE4], b[0xBD], b[0xA0], b[0xFF]] + word
    d = IncrementalDetokenizer(tok, at_start=True)
    out = [d.feed([i]) for i in seq] + [d.finish()]
    assert "".join(out) == hf.decode(seq) == "\ufffd" * 4 + " Hello"
    assert out[:4] == ["", "", "", ""]  # the run is held until a non-byte token ends it
    # a skipped special token does not end a run; a kept one does
    seq = [b[0xE4], eos, b[0xBD], b[0xA0]]
    d = IncrementalDetokenizer(tok, skip_special_tokens=True)
    assert d.feed(seq[:2]) + d.feed(seq[2:]) + d.finish() == hf.decode(seq, skip_special_tokens=True)
    d = IncrementalDetokenizer(tok, skip_special_tokens=False)
    got = d.feed(seq[:2]) + d.feed(seq[2:]) + d.finish()
    assert got == hf.decode(seq, skip_special_tokens=False) == "\ufffd</s>\ufffd\ufffd"


def test_leading_space_rule_sentencepiece() -> None:
    tok, hf = _get("byte_fallback")
    ids = hf.encode("Hello world", add_special_tokens=False).ids
    bos = hf.token_to_id("<s>")
    start = IncrementalDetokenizer(tok, at_start=True)
    assert "".join(start.feed([i]) for i in ids) + start.finish() == "Hello world"
    after = IncrementalDetokenizer(tok, at_start=False)
    assert "".join(after.feed([i]) for i in ids) + after.finish() == " Hello world"
    # a prompt of only BOS contributes no text: the output is the start of the text
    assert IncrementalDetokenizer.for_prompt(tok, [bos])._strip == 1
    assert IncrementalDetokenizer.for_prompt(tok, [bos], skip_special_tokens=False)._strip == 0
    assert IncrementalDetokenizer.for_prompt(tok, [bos] + ids)._strip == 0


def test_bad_ids_rejected_with_value_and_range() -> None:
    tok, _ = _get("byte_level")
    d = IncrementalDetokenizer(tok)
    with pytest.raises(InvalidInput, match=rf"token id {tok.vocab_size} out of range.*0\.\.{tok.vocab_size - 1}"):
        d.feed([1, tok.vocab_size])
    with pytest.raises(InvalidInput, match=r"token id -1 out of range"):
        d.feed([-1])


def test_constructor_is_cheap_and_shares_tables() -> None:
    """A detokenizer per request costs no per-vocabulary work: every one made for a tokenizer
    reads the same tables (built once, on the first)."""
    tok, _ = _get("byte_level")
    first, second = IncrementalDetokenizer(tok), IncrementalDetokenizer(tok)
    assert first._table is second._table and first._strs is second._strs
    assert first._skipped is second._skipped
    kept = IncrementalDetokenizer(tok, skip_special_tokens=False)
    assert kept._table is IncrementalDetokenizer(tok, skip_special_tokens=False)._table


def _byte_chars() -> dict[str, int]:
    from tests.helpers.stream_vocab import _byte_decoder

    return _byte_decoder()


class _ToyVocab:
    """Anything with the protocol works; this one has no weakref support (slots)."""

    __slots__ = ()
    vocab_size = 4
    special_ids = frozenset({2})
    decode_strip_leading = 0
    byte_fallback_ids: frozenset[int] = frozenset()

    def token_bytes(self, token_id: int, *, skip_special_tokens: bool = False) -> bytes:
        if skip_special_tokens and token_id in self.special_ids:
            return b""
        return [b"a", b"\xc3", b"<s>", b"\xa9"][token_id]


def test_protocol_object_without_weakref() -> None:
    v = _ToyVocab()
    d = IncrementalDetokenizer(v)
    assert (d.feed([0, 1]), d.feed([2]), d.feed([3]), d.feed([1]), d.finish()) == ("a", "", "é", "", "\ufffd")
    d = IncrementalDetokenizer(v, skip_special_tokens=False)
    assert (d.feed([0, 1]), d.feed([2, 3]), d.finish()) == ("a", "\ufffd<s>\ufffd", "")


@pytest.mark.parametrize("name", ["qwen3", "mistral", "gpt2"])
def test_edge_corpus_one_token_at_a_time(name: str) -> None:
    """Every named edge case, fed one id per step: deltas == decode, state stays O(1)."""
    from textproc.testing.corpus import EDGE_CASES, REFERENCE_REFUSES

    tok, _ = real_vocab(name)
    for case, text in EDGE_CASES.items():
        if case in REFERENCE_REFUSES:
            continue
        ids = tok.encode(text[:2000])  # the 10k repeats matter to encoders, not here
        for skip in (True, False):
            d = IncrementalDetokenizer(tok, skip_special_tokens=skip, at_start=True)
            deltas = []
            for token_id in ids:
                deltas.append(d.feed([token_id]))
                assert len(d._pending) <= 3, case
            deltas.append(d.finish())
            assert "".join(deltas) == tok.decode(ids, skip_special_tokens=skip), case


def test_prepare_builds_the_tables_before_the_first_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """The detokenizer process calls ``prepare`` before Ready: its first request used to build
    the tables (0.29 s on Qwen3) while it waited."""
    from textproc.core import detokenizer

    from textproc.core.tokenizer import Tokenizer

    fresh = Tokenizer.from_json(json.loads(byte_level_hf().to_str()), source="<toy>")  # new object
    built: list[object] = []
    real = detokenizer._build_tables
    monkeypatch.setattr(detokenizer, "_build_tables", lambda t: built.append(t) or real(t))
    detokenizer.prepare(fresh)
    assert built == [fresh]
    IncrementalDetokenizer(fresh).feed([1, 2, 3])
    assert built == [fresh]  # nothing more to build for a request
