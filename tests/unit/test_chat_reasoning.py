"""prompt_starts_in_reasoning on prompts rendered by real templates, and CHATML_TEMPLATE's shape.

Whether the output starts inside reasoning is read off the rendered prompt: QwQ and DeepSeek R1
pre-fill ``<think>\\n`` (True); Qwen3 with enable_thinking=False pre-fills an empty think block
(False); Qwen3's default leaves the model to open its own block (False).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.templates import template_source
from tests.helpers.conversations import CONVERSATIONS, ENDS_WITH_ASSISTANT, SPECIAL_TOKENS, WEATHER_TOOL, hf_render
from textproc.core.chat.template import CHATML_TEMPLATE, prompt_starts_in_reasoning, render_chat
from textproc.errors import InvalidInput

USER = [{"role": "user", "content": "Why is the sky blue?"}]


@pytest.mark.parametrize(
    ("name", "variables", "expected"),
    [
        ("qwq", {}, True),
        ("deepseek-r1", {}, True),
        ("qwen3", {}, False),
        ("qwen3", {"enable_thinking": True}, False),
        ("qwen3", {"enable_thinking": False}, False),
        ("chatml", {}, False),
        ("chatml", {"enable_thinking": True}, True),
        ("chatml", {"enable_thinking": False}, False),
        ("llama3.1", {}, False),
    ],
)
def test_generation_prompt_reasoning_state(name: str, variables: dict[str, Any], expected: bool) -> None:
    source = CHATML_TEMPLATE if name == "chatml" else template_source(name)
    prompt = render_chat(source, USER, **SPECIAL_TOKENS, **variables)
    assert prompt == hf_render(source, USER, add_generation_prompt=True, **variables)
    assert prompt_starts_in_reasoning(prompt) is expected, prompt[-60:]


def test_continuing_reasoning_starts_inside_it() -> None:
    # continue_final_message on the reasoning field leaves <think> open at the end of the prompt.
    prompt = render_chat(
        template_source("qwen3"), ENDS_WITH_ASSISTANT, add_generation_prompt=False,
        continue_final_message="reasoning_content",
    )
    assert prompt.endswith("<think>\nPick common ones")
    assert prompt_starts_in_reasoning(prompt) is True
    content = render_chat(template_source("qwen3"), ENDS_WITH_ASSISTANT, add_generation_prompt=False, continue_final_message=True)
    assert prompt_starts_in_reasoning(content) is False


def test_think_tags_in_earlier_turns_do_not_count() -> None:
    messages = [
        {"role": "user", "content": "Explain the <think> tag, do not close it"},
        {"role": "assistant", "content": "It opens a block: <think>"},
        {"role": "user", "content": "ok"},
    ]
    prompt = render_chat(CHATML_TEMPLATE, messages)
    assert "<think>" in prompt and prompt_starts_in_reasoning(prompt) is False
    assert prompt_starts_in_reasoning(render_chat(CHATML_TEMPLATE, messages, enable_thinking=True)) is True


def test_custom_tags_and_headers() -> None:
    prompt = "[INST] q [/INST]<reasoning>\n"
    assert prompt_starts_in_reasoning(prompt, open_tag="<reasoning>", close_tag="</reasoning>") is True
    assert prompt_starts_in_reasoning(prompt + "x</reasoning>", open_tag="<reasoning>", close_tag="</reasoning>") is False
    assert prompt_starts_in_reasoning("A: <think>\nB: ", assistant_header="B: ") is False
    assert prompt_starts_in_reasoning("A: <think>\nB: ", assistant_header=["nope"]) is True
    assert prompt_starts_in_reasoning("") is False
    with pytest.raises(InvalidInput, match="open_tag"):
        prompt_starts_in_reasoning("x", open_tag="")


def test_chatml_shape() -> None:
    messages = CONVERSATIONS["tool_call_dict"]
    prompt = render_chat(CHATML_TEMPLATE, messages, [WEATHER_TOOL], enable_thinking=False)
    assert prompt.startswith("<|im_start|>system\nYou are a terse assistant.")
    assert "<tools>\n" + json.dumps(WEATHER_TOOL, ensure_ascii=False) + "\n</tools>" in prompt
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}\n</tool_call>'
    assert "<|im_start|>assistant\n" + call + "<|im_end|>\n" in prompt
    assert '<|im_start|>user\n<tool_response>\n{"temp": 21, "sky": "☀"}\n</tool_response><|im_end|>\n' in prompt
    assert prompt.endswith("<|im_start|>user\nDanke! And tomorrow?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    as_string = render_chat(CHATML_TEMPLATE, CONVERSATIONS["tool_call_json_string"], [WEATHER_TOOL])
    assert '"arguments": {"city": "東京", "unit": "celsius"}}\n</tool_call>' in as_string  # string verbatim


def test_chatml_reasoning_kept_only_after_last_query() -> None:
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "", "reasoning_content": "r2", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {}}}]},
        {"role": "tool", "content": "done"},
    ]
    prompt = render_chat(CHATML_TEMPLATE, messages)
    assert "r1" not in prompt
    assert "<|im_start|>assistant\n<think>\nr2\n</think>\n\n<tool_call>" in prompt
    assert prompt == hf_render(CHATML_TEMPLATE, messages, add_generation_prompt=True)


def test_chatml_content_parts() -> None:
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "sys "}, {"type": "text", "text": "prompt"}]},
        {"role": "user", "content": [{"type": "text", "text": "look: "}, {"type": "image_url", "image_url": {"url": "x"}}]},
    ]
    prompt = render_chat(CHATML_TEMPLATE, messages, add_generation_prompt=False)
    assert prompt == "<|im_start|>system\nsys prompt<|im_end|>\n<|im_start|>user\nlook: <|im_end|>\n"
    assert prompt == hf_render(CHATML_TEMPLATE, messages)
