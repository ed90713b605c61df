"""Fuzz the streaming text core: stop lists, engine token ids, invalid text, model output parsers.

- Stop lists (``StopChecker``, ``OutputPipeline``): empty strings, non-strings, thousands of stops,
  very long stops -> InvalidInput naming the limit, or the exact truncation of a naive reference
  (first stop to complete wins, the longest among those ending at the same character) for any
  split into deltas. A maximal stop list must build in bounded memory and time.
- Token ids from an engine (negative, >= vocab_size, huge, bools, floats, None): ``Tokenizer.decode``
  and ``token_bytes`` skip unknown ids (the reference's rule) or raise InvalidInput;
  ``IncrementalDetokenizer.add`` and ``OutputPipeline.feed`` raise InvalidInput naming the id.
- Lone surrogates and other hostile text into encode, stops and the parser: a defined result or
  InvalidInput.
- Random model output into ``OutputParser`` (every mode, random splits) and
  ``parse_tool_calls``: never raises; streamed == one-shot; deltas are well-formed.

Deeper run: ``TEXTPROC_MAX_EXAMPLES=5000 .venv/bin/python -m pytest tests/fuzz/test_fuzz_stream.py``.
"""

from __future__ import annotations

import json
import random
import time
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.fuzz import FUZZ_TEXTS, SMALL_KINDS, hostile_text, json_values, small_tokenizer_json
from tests.helpers.models import available_models, model_dir
from textproc import Tokenizer
from textproc.core.detokenizer import IncrementalDetokenizer
from textproc.errors import InvalidInput
from textproc.core.parsing import OutputParser, merge_deltas, parse_output, parse_tool_calls
from textproc.core.pipeline import OutputPipeline
from textproc.core.stops import MAX_STOP_CHARS, MAX_STOPS, StopChecker

_TOKS: dict[str, Tokenizer] = {}


def _tok(kind: str) -> Tokenizer:
    if kind not in _TOKS:
        _TOKS[kind] = Tokenizer.from_json(small_tokenizer_json(kind))
    return _TOKS[kind]


REAL = [name for name in ("qwen3", "mistral", "gpt2") if name in available_models()]


def _real(name: str) -> Tokenizer:
    path = model_dir(name)  # skips when the fixture is not built
    key = f"real:{name}"
    if key not in _TOKS:
        _TOKS[key] = Tokenizer.from_dir(path)
    return _TOKS[key]


def _splits(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:])]


# -- stops -------------------------------------------------------------------------------------

def reference_truncate(text: str, stops: list[str], include_stop: bool) -> tuple[str, str | None]:
    """Naive: at each end position, the longest stop ending there; the first position wins."""
    for end in range(1, len(text) + 1):
        ending = [s for s in stops if text[:end].endswith(s)]
        if ending:
            stop = max(ending, key=len)
            return (text[:end] if include_stop else text[: end - len(stop)]), stop
    return text, None


_stop_alphabet = st.sampled_from(list("ab<>/\n ") + ["\ud800", "😀", "é"])
_stops_strategy = st.lists(st.text(_stop_alphabet, min_size=1, max_size=24), min_size=1, max_size=6)


@given(_stops_strategy, st.text(_stop_alphabet, max_size=80), st.lists(st.integers(0, 200), max_size=8),
       st.booleans())
def test_stops_match_the_naive_reference(stops: list[str], text: str, cuts: list[int],
                                         include_stop: bool) -> None:
    checker = StopChecker(stops, include_stop=include_stop)
    out = "".join(checker.feed(part) for part in _splits(text, cuts))
    out += checker.finish()
    want, stop = reference_truncate(text, stops, include_stop)
    assert (out, checker.matched) == (want, stop)


@given(st.lists(st.one_of(json_values, st.just(""), st.text(max_size=3)), min_size=1, max_size=5),
       st.integers(1, 8), st.integers(1, 8))
def test_bad_stop_lists_name_the_entry_or_limit(stops: list[Any], max_stops: int, max_chars: int) -> None:
    try:
        checker = StopChecker(stops, max_stops=max_stops, max_stop_chars=max_chars)
    except InvalidInput as e:
        msg = str(e)
        assert "stop[" in msg or f"at most {max_stops}" in msg, msg
        bad = [s for s in stops if not isinstance(s, str) or not s or len(s) > max_chars]
        assert bad or len(set(stops)) > max_stops
        return
    assert all(isinstance(s, str) and 0 < len(s) <= max_chars for s in stops)
    assert len(set(stops)) <= max_stops
    checker.feed("abc")
    checker.finish()


@pytest.mark.parametrize("stops", [None, 5, [None], [["a"]], [{"a": 1}], [""], ["a", ""], [b"x"], {"a"}])
def test_pipeline_refuses_bad_stops(stops: Any) -> None:
    if stops == {"a"}:  # any iterable of strings is a stop list
        OutputPipeline(_tok("bytelevel"), stop=stops)
        return
    with pytest.raises(InvalidInput, match="stop"):
        OutputPipeline(_tok("bytelevel"), stop=stops)


def test_stop_limits_are_enforced_with_the_limit_in_the_message() -> None:
    with pytest.raises(InvalidInput, match=f"at most {MAX_STOPS}"):
        StopChecker([f"s{i}" for i in range(MAX_STOPS + 1)])
    with pytest.raises(InvalidInput, match=f"at most {MAX_STOP_CHARS}"):
        StopChecker(["x" * (MAX_STOP_CHARS + 1)])
    # duplicates count once
    StopChecker(["same"] * (MAX_STOPS + 10))


def test_thousands_of_long_stops_build_in_bounded_memory_and_time() -> None:
    """The largest stop list allowed must not cost O(length**2) per stop.

    Regression: the checker kept a set of every prefix of every stop; 64 stops of 1,024
    characters (the service defaults) cost 38 MB and 0.4 s per distinct list, and 256 cached
    lists ~10 GB. Now it keeps prefixes of <= 16 characters and bisects the sorted stops.
    """
    rnd = random.Random(7)
    stops = ["".join(rnd.choice("ab<") for _ in range(MAX_STOP_CHARS)) for _ in range(MAX_STOPS // 4)]
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        checker = StopChecker(stops)
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 1024 * 1024, f"{peak / 1e6:.0f} MB to build {len(stops)} stops"
    assert elapsed < 10, elapsed
    # and it still truncates exactly, with a stop that ends deep inside a long held tail
    target = stops[5]
    text = "zz" + target[:700]
    out = checker.feed(text)
    assert out == "zz" and checker.held_text == target[:700]
    out += checker.feed(target[700:] + "tail")
    assert out == "zz" and checker.matched == target


# -- token ids from the engine -----------------------------------------------------------------

_bad_ids = st.one_of(
    st.integers(max_value=-1), st.integers(min_value=10**6), st.booleans(),
    st.floats(allow_nan=True), st.none(), st.text(max_size=2), st.lists(st.integers(0, 3), max_size=2),
)


@given(st.sampled_from(SMALL_KINDS), st.lists(st.integers(0, 300), max_size=6), _bad_ids,
       st.integers(0, 6), st.booleans())
def test_bad_ids_into_detokenizer_and_pipeline(kind: str, good: list[int], bad: Any, at: int,
                                               skip: bool) -> None:
    tok = _tok(kind)
    good = [i % tok.vocab_size for i in good]
    ids = good[:at] + [bad] + good[at:]
    detok = IncrementalDetokenizer(tok, skip_special_tokens=skip)
    with pytest.raises(InvalidInput, match="out of range") as info:
        detok.feed(ids)
    assert "IncrementalDetokenizer.feed" in str(info.value)
    pipe = OutputPipeline(tok, skip_special_tokens=skip, stop=["zz"], reasoning=True, tools=True)
    with pytest.raises(InvalidInput):
        pipe.feed(ids)
    with pytest.raises(InvalidInput):
        pipe2 = OutputPipeline(tok, skip_special_tokens=skip)
        pipe2.feed([bad])
    # decode and token_bytes skip unknown ids, like the reference; non-ints are never an index
    if type(bad) is int:
        assert tok.decode(ids, skip_special_tokens=skip) == tok.decode(good, skip_special_tokens=skip)
        assert tok.token_bytes(bad) == b""
    elif not isinstance(bad, bool):  # bools: see test_decode_treats_bools_like_hf
        try:
            text = tok.decode(ids, skip_special_tokens=skip)
        except InvalidInput:
            pass
        else:
            assert text == tok.decode(good, skip_special_tokens=skip)
        try:
            assert tok.token_bytes(bad) == b""
        except InvalidInput:
            pass
    assert tok.id_to_token(bad) is None if not (type(bad) is int and 0 <= bad < tok.vocab_size) else True


@given(st.sampled_from(SMALL_KINDS), st.lists(st.one_of(st.integers(-3, 400), _bad_ids), max_size=6))
def test_for_prompt_takes_any_prompt_ids(kind: str, prompt: list[Any]) -> None:
    tok = _tok(kind)
    try:
        detok = IncrementalDetokenizer.for_prompt(tok, prompt)
    except InvalidInput as e:
        assert "for_prompt" in str(e)
        assert any(type(i) is not int for i in prompt)
        return
    ids = tok.encode("hi there")
    # at_start only decides whether a leading space is stripped
    assert (detok.feed(ids) + detok.finish()).strip() == tok.decode(ids).strip()


def test_decode_treats_bools_like_hf() -> None:
    for kind in SMALL_KINDS:
        tok = _tok(kind)
        assert tok.decode([True, 5]) == tok.decode([1, 5]), kind
        assert tok.decode([False]) == tok.decode([0]), kind


# -- invalid text ------------------------------------------------------------------------------

@given(st.sampled_from(SMALL_KINDS), hostile_text, st.booleans())
def test_encode_hostile_text(kind: str, text: str, special: bool) -> None:
    tok = _tok(kind)
    has_surrogate = any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    try:
        ids = tok.encode(text, add_special_tokens=special)
    except InvalidInput as e:
        assert has_surrogate and "surrogate" in str(e), e
        return
    assert not has_surrogate
    assert all(type(i) is int and 0 <= i < tok.vocab_size for i in ids)
    detok = IncrementalDetokenizer(tok, skip_special_tokens=False, at_start=True)
    streamed = "".join(detok.feed([i]) for i in ids) + detok.finish()
    assert streamed == tok.decode(ids)


@pytest.mark.skipif(not REAL, reason="no real vocabulary built; run scripts/fetch_fixtures.py")
@given(name=st.sampled_from(REAL or ["qwen3"]), text=hostile_text, bad=_bad_ids, data=st.data())
def test_real_vocabularies_hostile_text_and_ids(name: str, text: str, bad: Any, data: st.DataObject) -> None:
    tok = _real(name)
    try:
        ids = tok.encode(text)
    except InvalidInput as e:
        assert "surrogate" in str(e)
        ids = tok.encode(FUZZ_TEXTS[1])
    detok = IncrementalDetokenizer(tok, skip_special_tokens=False, at_start=True)
    streamed = "".join(detok.feed([i]) for i in ids) + detok.finish()
    assert streamed == tok.decode(ids)
    at = data.draw(st.integers(0, len(ids)))
    with pytest.raises(InvalidInput, match="out of range"):
        IncrementalDetokenizer(tok).feed(ids[:at] + [bad] + ids[at:])
    if type(bad) is int and bad >= tok.vocab_size:
        with pytest.raises(InvalidInput):
            OutputPipeline(tok, stop=["\n\n"], reasoning=True, tools=True).feed([*ids, bad])
        assert tok.decode([*ids, bad]) == tok.decode(ids)


@pytest.mark.parametrize("value", [b"bytes", 5, None, ["a"], 3.5])
def test_encode_refuses_non_text(value: Any) -> None:
    with pytest.raises(InvalidInput, match="must be a str"):
        _tok("bytelevel").encode(value)


# -- parsers -----------------------------------------------------------------------------------

_model_pieces = st.sampled_from([
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool", "</", "<", ">", "{", "}", "[", "]",
    '"name"', '"arguments"', ": ", ", ", '"f"', '"x"', "1", "-", "null", "true", "\\", '"', "\\u00e9",
    "\\ud800", "\ud800", "\n", " ", "text", "😀", "[TOOL_CALLS]", '{"name": "f", "arguments": {"a": [1, {"b": null}]}}',
    '{"name": "g", "arguments": "not an object"}', '{"name": 5}', "{{{{{{{{", "]]]]",
])
model_output = st.one_of(
    st.lists(_model_pieces, max_size=20).map("".join),
    hostile_text,
    st.builds(lambda v: "<tool_call>" + json.dumps(v) + "</tool_call>", json_values),
    st.builds(lambda v: "[TOOL_CALLS]" + json.dumps(v), json_values),
)


def _check_deltas(deltas: list[dict[str, Any]]) -> None:
    for delta in deltas:
        assert isinstance(delta, dict) and len(delta) == 1, delta
        key, value = next(iter(delta.items()))
        assert key in ("content", "reasoning_content", "tool_calls"), delta
        if key == "tool_calls":
            for part in value:
                assert isinstance(part["index"], int)
                assert isinstance(part["function"].get("arguments", ""), str)
        else:
            assert isinstance(value, str) and value, delta


@given(model_output, st.lists(st.integers(0, 400), max_size=8), st.booleans(), st.booleans(),
       st.booleans(), st.sampled_from(["hermes", "mistral"]))
def test_output_parser_never_raises(text: str, cuts: list[int], reasoning: bool, tools: bool,
                                    starts_in_reasoning: bool, tool_format: str) -> None:
    opts = {"reasoning": reasoning, "tools": tools, "starts_in_reasoning": starts_in_reasoning,
            "tool_format": tool_format, "request_id": "r1"}
    parser = OutputParser(**opts)
    deltas: list[dict[str, Any]] = []
    for part in _splits(text, cuts):
        deltas += parser.feed(part)
    deltas += parser.finish()
    _check_deltas(deltas)
    merged = merge_deltas(deltas)
    assert merged == parse_output(text, **opts)
    for call in merged["tool_calls"]:
        assert isinstance(call["function"]["name"], str) and call["function"]["name"]
        json.loads(call["function"]["arguments"])
    if not reasoning and not tools:
        assert merged["content"] == text
    content, calls = parse_tool_calls(text, tool_format=tool_format)
    assert isinstance(content, str) and isinstance(calls, list)


@given(model_output, st.sampled_from(SMALL_KINDS), st.lists(st.integers(0, 50), max_size=5),
       st.lists(st.sampled_from(["</tool_call>", "\n\n", "zz", "😀", "<think>"]), max_size=2))
def test_pipeline_on_encoded_model_output(text: str, kind: str, cuts: list[int], stops: list[str]) -> None:
    tok = _tok(kind)
    try:
        ids = tok.encode(text)
    except InvalidInput:
        return
    pipe = OutputPipeline(tok, stop=stops, reasoning=True, tools=True, at_start=True)
    deltas: list[dict[str, Any]] = []
    fed = 0
    for part in _splits(ids, cuts):  # type: ignore[arg-type]
        if not pipe.is_finished:
            fed += len(part)
        deltas += pipe.feed(part)
    deltas += pipe.finish("length")
    _check_deltas(deltas)
    assert pipe.finish_reason in ("stop", "length", "tool_calls")
    assert pipe.n_tokens == fed  # every token up to the step that ended it


def test_fuzz_texts_are_plain() -> None:
    assert all(isinstance(t, str) for t in FUZZ_TEXTS)
