"""OutputParser / TagStreamer / tool-call parsing: examples, streaming shape, and the property
that merging streamed deltas equals the one-shot parse for any split of any text."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from textproc.errors import InvalidInput
from textproc.core.parsing import (
    OutputParser,
    TagStreamer,
    merge_deltas,
    openai_tool_call,
    parse_output,
    parse_tool_calls,
)

BOTH = {"reasoning": True, "tools": True}


def stream(text: str, sizes: list[int], **opts: Any) -> tuple[list[dict[str, Any]], OutputParser]:
    """Feed text in chunks of the given sizes (cycled), return all deltas."""
    parser = OutputParser(**opts)
    out: list[dict[str, Any]] = []
    pos = 0
    i = 0
    while pos < len(text):
        size = sizes[i % len(sizes)] if sizes else 1
        out.extend(parser.feed(text[pos : pos + size]))
        pos += size
        i += 1
    out.extend(parser.finish())
    return out, parser


def call(name: str, arguments: str, index: int = 0) -> dict[str, Any]:
    return openai_tool_call(name, arguments, id=f"call_{index}")


# -- examples ------------------------------------------------------------------------------


def test_reasoning_content_and_tool_call() -> None:
    text = (
        "<think>\nlet me see</think>\n\nSure."
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
    )
    assert parse_output(text, **BOTH) == {
        "reasoning_content": "let me see",
        "content": "Sure.",
        "tool_calls": [call("get_weather", '{"city": "Paris", "unit": "c"}')],
    }


def test_starts_in_reasoning() -> None:
    got = parse_output("plan</think>answer", reasoning=True, starts_in_reasoning=True)
    assert got["reasoning_content"] == "plan" and got["content"] == "answer"
    # ignored without reasoning: everything is content
    assert parse_output("plan</think>x", starts_in_reasoning=True)["content"] == "plan</think>x"


def test_flags_off_keep_tags_as_content() -> None:
    text = '<think>a</think><tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert parse_output(text)["content"] == text
    got = parse_output(text, reasoning=True)
    assert got["content"] == '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    got = parse_output(text, tools=True)
    assert got["content"] == "<think>a</think>" and got["tool_calls"] == [call("f", "{}")]


def test_tool_tags_inside_reasoning_are_reasoning() -> None:
    text = '<think><tool_call>{"name": "f"}</tool_call></think>ok'
    got = parse_output(text, **BOTH)
    assert got["reasoning_content"] == '<tool_call>{"name": "f"}</tool_call>'
    assert got["tool_calls"] == [] and got["content"] == "ok"


def test_close_tag_inside_argument_string_does_not_end_call() -> None:
    args = json.dumps({"code": 'print("</tool_call>")\n<tool_call>', "k": "\\\"}"})
    text = f'<tool_call>{{"name": "run", "arguments": {args}}}</tool_call>after'
    content, calls = parse_tool_calls(text)
    assert content == "after"
    assert calls == [call("run", args)]
    assert json.loads(calls[0]["function"]["arguments"])["code"] == 'print("</tool_call>")\n<tool_call>'


def test_several_calls_get_consecutive_indices_and_request_ids() -> None:
    one = '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>'
    two = '<tool_call>\n{"name": "b", "arguments": {"y": [true, null]}}\n</tool_call>'
    got = parse_output(one + "\n" + two, tools=True, request_id="req7")
    assert [c["id"] for c in got["tool_calls"]] == ["call_req7_0", "call_req7_1"]
    assert [c["function"]["name"] for c in got["tool_calls"]] == ["a", "b"]
    assert got["content"] == "\n"


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        '{"name": 5, "arguments": {}}',
        '{"name": "", "arguments": {}}',
        '{"arguments": {}}',
        '{"nam": "f"}',
        "{'name': 'f'}",
        '{"name": "f\x01"}',
    ],
)
def test_malformed_before_name_comes_back_as_content(body: str) -> None:
    text = f"x<tool_call>{body}</tool_call>y"
    for sizes in ([len(text)], [1], [3]):
        deltas, parser = stream(text, sizes, tools=True)
        assert merge_deltas(deltas) == {"reasoning_content": "", "content": text, "tool_calls": []}
        assert not parser.has_tool_calls


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "f", "arguments": {"a": tru}}</tool_call>z',
    '<tool_call>{"name": "f", "name": "g"}</tool_call>',  # a duplicate key after the name
    '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',  # arguments not an object
])
@pytest.mark.parametrize("stream_calls", [True, False])
def test_a_call_malformed_after_its_name_is_content(text: str, stream_calls: bool) -> None:
    """The name was complete when the call broke: streamed or not, no part of it ever goes out
    as a call (a client may act on a header it sees), and its whole text is content."""
    opts = {"tools": True, "stream_calls": stream_calls}
    assert parse_output(text, **opts) == {"reasoning_content": "", "content": text, "tool_calls": []}
    deltas, parser = stream(text, [1], **opts)
    assert not any("tool_calls" in d for d in deltas)
    assert merge_deltas(deltas)["content"] == text
    assert not parser.has_tool_calls  # the finish reason is not "tool_calls"


def test_arguments_as_a_json_string() -> None:
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": \\"</tool_call>\\"}"}</tool_call>'
    assert parse_tool_calls(text) == ("", [call("f", '{"a": "</tool_call>"}')])
    deltas, _ = stream(text, [1], tools=True)
    assert [d["tool_calls"][0]["function"]["arguments"] for d in deltas] == ["", '{"a": "</tool_call>"}']
    # a string that does not hold a JSON object is malformed
    bad = '<tool_call>{"name": "f", "arguments": "[1]"}</tool_call>'
    assert parse_tool_calls(bad) == (bad, [])
    deltas, _ = stream(bad, [1], tools=True)
    assert merge_deltas(deltas) == {"reasoning_content": "", "content": bad, "tool_calls": []}


def test_unterminated_calls() -> None:
    assert parse_tool_calls('a<tool_call>{"name": "f') == ('a<tool_call>{"name": "f', [])
    # a call cut off after its name is content, streamed or not
    cut = '<tool_call>{"name": "f", "arguments": {"q": "ab'
    assert parse_tool_calls(cut) == (cut, [])
    for stream_calls in (True, False):
        deltas, _ = stream(cut, [1], tools=True, stream_calls=stream_calls)
        assert deltas == [{"content": cut}]
    # a complete object without the close tag is a valid call
    assert parse_tool_calls('<tool_call>{"name": "f", "arguments": {}}\n') == ("", [call("f", "{}")])
    # a truncated close tag comes back as content
    assert parse_tool_calls('<tool_call>{"name": "f", "arguments": {}}\n</tool_') == (
        "</tool_",
        [call("f", "{}")],
    )


def test_lenient_end_after_object() -> None:
    assert parse_tool_calls('<tool_call>{"name": "f", "arguments": {}}  then</tool_call>') == (
        "then</tool_call>",
        [call("f", "{}")],
    )
    assert parse_tool_calls('<tool_call>{"name": "f"}</tool_x') == ("</tool_x", [call("f", "{}")])


def test_arguments_before_name_and_missing_arguments() -> None:
    got = parse_tool_calls('<tool_call>{"arguments": {"a": {"b": []}}, "name": "g"}</tool_call>')
    assert got == ("", [call("g", '{"a": {"b": []}}')])
    assert parse_tool_calls('<tool_call>{"name": "g"}</tool_call>') == ("", [call("g", "{}")])


def test_custom_tags() -> None:
    text = '[R]hm[/R]ok[C]{"name": "f", "arguments": {}}[/C]'
    got = parse_output(text, **BOTH, think_tags=("[R]", "[/R]"), tool_tags=("[C]", "[/C]"))
    assert got == {"reasoning_content": "hm", "content": "ok", "tool_calls": [call("f", "{}")]}
    with pytest.raises(InvalidInput, match="think_tags=.*pair of non-empty strings"):
        OutputParser(think_tags=("<a>", ""))  # type: ignore[arg-type]


def test_feed_after_finish_is_an_error() -> None:
    parser = OutputParser()
    parser.finish()
    with pytest.raises(InvalidInput, match="after finish"):
        parser.feed("x")


def test_openai_tool_call() -> None:
    assert openai_tool_call("f", {"é": 1}, id="c") == {
        "id": "c",
        "type": "function",
        "function": {"name": "f", "arguments": '{"é": 1}'},
    }
    a = openai_tool_call("f", '{"x": 1}')
    assert a["id"].startswith("call_") and len(a["id"]) == 29
    assert a == openai_tool_call("f", '{"x": 1}')  # deterministic
    assert a["id"] != openai_tool_call("g", '{"x": 1}')["id"]
    with pytest.raises(InvalidInput, match="name '' must be a non-empty string"):
        openai_tool_call("", {})
    with pytest.raises(InvalidInput, match=r"arguments \[1\] for 'f' must be"):
        openai_tool_call("f", [1])  # type: ignore[arg-type]


# -- holdback ------------------------------------------------------------------------------


def test_holdback_only_while_tail_could_start_a_tag() -> None:
    p = OutputParser(**BOTH)
    assert p.feed("a<thi") == [{"content": "a"}]
    assert p.feed("s") == [{"content": "<this"}]
    assert p.feed("<") == []
    assert p.feed("tool") == []
    assert p.feed("s") == [{"content": "<tools"}]
    assert p.feed("<<") == [{"content": "<"}]
    assert p.feed("/think>") == [{"content": "</think>"}]  # not a tag in content
    assert p.finish() == []
    r = OutputParser(reasoning=True, starts_in_reasoning=True)
    assert r.feed("x<think>y</thin") == [{"reasoning_content": "x<think>y"}]
    assert r.finish() == [{"reasoning_content": "</thin"}]


def test_tag_streamer() -> None:
    s = TagStreamer(["<a>", "<ab>"])
    assert s.feed("x<a") == [("text", "x")]
    assert s.feed("b>y<") == [("tag", "<ab>"), ("text", "y")]
    assert s.finish() == [("text", "<")]
    with pytest.raises(InvalidInput, match=r"tag '' at tags\[1\]"):
        TagStreamer(["<a>", ""])


@given(
    st.lists(st.sampled_from(["<", "a", "<a", "<ab>", "<a>", ">", "b", "é"]), max_size=20).map("".join),
    st.lists(st.integers(1, 5), min_size=1, max_size=5),
)
def test_tag_streamer_split_invariant_and_minimal_holdback(text: str, sizes: list[int]) -> None:
    tags = ["<a>", "<ab>"]
    one = TagStreamer(tags)
    whole = one.feed(text) + one.finish()
    s = TagStreamer(tags)
    events: list[tuple[str, str]] = []
    pos = i = 0
    while pos < len(text):
        chunk = text[pos : pos + sizes[i % len(sizes)]]
        pos += len(chunk)
        i += 1
        events.extend(s.feed(chunk))
        released = "".join(e[1] for e in events)
        held = text[:pos][len(released) :]
        assert text[:pos].startswith(released)
        # held back only a proper prefix of a tag
        assert held == "" or (len(held) < 4 and any(t.startswith(held) and t != held for t in tags))
    events.extend(s.finish())
    assert _join_texts(events) == _join_texts(whole)


def _join_texts(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for kind, value in events:
        if kind == "text" and out and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + value)
        else:
            out.append((kind, value))
    return out


# -- streaming shape -----------------------------------------------------------------------


def test_tool_call_streaming_shape() -> None:
    args = {"city": "Zürich 😀", "days": [1, 2.5e3, -0.0], "opts": {"q": 'a"</tool_call>\\'}, "n": None}
    args_text = json.dumps(args, ensure_ascii=False)
    text = "pre<tool_call>\n" + json.dumps({"name": "fc", "arguments": args}, ensure_ascii=False)
    text += '\n</tool_call>\n<tool_call>{"name": "g", "arguments": {}}</tool_call>'
    for sizes in ([1], [2, 7, 3], [len(text)]):
        deltas, parser = stream(text, sizes, tools=True, request_id="r")
        assert parser.has_tool_calls
        per_index: dict[int, list[dict[str, Any]]] = {}
        for d in deltas:
            assert len(d) == 1 and all(v != "" for v in d.values() if isinstance(v, str))
            for part in d.get("tool_calls", []):
                per_index.setdefault(part["index"], []).append(part)
        assert sorted(per_index) == [0, 1]
        for index, parts in per_index.items():
            first, later = parts[0], parts[1:]
            assert first["id"] == f"call_r_{index}" and first["type"] == "function"
            assert first["function"]["arguments"] == ""
            assert later and all(set(p) == {"index", "function"} for p in later)
            assert all(set(p["function"]) == {"arguments"} for p in later)
            joined = "".join(p["function"]["arguments"] for p in later)
            assert json.loads(joined) == (args if index == 0 else {})
            if index == 0:
                assert joined == args_text
        assert merge_deltas(deltas)["content"] == "pre\n"


def test_a_call_goes_out_once_it_is_complete() -> None:
    """Not when its name is complete: until the call ends the text may still be cut off or
    turn out malformed, and then it is content (a client cannot take back a call it acted on)."""
    p = OutputParser(tools=True)
    assert p.feed('<tool_call>{"name": "loo') == []
    assert p.feed('kup", "arguments": {"k"') == []
    assert p.feed(": 1}}") == []  # the close tag, or whatever follows the object, ends the call
    assert not p.has_tool_calls
    out = p.feed("</tool_call>")
    assert out == [{"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                                    "function": {"name": "lookup", "arguments": ""}}]},
                   {"tool_calls": [{"index": 0, "function": {"arguments": '{"k": 1}'}}]}]
    assert p.has_tool_calls


# -- property: streamed == one-shot == what the generator meant ---------------------------

PLAIN = st.text(st.characters(blacklist_characters="<", blacklist_categories=["Cs"]), max_size=8)
NEAR_TAGS = st.sampled_from(["<thin ", "<tool_c ", "</thi ", "</tool_call ", "< ", "<tool_call\n"])
CONTENT = st.lists(st.one_of(PLAIN, NEAR_TAGS), max_size=4).map("".join)
REASONING_TEXT = st.lists(
    st.one_of(PLAIN, NEAR_TAGS, st.just("<tool_call>"), st.just("<think>")), max_size=4
).map("".join)
JSON_STR = st.lists(
    st.one_of(
        st.characters(blacklist_categories=["Cs"]),
        st.sampled_from(['"', "\\", "</tool_call>", "<think>", "}", "\n", "\x00", "\u2028"]),
    ),
    max_size=6,
).map("".join)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=False, allow_infinity=False) | JSON_STR,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(JSON_STR, kids, max_size=3),
    max_leaves=8,
)
ARGS = st.dictionaries(JSON_STR, JSON_VALUE, max_size=4)
WS = st.sampled_from(["", "\n", " ", "\n\n", "\t"])


@dataclass
class Expected:
    """The parse in either call mode: a call is a call only when complete and valid."""

    reasoning: list[str] = field(default_factory=list)  # one item per reasoning block
    content: list[str | None] = field(default_factory=list)  # None: a reasoning block ended
    calls: list[tuple[str, str]] = field(default_factory=list)


def _dumps(draw: st.DrawFn, value: object) -> str:
    style = draw(st.sampled_from(["default", "compact", "indent", "ascii"]))
    if style == "compact":
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if style == "indent":
        return json.dumps(value, ensure_ascii=False, indent=1)
    return json.dumps(value, ensure_ascii=style == "ascii")


@st.composite
def outputs(draw: st.DrawFn) -> tuple[str, Expected, bool]:
    """A model output from a grammar, with the parse it must give (reasoning and tools on)."""
    exp = Expected()
    parts: list[str] = []
    starts_in_reasoning = draw(st.booleans())
    if starts_in_reasoning:
        r = draw(REASONING_TEXT)
        parts.append(r + "</think>")
        exp.reasoning.append(r)
        exp.content.append(None)
    n = draw(st.integers(0, 5))
    for i in range(n):
        kind = draw(
            st.sampled_from(
                ["content", "think", "call", "call", "args_first", "string_args", "bad_early", "bad_late", "lenient"]
            )
        )
        last = i == n - 1
        if kind == "content":
            c = draw(CONTENT)
            parts.append(c)
            exp.content.append(c)
        elif kind == "think":
            r = draw(REASONING_TEXT)
            parts.append(f"<think>{r}</think>")
            exp.reasoning.append(r)
            exp.content.append(None)
        elif kind in ("call", "args_first", "lenient", "string_args"):
            name = draw(st.sampled_from(["f", "get_weather", "名前", 'q"x']))
            args = draw(ARGS)
            args_text = _dumps(draw, args)
            sep = draw(st.sampled_from([", ", ",", ",\n "]))
            name_text = json.dumps(name, ensure_ascii=draw(st.booleans()))
            if kind == "args_first":
                body = f'{{"arguments": {args_text}{sep}"name": {name_text}}}'
            elif kind == "string_args":  # arguments as a string holding JSON
                body = f'{{"name": {name_text}{sep}"arguments": {json.dumps(args_text, ensure_ascii=draw(st.booleans()))}}}'
            else:
                body = f'{{"name": {name_text}{sep}"arguments":{draw(WS)}{args_text}{draw(WS)}}}'
            if kind == "lenient":  # no close tag: the call ends at its object
                tail = draw(st.sampled_from(["Z", "<thin ", "</tool_x"])) + draw(CONTENT)
                parts.append(f"<tool_call>{draw(WS)}{body}{draw(WS)}{tail}")
                exp.content.append(tail)
            else:
                close = "" if last and draw(st.booleans()) else "</tool_call>"
                parts.append(f"<tool_call>{draw(WS)}{body}{draw(WS)}{close}")
            exp.calls.append((name, args_text))
        elif kind == "bad_early":
            body = draw(st.sampled_from(['{"name": 1}', "{name}", '{"x": "f"}', '"f"', '{"name": "f"', '{"na']))
            if body == '{"na' and not last:  # would swallow what follows into a string
                body = "{name}"
            raw = f"<tool_call>{body}"
            if not (last and body in ('{"name": "f"', '{"na')):
                raw += "</tool_call>"
            parts.append(raw)  # ('{"name": "f"': the name is complete, the call is not)
            exp.content.append(raw)
        else:  # bad_late: the arguments break after the name
            args_text = _dumps(draw, draw(ARGS.filter(bool)))
            cut = draw(st.integers(1, len(args_text) - 1))
            prefix = f'<tool_call>{{"name": "f", "arguments": {args_text[:cut]}'
            if last and draw(st.booleans()):
                parts.append(prefix)  # unterminated
            else:
                parts.append(prefix + "\x01</tool_call>")
            exp.content.append(parts[-1])
    return "".join(parts), exp, starts_in_reasoning


NOISE = st.lists(
    st.sampled_from(
        ["<", ">", "/", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_", "</thi", "{", "}",
         "[", "]", '"', "\\", ":", ",", " ", "\n", '"name"', '"arguments"', '"f"', "1", "-", ".", "e",
         "true", "nul", "x", "é", "😀"]
    ),
    max_size=40,
).map("".join)

SPLITS = st.one_of(
    st.just([1]),
    st.lists(st.integers(1, 12), min_size=1, max_size=8),
    st.lists(st.integers(2, 40), min_size=1, max_size=3),
)


def _reasoning_of(blocks: list[str]) -> str:
    # newlines around each reasoning block are formatting
    return "".join(b.strip("\n") for b in blocks)


def _content_of(pieces: list[str | None]) -> str:
    # after a reasoning block, the content's leading newlines are formatting
    out = []
    strip = False
    for piece in pieces:
        if piece is None:
            strip = True
            continue
        if strip:
            piece = piece.lstrip("\n")
            strip = not piece
        out.append(piece)
    return "".join(out)


@given(outputs(), SPLITS)
def test_streamed_equals_one_shot_equals_grammar(case: tuple[str, Expected, bool], sizes: list[int]) -> None:
    text, exp, starts = case
    want = {
        "reasoning_content": _reasoning_of(exp.reasoning),
        "content": _content_of(exp.content),
        "tool_calls": [call(name, args, i) for i, (name, args) in enumerate(exp.calls)],
    }
    assert parse_output(text, **BOTH, starts_in_reasoning=starts) == want
    # streamed (the parser's default) or held, any split: the same calls, the same content
    for opts in ({}, {"stream_calls": True}, {"stream_calls": False}):
        assert parse_output(text, **BOTH, starts_in_reasoning=starts, **opts) == want
        deltas, parser = stream(text, sizes, **BOTH, starts_in_reasoning=starts, **opts)
        assert merge_deltas(deltas) == want
        assert parser.has_tool_calls == bool(exp.calls)


@given(
    st.one_of(NOISE, outputs().map(lambda c: c[0])),
    SPLITS,
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_streamed_equals_one_shot_for_any_text(
    text: str, sizes: list[int], reasoning: bool, tools: bool, starts: bool
) -> None:
    opts = {"reasoning": reasoning, "tools": tools, "starts_in_reasoning": starts}
    one_shot = parse_output(text, **opts)
    deltas, _ = stream(text, sizes, **opts)  # the parser streams calls by default
    assert merge_deltas(deltas) == one_shot
    for stream_calls in (True, False):
        assert parse_output(text, **opts, stream_calls=stream_calls) == one_shot
        deltas, _ = stream(text, sizes, **opts, stream_calls=stream_calls)
        assert merge_deltas(deltas) == one_shot


def test_forced_call_after_closing_a_prefilled_think_block() -> None:
    """tool_call_pattern(prefix="</think>\\n\\n") output parses as a call when the prompt
    ended inside <think>."""
    text = '</think>\n\n<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'
    got = parse_output(text, **BOTH, starts_in_reasoning=True)
    assert got == {"reasoning_content": "", "content": "", "tool_calls": [call("ping", "{}")]}


@pytest.mark.parametrize("template", ["qwen3", "qwq"])
def test_real_template_tool_call_turn_parses_back(template: str) -> None:
    """What a real template writes for an assistant turn with reasoning and two tool calls is
    what the model is trained to emit: parse it back, streamed and one-shot, and match the
    forced-call pattern."""
    import re

    from tests.helpers.templates import template_source
    from textproc.core.chat.template import render_chat
    from textproc.core.constraints.plans.forced_calls import tool_call_pattern

    args = {"city": 'Zürich "c" </tool_call>', "days": [3, None]}
    calls = [
        {"type": "function", "function": {"name": "get_weather", "arguments": args}},
        {"type": "function", "function": {"name": "ping", "arguments": {}}},
    ]
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "array", "items": {"type": ["integer", "null"]}}}}}},
        {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}},
    ]
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "need a tool", "tool_calls": calls},
        {"role": "tool", "content": "sunny"},
    ]
    prompt = render_chat(template_source(template), messages, tools=tools)
    start = prompt.index("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")
    turn = prompt[start : prompt.index("<|im_end|>", start)]
    got = parse_output(turn, **BOTH)
    assert got["content"].strip() == "Let me check."
    assert got["reasoning_content"].strip() in ("need a tool", "")  # qwq drops past reasoning
    assert [c["function"]["name"] for c in got["tool_calls"]] == ["get_weather", "ping"]
    assert got["tool_calls"][0]["function"]["arguments"] == json.dumps(args, ensure_ascii=False)
    assert got["tool_calls"][1]["function"]["arguments"] == "{}"
    deltas, _ = stream(turn, [1], **BOTH)
    assert merge_deltas(deltas) == got
    blocks = turn[turn.index("<tool_call>") :]
    assert re.fullmatch(tool_call_pattern(tools), blocks), blocks
