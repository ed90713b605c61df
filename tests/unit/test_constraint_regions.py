"""States on short cycles answered from region templates kept per vocabulary
(``regions``): the index is the walk definition's, token by token; every state allows
the same tokens, with the same next states, as in the index built without templates (state for
state along both, shortest completions as long); and an index does not depend on what the
vocabulary compiled before it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.agent_tools import AGENT_TOOLS
from tests.helpers.constraint_sample import same_index, sample_vocab, walk_definition_states
from textproc import TokenVocabulary, compile_constraint
from textproc.core.constraints import Budget, json_schema_to_regex
from textproc.core.constraints.automaton.dfa import build_dfa
from textproc.core.constraints.index import regions
from textproc.core.constraints.plans.forced_calls import forced_calls_pattern
from textproc.core.constraints.plans.strict_calls import strict_calls_pattern
from textproc.core.constraints.regex.syntax import parse_regex
from textproc.core.parsing import REASONING_FORMATS, TOOL_FORMATS

# single ASCII bytes, whole and partial UTF-8 characters, escapes, hex digits, quotes with what
# follows them in JSON, markers and their pieces, long runs
_PIECES = [bytes([b]) for b in range(0x20, 0x7F)] + [
    "é".encode(), "中".encode(), "\U0001F600".encode(), b"\xc3", b"\xa9", b"\xe4\xb8", b"\xad", b"\xf0\x9f",
    b"\x98\x80", "é中".encode(), b"a\xc3", b"\\", b"\\n", b"\\\\", b'\\"', b"\\u", b"\\u00", b"\\u00e9",
    b"\\ud83d", b"u00e9", b"00", b"e9", b"dead", b"beef", b"abc", b'"}', b'",', b'", "', b'"]', b'"}}',
    b'"}}\n', b'x"', b'ab", "c', b'": "', b'"]}', b"<tool_call>", b"</tool_call>", b"<think>", b"</think>",
    b"<tool", b"_call", b">\n", b"\n", b"\n\n", b"</", b"<", b"call", b"tion", b" " * 8, b"/" * 7,
]


def _vocab() -> TokenVocabulary:
    """A vocabulary of its own (templates are kept per vocabulary)."""
    return TokenVocabulary([*_PIECES, b""], end_ids=[len(_PIECES)])


STR = {"type": "string"}
TOOLS = {
    "lookup": {"type": "object", "properties": {"query": STR, "tags": {"type": "array", "items": STR}},
               "required": ["query"], "additionalProperties": False},
    "write": {"type": "object", "properties": {"path": STR, "text": STR, "lines": {"type": "integer"}},
              "required": ["path", "text"], "additionalProperties": False},
    "note": {"type": "object", "properties": {"title": STR, "body": {"type": "object", "properties": {"x": STR}}}},
}


def _strict(fmt: str, tools: dict[str, Any] = TOOLS) -> str:
    return strict_calls_pattern(TOOL_FORMATS[fmt], tools, parallel=True, to_regex=json_schema_to_regex,
                                reasoning=REASONING_FORMATS["think"])


CASES = {
    "strings": lambda: json_schema_to_regex({"type": "object", "properties": {
        "a": STR, "b": STR, "c": {"type": "array", "items": STR}, "d": {"type": "object", "properties": {"e": STR}}}}),
    # open objects, values of any type: regions that many tokens leave are cut down to a string's
    "open-any": lambda: json_schema_to_regex({"type": "object", "properties": {
        "a": STR, "b": {"type": "array", "items": {}}, "c": {"type": "object"}}}),
    "strict-hermes": lambda: _strict("hermes"),
    "strict-qwen3-coder": lambda: _strict("qwen3_coder"),
    "forced-hermes": lambda: forced_calls_pattern("hermes", TOOLS, None, parallel=True, to_regex=json_schema_to_regex),
}


def _templated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets one entry per state answered from a template."""
    answered: list[int] = []
    real = regions.Regions._answer

    def counting(self: regions.Regions, template: regions.Template, order: list[int]) -> Any:
        answered.append(order[0])
        return real(self, template, order)

    monkeypatch.setattr(regions.Regions, "_answer", counting)
    return answered


@pytest.mark.parametrize("name", sorted(CASES))
def test_templates_give_the_index_built_without_them(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pattern = CASES[name]()
    vocab = _vocab()
    answered = _templated(monkeypatch)
    fast = compile_constraint(vocab, regex=pattern, cache=None)
    assert len(answered) > 5  # string states from templates, most of them made by other states
    dfa = build_dfa(parse_regex(pattern), Budget())
    assert walk_definition_states(fast, dfa, vocab, name) == fast.n_states
    monkeypatch.setattr(regions.Regions, "state", lambda self, q: None)
    slow = compile_constraint(_vocab(), regex=pattern, cache=None)
    assert same_index(fast, slow, vocab.size) == fast.n_states == slow.n_states


def test_an_index_does_not_depend_on_what_was_compiled_before() -> None:
    """Templates made by other constraints answer in the order a new one would: the tables
    are the same, state numbers and completions included."""
    fresh = compile_constraint(_vocab(), regex=CASES["strict-hermes"](), cache=None)
    vocab = _vocab()
    for name in ("strings", "forced-hermes", "strict-qwen3-coder"):
        compile_constraint(vocab, regex=CASES[name](), cache=None)
    after = compile_constraint(vocab, regex=CASES["strict-hermes"](), cache=None)
    assert after.pack() == fresh.pack()


def test_agent_tools_on_a_qwen3_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strict calls of a coding agent's tools on a sample of the Qwen3 vocabulary: the walk
    definition token by token, and the index built without templates."""
    vocab = sample_vocab()
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in AGENT_TOOLS[1:3]}
    pattern = _strict("hermes", tools)
    answered = _templated(monkeypatch)
    fast = compile_constraint(vocab, regex=pattern, cache=None)
    assert len(answered) > 20
    dfa = build_dfa(parse_regex(pattern), Budget())
    assert walk_definition_states(fast, dfa, vocab, "agent tools") == fast.n_states
    monkeypatch.setattr(regions.Regions, "state", lambda self, q: None)
    slow = compile_constraint(vocab, regex=pattern, cache=None)
    assert same_index(fast, slow, vocab.size) == fast.n_states
