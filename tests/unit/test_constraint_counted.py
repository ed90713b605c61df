"""Counted repetitions answered as whole regions (``counted``): the index is the one the
plain paths build (the regions and the moved answers of ``shift`` switched off), state
for state (same masks, next states, accepting states and completion lengths; the completion
token may be another one on a shortest way), and the walk definition token by token: for
several bounds and minimums, tokens with escapes, partial escapes, whole and partial UTF-8
characters and tokens long enough to run past the bound, several counted strings in one
schema, and repetitions the region's checks must refuse."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.constraint_sample import same_index, sample_vocab, walk_definition_states
from textproc import TokenVocabulary, compile_constraint
from textproc.core.constraints import Budget, json_schema_to_regex
from textproc.core.constraints.automaton.dfa import build_dfa
from textproc.core.constraints.index import counted, shift
from textproc.core.constraints.regex.syntax import parse_regex

_PIECES = [bytes([b]) for b in range(0x20, 0x7F)] + [
    "é".encode(), "中".encode(), "\U0001F600".encode(), b"\xc3", b"\xa9", b"\xe4\xb8", b"\xad", b"\xf0\x9f",
    b"\x98\x80", b"\x9f\x98", "é中".encode(), b"a\xc3", b"\xa9b", b"\\", b"\\n", b"\\\\", b'\\"', b"\\u", b"\\u00",
    b"\\u00e9", b"\\ud83d", b"\\uD8", b"u00e9", b"00", b"e9", b"dead", b"beef", b"Face", b"abc", b"/" * 7,
    b"/" * 19, b"/" * 60, b" " * 12, b"abcdefghijkl", b'ab"}', b'"}', b'"]', b'", "', b'x", "', b'x\\n', b'x\\u0',
    b"tion", b"n\\t", b"\\/" * 3, "é".encode() * 5, "é".encode() * 50, b"nabc", b"u12", b"d7ff", b'0"', b"\x01",
    b'"', b'":', b"12", b"1", b", ", b"true", b"false",
]
_VOCAB = TokenVocabulary([*_PIECES, b""], end_ids=[len(_PIECES)])


def _string(max_length: int, min_length: int = 0) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "string", "maxLength": max_length}
    if min_length:
        s["minLength"] = min_length
    return s


def _object(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


_PATTERNS = {
    "max3": json_schema_to_regex(_object(name=_string(3))),
    "max9": json_schema_to_regex(_object(name=_string(9), n={"type": "integer"})),
    "max40": json_schema_to_regex(_object(name=_string(40))),
    "min5-max33": json_schema_to_regex(_object(name=_string(33, 5))),
    "exactly12": json_schema_to_regex(_object(name=_string(12, 12))),
    "booking": json_schema_to_regex(_object(city=_string(20), nights={"type": "integer", "minimum": 1},
                                            guests={"type": "array", "items": _string(7), "maxItems": 3})),
    "three-strings": json_schema_to_regex(_object(a=_string(8), b=_string(15, 2), c=_string(30))),
    "ascii-class": "[a-z0-9]{3,30}-x",
    # refused by the checks (a letter may end the repetition or go on in it): the other paths
    "ambiguous-end": '"[^"]{0,6}[a-z]"',
    "unbounded": '"[^"]*"',
}


def _plain_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(counted.CountedRegions, "state", lambda self, q: None)
    monkeypatch.setattr(shift.CountedShift, "state", lambda self, q: None)


@pytest.mark.parametrize("name", sorted(_PATTERNS))
def test_regions_give_the_plain_paths_index(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pattern = _PATTERNS[name]
    answered = []
    real = counted.CountedRegions.state

    def counting(self: counted.CountedRegions, q: int) -> object:
        got = real(self, q)
        answered.append(got is not None)
        return got

    monkeypatch.setattr(counted.CountedRegions, "state", counting)
    fast = compile_constraint(_VOCAB, regex=pattern, cache=None)
    _plain_paths(monkeypatch)
    slow = compile_constraint(_VOCAB, regex=pattern, cache=None)
    assert same_index(fast, slow, _VOCAB.size) == fast.n_states == slow.n_states
    dfa = build_dfa(parse_regex(pattern), Budget())
    assert walk_definition_states(fast, dfa, _VOCAB, name) == fast.n_states
    if name in ("ambiguous-end", "unbounded"):
        assert not any(answered)
    else:  # most states came from the regions
        assert sum(answered) > len(answered) // 2


def test_regions_on_real_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample of the Qwen3 vocabulary (quotes, backslashes, hex-looking and multi-byte
    tokens over-represented): the same index as the plain paths, and the walk definition."""
    vocab = sample_vocab()
    pattern = json_schema_to_regex(_object(city=_string(12), guests={"type": "array", "items": _string(5, 1),
                                                                     "maxItems": 2}))
    fast = compile_constraint(vocab, regex=pattern, cache=None)
    dfa = build_dfa(parse_regex(pattern), Budget())
    assert walk_definition_states(fast, dfa, vocab, pattern) == fast.n_states
    _plain_paths(monkeypatch)
    slow = compile_constraint(vocab, regex=pattern, cache=None)
    assert same_index(fast, slow, vocab.size) == fast.n_states


def test_summaries_are_kept_per_vocabulary() -> None:
    """A second schema with other bounds walks no token again: its kinds' moves are the
    first's (a JSON string's, whatever its bounds)."""
    vocab = TokenVocabulary([*_PIECES, b""], end_ids=[len(_PIECES)])
    compile_constraint(vocab, regex=_PATTERNS["max9"], cache=None)
    kept = {k for k in vocab.tables().derived if k[0] == "counted"}
    assert kept
    compile_constraint(vocab, regex=_PATTERNS["max40"], cache=None)
    assert {k for k in vocab.tables().derived if k[0] == "counted"} == kept
