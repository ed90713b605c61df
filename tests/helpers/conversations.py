"""Conversations and the transformers reference renderer shared by the chat-template tests."""

from __future__ import annotations

import copy
import functools
from typing import Any

import jinja2.exceptions
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

from textproc.core.chat.template import render_chat
from textproc.errors import InvalidInput, TemplateError

SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def make_hf_tokenizer(chat_template: Any = None) -> PreTrainedTokenizerFast:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    return PreTrainedTokenizerFast(
        tokenizer_object=HFTokenizer(WordLevel(vocab, unk_token="<unk>")),
        chat_template=chat_template,
        **SPECIAL_TOKENS,
    )


@functools.lru_cache(maxsize=1)
def _hf_tokenizer() -> PreTrainedTokenizerFast:
    return make_hf_tokenizer()


def hf_render(template: str, messages: list[dict[str, Any]], tools: Any = None, **kwargs: Any) -> str:
    """The reference: transformers' real apply_chat_template path (special tokens included)."""
    out = _hf_tokenizer().apply_chat_template(
        copy.deepcopy(messages), tools=copy.deepcopy(tools), chat_template=template, tokenize=False, **kwargs
    )
    assert isinstance(out, str)
    return out


def assert_same(template: str, messages: list[dict[str, Any]], tools: Any = None, **kwargs: Any) -> str | None:
    """Render with both; equal text, or both fail (jinja-level failures with the same message)."""
    label = f"tools={tools is not None} {kwargs}"
    try:
        expected = hf_render(template, messages, tools, **kwargs)
    except (jinja2.exceptions.TemplateError, TypeError, ValueError, LookupError, AttributeError) as e:
        with pytest.raises((TemplateError, InvalidInput)) as info:
            render_chat(template, messages, tools, **SPECIAL_TOKENS, **kwargs)
        if type(e) is not ValueError:  # transformers' own input checks word their errors differently
            assert str(e) in str(info.value), label
        return None
    snapshot = copy.deepcopy(messages)
    got = render_chat(template, messages, tools, **SPECIAL_TOKENS, **kwargs)
    assert got == expected, label
    assert messages == snapshot, "render_chat must not modify the caller's messages"
    return got


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
CALL_ID = "call12345"  # Mistral's templates insist on 9 alphanumeric characters
SYSTEM = {"role": "system", "content": "You are a terse assistant. Antworte kurz & <b>präzise</b>."}


def _tool_turns(arguments: Any) -> list[dict[str, Any]]:
    return [
        SYSTEM,
        {"role": "user", "content": "What's the weather in Zürich and 東京?"},
        {
            "role": "assistant",
            "content": None,  # OpenAI clients send None; transformers drops the key
            "tool_calls": [
                {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": CALL_ID, "name": "get_weather", "content": '{"temp": 21, "sky": "☀"}'},
        {"role": "assistant", "content": "Sunny, 21 °C in Zürich. 🌞"},
        {"role": "user", "content": "Danke! And tomorrow?"},
    ]


CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "system_user": [SYSTEM, {"role": "user", "content": "Hello!"}],
    "multi_turn": [
        SYSTEM,
        {"role": "user", "content": "Write a haiku about the sea."},
        {"role": "assistant", "content": "Waves fold into foam\nsalt wind carries gull voices\nthe tide keeps its time"},
        {"role": "user", "content": "Now in Japanese: 海 🌊 — «merci» — Ωμέγα"},
    ],
    "no_system": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "  spaces  and\ttabs\n\nand {{ braces }} {% raw %}"},
    ],
    "tool_call_dict": _tool_turns({"city": "Zürich", "unit": "celsius"}),
    "tool_call_json_string": _tool_turns('{"city": "東京", "unit": "celsius"}'),
    "content_parts": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "this: ✓"}]},
    ],
    "reasoning": [
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "content": "No: 91 = 7 × 13.", "reasoning_content": "91/7 = 13, so composite."},
        {"role": "user", "content": "And 97?"},
    ],
    "reasoning_aliases": [  # `reasoning` (vLLM) and `thinking` (gpt-oss) alias reasoning_content
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "content": "No.", "reasoning": "7 × 13"},
        {"role": "user", "content": "Is 97 prime?"},
        {"role": "assistant", "content": "Yes.", "thinking": "no divisor up to 9"},
        {"role": "user", "content": "Thanks"},
    ],
}


ENDS_WITH_ASSISTANT = [
    SYSTEM,
    {"role": "user", "content": "Name three colours."},
    {"role": "assistant", "content": "Red, grün, and ", "reasoning_content": "Pick common ones"},
]
