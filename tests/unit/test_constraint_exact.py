"""The index builder's shortcuts (bitsets for string loops, runs such as ``\\uXXXX``, tokens
leaving a string walked by their distinct rests, caches kept across compiles) give exactly the
definition: a token is allowed in a state iff walking its bytes through the DFA never dies,
and it leads to the state the walk ends in. Checked token by token on a sample of the real
Qwen3 vocabulary (quotes, backslashes, hex-looking and multi-byte tokens over-represented),
for schemas with strings, escapes, counted strings, formats and enums."""

from __future__ import annotations

import pytest

from tests.helpers.constraint_sample import SCHEMAS
from tests.helpers.constraint_sample import sample_vocab as _sample
from textproc import compile_constraint
from textproc.core.constraints import Budget, json_schema_to_regex
from textproc.core.constraints.automaton import build_dfa
from textproc.core.constraints.regex_syntax import parse_regex


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_index_is_the_walk_definition(name: str) -> None:
    vocab = _sample()
    pattern = json_schema_to_regex(SCHEMAS[name])
    dfa = build_dfa(parse_regex(pattern), Budget())
    index = compile_constraint(vocab, regex=pattern, cache=None)
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
            assert (token_id in allowed) == (walked >= 0), (name, vocab.token_bytes(token_id))
            if walked >= 0:
                nxt = index.next_state(state, token_id)
                if nxt not in seen:
                    seen[nxt] = walked
                    todo.append(nxt)
                assert seen[nxt] == walked, (name, vocab.token_bytes(token_id))
    assert len(seen) == index.n_states
