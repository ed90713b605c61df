"""Schemas and a sample of the real Qwen3 vocabulary (quotes, backslashes, hex-looking and
multi-byte tokens over-represented) on which the index builders are checked token by token
against the walk definition."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from tests.helpers.models import model_dir
from textproc import TokenVocabulary

STR = {"type": "string"}
SCHEMAS = {
    "strings": {"type": "object", "properties": {"a": STR, "b": {"type": "array", "items": STR}}, "required": ["a"]},
    "counted": {"type": "object", "properties": {"c": {"type": "string", "minLength": 1, "maxLength": 5}}},
    "formats": {"type": "object", "properties": {"u": {"type": "string", "format": "uuid"},
                                                 "e": {"type": "string", "format": "email"}}},
    "enum-and-number": {"type": "object", "properties": {"k": {"enum": ["x\"y", "caf\u00e9", 3]},
                                                         "n": {"type": "number"}}, "required": ["k", "n"]},
    "pattern": {"type": "string", "pattern": "^[a-f0-9]{2,6}-x$"},
    # an open object's keys sharing prefixes (a key being written is near the key string's loop)
    "key-prefixes": {"type": "object", "properties": {"de_id": {"type": "integer"}, "de_f\u00e9e": STR,
                                                      "dead": {"type": "object", "properties": {"bee": STR}},
                                                      "e\\c": STR}},
}


@lru_cache(maxsize=1)
def sample_vocab() -> TokenVocabulary:
    full = TokenVocabulary.from_dir(model_dir("qwen3"))
    picked: list[bytes] = []
    for i in range(full.size):
        data = full.token_bytes(i)
        if not data:
            continue
        hexish = len(data) <= 6 and not data.lower().lstrip(b"0123456789abcdef\" ")
        if len(data) == 1 or i % 151 == 0 or (b'"' in data and i % 3 == 0) or b"\\" in data or hexish or (
                data[0] >= 0x80 and i % 41 == 0):
            picked.append(data)
    return TokenVocabulary([*picked, b""], end_ids=[len(picked)])


def walk_definition_states(index: Any, dfa: Any, vocab: TokenVocabulary, what: str) -> int:
    """Assert that ``index`` is the walk definition of ``dfa`` on ``vocab`` (a token is allowed
    in a state iff walking its bytes never dies, and leads where the walk ends); the number of
    index states reached."""
    end = vocab.end_ids[0]
    seen = {index.initial_state: dfa.start}
    todo = [index.initial_state]
    while todo:
        state = todo.pop()
        q = seen[state]
        allowed = set(index.allowed_ids(state))
        assert (end in allowed) == dfa.accepting[q]
        for token_id in range(end):
            walked = dfa.walk(q, vocab.token_bytes(token_id))
            assert (token_id in allowed) == (walked >= 0), (what, vocab.token_bytes(token_id))
            if walked >= 0:
                nxt = index.next_state(state, token_id)
                if nxt not in seen:
                    seen[nxt] = walked
                    todo.append(nxt)
                assert seen[nxt] == walked, (what, vocab.token_bytes(token_id))
    return len(seen)


def same_index(a: Any, b: Any) -> int:
    """Assert that indexes ``a`` and ``b`` are one automaton whatever their state numbers and
    table layouts: walked together from their initial states, each pair of states allows the
    same ids (masks equal), sends each to a pair of states walked together, is accepting
    alike and has the same shortest completion length, and each completion token is on a
    shortest way. The number of state pairs."""
    pairs = {a.initial_state: b.initial_state}
    todo = [a.initial_state]
    while todo:
        s = todo.pop()
        t = pairs[s]
        assert a.allowed_mask(s) == b.allowed_mask(t), (s, t)
        assert a.is_accepting(s) == b.is_accepting(t)
        assert a.completion_length(s) == b.completion_length(t), (s, t)
        for x, q in ((a, s), (b, t)):
            if 0 < x.completion_length(q) < 1 << 30:
                n = x.next_state(q, x.completion_token(q))
                assert x.completion_length(n) == x.completion_length(q) - 1, q
        ends = set(a.end_ids)
        for token_id in a.allowed_ids(s):
            if token_id in ends:
                continue
            n, m = a.next_state(s, token_id), b.next_state(t, token_id)
            if n not in pairs:
                pairs[n] = m
                todo.append(n)
            assert pairs[n] == m, (s, token_id)
    return len(pairs)
