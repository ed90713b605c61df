"""render_chat against transformers' apply_chat_template(tokenize=False), character for character.

Real model templates (tests/templates.py, fetched by scripts/fetch_templates.py) x conversations
with a system prompt, several turns, tools, tool calls with dict and JSON-string arguments, tool
results, non-ASCII text and reasoning, x add_generation_prompt on/off, tools on/off and
enable_thinking absent/on/off; plus continue_final_message, documents, named-template selection
and random message contents. When transformers' render fails (a template refusing a system role,
say), ours must fail too, with the same message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerFast

from tests.helpers.conversations import (
    CALL_ID,
    CONVERSATIONS,
    ENDS_WITH_ASSISTANT,
    SPECIAL_TOKENS,
    SYSTEM,
    WEATHER_TOOL,
    make_hf_tokenizer,
    assert_same,
    hf_render,
)
from tests.helpers.templates import REAL_TEMPLATES, template_source
from textproc.core.chat.selection import load_chat_template, select_template
from textproc.core.chat.template import CHATML_TEMPLATE, ChatTemplate, render_chat
from textproc.errors import InvalidInput

THINKING = [{}, {"enable_thinking": True}, {"enable_thinking": False}]


@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("name", sorted(REAL_TEMPLATES) + ["chatml"])
def test_render_matches_transformers(name: str, conversation: str) -> None:
    source = CHATML_TEMPLATE if name == "chatml" else template_source(name)
    messages = CONVERSATIONS[conversation]
    rendered = 0
    for add_generation_prompt in (True, False):
        for tools in (None, [WEATHER_TOOL]):
            for thinking in THINKING:
                out = assert_same(
                    source, messages, tools, add_generation_prompt=add_generation_prompt, **thinking
                )
                rendered += out is not None
    if name == "chatml":
        assert rendered == 12  # our own template must render every case


@pytest.mark.parametrize("name", sorted(REAL_TEMPLATES) + ["chatml"])
def test_most_cases_render(name: str) -> None:
    # Guards against a vacuous parity test: each real template renders most conversations.
    source = CHATML_TEMPLATE if name == "chatml" else template_source(name)
    ok = sum(
        any(assert_same(source, messages, tools, add_generation_prompt=True) is not None for tools in (None, [WEATHER_TOOL]))
        for messages in CONVERSATIONS.values()
    )
    assert ok >= 2, f"{name} rendered only {ok} of {len(CONVERSATIONS)} conversations"


@pytest.mark.parametrize("name", sorted(REAL_TEMPLATES) + ["chatml"])
def test_continue_final_message(name: str) -> None:
    source = CHATML_TEMPLATE if name == "chatml" else template_source(name)
    out = assert_same(source, ENDS_WITH_ASSISTANT, None, add_generation_prompt=False, continue_final_message=True)
    if out is not None:
        assert out.endswith("Red, grün, and") or out.endswith("Red, grün, and ")
    no_reasoning = [dict(m) for m in ENDS_WITH_ASSISTANT[:2]] + [{"role": "assistant", "content": "Sure: "}]
    assert_same(source, no_reasoning, None, add_generation_prompt=False, continue_final_message=True)
    assert_same(source, ENDS_WITH_ASSISTANT, None, add_generation_prompt=False)


def test_continue_reasoning_field() -> None:
    source = template_source("qwen3")
    out = assert_same(
        source, ENDS_WITH_ASSISTANT, None, add_generation_prompt=False, continue_final_message="reasoning_content"
    )
    assert out is not None and out.endswith("<think>\nPick common ones")


def test_continue_and_generation_prompt_conflict() -> None:
    with pytest.raises(InvalidInput, match="add_generation_prompt=False"):
        render_chat(CHATML_TEMPLATE, ENDS_WITH_ASSISTANT, continue_final_message=True)
    with pytest.raises(InvalidInput, match="'nonexistent_field'"):
        render_chat(
            CHATML_TEMPLATE, ENDS_WITH_ASSISTANT, add_generation_prompt=False, continue_final_message="nonexistent_field"
        )


DOCUMENTS = [
    {"title": "Zürich weather", "text": "Sunny, 21 °C; Föhn expected."},
    {"title": "東京", "text": "Rain until Thursday ☔"},
]


@pytest.mark.parametrize("name", ["granite3.3", "command-r7b"])
def test_documents(name: str) -> None:
    source = template_source(name)
    messages = [SYSTEM, {"role": "user", "content": "Summarise the documents."}]
    outs = [
        assert_same(source, messages, tools, add_generation_prompt=True, documents=DOCUMENTS)
        for tools in (None, [WEATHER_TOOL])  # Command R's tool_use template needs tools too
    ]
    assert any(out is not None and "Föhn" in out for out in outs)


def test_special_tokens_and_variables_reach_the_template() -> None:
    source = "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}{{ custom|tojson }}"
    messages = [{"role": "user", "content": "hi <b>&"}]
    out = assert_same(source, messages, None, add_generation_prompt=True, custom={"ü": "<&>", "n": [1, 2.5, None]})
    assert out == '<s>hi <b>&</s>{"ü": "<&>", "n": [1, 2.5, null]}'


def test_tojson_options_match() -> None:
    source = (
        "{{ tools|tojson(indent=2) }}|{{ tools|tojson(separators=(',', ':'), sort_keys=true) }}|"
        "{{ messages[0]|tojson(ensure_ascii=true) }}"
    )
    messages = [{"role": "user", "content": "naïve <tag> 😀"}]
    assert assert_same(source, messages, [WEATHER_TOOL], add_generation_prompt=True) is not None


def test_autoescape_blocks_match() -> None:
    # Nobody ships this, but the instrumentation must not change jinja's escaping rules.
    source = (
        "<i>{% for m in messages %}{% autoescape true %}<b>{{ m.content }}</b>{{ m.content ~ '&' ~ m.role }}"
        "{% endautoescape %}{{ m.content ~ '<' }}{% endfor %}</i>"
    )
    messages = [{"role": "user", "content": "a < b & \"c\""}]
    out = assert_same(source, messages, None, add_generation_prompt=False)
    assert out is not None and "&lt;" in out and "a < b" in out


def test_generation_block_renders_its_body() -> None:
    source = (
        "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
        "{% set inner = 1 %}{% endgeneration %}{% else %}[{{ m.content }}]{% endif %}{% endfor %}{{ inner }}"
    )
    messages = CONVERSATIONS["multi_turn"]
    out = assert_same(source, messages, None, add_generation_prompt=False)
    assert out is not None and "Waves fold" in out


def test_named_templates_pick_like_transformers() -> None:
    default = "D:{% for m in messages %}{{ m.content }}{% endfor %}"
    tool_use = "T{{ tools|length }}:{% for m in messages %}{{ m.content }}{% endfor %}"
    named = {"default": default, "tool_use": tool_use}
    as_list = [{"name": "default", "template": default}, {"name": "tool_use", "template": tool_use}]
    tokenizer = make_hf_tokenizer(as_list)  # tokenizer_config's list form
    messages = [{"role": "user", "content": "x"}]
    for tools in (None, [], [WEATHER_TOOL]):
        expected = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        for template in (named, as_list):
            assert render_chat(template, messages, tools, add_generation_prompt=False) == expected
    assert select_template(named, tools=[]) == ("tool_use", tool_use)
    assert select_template(named, name="default", tools=[WEATHER_TOOL]) == ("default", default)
    with pytest.raises(InvalidInput, match="'nope'"):
        select_template(named, name="nope")
    with pytest.raises(InvalidInput, match="none named 'default'"):
        select_template({"a": default, "b": tool_use})


def test_load_chat_template_like_transformers(tmp_path: Path) -> None:
    source = template_source("qwen3")
    single = tmp_path / "single"
    make_hf_tokenizer().save_pretrained(single)
    (single / "chat_template.jinja").write_text(source + "\n", encoding="utf-8")
    loaded = PreTrainedTokenizerFast.from_pretrained(single)
    assert load_chat_template(single) == loaded.chat_template
    assert load_chat_template(single / "chat_template.jinja") == loaded.chat_template
    messages = CONVERSATIONS["reasoning"]
    expected = loaded.apply_chat_template(messages, tools=[WEATHER_TOOL], tokenize=False, add_generation_prompt=True)
    assert render_chat(single, messages, [WEATHER_TOOL], **SPECIAL_TOKENS) == expected

    listed = tmp_path / "listed"
    make_hf_tokenizer().save_pretrained(listed)
    config_path = listed / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = [{"name": "default", "template": "A"}, {"name": "tool_use", "template": source}]
    config_path.write_text(json.dumps(config), encoding="utf-8")
    loaded = PreTrainedTokenizerFast.from_pretrained(listed)
    assert load_chat_template(listed) == loaded.chat_template == {"default": "A", "tool_use": source}
    (tmp_path / "empty").mkdir()
    assert load_chat_template(tmp_path / "empty") is None
    with pytest.raises(InvalidInput, match="nothing-here"):
        load_chat_template(tmp_path / "nothing-here.jinja")


def test_input_validation() -> None:
    with pytest.raises(InvalidInput, match="empty conversation"):
        render_chat(CHATML_TEMPLATE, [])
    with pytest.raises(InvalidInput, match=r"messages\[1\] must be a dict"):
        render_chat(CHATML_TEMPLATE, [{"role": "user", "content": "a"}, "b"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match=r"tools\[0\] must be a JSON-schema dict"):
        render_chat(CHATML_TEMPLATE, [{"role": "user", "content": "a"}], [print])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match=r"documents\[0\]"):
        render_chat(CHATML_TEMPLATE, [{"role": "user", "content": "a"}], documents=["text"])  # type: ignore[list-item]


def test_chat_template_object_and_cache() -> None:
    template = ChatTemplate(CHATML_TEMPLATE, name="chatml")
    assert template.compile() is ChatTemplate(CHATML_TEMPLATE).compile()  # compiled once per source
    messages = CONVERSATIONS["multi_turn"]
    assert template.render(messages) == render_chat(CHATML_TEMPLATE, messages)
    assert render_chat(template, messages, add_generation_prompt=False) == hf_render(CHATML_TEMPLATE, messages)


# Characters that stress templates: markup, template syntax, think/tool tags, control and
# non-BMP characters, lone surrogates.
_PIECES = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["<think>", "</think>", "<tool_call>", "{{", "}}", "{%", "\n", " ", "\\", '"', "<|im_end|>"]),
)
_TEXT = st.lists(_PIECES, max_size=6).map("".join)


@st.composite
def _conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(_TEXT)})
    for turn in range(draw(st.integers(1, 4))):
        messages.append({"role": "user", "content": draw(_TEXT)})
        if draw(st.booleans()):
            message: dict[str, Any] = {"role": "assistant", "content": draw(_TEXT)}
            if draw(st.booleans()):
                message["reasoning_content"] = draw(_TEXT)
            if draw(st.booleans()):
                arguments = {draw(_TEXT): draw(st.one_of(_TEXT, st.integers(), st.none()))}
                message["tool_calls"] = [
                    {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
                ]
                messages.append(message)
                messages.append({"role": "tool", "tool_call_id": CALL_ID, "content": draw(_TEXT)})
                continue
            messages.append(message)
    return messages


@pytest.mark.parametrize("name", ["chatml", "qwen3", "llama3.1"])
def test_random_contents_match_transformers(name: str) -> None:
    source = CHATML_TEMPLATE if name == "chatml" else template_source(name)

    @given(messages=_conversations(), thinking=st.sampled_from(THINKING), with_tools=st.booleans())
    def check(messages: list[dict[str, Any]], thinking: dict[str, bool], with_tools: bool) -> None:
        tools = [WEATHER_TOOL] if with_tools else None
        assert_same(source, messages, tools, add_generation_prompt=True, **thinking)

    check()
