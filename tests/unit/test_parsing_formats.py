"""Every tool-call format: examples written from each family's template rendering, and the
streaming contracts as hypothesis properties (any regrouping of the text into deltas gives the
one-shot parse, in both call modes)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.tool_calls import render
from textproc.core.parsing import TOOL_FORMATS, OutputParser, merge_deltas, parse_output

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "opts": {"type": "object"}, "flag": {"type": "boolean"}}}}}
PING = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, PING]
ARGS = {"city": 'Zürich "x" </tool_call>', "days": 3}

DS_B, DS_E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DC_B, DC_E, DSEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
K_B, K_E = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
DSML_B, DSML_E = "<｜DSML｜function_calls>", "</｜DSML｜function_calls>"
M3 = "]<]minimax[>["


def _j(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


# format -> (text, content, [(name, arguments object)]), as each family's template renders calls
CASES: dict[str, list[tuple[str, str, list[tuple[str, dict[str, Any]]]]]] = {
    "hermes": [
        (f'Sure.<tool_call>\n{{"name": "get_weather", "arguments": {_j(ARGS)}}}\n</tool_call>\n'
         '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>', "Sure.\n", [("get_weather", ARGS), ("ping", {})]),
        ('<tool_call>\n{"name": "ping", "arguments": {}}', "", [("ping", {})]),  # close tag missing at the end
    ],
    "qwen3_coder": [
        ("I'll check.\n" + render("qwen3_coder", "get_weather", ARGS) + "\n" + render("qwen3_coder", "ping", {}),
         "I'll check.\n\n", [("get_weather", ARGS), ("ping", {})]),
        (render("qwen3_coder", "get_weather", {"city": "a\nb", "opts": {"k": [1]}, "flag": True}), "",
         [("get_weather", {"city": "a\nb", "opts": {"k": [1]}, "flag": True})]),
    ],
    "llama3_json": [
        (f'{{"name": "get_weather", "parameters": {_j(ARGS)}}}', "", [("get_weather", ARGS)]),
        ('<|python_tag|>{"name": "ping", "parameters": {}}; {"name": "get_weather", "parameters": {"days": 1}}',
         "", [("ping", {}), ("get_weather", {"days": 1})]),
        ('  {"name": "ping", "parameters": {}} done', " done", [("ping", {})]),
        ("Hello {not a call}", "Hello {not a call}", []),
    ],
    "pythonic": [
        ("[get_weather(city='Zürich \"x\" </tool_call>', days=3), ping()]", "", [("get_weather", ARGS), ("ping", {})]),
        ("<|python_start|>[get_weather(opts={'a': (1, None, True)})]<|python_end|>", "",
         [("get_weather", {"opts": {"a": [1, None, True]}})]),
        ("[1] is a citation", "[1] is a citation", []),
        ("[get_weather(city=__import__('os'))]", "[get_weather(city=__import__('os'))]", []),
    ],
    "mistral": [
        (f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {_j(ARGS)}}}, {{"name": "ping", "arguments": {{}}}}]',
         "", [("get_weather", ARGS), ("ping", {})]),
        (f"Ok[TOOL_CALLS]get_weather[ARGS]{_j(ARGS)}[TOOL_CALLS]ping[ARGS]{{}}", "Ok", [("get_weather", ARGS), ("ping", {})]),
        ("[TOOL_CALLS]ping{}", "", [("ping", {})]),  # [ARGS] dropped by the decoder
        (f"[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{_j(_j(ARGS))}", "", [("get_weather", ARGS)]),
    ],
    "deepseek_v3": [
        (f"Hi{DS_B}{DC_B}function{DSEP}get_weather\n```json\n{_j(ARGS)}\n```{DC_E}\n"
         f"{DC_B}function{DSEP}ping\n```json\n{{}}\n```{DC_E}{DS_E}", "Hi", [("get_weather", ARGS), ("ping", {})]),
    ],
    "deepseek_v31": [
        (f"{DS_B}{DC_B}get_weather{DSEP}{_j(ARGS)}{DC_E}{DC_B}ping{DSEP}{{}}{DC_E}{DS_E}", "",
         [("get_weather", ARGS), ("ping", {})]),
        (f"{DS_B}{DC_B}ping{DSEP}{{}}{DC_E}", "", [("ping", {})]),  # section end missing at the end
    ],
    "kimi_k2": [
        (f"Let me look.{K_B}<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{_j(ARGS)}"
         f"<|tool_call_end|><|tool_call_begin|>functions.ping:1<|tool_call_argument_begin|>{{}}<|tool_call_end|>{K_E}",
         "Let me look.", [("get_weather", ARGS), ("ping", {})]),
    ],
    "glm45": [
        ("Checking.\n" + render("glm45", "get_weather", ARGS) + "\n" + render("glm45", "ping", {}), "Checking.\n\n",
         [("get_weather", ARGS), ("ping", {})]),
    ],
    "glm47": [
        (render("glm47", "get_weather", {"city": "3", "days": 3}) + render("glm47", "ping", {}), "",
         [("get_weather", {"city": "3", "days": 3}), ("ping", {})]),
    ],
    "granite": [
        (f'<|tool_call|>[{{"name": "get_weather", "arguments": {_j(ARGS)}}}, {{"name": "ping", "arguments": {{}}}}]',
         "", [("get_weather", ARGS), ("ping", {})]),
        ('<tool_call>[{"name": "ping", "arguments": {}}]', "", [("ping", {})]),
    ],
    "deepseek_v32": [
        ("Checking." + render("deepseek_v32", "get_weather", {**ARGS, "opts": {"k": [1]}, "flag": False})[:-len(DSML_E)]
         + render("deepseek_v32", "ping", {})[len(DSML_B) + 1:], "Checking.",
         [("get_weather", {**ARGS, "opts": {"k": [1]}, "flag": False}), ("ping", {})]),
    ],
    "deepseek_v4": [
        ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="ping">\n\n</｜DSML｜invoke>\n', "", [("ping", {})]),  # end missing
        (render("deepseek_v4", "get_weather", ARGS), "", [("get_weather", ARGS)]),
    ],
    "minimax_m2": [
        ("Sure.\n" + render("minimax_m2", "get_weather", {**ARGS, "opts": {"a": None}}), "Sure.\n",
         [("get_weather", {**ARGS, "opts": {"a": None}})]),
        ('<minimax:tool_call>\n<invoke name="ping">\n</invoke>\n<invoke name="get_weather">'
         '<parameter name="days">2</parameter></invoke>\n</minimax:tool_call>', "", [("ping", {}), ("get_weather", {"days": 2})]),
    ],
    "minimax_m3": [
        ("</mm:think>Sure." + render("minimax_m3", "get_weather", ARGS)[:-len(M3 + "</tool_call>")]
         + render("minimax_m3", "ping", {})[len(M3 + "<tool_call>\n"):], "Sure.",
         [("get_weather", ARGS), ("ping", {})]),
        # nested values as the template expands them; an empty list is an empty element
        (f'{M3}<tool_call>\n{M3}<invoke name="get_weather">{M3}<opts>{M3}<k>{M3}<item>1{M3}</item>{M3}<item>'
         f'{M3}<a>x{M3}</a>{M3}</item>{M3}</k>{M3}<e>{M3}</e>{M3}</opts>{M3}<flag>true{M3}</flag>{M3}</invoke>\n',
         "", [("get_weather", {"opts": {"k": [1, {"a": "x"}], "e": ""}, "flag": True})]),  # block end missing
    ],
    "gemma4": [
        ("On it." + render("gemma4", "get_weather", {**ARGS, "opts": {"k": [1, True, None, "s"]}, "flag": True})
         + render("gemma4", "ping", {}), "On it.",
         [("get_weather", {**ARGS, "opts": {"k": [1, True, None, "s"]}, "flag": True}), ("ping", {})]),
        ('<|tool_call>call:get_weather{<|"|>days<|"|>:4, city:<|"|>a,b}<|"|>}', "", [("get_weather", {"days": 4, "city": "a,b}"})]),
    ],
    "seed_oss": [
        ("Let me see.\n" + render("seed_oss", "get_weather", ARGS) + "\n" + render("seed_oss", "ping", {}), "Let me see.\n\n",
         [("get_weather", ARGS), ("ping", {})]),
        ("<seed:tool_call>\n<function=get_weather>\n<parameter=opts>{'a': True}</parameter>\n"
         "<parameter=flag>False</parameter>\n</function>\n</seed:tool_call>", "",
         [("get_weather", {"opts": {"a": True}, "flag": False})]),
    ],
    "step3p5": [
        ("Let me check." + render("step3p5", "get_weather", ARGS) + render("step3p5", "ping", {}), "Let me check.",
         [("get_weather", ARGS), ("ping", {})]),
    ],
    "lfm2": [
        ("Checking.<|tool_call_start|>[get_weather(city='Zürich \"x\" </tool_call>', days=3, opts={\"a\": true, \"b\": null}), "
         "ping()]<|tool_call_end|>", "Checking.", [("get_weather", {**ARGS, "opts": {"a": True, "b": None}}), ("ping", {})]),
        (render("lfm2", "ping", {}), "", [("ping", {})]),
    ],
    "nemotron_json": [
        ("<TOOLCALL>" + f'[{{"name": "get_weather", "arguments": {_j(ARGS)}}}, {{"name": "ping", "arguments": {{}}}}]'
         + "</TOOLCALL>", "", [("get_weather", ARGS), ("ping", {})]),
        ('Sure <TOOLCALL>[{"name": "ping", "arguments": {}}]', "Sure ", [("ping", {})]),  # close missing at the end
    ],
    "cohere": [
        ("I will look.<|START_ACTION|>[\n    " + f'{{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {_j(ARGS)}}}'
         + ',\n    {"tool_call_id": "1", "tool_name": "ping", "parameters": {}}\n]<|END_ACTION|>', "I will look.",
         [("get_weather", ARGS), ("ping", {})]),
    ],
    "hunyuan": [
        ("Ok." + render("hunyuan", "get_weather", {**ARGS, "opts": {"k": [1]}})[:-len("</tool_calls:opensource>")]
         + render("hunyuan", "ping", {})[len("<tool_calls:opensource>\n"):], "Ok.",
         [("get_weather", {**ARGS, "opts": {"k": [1]}}), ("ping", {})]),
    ],
    "kimi_k3": [
        ("<|open|>think<|sep|>Need weather.<|close|>think<|sep|><|open|>response<|sep|>Let me look.<|close|>response<|sep|>"
         + render("kimi_k3", "get_weather", {**ARGS, "opts": {"k": [1]}, "flag": True})[:-len("<|close|>tools<|sep|>")]
         + render("kimi_k3", "ping", {})[len("<|open|>tools<|sep|>"):] + "<|close|>message<|sep|><|end_of_msg|>",
         "Let me look.", [("get_weather", {**ARGS, "opts": {"k": [1]}, "flag": True}), ("ping", {})]),
        ('<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>json type="object"<|sep|>'
         f'{_j(ARGS)}<|close|>json<|sep|><|close|>call<|sep|>', "", [("get_weather", ARGS)]),
    ],
    "step3": [
        ("Checking." + render("step3", "get_weather", {**ARGS, "opts": {"k": [1]}})[:-len("<｜tool_calls_end｜>")]
         + render("step3", "ping", {})[len("<｜tool_calls_begin｜>"):], "Checking.",
         [("get_weather", {**ARGS, "opts": {"k": [1]}}), ("ping", {})]),
        ('<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="ping">\n</steptml:invoke>'
         "<｜tool_call_end｜>", "", [("ping", {})]),  # section end missing at the end
    ],
    "olmo3": [
        ("Sure.\n<function_calls>get_weather(city='Zürich \"x\" </tool_call>', days=3)\nping()</function_calls>",
         "Sure.\n", [("get_weather", ARGS), ("ping", {})]),
        ('<function_calls>get_weather(opts={"a": true, "b": null}, flag=false)', "",
         [("get_weather", {"opts": {"a": True, "b": None}, "flag": False})]),  # close missing at the end
    ],
    "phi4_mini": [
        (f'functools[{{"name": "get_weather", "arguments": {_j(ARGS)}}}, {{"name": "ping", "arguments": {{}}}}]', "",
         [("get_weather", ARGS), ("ping", {})]),
        ("import functools; functools.reduce", "import functools; functools.reduce", []),
    ],
    "gpt_oss": [
        ("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
         f"to=functions.get_weather <|constrain|>json<|message|>{_j(ARGS)}<|call|>", "", [("get_weather", ARGS)]),
        ("<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Sunny.", "Sunny.", []),
        ("<|start|>assistant to=functions.ping<|channel|>commentary json<|message|>{}<|call|>", "", [("ping", {})]),
    ],
}

REASONING = {"gpt_oss": "Need weather.", "kimi_k3": "Need weather."}


def _calls(got: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got["tool_calls"]]


def _stream(text: str, sizes: list[int], **opts: Any) -> dict[str, Any]:
    parser = OutputParser(**opts)
    deltas: list[dict[str, Any]] = []
    pos = i = 0
    while pos < len(text):
        size = sizes[i % len(sizes)]
        deltas += parser.feed(text[pos : pos + size])
        pos += size
        i += 1
    return merge_deltas(deltas + parser.finish())


def test_every_format_has_cases() -> None:
    assert set(CASES) == set(TOOL_FORMATS)


@pytest.mark.parametrize("fmt,index", [(f, i) for f, cases in CASES.items() for i in range(len(cases))])
def test_format_examples(fmt: str, index: int) -> None:
    text, content, calls = CASES[fmt][index]
    opts: dict[str, Any] = {"tools": True, "reasoning": True, "tool_format": fmt, "tool_schemas": TOOLS,
                            "reasoning_format": TOOL_FORMATS[fmt].reasoning or "think"}
    got = parse_output(text, **opts)
    assert got["content"] == content, text
    assert _calls(got) == calls, text
    if fmt in REASONING and index == 0:
        assert got["reasoning_content"] == REASONING[fmt]
    for sizes in ([1], [2], [3, 7], [len(text)]):
        assert _stream(text, sizes, **opts) == got  # the parser streams calls by default
        assert _stream(text, sizes, stream_calls=False, **opts) == got


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_undeclared_cut_off_and_single_call(fmt: str) -> None:
    text, _, calls = CASES[fmt][0]
    opts: dict[str, Any] = {"tools": True, "reasoning": True, "tool_format": fmt}
    # a tool the request did not declare is not a call
    only_ping = parse_output(text, tool_schemas=[PING], **opts)
    assert [n for n, _ in _calls(only_ping)] == [n for n, _ in calls if n == "ping"]
    # parallel_tool_calls false: at most one call
    one = parse_output(text, tool_schemas=TOOLS, parallel_tool_calls=False, **opts)
    assert _calls(one) == calls[:1]
    # cut off inside the first call: no call, the text comes back (streamed or not)
    cut = text[: text.index("Zürich") + 3] if "Zürich" in text else text[:-3]
    got = parse_output(cut, tool_schemas=TOOLS, **opts)
    assert len(got["tool_calls"]) < len(calls)
    if "Zürich" in text:  # cut inside the first call
        assert got["tool_calls"] == [] and got["content"].endswith("Zür")
    parser = OutputParser(tool_schemas=TOOLS, **opts)
    assert merge_deltas(parser.feed(cut) + parser.finish()) == got
    assert parser.has_tool_calls == bool(got["tool_calls"])


def test_calls_inside_reasoning_stay_reasoning() -> None:
    text = '<think>\nmaybe <tool_call>{"name": "ping", "arguments": {}}</tool_call>\n</think>\n\nNo.'
    got = parse_output(text, reasoning=True, tools=True)
    assert got == {"reasoning_content": 'maybe <tool_call>{"name": "ping", "arguments": {}}</tool_call>',
                   "content": "No.", "tool_calls": []}


def test_reasoning_formats() -> None:
    assert parse_output("<think>\nplan\n</think>\n\nAnswer", reasoning=True) == {
        "reasoning_content": "plan", "content": "Answer", "tool_calls": []}
    assert parse_output("plan\n</think>\n\nAnswer", reasoning=True, reasoning_format="deepseek_r1")["content"] == "Answer"
    got = parse_output("[THINK]hm[/THINK]ok", reasoning=True, reasoning_format="mistral")
    assert (got["reasoning_content"], got["content"]) == ("hm", "ok")
    got = parse_output("Here is my thought process:\nx\nHere is my response:\ny", reasoning=True,
                       reasoning_format="granite")
    assert (got["reasoning_content"], got["content"]) == ("x", "y")
    # Kimi K2: the tool section ends reasoning
    got = parse_output(f"<think>hm{K_B}<|tool_call_begin|>functions.ping:0<|tool_call_argument_begin|>{{}}"
                       f"<|tool_call_end|>{K_E}", reasoning=True, tools=True, tool_format="kimi_k2")
    assert got["reasoning_content"] == "hm" and got["tool_calls"][0]["id"] == "functions.ping:0"


def _noise(fmt: str) -> st.SearchStrategy[str]:
    text, _, _ = CASES[fmt][0]
    cut = st.integers(0, len(text))
    pieces = st.one_of(
        st.tuples(cut, cut).map(lambda ab: text[min(ab) : max(ab)]),
        st.sampled_from(["<think>", "</think>", "\n", " ", "{", "}", '"', "x", "(", ")", "[", "]", ",", ";", "é"]),
    )
    return st.lists(pieces, max_size=8).map("".join)


SPLITS = st.lists(st.integers(1, 12), min_size=1, max_size=6)


@pytest.mark.parametrize("fmt", sorted(CASES))
@given(data=st.data())
def test_streamed_equals_one_shot_for_any_split(fmt: str, data: st.DataObject) -> None:
    text = data.draw(_noise(fmt))
    sizes = data.draw(SPLITS)
    schemas = data.draw(st.sampled_from([None, TOOLS, [PING]]))
    opts: dict[str, Any] = {"tools": True, "reasoning": data.draw(st.booleans()), "tool_format": fmt,
                            "tool_schemas": schemas}
    one_shot = parse_output(text, **opts)
    assert _stream(text, sizes, **opts) == one_shot  # streamed calls (the parser's default)
    for stream_calls in (True, False):
        assert _stream(text, sizes, **opts, stream_calls=stream_calls) == one_shot


@pytest.mark.parametrize("starts", [True, False])
def test_newline_inside_reasoning_is_kept_for_any_split(starts: bool) -> None:
    text = ("" if starts else "<think>") + "ab \n x\n\n</think>\n\nok\nyes"
    for size in (1, 2, 3, len(text)):
        got = _stream(text, [size], reasoning=True, starts_in_reasoning=starts)
        assert got == {"reasoning_content": "ab \n x", "content": "ok\nyes", "tool_calls": []}


@pytest.mark.parametrize("fmt", ["qwen3_coder", "glm45", "minimax_m3"])
def test_a_string_value_cut_before_its_close_tag_is_never_a_call(fmt: str) -> None:
    """A raw string value is read as it arrives, but its call goes out only once complete: cut
    inside the value, the text is content; whole, the value keeps its inner newlines."""
    text = render(fmt, "get_weather", {"city": "line one\nline two\n", "days": 3})
    cut = text.index("line two") + 4
    parser = OutputParser(tools=True, tool_format=fmt, tool_schemas=TOOLS)
    early = parser.feed(text[:cut])
    assert not any("tool_calls" in d for d in early)
    assert merge_deltas(early + parser.finish()) == {"reasoning_content": "", "content": text[:cut], "tool_calls": []}
    parser = OutputParser(tools=True, tool_format=fmt, tool_schemas=TOOLS)
    assert not any("tool_calls" in d for d in parser.feed(text[:cut]))
    got = merge_deltas(parser.feed(text[cut:]) + parser.finish())
    assert _calls(got) == [("get_weather", {"city": "line one\nline two\n", "days": 3})]


@pytest.mark.parametrize("size", [1, 2, 3])
def test_harmony_recipient_at_the_start_is_a_header_for_any_split(size: int) -> None:
    """The answer opens with its header's recipient (`` to=functions.NAME``): fed a character
    at a time it is held until it is known to be one, as the one-shot parse reads it."""
    text = ' to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}'
    for opts in ({"tools": True, "tool_format": "gpt_oss", "tool_schemas": TOOLS},
                 {"tools": True, "tool_format": "gpt_oss", "tool_schemas": None}):
        got = _stream(text, [size], **opts)
        assert got == parse_output(text, **opts)
        assert got["content"] == "" and got["tool_calls"][0]["function"]["name"] == "get_weather"
    assert _stream(" to", [1], tools=True, tool_format="gpt_oss")["content"] == " to"


def _is_prefix(sent: dict[str, Any], whole: dict[str, Any]) -> bool:
    # the merged deltas sent so far start the merged parse `whole`
    calls = sent["tool_calls"]
    return (whole["content"].startswith(sent["content"])
            and whole["reasoning_content"].startswith(sent["reasoning_content"])
            and whole["tool_calls"][: len(calls)] == calls)


@pytest.mark.parametrize("fmt,index", [(f, i) for f, cases in CASES.items() for i in range(len(cases))])
def test_a_stream_cut_anywhere_sent_only_what_the_one_shot_parse_gives(fmt: str, index: int) -> None:
    """Generation may stop after any character (max_tokens, a stop string): whatever a stream
    sent by then starts the one-shot parse of the text so far, so no call goes out before that
    parse gives it (a call with its name or arguments cut off is content), and a stream that
    ends there gives exactly that parse."""
    text = CASES[fmt][index][0]
    opts: dict[str, Any] = {"tools": True, "reasoning": True, "tool_format": fmt, "tool_schemas": TOOLS,
                            "reasoning_format": TOOL_FORMATS[fmt].reasoning or "think"}
    parser = OutputParser(**opts)
    deltas: list[dict[str, Any]] = []
    for k in range(1, len(text) + 1):
        deltas += parser.feed(text[k - 1])
        cut = parse_output(text[:k], **opts)
        assert _is_prefix(merge_deltas(deltas), cut), text[:k]
        assert _stream(text[:k], [5], **opts) == cut, text[:k]


# format -> the shortest text of its CASES after which the parser once sent a call (its name
# complete, the rest cut off) that the one-shot parse of that text does not give
CUT_AFTER_NAME: dict[str, str] = {
    'cohere': 'I will look.<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather"',
    'deepseek_v3': 'Hi<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n',
    'deepseek_v31': '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>ping<｜tool▁sep｜>',
    'deepseek_v32': 'Checking.<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">',
    'deepseek_v4': '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="ping">',
    'gemma4': '<|tool_call>call:get_weather{',
    'glm45': 'Checking.\n<tool_call>get_weather\n',
    'glm47': '<tool_call>get_weather<arg_key>',
    'gpt_oss': '<|start|>assistant to=functions.ping<|channel|>commentary json<|message|>{',
    'granite': '<tool_call>[{"name": "ping"',
    'hermes': '<tool_call>\n{"name": "ping"',
    'hunyuan': 'Ok.<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>',
    'kimi_k2': 'Let me look.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>',
    'kimi_k3': '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>',
    'lfm2': '<|tool_call_start|>[ping(',
    'llama3_json': '  {"name": "ping"',
    'minimax_m2': '<minimax:tool_call>\n<invoke name="ping">',
    'minimax_m3': ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">',
    'mistral': '[TOOL_CALLS]ping{',
    'nemotron_json': 'Sure <TOOLCALL>[{"name": "ping"',
    'olmo3': '<function_calls>get_weather(',
    'phi4_mini': 'functools[{"name": "get_weather"',
    'pythonic': '[get_weather(',
    'qwen3_coder': '<tool_call>\n<function=get_weather>',
    'seed_oss': '<seed:tool_call>\n<function=get_weather>',
    'step3': '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="ping">',
    'step3p5': 'Let me check.<tool_call>\n<function=get_weather>',
}


def test_every_format_has_a_cut_after_name() -> None:
    assert set(CUT_AFTER_NAME) == {f for f, cases in CASES.items() if any(calls for _, _, calls in cases)}


@pytest.mark.parametrize("fmt", sorted(CUT_AFTER_NAME))
def test_a_call_cut_after_its_name_is_never_sent(fmt: str) -> None:
    text = CUT_AFTER_NAME[fmt]
    opts: dict[str, Any] = {"tools": True, "reasoning": True, "tool_format": fmt, "tool_schemas": TOOLS,
                            "reasoning_format": TOOL_FORMATS[fmt].reasoning or "think"}
    want = parse_output(text, **opts)
    assert want["tool_calls"] == []
    for stream_calls in (True, False):
        for size in (1, 2, 3, len(text)):
            parser = OutputParser(**opts, stream_calls=stream_calls)
            deltas = [d for i in range(0, len(text), size) for d in parser.feed(text[i : i + size])]
            assert not any("tool_calls" in d for d in deltas)
            assert merge_deltas(deltas + parser.finish()) == want
            assert not parser.has_tool_calls
