"""The index builder's shortcuts (bitsets for string loops, runs such as ``\\uXXXX``, tokens
leaving a string walked by their distinct rests, caches kept across compiles) give exactly the
definition: a token is allowed in a state iff walking its bytes through the DFA never dies,
and it leads to the state the walk ends in. Checked token by token on a sample of the real
Qwen3 vocabulary (quotes, backslashes, hex-looking and multi-byte tokens over-represented),
for schemas with strings, escapes, counted strings, formats and enums."""

from __future__ import annotations

import pytest

from tests.helpers.constraint_sample import SCHEMAS, walk_definition_states
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
    assert walk_definition_states(index, dfa, vocab, name) == index.n_states
