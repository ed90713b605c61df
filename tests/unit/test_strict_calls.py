"""Strict tool calls in free text (``strict_calls_pattern``) for every tool-call format, and the
marker-free text it is made of (``free_text.without``): outputs the pattern accepts parse back,
with the format's own OutputParser, to calls that validate against their schemas (nothing
marked left in content); any text without a marker is accepted, at the byte level over tokens
too (a marker as one special id or as pieces)."""

from __future__ import annotations

import codecs
import json
import random
import re
from typing import Any
from unittest import mock

import jsonschema
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.helpers.regex_sampler import sample
from tests.helpers.tool_calls import render
from textproc.core.constraints import Budget, Guide, TokenVocabulary, compile_constraint
from textproc.core.constraints.automaton.dfa import build_dfa
from textproc.core.constraints.automaton.lazy import lazy_dfa
from textproc.core.constraints.plans import forced_calls, strict_calls
from textproc.core.constraints.plans.free_text import without
from textproc.core.constraints.plans.strict_calls import free_reasoning_pattern, strict_calls_pattern
from textproc.core.constraints.regex.syntax import parse_regex
from textproc.core.constraints.schema.to_regex import json_schema_to_regex
from textproc.core.parsing import REASONING_FORMATS, TOOL_FORMATS, parse_output
from textproc.errors import InvalidInput

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer", "minimum": 0, "maximum": 30},
    "unit": {"enum": ["c", "f"]}, "ok": {"type": "boolean"}, "rate": {"type": "integer"}},
    "required": ["city"]}
# (numbers: the forced spelling of Python-literal formats admits exponents past 1e308, which read
# back as inf and make the call content: a known gap of forced_calls, so integers here)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]
STRICT_FORMATS = sorted(n for n, f in TOOL_FORMATS.items() if f.whole_parser is None)


class _Dfa:
    """A full match by textproc's own byte DFA (linear; Python's re backtracks badly on the
    long alternations of phrase markers), built on demand: only the states a text walks."""

    def __init__(self, pattern: str) -> None:
        self.dfa = lazy_dfa(parse_regex(pattern), Budget(max_seconds=60))

    def fullmatch(self, text: str) -> bool:
        state = self.dfa.walk(self.dfa.start, text.encode())
        return state >= 0 and bool(self.dfa.accepting[state])


def _by_name(tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {t["function"]["name"]: t["function"]["parameters"] for t in tools}


def _reasoning(fmt: str) -> str:
    return TOOL_FORMATS[fmt].reasoning or "think"


def _pattern(fmt: str, tools: list[dict[str, Any]] = TOOLS, *, parallel: bool = True,
             reasoning: str | None = "default", inside: bool = False, plain: bool = True) -> str:
    """The strict pattern; ``plain``: in Python ``re`` syntax at any length (Python's ``re`` and
    the sampler read these tests' patterns; past ``strict_calls.PLAIN_MAX_CHARS`` the service's
    writes its calls once)."""
    rname = _reasoning(fmt) if reasoning == "default" else reasoning
    with mock.patch.object(strict_calls, "PLAIN_MAX_CHARS", 1 << 30 if plain else strict_calls.PLAIN_MAX_CHARS):
        return strict_calls_pattern(TOOL_FORMATS[fmt], _by_name(tools), parallel=parallel,
                                    to_regex=json_schema_to_regex,
                                    reasoning=REASONING_FORMATS[rname] if rname else None,
                                    starts_in_reasoning=inside)


def _check_parse(fmt: str, text: str, tools: list[dict[str, Any]], *, parallel: bool,
                 inside: bool = False, rname: str | None = None) -> dict[str, Any]:
    got = parse_output(text, tools=True, reasoning=True, tool_format=fmt, reasoning_format=rname or _reasoning(fmt),
                       tool_schemas=tools, parallel_tool_calls=parallel, starts_in_reasoning=inside)
    schemas = _by_name(tools)
    for call in got["tool_calls"]:
        jsonschema.validate(json.loads(call["function"]["arguments"]), schemas[call["function"]["name"]])
    for tag in TOOL_FORMATS[fmt].open_tags:  # every marked section was a call
        assert tag not in got["content"], (fmt, text, got)
    if not parallel:
        assert len(got["tool_calls"]) <= 1
    return got


def test_gpt_oss_is_refused_with_the_reason() -> None:
    with pytest.raises(InvalidInput, match="not marked in content"):
        _pattern("gpt_oss")


@pytest.mark.parametrize("fmt", STRICT_FORMATS)
@pytest.mark.parametrize("parallel", [True, False])
def test_sampled_strict_outputs_parse_back_to_valid_calls(fmt: str, parallel: bool) -> None:
    pattern = _pattern(fmt, parallel=parallel)
    compiled = re.compile(pattern)
    n_calls = 0
    for seed in range(40):
        text = sample(pattern, random.Random(seed))
        assert compiled.fullmatch(text)
        n_calls += len(_check_parse(fmt, text, TOOLS, parallel=parallel)["tool_calls"])
    assert n_calls > 0  # the samples do hold calls


@pytest.mark.parametrize("fmt", STRICT_FORMATS)
def test_text_around_a_rendered_call_is_accepted(fmt: str) -> None:
    pattern = re.compile(_pattern(fmt, reasoning=None))
    call = render(fmt, "get_weather", {"city": "Paris", "days": 3})
    tags = TOOL_FORMATS[fmt].open_tags
    marked = call if call.startswith(tags) else tags[0] + call  # a bare '{' or '[' starts only the answer
    for before, after in (("", ""), ("Let me check. ", "\nDone."), ("", " ok")):
        text = before + (call if not before else marked) + after
        assert pattern.fullmatch(text), text
        got = _check_parse(fmt, text, TOOLS, parallel=True)
        assert [c["function"]["name"] for c in got["tool_calls"]] == ["get_weather"]
    assert not pattern.fullmatch(render(fmt, "unknown_tool", {}))
    bad = render(fmt, "get_weather", {"days": 3})  # city is required
    assert not pattern.fullmatch("Sure: " + (bad if bad.startswith(tags) else tags[0] + bad))


def _marker_free(fmt: str, text: str) -> bool:
    f = TOOL_FORMATS[fmt]
    first = text.lstrip(" \t\r\n")[:1]
    return not any(t in text for t in f.open_tags) and not (first and first in f.start_chars)


@pytest.mark.parametrize("fmt", STRICT_FORMATS)
@given(text=st.text(alphabet=st.sampled_from(list("<>|[]{}_tool cal\n\u2581\uff5c") + ["é", "😀"]), max_size=30)
       | st.text(max_size=30))
def test_free_text_is_never_constrained(fmt: str, text: str) -> None:
    """Any text without the format's markers is a whole output, and stays text to the parser."""
    assume(_marker_free(fmt, text))
    assert re.fullmatch(_pattern(fmt, reasoning=None), text)


@given(text=st.text(alphabet=st.sampled_from(list("<tol_cap>|/ ki[]") + ["é"]), max_size=40),
       markers=st.sampled_from([["<tool_call>"], ["<|tool_call|>", "<tool_call>"], ["functools"],
                                ["</think>", "<tool_call>"], ["[TOOL_CALLS]"]]))
def test_without_is_exactly_the_complement(text: str, markers: list[str]) -> None:
    assert bool(re.fullmatch(without(markers), text)) == (not any(m in text for m in markers))
    first = text.lstrip(" \t\r\n")[:1]
    expected = not any(m in text for m in markers) and first not in ("[", "{")
    assert bool(re.fullmatch(without(markers, first_excluded="[{"), text)) == expected


def test_overlapping_markers_are_refused() -> None:
    with pytest.raises(InvalidInput, match="overlap"):
        without(["abab"])
    with pytest.raises(InvalidInput, match="contains"):
        without(["<tool_call>", "tool"])


@pytest.mark.parametrize("rname", sorted(n for n, r in REASONING_FORMATS.items() if r.open_tags))
def test_reasoning_comes_first_in_its_own_markup(rname: str) -> None:
    rfmt = REASONING_FORMATS[rname]
    call = render("hermes", "ping", {})
    close = rfmt.close_tags[0]
    inside = _Dfa(_pattern("hermes", reasoning=rname, inside=True))
    text = f"plan <tool_call> {{not json}} {rfmt.open_tags[0]}{close}answer {call}"
    assert inside.fullmatch(text)  # a marker inside reasoning is reasoning text
    got = _check_parse("hermes", text, TOOLS, parallel=True, inside=True, rname=rname)
    assert [c["function"]["name"] for c in got["tool_calls"]] == ["ping"]
    assert not inside.fullmatch("plan without close " + call)
    opened = _Dfa(_pattern("hermes", reasoning=rname))
    assert opened.fullmatch(f"{rfmt.open_tags[0]}plan <tool_call> x{close}answer {call}")
    assert opened.fullmatch(f"no reasoning at all {call}")
    # a forced output after free reasoning (the prompt left the block open)
    forced = free_reasoning_pattern(rfmt, starts_inside=True, close_text=rfmt.close_text) + "ok"
    if rfmt.close_text is not None:
        assert _Dfa(forced).fullmatch(f"think {rfmt.open_tags[0]} more{rfmt.close_text}ok")
        assert not _Dfa(forced).fullmatch(f"think{close} and more{rfmt.close_text}ok")


# -- random schemas ------------------------------------------------------------------------------

_SCALARS = [{"type": "string", "description": "free"}, {"type": "integer", "minimum": -5, "maximum": 500},
            {"type": "boolean"}, {"enum": ["a", "b c"]}]


@st.composite
def _tools(draw: st.DrawFn) -> list[dict[str, Any]]:
    tools = []
    for i in range(draw(st.integers(1, 3))):
        keys = draw(st.lists(st.sampled_from(["q", "n", "flag", "mode", "x_y"]), unique=True, max_size=4))
        props = {k: draw(st.sampled_from(_SCALARS)) for k in keys}
        required = [k for k in keys if draw(st.booleans())]
        tools.append({"type": "function", "function": {"name": f"tool_{i}", "parameters": {
            "type": "object", "properties": props, "required": required}}})
    return tools


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder", "llama3_json", "pythonic", "mistral", "gemma4"])
@settings(max_examples=12)  # each example builds and samples a new pattern
@given(tools=_tools(), seed=st.integers(0, 2**16), parallel=st.booleans())
def test_random_schemas_strict_outputs_parse_back(fmt: str, tools: list[dict[str, Any]], seed: int,
                                                  parallel: bool) -> None:
    pattern = _pattern(fmt, tools, parallel=parallel)
    text = sample(pattern, random.Random(seed))  # (a sample's match is checked above, per format)
    _check_parse(fmt, text, tools, parallel=parallel)


# -- over tokens: the marker as one special id or as text pieces ----------------------------------

_PIECES = [b"<", b"tool", b"_call", b">", b"</", b"\n", b" ", b"{\"", b"\"}", b"<tool_call>", b"</tool_call>",
           b"<think>", b"</think>", b"\xc3", b"\xa9", b"\xc3\xa9"]


def _vocab() -> TokenVocabulary:
    data = [bytes([b]) for b in range(1, 128)] + _PIECES + [b""]
    return TokenVocabulary(data, end_ids=[len(data) - 1])


@given(ids=st.lists(st.integers(127, 127 + len(_PIECES) - 1) | st.integers(0, 126), max_size=24))
def test_token_level_free_text_is_exact(ids: list[int]) -> None:
    """A token sequence is allowed while its bytes hold no marker, whatever the split: the
    marker as one id or as pieces, a character split over two byte tokens."""
    vocab = _vocab()
    index = compile_constraint(vocab, regex=_pattern("hermes", reasoning=None))
    guide = Guide(index)
    data = b""
    for token_id in ids:
        data += vocab.token_bytes(token_id)
        if b"<tool_call>" in data:
            break  # from here on the call is constrained
        try:
            codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
        except UnicodeDecodeError:
            break  # output is UTF-8 text: bytes that cannot be are refused anywhere
        guide.advance(token_id)  # raises if a marker-free prefix were refused
    else:
        complete = data.decode("utf-8", "replace") == data.decode("utf-8", "ignore")
        assert guide.is_accepting == complete


@pytest.mark.parametrize("fmt", ["llama3_json", "hermes"])
def test_a_long_pattern_writes_its_calls_once_in_the_same_language(fmt: str) -> None:
    """Past ``PLAIN_MAX_CHARS`` the calls recur as calls of one definition (``(?&name)``): a
    shorter text, the same minimal DFA as the plain pattern."""
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": WEATHER}} for i in range(4)]
    shared = _pattern(fmt, tools, plain=False)
    with mock.patch.object(forced_calls, "PLAIN_MAX_CHARS", 1 << 12):
        forced = forced_calls.forced_calls_pattern(fmt, _by_name(tools), None, parallel=True,
                                                   to_regex=json_schema_to_regex)
    plain = _pattern(fmt, tools)
    with mock.patch.object(forced_calls, "PLAIN_MAX_CHARS", 1 << 30):
        plain_forced = forced_calls.forced_calls_pattern(fmt, _by_name(tools), None, parallel=True,
                                                         to_regex=json_schema_to_regex)
    for short, long in ((shared, plain), (forced, plain_forced)):
        assert "(?&" in short and "(?&" not in long and len(short) < len(long) * 0.6
        a = build_dfa(parse_regex(short), Budget(max_seconds=60))
        b = build_dfa(parse_regex(long), Budget(max_seconds=60))
        assert (a.rows, a.accepting) == (b.rows, b.accepting)


def test_strict_tools_take_no_other_keys() -> None:
    """The service's strict pattern (``constraint_plan.strict_tools_pattern``): a ``strict: true`` tool's
    objects that list properties, nested ones too, take no other keys (OpenAI's strict mode),
    every tool's with ``--strict-tools`` (``close_all``); a tool that is not strict keeps the
    keys its schema allows."""
    from textproc.service.constraint_plan import strict_tools_pattern

    where = {"type": "object", "properties": {"where": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    trip = {"type": "function", "function": {"name": "trip", "parameters": where}}
    weather = TOOLS[0]

    def strict(tool: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function", "function": {**tool["function"], "strict": True}}

    good = [render("hermes", "get_weather", {"city": "Paris", "days": 3}),
            render("hermes", "trip", {"where": {"city": "Oslo"}})]
    extra = [render("hermes", "get_weather", {"city": "Paris", "days": 3, "wind": 1}),
             render("hermes", "trip", {"where": {"city": "Oslo", "zip": "0150"}})]
    for tools, close_all, closed in (([strict(weather), strict(trip)], False, [True, True]),
                                     ([strict(weather), trip], False, [True, False]),
                                     ([weather, trip], True, [True, True]),
                                     ([weather, trip], False, [False, False])):
        pattern = _Dfa(strict_tools_pattern(tools, "hermes", None, False, parallel=True, close_all=close_all))
        for text in good:
            assert pattern.fullmatch("Sure. " + text), (tools, text)
        for text, is_closed in zip(extra, closed):
            assert pattern.fullmatch("Sure. " + text) != is_closed, (close_all, text)
