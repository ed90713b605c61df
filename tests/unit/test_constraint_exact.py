"""The index builder's shortcuts (bitsets for string loops, runs such as ``\\uXXXX``, tokens
leaving a string walked by their distinct rests, caches kept across compiles) give exactly the
definition: a token is allowed in a state iff walking its bytes through the DFA never dies,
and it leads to the state the walk ends in. Checked token by token on a sample of the real
Qwen3 vocabulary (quotes, backslashes, hex-looking and multi-byte tokens over-represented),
for schemas with strings, escapes, counted strings, formats and enums."""

from __future__ import annotations

import pytest

from tests.helpers.constraint_sample import SCHEMAS, STR, walk_definition_states
from tests.helpers.constraint_sample import sample_vocab as _sample
from textproc import TokenVocabulary, compile_constraint
from textproc.core.constraints import Budget, json_schema_to_regex
from textproc.core.constraints.automaton.dfa import build_dfa
from textproc.core.constraints.regex.syntax import parse_regex


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_index_is_the_walk_definition(name: str) -> None:
    vocab = _sample()
    pattern = json_schema_to_regex(SCHEMAS[name])
    dfa = build_dfa(parse_regex(pattern), Budget())
    index = compile_constraint(vocab, regex=pattern, cache=None)
    assert walk_definition_states(index, dfa, vocab, name) == index.n_states


def test_tokens_through_declared_key_bytes() -> None:
    """A key being written that shares a prefix with declared keys reads like the key string's
    loop but for a few bytes: tokens through those bytes (``xy":"`` dies where ``xy`` is a
    declared integer, lives where the key is any other) on a vocabulary where enough tokens
    start with the byte for the bitset path."""
    tails = [bytes([b]) for b in b"abcdefghijklmnopqrstuvwxyz"] + [
        b'"', b'":"', b'":1', b"y", b"yz", b'y"', b'y":"', b'y":1', b'y": 1', b'yz":"', b"y\\n", b"y\\",
        "y\u00e9".encode(), "\u00e9".encode(), b"\xc3", b"y\xc3", b'_q":t', b'_q":"', b"_", b"\x01", b"yy"]
    tokens = [bytes([b]) for b in range(0x20, 0x7F)] + ["\u00e9".encode(), b"\xc3", b"\xa9"]
    tokens += [b"x" + t for t in tails] + [b'"' + t for t in (b"x", b"xy", b'xy":', b"xz", b'"')] + [b""]
    vocab = TokenVocabulary(tokens, end_ids=[len(tokens) - 1])
    schema = {"type": "object", "properties": {"xy": {"type": "integer"}, "xyz": STR, "x_q": {"type": "boolean"},
                                               "o": {"type": "object", "properties": {"xy": STR}}}}
    # and a state like the loop but for a dead loop byte (``xq`` dies, ``xa`` stays)
    for pattern in (json_schema_to_regex(schema), "[a-wyz][a-z]*|x([a-pr-z][a-z]*)?"):
        dfa = build_dfa(parse_regex(pattern), Budget())
        index = compile_constraint(vocab, regex=pattern, cache=None)
        assert walk_definition_states(index, dfa, vocab, pattern) == index.n_states
