"""Objects with many optional properties stay small: their regex spells each member O(log n)
times and the NFA builds equal sub-expressions followed by the same state once, so the subset
construction makes about as many states as the minimal DFA has."""

from __future__ import annotations

import itertools
import random

import pytest
import regex

from textproc.core.constraints import Budget, json_schema_to_regex
from textproc.core.constraints.automaton import build_dfa
from textproc.core.constraints.regex_syntax import parse_regex
from textproc.core.constraints.schema_emit import _members


def _valid(seq: tuple[str, ...], members: list[tuple[str, bool]], extra: bool, nonempty: bool) -> bool:
    """The definition: declared members in their order, each at most once, every required one,
    then (when allowed) any number of extra ones; at least one member when ``nonempty``."""
    order = {m: i for i, (m, _) in enumerate(members)}
    k = 0
    while k < len(seq) and seq[k] in order and (k == 0 or order[seq[k]] > order[seq[k - 1]]):
        k += 1
    declared, rest = seq[:k], seq[k:]
    return (all(m in declared for m, required in members if required)
            and all(x == "x" for x in rest) and (extra or not rest) and (len(seq) > 0 or not nonempty))


@pytest.mark.parametrize("seed", range(24))
def test_members_spell_the_ordered_subsets(seed: int) -> None:
    rng = random.Random(seed)
    members = [(chr(97 + i), rng.random() < 0.3) for i in range(rng.randint(1, 6))]
    extra, nonempty = rng.random() < 0.5, rng.random() < 0.3
    pattern = _members(members, "x" if extra else None, nonempty=nonempty)
    assert pattern is not None
    matcher = regex.compile(pattern)
    letters = [m for m, _ in members] + ["x"]
    for n in range(5):
        for seq in itertools.product(letters, repeat=n):
            text = "{" + ", ".join(seq) + "}"
            assert bool(matcher.fullmatch(text)) == _valid(seq, members, extra, nonempty), (members, text)


def test_optional_properties_are_spelled_n_log_n_times() -> None:
    def size(n: int) -> int:
        return len(json_schema_to_regex({"type": "object", "properties": {
            f"p{i:03d}": {"type": "string"} for i in range(n)}, "additionalProperties": False}))

    assert size(128) < 2.5 * size(64)  # one alternative per first member spelled: 4x


def test_open_objects_determinise_to_about_their_minimal_size() -> None:
    """Six optional open objects: one subset per spelling of each member was 27,546 states
    (1,335 minimal); sharing the spellings keeps it under 2,000."""
    inner = {"type": "object", "properties": {k: {"type": "string"} for k in "abc"}}
    schema = {"type": "object", "properties": {f"p{i}": inner for i in range(6)}}
    dfa = build_dfa(parse_regex(json_schema_to_regex(schema)), Budget(max_states=2_000))
    assert dfa.n_states == 1335
    end = dfa.walk(dfa.start, b'{"p4": {"c": "", "zz": [1, "s"]}, "q": null}')
    assert end >= 0 and dfa.accepting[end]
    assert dfa.walk(dfa.start, b'{"p4": {"c": 1') == -1
