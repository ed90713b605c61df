"""The tool-call / reasoning format chosen from a model's own files, on every real template
scripts/fetch_templates.py fetches, and each family's own rendering of an assistant tool-call
turn parsed back with the chosen format."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import regex

from tests.helpers.templates import TEMPLATES_DIR, template_source
from textproc.core.chat.template import render_chat
from textproc.core.constraints.plans.forced_calls import tool_call_pattern
from textproc.errors import InvalidInput
from textproc.core.parsing import REASONING_FORMATS, TOOL_FORMATS, parse_output
from textproc.core.parsing.declaration import PythonArgs, RawArgs
from textproc.core.parsing.detect import FormatChoice, detect_formats, resolve_formats

# template short name -> (tool format, reasoning format)
EXPECTED = {
    "qwen3": ("hermes", "think"),
    "qwq": ("hermes", "think"),
    "qwen3-coder": ("qwen3_coder", None),
    "qwen3.5": ("qwen3_coder", "think"),
    "llama3.1": ("llama3_json", None),
    "llama3.2": ("llama3_json", None),
    "llama3.3": ("llama3_json", None),
    "hermes3": ("hermes", None),
    "mistral-nemo": ("mistral", None),
    "mistral-small-3.2": ("mistral", None),
    "devstral": ("mistral", None),
    "ministral3-reasoning": ("mistral", "mistral"),
    "deepseek-r1": ("deepseek_v3", "think"),
    "deepseek-v3.1": ("deepseek_v31", "think"),
    "kimi-k2": ("kimi_k2", None),
    "kimi-k2-instruct": ("kimi_k2", None),
    "kimi-k2-thinking": ("kimi_k2", "think"),
    "glm-4.6": ("glm45", "think"),
    "glm-4.7": ("glm47", "think"),
    "gpt-oss": ("gpt_oss", "gpt_oss"),
    "granite3.3": ("granite", "think"),
    "granite4": ("hermes", None),
    "deepseek-v3.2": ("deepseek_v32", "think"),
    "deepseek-v4": ("deepseek_v4", "think"),
    "minimax-m2": ("minimax_m2", "think"),
    "minimax-m3": ("minimax_m3", "minimax_m3"),
    "gemma4": ("gemma4", "gemma4"),
    "seed-oss": ("seed_oss", "seed"),
    "nemotron-nano-v2": ("nemotron_json", "think"),
    "nemotron3-nano": ("qwen3_coder", "think"),
    "step3.5-flash": ("step3p5", "think"),
    "lfm2.5": ("lfm2", "think"),
    "command-r7b": ("cohere", "cohere"),
    "hy3": ("hunyuan", "hunyuan"),
    "kimi-k3": ("kimi_k3", "kimi_k3"),
    "firefunction-v2": ("phi4_mini", None),
    "phi4-mini": ("phi4_mini", None),
    "gemma2": (None, None),
    "phi3.5": (None, None),
}

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "opts": {"type": "object"}}}}},
         {"type": "function", "function": {"name": "ping", "description": "Ping", "parameters": {
             "type": "object", "properties": {}}}}]
ARGS = {"city": "Zürich", "days": 3, "opts": {"unit": "c", "hours": [1, 2]}}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_format_chosen_from_the_real_template(name: str) -> None:
    choice = detect_formats(template_source(name))
    assert (choice.tool_format, choice.reasoning_format) == EXPECTED[name], choice.reason


def test_every_fetched_template_gets_a_choice_and_a_reason() -> None:
    files = sorted(TEMPLATES_DIR.glob("*.jinja"))
    if not files:
        pytest.skip("no templates fetched; run scripts/fetch_templates.py")
    for path in files:
        choice = detect_formats(path.read_text(encoding="utf-8"))
        assert isinstance(choice, FormatChoice) and choice.reason, path.name
        if choice.tool_format is None:
            assert "no known tool-call markup" in choice.reason


def test_added_tokens_count_and_overrides() -> None:
    assert detect_formats(None, ["<|tool_calls_section_begin|>"]).tool_format == "kimi_k2"
    # the special tokens of the newer families name them without a template
    for tokens, tool, reasoning in [
        (["<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>"], "gemma4", "gemma4"),
        (["<minimax:tool_call>", "</minimax:tool_call>", "<think>", "</think>"], "minimax_m2", "think"),
        (["]<]minimax[>[", "<mm:think>", "</mm:think>"], "minimax_m3", "minimax_m3"),
        (["<seed:tool_call>", "</seed:tool_call>", "<seed:think>", "</seed:think>"], "seed_oss", "seed"),
        (["<|START_ACTION|>", "<|END_ACTION|>", "<|START_THINKING|>", "<|END_THINKING|>"], "cohere", "cohere"),
        (["<tool_sep:opensource>", "<think:opensource>"], "hunyuan", "hunyuan"),
        (["<|tool_call_start|>", "<|tool_call_end|>"], "lfm2", None),
        (["<TOOLCALL>", "</TOOLCALL>"], "nemotron_json", None),
        # the families without a fetched template: their special tokens name them
        (["<function_calls>", "</function_calls>", "<functions>", "</functions>"], "olmo3", None),
        (["<｜tool_calls_begin｜>", "<｜tool_call_begin｜>", "<｜tool_sep｜>", "<think>", "</think>"], "step3", "think"),
        # Phi-4-mini's vocabulary holds Granite's <|tool_call|> too: its <|tool|> pair decides
        (["<|tool|>", "<|/tool|>", "<|tool_call|>", "<|/tool_call|>", "<|tool_response|>"], "phi4_mini", None),
    ]:
        choice = detect_formats(None, tokens)
        assert (choice.tool_format, choice.reasoning_format) == (tool, reasoning), choice.reason
    assert detect_formats("{{ x }}").tool_format is None
    got = resolve_formats(detect_formats("<tool_call>"), tool_format="pythonic", reasoning_format="none")
    assert (got.tool_format, got.reasoning_format) == ("pythonic", None)
    assert "from the command line" in got.reason
    with pytest.raises(InvalidInput, match="tool_format='nope'; supported: auto, none, hermes"):
        resolve_formats(detect_formats(""), tool_format="nope")


def _assistant_turn(template: str, calls: list[dict[str, Any]], **variables: Any) -> str:
    user = [{"role": "user", "content": "weather?"}]
    assistant = {"role": "assistant", "content": "", "tool_calls": calls}
    prefix = render_chat(template, user, TOOLS, add_generation_prompt=True, **variables)
    full = render_chat(template, [*user, assistant], TOOLS, add_generation_prompt=False, **variables)
    n = 0
    while n < min(len(prefix), len(full)) and prefix[n] == full[n]:
        n += 1
    while n and full[n - 1] in "<|":  # (a shared start of two different special tokens)
        n -= 1
    return full[n:]


# (not here: Kimi-K2-Instruct's template calls list.append, which the sandbox refuses like
# transformers' does; Granite 3.3's renders no tool calls of past assistant turns; the
# DeepSeek R1 distills' only when content is None, a key transformers 5 drops)
def _calls(got: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got["tool_calls"]]


ROUND_TRIP = ["qwen3", "qwen3-coder", "qwen3.5", "hermes3", "llama3.1", "llama3.3", "mistral-nemo",
              "mistral-small-3.2", "devstral", "deepseek-v3.1", "kimi-k2",
              "glm-4.6", "glm-4.7", "gpt-oss", "granite4", "deepseek-v3.2", "deepseek-v4", "minimax-m2", "minimax-m3",
              "gemma4", "seed-oss", "nemotron-nano-v2", "nemotron3-nano", "step3.5-flash", "lfm2.5",
              "command-r7b", "hy3", "kimi-k3"]


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_real_template_tool_call_turn_parses_back(name: str) -> None:
    template = template_source(name)
    choice = detect_formats(template)
    assert choice.tool_format is not None
    calls = [{"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}},
             {"id": "xyzUVW456", "type": "function", "function": {"name": "ping", "arguments": {}}}]
    if choice.tool_format in ("gpt_oss", "llama3_json"):
        calls = calls[:1]  # harmony: one call per assistant message; Llama 3: one call at once
    turn = _assistant_turn(template, calls, bos_token="<s>", eos_token="</s>")
    got = parse_output(turn, tools=True, reasoning=choice.reasoning_format is not None,
                       tool_format=choice.tool_format, reasoning_format=choice.reasoning_format or "think",
                       tool_schemas=TOOLS)
    parsed = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got["tool_calls"]]
    assert parsed == [(c["function"]["name"], c["function"]["arguments"]) for c in calls], turn
    # the forced-call pattern of the format accepts the template's own rendering of the calls
    # (of their JSON-spelled values: a template writing Python literals is read, not forced)
    layout = TOOL_FORMATS[choice.tool_format].calls.args_layout
    tools = TOOLS
    if isinstance(layout, PythonArgs):  # (forced Python calls take scalar arguments only)
        tools = [{**t, "function": {**t["function"], "parameters": {"type": "object", "properties": {
            k: v for k, v in t["function"]["parameters"]["properties"].items() if k != "opts"}}}} for t in TOOLS]
    if isinstance(layout, RawArgs) and layout.item:  # (nested elements are forced where members are named)
        opts = {"type": "object", "properties": {"unit": {"type": "string"},
                                                 "hours": {"type": "array", "items": {"type": "integer"}}}}
        tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "parameters": {
            **TOOLS[0]["function"]["parameters"], "properties": {
                **TOOLS[0]["function"]["parameters"]["properties"], "opts": opts}}}}, TOOLS[1]]
    if isinstance(layout, PythonArgs) or (isinstance(layout, RawArgs) and layout.python_values):
        calls = [{**c, "function": {**c["function"], "arguments": {
            k: v for k, v in c["function"]["arguments"].items() if isinstance(v, (str, int))}}} for c in calls]
        turn = _assistant_turn(template, calls, bos_token="<s>", eos_token="</s>")
        got = parse_output(turn, tools=True, tool_format=choice.tool_format, tool_schemas=TOOLS)
    pattern = tool_call_pattern(tools, tool_format=choice.tool_format)
    match = regex.search(pattern, turn)  # (a long pattern calls (?(DEFINE)...) groups: regex's syntax)
    assert match is not None, turn
    assert _calls(parse_output(match.group(), tools=True, tool_format=choice.tool_format)) == _calls(got)


def test_phi4_mini_spelling_from_the_templates() -> None:
    """Phi-4-mini's own template renders no assistant tool calls (its tools sit between
    <|tool|> tokens of a system message); FireFunction v2's renders the same ``functools[...]``
    spelling, which parses back and which the forced-call pattern accepts."""
    phi = template_source("phi4-mini")
    system = {"role": "system", "content": "Be brief.", "tools": json.dumps([TOOLS[1]["function"]])}
    call = {"id": "c1", "type": "function", "function": {"name": "ping", "arguments": {}}}
    text = render_chat(phi, [system, {"role": "user", "content": "ping?"},
                             {"role": "assistant", "content": "", "tool_calls": [call]}],
                       add_generation_prompt=False, eos_token="<|endoftext|>")
    assert '<|tool|>[{"name": "ping"' in text and "functools" not in text and "<|assistant|><|end|>" in text
    fire = template_source("firefunction-v2")
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
             for i, (name, args) in enumerate([("get_weather", ARGS), ("ping", {})])]
    turn = _assistant_turn(fire, calls, bos_token="<s>", functions=json.dumps(TOOLS), datetime="2026-01-01")
    got = parse_output(turn, tools=True, tool_format="phi4_mini", tool_schemas=TOOLS)
    assert _calls(got) == [("get_weather", ARGS), ("ping", {})], turn
    match = re.search(tool_call_pattern(TOOLS, tool_format="phi4_mini"), turn)
    assert match is not None and _calls(parse_output(match.group(), tools=True, tool_format="phi4_mini")) == _calls(got)


def test_minimax_m3_turn_with_reasoning_and_thinking_modes() -> None:
    """MiniMax M3's template: a past turn's reasoning, content and calls parse back; its thinking
    modes open the block in the prompt (enabled), close it (disabled) or leave it to the model."""
    template = template_source("minimax-m3")
    choice = detect_formats(template)
    rfmt = REASONING_FORMATS[choice.reasoning_format or ""]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}
    full = render_chat(template, [{"role": "user", "content": "weather?"},
                                  {"role": "assistant", "content": "Checking.", "reasoning_content": "Need it.",
                                   "tool_calls": [call]}], TOOLS, add_generation_prompt=False)
    turn = full[full.rindex("]~b]ai\n") + len("]~b]ai\n"):full.rindex("[e~[")]  # (the turn's own text)
    got = parse_output(turn, tools=True, reasoning=True, tool_format=choice.tool_format,
                       reasoning_format=rfmt.name, tool_schemas=TOOLS)
    assert (got["reasoning_content"], got["content"]) == ("Need it.", "Checking."), turn
    assert _calls(got) == [("get_weather", ARGS)]
    prompts = {mode: render_chat(template, [{"role": "user", "content": "hi"}], thinking_mode=mode)
               for mode in ("enabled", "disabled", "adaptive")}
    assert [rfmt.prompt_leaves_open(p) for p in prompts.values()] == [True, False, False]
    assert prompts["disabled"].endswith(rfmt.close_text or "")
