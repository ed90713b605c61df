"""What a chat request is constrained by (textproc.service.constraint_plan.plan_constraint):
forced call, then structured output, then strict tools, then nothing; a reasoning budget on top.
Each plan's regex is checked by what it accepts, with textproc's own byte DFA."""

from __future__ import annotations

import json
from typing import Any

import pytest

from textproc.core.constraints.automaton.lazy import lazy_dfa
from textproc.core.constraints.budget import Budget
from textproc.core.constraints.regex.syntax import parse_regex
from textproc.errors import InvalidInput
from textproc.options import REASONING_BUDGET_OPTIONAL
from textproc.service.constraint_plan import ConstraintPlan, plan_constraint

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
STRICT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER,
                                                  "strict": True}}]
OPEN_PROMPT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"  # Qwen3, thinking
CLOSED_PROMPT = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def _call(name: str, args: dict[str, Any]) -> str:
    """A call in the Hermes / Qwen spelling (``hermes``, the default tool format)."""
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


def _accepts(pattern: str | None, text: str) -> bool:
    assert pattern is not None
    dfa = lazy_dfa(parse_regex(pattern), Budget(max_seconds=60))
    state = dfa.walk(dfa.start, text.encode())
    return state >= 0 and bool(dfa.accepting[state])


def _plan(**kwargs: Any) -> ConstraintPlan:
    given: dict[str, Any] = dict(prompt=CLOSED_PROMPT, tools=[], tool_choice="none",
                                 forced_name=None, structured=None, tool_format="hermes",
                                 reasoning_format="think", strict_tools=False,
                                 parallel_tool_calls=True, sampling_params={})
    given.update(kwargs)
    return plan_constraint(**given)


def test_a_request_with_nothing_to_enforce_is_free() -> None:
    plan = _plan(tools=TOOLS, tool_choice="auto")
    assert plan == ConstraintPlan(None, "tools", True, False, None)
    assert _plan(reasoning_format=None).reasoning is False
    assert _plan(prompt=OPEN_PROMPT).starts_in_reasoning is True


def test_a_forced_call_is_the_call_in_the_model_format() -> None:
    plan = _plan(tools=TOOLS, tool_choice="required")
    assert plan.param == "tools" and plan.reasoning is True
    assert _accepts(plan.regex, _call("get_weather", {"city": "Paris"}))
    assert not _accepts(plan.regex, "It is sunny.")
    assert not _accepts(plan.regex, _call("get_weather", {"city": 3}))  # the schema holds
    named = _plan(tools=TOOLS, tool_choice="required", forced_name="get_weather")
    assert _accepts(named.regex, _call("get_weather", {"city": "Oslo"}))
    # a model with no tool format of its own: the default format's spelling
    assert _accepts(_plan(tools=TOOLS, tool_choice="required", tool_format=None).regex,
                    _call("get_weather", {"city": "Rome"}))


def test_a_prompt_left_inside_reasoning_reasons_freely_before_the_forced_output() -> None:
    plan = _plan(prompt=OPEN_PROMPT, tools=TOOLS, tool_choice="required")
    assert plan.starts_in_reasoning is True
    assert _accepts(plan.regex, "let me see</think>\n\n" + _call("get_weather", {"city": "Paris"}))
    assert not _accepts(plan.regex, _call("get_weather", {"city": "Paris"}))  # block not closed
    structured = _plan(prompt=OPEN_PROMPT, structured={"choice": ["yes", "no"]})
    assert structured.reasoning is True and structured.param == "response_format"
    assert _accepts(structured.regex, "hmm</think>\n\nyes")


def test_a_structured_output_is_the_whole_answer() -> None:
    plan = _plan(structured={"json": WEATHER})
    # not parsed for reasoning: a <think> inside a JSON string stays content
    assert plan.reasoning is False and plan.param == "response_format"
    assert _accepts(plan.regex, '{"city": "<think>Paris"}')
    assert not _accepts(plan.regex, '{"town": "Paris"}')
    with pytest.raises(InvalidInput, match=r"must be one of") as e:
        _plan(structured={"grammar": "root ::= x"})
    assert e.value.param == "response_format"


def test_strict_tools_enforce_every_call_and_leave_text_free() -> None:
    plan = _plan(tools=STRICT_TOOLS, tool_choice="auto")
    assert plan.param == "tools"
    assert _accepts(plan.regex, "Sure. " + _call("get_weather", {"city": "Paris"}))
    assert _accepts(plan.regex, "no call at all")
    assert not _accepts(plan.regex, _call("get_weather", {"city": 3}))
    # strict: its objects that list properties take no other keys (OpenAI's strict mode)
    assert not _accepts(plan.regex, _call("get_weather", {"city": "Paris", "days": 2}))
    # --strict-tools makes a tool without "strict" strict too; no tool format: nothing to enforce
    assert _plan(tools=TOOLS, tool_choice="auto", strict_tools=True).regex == plan.regex
    assert _plan(tools=STRICT_TOOLS, tool_choice="auto", tool_format=None).regex is None
    assert _plan(tools=STRICT_TOOLS, tool_choice="none").regex is None


def test_a_reasoning_budget_constrains_a_free_output_and_tells_the_engine_the_markup() -> None:
    plan = _plan(sampling_params={"max_reasoning_tokens": 8, "temperature": 0.5})
    assert plan.sampling_params == {
        "max_reasoning_tokens": 8, "temperature": 0.5, "reasoning_close": "</think>\n\n",
        "reasoning_close_tag": "</think>", "reasoning_open": ["<think>"],
        "reasoning_starts_inside": False}
    assert _accepts(plan.regex, "<think>a</think>\n\nhello")
    assert _accepts(plan.regex, "<think>still thinking")  # may end inside the block
    assert not _accepts(plan.regex, "<think>a</think>\n\nhello<think>again</think>")
    # on top of a structured output, the structured regex is kept
    structured = _plan(structured={"choice": ["yes"]}, sampling_params={"max_reasoning_tokens": 8})
    assert structured.regex == "yes" and structured.sampling_params is not None


def test_a_budget_needs_reasoning_markup_unless_it_is_optional() -> None:
    with pytest.raises(InvalidInput, match=r"needs a reasoning format with open and close tags") as e:
        _plan(reasoning_format=None, sampling_params={"max_reasoning_tokens": 8})
    assert e.value.param == "max_reasoning_tokens"
    optional = {"max_reasoning_tokens": 8, REASONING_BUDGET_OPTIONAL: True, "seed": 1}
    plan = _plan(reasoning_format=None, sampling_params=optional)
    assert plan.regex is None and plan.sampling_params == {"seed": 1}
    assert optional == {"max_reasoning_tokens": 8, REASONING_BUDGET_OPTIONAL: True, "seed": 1}


def test_the_same_request_gives_the_same_plan() -> None:
    kwargs: dict[str, Any] = dict(prompt=OPEN_PROMPT, tools=STRICT_TOOLS, tool_choice="auto",
                                  sampling_params={"max_reasoning_tokens": 4})
    assert _plan(**kwargs) == _plan(**kwargs)
