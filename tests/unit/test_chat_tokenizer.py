"""End to end with real vocabularies: textproc's Tokenizer supplies the template and special tokens.

render_chat(tok.chat_template, ..., **tok.special_tokens_map) must equal transformers'
apply_chat_template on the same model directory, and the rendered prompt must encode to the same
ids (special tokens such as <|im_start|> recognised inside the prompt).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerFast

from tests.helpers.models import model_dir
from tests.helpers.templates import template_source
from tests.helpers.conversations import CONVERSATIONS, WEATHER_TOOL
from textproc.core.chat.template import CHATML_TEMPLATE, render_chat
from textproc.core.tokenizer import Tokenizer


@functools.lru_cache(maxsize=None)
def _load(path: Path) -> tuple[Tokenizer, PreTrainedTokenizerFast]:
    return Tokenizer.from_dir(path), PreTrainedTokenizerFast.from_pretrained(path)


@pytest.mark.parametrize("thinking", [{}, {"enable_thinking": False}])
@pytest.mark.parametrize("conversation", ["multi_turn", "tool_call_json_string", "reasoning"])
def test_qwen3_directory_matches_transformers(conversation: str, thinking: dict[str, Any]) -> None:
    ours, reference = _load(model_dir("qwen3"))
    assert ours.chat_template == reference.chat_template
    # Qwen3's template reads message.content of tool-call turns, which transformers drops when it
    # is None (as OpenAI clients send it): give those turns "" as servers do.
    messages = [dict(m, content=m["content"] or "") for m in CONVERSATIONS[conversation]]
    tools = [WEATHER_TOOL] if conversation.startswith("tool") else None
    expected = reference.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True, **thinking
    )
    assert ours.chat_template is not None
    prompt = render_chat(ours.chat_template, messages, tools, **ours.special_tokens_map, **thinking)
    assert prompt == expected
    assert ours.encode(prompt) == reference.encode(expected, add_special_tokens=False)


@pytest.mark.parametrize("template", ["mistral-nemo", "chatml"])
def test_mistral_vocabulary_with_a_template(template: str) -> None:
    # The mistral fixture ships no template: supply one, with the vocabulary's own bos/eos.
    ours, reference = _load(model_dir("mistral"))
    source = CHATML_TEMPLATE if template == "chatml" else template_source(template)
    messages = CONVERSATIONS["multi_turn"]
    expected = reference.apply_chat_template(messages, chat_template=source, tokenize=False, add_generation_prompt=True)
    prompt = render_chat(source, messages, **ours.special_tokens_map)
    assert prompt == expected
    if template == "mistral-nemo":
        assert prompt.startswith("<s>[INST]")
