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



def same_index(a: Any, b: Any, vocab_size: int) -> int:
    """Assert that ``a`` and ``b`` allow the same ids in every state reached from their initial
    states, each leading to corresponding states (one state of ``b`` per state of ``a``), with
    the same accepting states and shortest completion lengths, and that each state's completion
    token is on a shortest way (the paths may pick different ones); the number of states."""
    partner = {a.initial_state: b.initial_state}
    todo = [a.initial_state]
    while todo:
        s = todo.pop()
        t = partner[s]
        assert a.allowed_mask(s) == b.allowed_mask(t), (s, t)
        assert a.is_accepting(s) == b.is_accepting(t)
        assert a.completion_length(s) == b.completion_length(t)
        for x, q in ((a, s), (b, t)):
            if 0 < x.completion_length(q) < 1 << 30:
                assert x.completion_length(x.next_state(q, x.completion_token(q))) == x.completion_length(q) - 1
        (da, ea), (db, eb) = a.transitions(s), b.transitions(t)
        # the ids in either exception map, and one id going to each default (all ids where a
        # row by character count stands in for the default)
        ids: set[int] | range = range(vocab_size) if da < 0 or db < 0 else ea.keys() | eb.keys()
        if da >= 0 and db >= 0:
            plain = set(a.allowed_ids(s)) - ids - set(a.end_ids)
            ids |= set(list(plain)[:1])
        for token_id in ids:
            x, y = a.next_state(s, token_id), b.next_state(t, token_id)
            assert (x < 0) == (y < 0), (s, t, token_id)
            if x >= 0:
                if x not in partner:
                    partner[x] = y
                    todo.append(x)
                assert partner[x] == y, (s, t, token_id)
    return len(partner)
