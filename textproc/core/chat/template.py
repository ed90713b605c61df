"""Chat templates: messages + tools -> prompt text, exactly as transformers' apply_chat_template.

Owns turning an OpenAI-style conversation into the prompt string: the template picked by
:mod:`textproc.core.chat.selection` (a string, or named templates as a dict or tokenizer_config
list), preparing the inputs the way transformers 5 does (keys whose value is None dropped,
everything rebuilt from plain JSON types, reasoning fields aliased, ``continue_final_message``
trimmed), and rendering in the metered sandbox of :mod:`textproc.core.chat.sandbox`. Also answers
whether a rendered prompt leaves the model inside a reasoning block.

Contract: ``render_chat(t, m, tools, **kw) == tokenizer.apply_chat_template(m, tools=tools,
chat_template=t, tokenize=False, **kw)`` for any template that renders within the limits.
Must not: tokenize, read the environment, or run any code a template asks for.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import jinja2.exceptions

from textproc.core.chat.chatml import CHATML_TEMPLATE
from textproc.core.chat.budget import RenderBudget, RenderLimits, active_budget
from textproc.core.chat.sandbox import compile_template
from textproc.core.chat.selection import load_chat_template, select_template
from textproc.errors import InvalidInput, TemplateError, short

__all__ = [
    "CHATML_TEMPLATE",
    "ChatTemplate",
    "RenderLimits",
    "RESERVED_VARIABLES",
    "render_chat",
    "prompt_starts_in_reasoning",
    "ASSISTANT_HEADERS",
]

# Keyword arguments of render_chat / ChatTemplate.render: never template variables.
# (template and messages are positional-only, so those names pass through to the template, where
# transformers' own `messages` always wins; servers should refuse them anyway.)
RESERVED_VARIABLES = frozenset(
    {"messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
     "template_name", "limits"}
)

# Names a message's reasoning is passed under; templates read the first (transformers 5).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "

# Errors Python raises from inside a template's expressions (bad types, missing keys, deep
# recursion); they become TemplateError naming the template.
_RENDER_ERRORS = (
    TypeError,
    ValueError,
    LookupError,
    ArithmeticError,
    AttributeError,
    RuntimeError,  # RecursionError from endless macro recursion, NotImplementedError
    MemoryError,
)


class ChatTemplate:
    """One chat template source, compiled once (cached by source) and rendered in the sandbox.

    >>> ChatTemplate("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}").render(
    ...     [{"role": "user", "content": "hi"}])
    'user:hi;'
    """

    __slots__ = ("source", "name")

    def __init__(self, source: str, *, name: str | None = None) -> None:
        self.source = source
        self.name = name if name is not None else _source_name(source)

    def __repr__(self) -> str:
        return f"ChatTemplate(name={self.name!r}, {len(self.source)} chars)"

    def compile(self) -> jinja2.Template:
        """The compiled template (cached by source); TemplateError on a syntax error."""
        if not isinstance(self.source, str):
            raise InvalidInput(f"chat template must be a str, got {type(self.source).__name__}")
        try:
            return compile_template(self.source)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise TemplateError(f"chat template {self.name}: syntax error at line {e.lineno}: {e.message}") from e
        except jinja2.exceptions.TemplateError as e:
            raise TemplateError(f"chat template {self.name}: {e}") from e
        except SyntaxError as e:
            # jinja's parser lets some invalid templates through to Python's compile():
            # {% break %} / {% continue %} outside a for loop (top level, set/filter/macro blocks)
            raise TemplateError(f"chat template {self.name}: invalid template: {e.msg}") from e
        except (RecursionError, MemoryError) as e:
            # deeply nested blocks or expressions ('[' * 200, '1 + 1 + ...' 20k times)
            raise TemplateError(
                f"chat template {self.name}: too deeply nested to compile ({type(e).__name__})"
            ) from e

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        /,
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool | str = False,
        documents: Sequence[Mapping[str, Any]] | None = None,
        limits: RenderLimits | None = None,
        **variables: Any,
    ) -> str:
        """Render the prompt; see :func:`render_chat` for the arguments and the contract."""
        limits = _check_limits(limits)
        if "messages" in variables:
            raise InvalidInput("'messages' is the conversation argument, not a template variable")
        compiled = self.compile()
        chat = _prepare_messages(messages)
        if continue_final_message and add_generation_prompt:
            raise InvalidInput(
                "continue_final_message and add_generation_prompt are not compatible: pass "
                "add_generation_prompt=False to continue the final message"
            )
        tool_schemas = _prepare_dict_list(tools, "tools", "JSON-schema dicts", "JSON-schema dict")
        docs = _prepare_dict_list(
            documents, "documents", "dicts with 'title' and 'text'", "dict with 'title' and 'text'"
        )
        final_text: str | None = None
        if continue_final_message:
            final_text = _tag_final_message(chat, continue_final_message, self.source)
        context = {
            key: _plain(value) for key, value in variables.items()
        }
        context.update(
            messages=chat,
            tools=tool_schemas,
            documents=docs,
            add_generation_prompt=add_generation_prompt,
        )
        rendered = self._run(compiled, context, limits)
        if final_text is not None:
            rendered = _trim_continued(rendered, final_text, self.name)
        return rendered

    def _run(
        self,
        compiled: jinja2.Template,
        context: dict[str, Any],
        limits: RenderLimits,
    ) -> str:
        max_output_chars = limits.max_output_chars
        budget = RenderBudget(
            self.name, max_output_chars=max_output_chars, max_steps=limits.max_steps, timeout_s=limits.timeout_s
        )
        token = active_budget().set(budget)
        parts: list[str] = []
        total = 0
        chunks = compiled.generate(**context)  # a generator: closed below if we stop early
        try:
            for chunk in chunks:
                total += len(chunk)
                if total > max_output_chars:
                    budget.fail(f"the rendered prompt passed max_output_chars={max_output_chars}")
                parts.append(chunk)
        except TemplateError:
            raise
        except jinja2.exceptions.TemplateError as e:
            # raise_exception() raises a plain jinja TemplateError: its message is the template's own
            kind = "" if type(e) is jinja2.exceptions.TemplateError else f"{type(e).__name__}: "
            raise TemplateError(f"chat template {self.name}: {kind}{_clip(e.message or str(e))}") from e
        except _RENDER_ERRORS as e:
            raise TemplateError(f"chat template {self.name}: {type(e).__name__}: {_clip(str(e))}") from e
        finally:
            chunks.close()  # type: ignore[attr-defined]
            active_budget().reset(token)
        return "".join(parts)


def render_chat(
    template: str | Mapping[str, str] | Sequence[Mapping[str, str]] | ChatTemplate | os.PathLike[str],
    messages: Sequence[Mapping[str, Any]],
    /,
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
    continue_final_message: bool | str = False,
    documents: Sequence[Mapping[str, Any]] | None = None,
    template_name: str | None = None,
    limits: RenderLimits | None = None,
    **variables: Any,
) -> str:
    """Render ``messages`` (and ``tools``/``documents``) into a prompt with a chat template.

    ``template`` is a template source, named templates (``{"default": ..., "tool_use": ...}`` or
    tokenizer_config's ``[{"name", "template"}]`` list: ``template_name`` picks one, else
    ``tool_use`` when ``tools`` is not None, else ``default``, as transformers does), a path to a
    ``chat_template.jinja`` file, or a :class:`ChatTemplate`. ``variables`` reach the template as
    globals: pass the special tokens (``bos_token``, ``eos_token``...) and chat_template_kwargs
    such as ``enable_thinking``. ``continue_final_message`` (True, or the message field to
    continue) leaves the last message open instead of closing it.

    Contract: equals transformers' ``apply_chat_template(messages, tools=tools,
    documents=documents, tokenize=False, add_generation_prompt=..., continue_final_message=...,
    **special_tokens, **variables)``. A render that passes ``limits`` (a :class:`RenderLimits`:
    ``max_steps`` steps, ``timeout_s`` seconds, ``max_output_chars`` characters), touches an
    unsafe attribute, or fails inside the template raises :class:`TemplateError` naming the
    template; bad messages, tools or options raise :class:`InvalidInput`.

    The names in :data:`RESERVED_VARIABLES` are arguments, not template variables: a server that
    forwards a client's chat_template_kwargs as ``variables`` must refuse those keys. (``limits``
    must be a :class:`RenderLimits` object, which JSON cannot produce, so a client cannot lift
    the limits through them.)
    """
    if isinstance(template, ChatTemplate):
        chat_template = template
    else:
        if isinstance(template, os.PathLike):
            loaded = load_chat_template(template)
            if loaded is None:
                raise InvalidInput(f"no chat template found at {os.fspath(template)!r}")
            template = loaded
        chosen_name, source = select_template(template, tools=tools, name=template_name)
        chat_template = ChatTemplate(source, name=None if chosen_name is None else f"{chosen_name}:{_source_name(source)}")
    return chat_template.render(
        messages,
        tools,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        documents=documents,
        limits=limits,
        **variables,
    )


# Generation-prompt headers of common templates, for prompt_starts_in_reasoning.
ASSISTANT_HEADERS = (
    "<|im_start|>assistant",  # ChatML: Qwen, Hermes, QwQ
    "<|start_header_id|>assistant<|end_header_id|>",  # Llama 3
    "<｜Assistant｜>",  # DeepSeek R1 / V3
    "<|Assistant|>",
    "<|assistant|>",  # Phi-3, GLM
    "<start_of_turn>model",  # Gemma
    "<|start|>assistant",  # gpt-oss
    "<|im_assistant|>",  # Kimi
    "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",  # Command R
    "<|start_of_role|>assistant<|end_of_role|>",  # Granite
    "[/INST]",  # Mistral
)


def prompt_starts_in_reasoning(
    prompt: str,
    *,
    open_tag: str = "<think>",
    close_tag: str = "</think>",
    assistant_header: str | Sequence[str] | None = None,
) -> bool:
    """True when the prompt leaves the model inside an open reasoning block.

    Looks only after the last assistant header (``assistant_header``, default
    :data:`ASSISTANT_HEADERS`; the whole prompt when none occurs), so a ``<think>`` quoted in a
    user message does not count: True when the last ``open_tag`` there is not followed by
    ``close_tag`` (a template that pre-fills ``<think>\\n``), False when there is none or it is
    closed (an empty ``<think>\\n\\n</think>\\n\\n`` block means thinking is off).

    >>> prompt_starts_in_reasoning("<|im_start|>assistant\\n<think>\\n")
    True
    >>> prompt_starts_in_reasoning("<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n")
    False
    """
    if not open_tag:
        raise InvalidInput("open_tag must be a non-empty string")
    headers = ASSISTANT_HEADERS if assistant_header is None else (
        (assistant_header,) if isinstance(assistant_header, str) else tuple(assistant_header)
    )
    start = max((prompt.rfind(h) + len(h) for h in headers if h and h in prompt), default=0)
    tail = prompt[start:]
    opened = tail.rfind(open_tag)
    if opened < 0:
        return False
    return close_tag not in tail[opened + len(open_tag):]


# --- input preparation, mirroring transformers 5's apply_chat_template ---------------------


def _check_limits(limits: object) -> RenderLimits:
    if limits is None:
        return RenderLimits()
    if not isinstance(limits, RenderLimits):
        raise InvalidInput(f"limits must be a textproc.core.chat.template.RenderLimits, got {short(limits)}")
    return limits


def _clip(message: str, limit: int = 2000) -> str:
    # A template can raise with a message of any size; keep errors printable.
    return message if len(message) <= limit else message[:limit] + f"... ({len(message)} chars)"


def _source_name(source: object) -> str:
    data = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else repr(source).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()[:12]


def _plain(value: Any) -> Any:
    # transformers' _plain_template_data: the template sees only plain JSON types (and tuples);
    # str/int/float subclasses are stripped to the base type, other objects become "<TypeName>".
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


def _prepare_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidInput(f"messages must be a list of dicts, got {short(messages)}")
    if not messages:
        raise InvalidInput("cannot render an empty conversation; provide at least one message")
    chat: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if dataclasses.is_dataclass(message) and not isinstance(message, type):
            message = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
        elif callable(getattr(message, "model_dump", None)):
            message = message.model_dump()  # type: ignore[attr-defined]
        if not isinstance(message, Mapping):
            raise InvalidInput(f"messages[{i}] must be a dict with 'role' and 'content', got {short(message)}")
        # Keys whose value is None are dropped: OpenAI clients send content=None / tool_calls=None,
        # and templates handle a missing key where they would print "None".
        try:
            plain = _plain({key: value for key, value in message.items() if value is not None})
        except RecursionError as e:
            raise InvalidInput(f"messages[{i}] is nested too deeply to render") from e
        reasoning = next((plain[k] for k in _REASONING_FIELDS if plain.get(k) is not None), None)
        if reasoning is not None:
            plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
        chat.append(plain)
    return chat


def _prepare_dict_list(
    value: Sequence[Mapping[str, Any]] | None, name: str, items: str, item: str
) -> list[Any] | None:
    """A plain copy of ``tools``/``documents``: a list of dicts (``items``/``item`` say which)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise InvalidInput(f"{name} must be a list of {items}, got {short(value)}")
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise InvalidInput(f"{name}[{i}] must be a {item}, got {short(entry)}")
    result: list[Any] = _plain(list(value))
    return result


def _tag_final_message(chat: list[dict[str, Any]], field: bool | str, source: str) -> str:
    """Append transformers' continue tag to the final message's field; return the original text."""
    field = field if isinstance(field, str) else "content"
    last = chat[-1]
    final = last.get(field)
    if final is None:
        raise InvalidInput(f"continue_final_message is set but the final message has no {field!r} to continue")
    fields = [field]
    if field in _REASONING_FIELDS:
        fields = [name for name in _REASONING_FIELDS if last.get(name) == final]
    if not any(name in source for name in fields):
        raise InvalidInput(f"continue_final_message={field!r} but the chat template never reads that field")
    if isinstance(final, (list, tuple)):
        for block in reversed(final):
            if isinstance(block, dict) and "text" in block:
                text = block["text"]
                block["text"] = text + _CONTINUE_TAG
                return str(text)
        raise InvalidInput("continue_final_message is set but the final message has no text block to continue")
    if not isinstance(final, str):
        raise InvalidInput(f"continue_final_message: the final message's {field!r} must be text, got {short(final)}")
    for name in fields:
        last[name] = last[name] + _CONTINUE_TAG
    return final


def _trim_continued(rendered: str, final_text: str, name: str) -> str:
    tag = _CONTINUE_TAG.strip()
    if final_text.strip() not in rendered or tag not in rendered:
        raise TemplateError(
            f"chat template {name}: continue_final_message is set but the template dropped part of the "
            f"final message {short(final_text.strip())}, so it cannot be continued"
        )
    at = rendered.rindex(tag)
    if rendered[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return rendered[:at]
    # The template trimmed the message's trailing space, so trim what precedes the tag too.
    return rendered[:at].rstrip()
