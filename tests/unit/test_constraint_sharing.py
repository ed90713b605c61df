"""Objects with many optional properties stay small: their regex spells each member O(log n)
times, a long regex calls its repeated parts (``(?&name)``) instead of spelling them again,
and the NFA builds equal sub-expressions followed by the same state once, so the subset
construction makes about as many states as the minimal DFA has."""

from __future__ import annotations

import itertools
import random

import pytest
import regex

from textproc.core.constraints import Budget, json_schema_to_regex
from textproc.core.constraints.automaton.dfa import build_dfa
from textproc.core.constraints.regex.syntax import parse_regex
from textproc.core.constraints.schema.emit import Compiler, _members
from textproc.core.constraints.schema.nodes import Node
from textproc.errors import InvalidInput


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
    (1,335 minimal); sharing the spellings (and UTF-8 suffixes) makes no more than that."""
    inner = {"type": "object", "properties": {k: {"type": "string"} for k in "abc"}}
    schema = {"type": "object", "properties": {f"p{i}": inner for i in range(6)}}
    dfa = build_dfa(parse_regex(json_schema_to_regex(schema)), Budget(max_states=1_340))
    assert dfa.n_states == 1335
    end = dfa.walk(dfa.start, b'{"p4": {"c": "", "zz": [1, "s"]}, "q": null}')
    assert end >= 0 and dfa.accepting[end]
    assert dfa.walk(dfa.start, b'{"p4": {"c": 1') == -1


ITEM = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {}}}
CALLED = {"type": "object", "properties": {
    "a": ITEM, "b": {"type": "array", "items": ITEM}, "c": {"enum": ["u", "v", 3], "type": "string"},
    "d": {"type": "array", "items": {"enum": [True, None]}, "uniqueItems": True}}, "required": ["a"]}


def test_a_regex_with_calls_is_the_plain_regex_language() -> None:
    """Long sub-regexes written once and called (``(?&name)``) change the text, not the
    language: the minimal DFAs are the same, and the ``regex`` module reads it alike."""
    compiler = Compiler(CALLED, max_recursion=5, any_depth=2, strict=False, max_chars=1 << 20, define_from=16)
    body = compiler.compile([Node(CALLED, "", "$")])
    assert body is not None and compiler.defined
    called = compiler.definitions() + body
    plain = json_schema_to_regex(CALLED)
    assert "(?&" in called and "(?&" not in plain and len(called) < len(plain)
    a, b = build_dfa(parse_regex(called), Budget()), build_dfa(parse_regex(plain), Budget())
    assert (a.rows, a.accepting) == (b.rows, b.accepting)
    matcher = regex.compile(called)
    for text, ok in [('{"a": {"x": 1, "y": [true]}, "b": [{}, {"y": {"k": 1}}], "c": "u", "d": [true, null]}', True),
                     ('{"a": {}, "c": "w"}', False), ('{"a": {"x": 1.5}}', False), ('{"b": []}', False)]:
        assert bool(matcher.fullmatch(text)) == ok == (a.walk(a.start, text.encode()) >= 0
                                                         and a.accepting[a.walk(a.start, text.encode())]), text


@pytest.mark.parametrize(("pattern", "error"), [
    ("(?&a)(?P<a>x)", "no named group closed before it"), ("(?P<a>x(?&a))", "no named group closed before it"),
    ("(?P<a>x)(?P<a>y)(?&a)", "two different groups of that name"), ("(?(DEFINE)x)", "anything but named groups"),
    ("(?&a", "an unclosed group reference")])
def test_calls_name_a_group_closed_before_them(pattern: str, error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        parse_regex(pattern)
    dfa = build_dfa(parse_regex("(?P<a>x)(?P<a>x)(?&a)"), Budget())  # the same group twice: one
    assert dfa.accepting[dfa.walk(dfa.start, b"xxx")] and dfa.walk(dfa.start, b"xxxx") == -1
