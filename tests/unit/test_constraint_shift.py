"""Counted repetitions answered a position on (``shift``): the index of a counted string
is the one the build makes without moving answers, table for table (masks, next states,
exceptions, state numbers, shortest completions), including the last positions before the
bound, where tokens long enough to reach it walk differently from each position (trie walks
walked again in part, ``index.shift``)."""

from __future__ import annotations

import pytest

from textproc import TokenVocabulary, compile_constraint
from textproc.core.constraints import Budget, json_schema_to_regex
from textproc.core.constraints.automaton.dfa import build_dfa
from textproc.core.constraints.index import counted, shift
from textproc.core.constraints.regex.syntax import parse_regex
from tests.helpers.constraint_sample import walk_definition_states

# single ASCII bytes, whole and partial UTF-8 characters, escapes and partial escapes, hex
# digits, and tokens long enough to run past a short bound ("/" runs, spaces, a word)
_PIECES = [bytes([b]) for b in range(0x20, 0x7F)] + [
    "é".encode(), "中".encode(), "\U0001F600".encode(), b"\xc3", b"\xa9", b"\xe4\xb8", b"\xad", b"\xf0\x9f",
    b"\x98\x80", "é中".encode(), b"a\xc3", b"\\", b"\\n", b"\\\\", b'\\"', b"\\u", b"\\u00", b"\\u00e9",
    b"\\ud83d", b"u00e9", b"00", b"e9", b"dead", b"beef", b"Face", b"abc", b"/" * 7, b"/" * 19, b" " * 12,
    b"abcdefghijkl", b'ab"}', b'"}', b'x\\n', b'x\\u0', b"tion", b"n\\t", b"\\/" * 3, "é" .encode() * 5,
]
_VOCAB = TokenVocabulary([*_PIECES, b""], end_ids=[len(_PIECES)])


def _counted(max_length: int, min_length: int = 0) -> dict[str, object]:
    name: dict[str, object] = {"type": "string", "maxLength": max_length}
    if min_length:
        name["minLength"] = min_length
    return {"type": "object", "properties": {"name": name, "n": {"type": "integer"}}, "required": ["name"],
            "additionalProperties": False}


@pytest.mark.parametrize(("max_length", "min_length"), [(9, 0), (40, 0), (33, 5)])
def test_moved_answers_give_the_same_index(max_length: int, min_length: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pattern = json_schema_to_regex(_counted(max_length, min_length))
    moved = []
    real_moved = shift._moved

    def counting(*args: object) -> object:
        got = real_moved(*args)  # type: ignore[arg-type]
        moved.append(got is not None)
        return got

    replayed = []
    real_replayed = shift.CountedShift._replayed

    def counting_replays(self: shift.CountedShift, *args: int) -> object:
        replayed.append(args)
        return real_replayed(self, *args)

    chains = []
    real_chain = shift.CountedShift._replayed_chain

    def counting_chains(self: shift.CountedShift, *args: object) -> object:
        got = real_chain(self, *args)  # type: ignore[arg-type]
        chains.append(got is not None)
        return got

    # the moved answers are what a region the checks refuse gets (counted, switched off)
    monkeypatch.setattr(counted.CountedRegions, "state", lambda self, q: None)
    monkeypatch.setattr(shift, "_moved", counting)
    monkeypatch.setattr(shift.CountedShift, "_replayed", counting_replays)
    monkeypatch.setattr(shift.CountedShift, "_replayed_chain", counting_chains)
    fast = compile_constraint(_VOCAB, regex=pattern, cache=None)
    monkeypatch.setattr(shift.CountedShift, "state", lambda self, q: None)
    slow = compile_constraint(_VOCAB, regex=pattern, cache=None)
    assert fast.pack() == slow.pack()
    if max_length >= 30:  # long enough for positions far from the bound: answers were moved
        assert sum(moved) > max_length  # whole answers moved
        assert replayed  # and trie walks near the bound walked again in part
        assert sum(chains) > 10  # and chain states' rest tries
    dfa = build_dfa(parse_regex(pattern), Budget())
    assert walk_definition_states(fast, dfa, _VOCAB, pattern) == fast.n_states


def test_two_counted_strings_each_move_in_their_own_region() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 30},
                                               "b": {"type": "string", "maxLength": 25, "minLength": 2}},
              "required": ["a", "b"], "additionalProperties": False}
    pattern = json_schema_to_regex(schema)
    dfa = build_dfa(parse_regex(pattern), Budget())
    index = compile_constraint(_VOCAB, regex=pattern, cache=None)
    assert walk_definition_states(index, dfa, _VOCAB, pattern) == index.n_states
