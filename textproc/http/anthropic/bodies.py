"""Anthropic's Messages API, request side: a ``POST /v1/messages`` body -> the chat request it is.

Owns the mapping of ``system`` (a string or text blocks), ``messages`` (content blocks ``text``,
``image`` in user turns (``base64`` or ``url`` source, an ``image_url`` part of the chat body),
``tool_use``, ``tool_result``, ``thinking`` / ``redacted_thinking``), custom ``tools`` with
``input_schema``, ``tool_choice`` (``auto`` / ``any`` / ``tool`` / ``none``,
``disable_parallel_tool_use``), ``stop_sequences``, ``max_tokens``, ``temperature`` /
``top_p`` / ``top_k``, ``thinking`` (the template's switch; ``budget_tokens``: the reasoning
budget where the model reasons in tagged markup), ``output_config.effort`` (the template's
``reasoning_effort``), ``output_config.format`` and a final assistant turn (a prefill, which
the answer continues) onto a chat completions body,
which then passes the same rules (``openai.bodies.chat_params``) and the same ``TextClient.chat``
call as ``/v1/chat/completions``: templates, tool formats, forced calls, constraints and
reasoning come from there, not from a second copy here. Owns Anthropic's error shape too
(:func:`anthropic_error_body`: ``{"type": "error", "error": {"type", "message"}}``, the error
type from the status).

Nothing that changes the output is silently ignored: document blocks, server tools
(a tool with a ``type`` other than ``custom``), ``mcp_servers`` and ``container`` are a 400
naming the field with its JSON path (``messages[2].content[0].type``). Fields that do not change
what this server generates (``cache_control``, ``metadata``, ``context_management``,
``service_tier``) are accepted. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Sequence

import msgspec

from textproc.errors import short
from textproc.http.api_types import ApiError, ChatParams, Int1
from textproc.http.openai.bodies import decode_body, translated_chat_params
from textproc.options import REASONING_BUDGET_OPTIONAL

__all__ = [
    "MessagesBody",
    "MessagesRequest",
    "parse_messages_request",
    "parse_count_tokens_request",
    "anthropic_error_body",
    "ERROR_TYPES",
]

# Anthropic's error type for each status it uses (anything else >= 500: api_error)
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 408: "timeout_error",
               413: "request_too_large", 429: "rate_limit_error", 499: "invalid_request_error",
               504: "timeout_error", 529: "overloaded_error"}

_Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]  # Anthropic's range: 0..1
_TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
_TopK = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
_MIN_THINKING_BUDGET = 1024  # Anthropic's lower bound for thinking.budget_tokens
_BLOCKS = "text, tool_use, tool_result, thinking, redacted_thinking"
# output_config.effort -> the template's reasoning_effort (gpt-oss reads low / medium / high;
# Anthropic's two levels above high are the most an open template offers)
_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def anthropic_error_body(exc: ApiError) -> tuple[int, dict[str, Any]]:
    """(status, body) of an error in Anthropic's shape. The service's 503 (down, starting,
    overloaded) becomes Anthropic's 529 ``overloaded_error``, which its clients retry.

    >>> anthropic_error_body(ApiError("bad", param="x"))
    (400, {'type': 'error', 'error': {'type': 'invalid_request_error', 'message': 'bad'}})
    """
    status = 529 if exc.status == 503 else exc.status
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return status, {"type": "error", "error": {"type": kind, "message": exc.message}}


class MessagesBody(msgspec.Struct, kw_only=True):
    """The body of ``POST /v1/messages`` (and ``/count_tokens``, where ``max_tokens`` is not
    needed); unknown fields are ignored. Blocks, tools and options stay plain JSON here: their
    many shapes are checked by hand below so that an error names the Anthropic field."""

    model: str
    messages: list[Any]
    max_tokens: Int1 | None = None
    system: str | list[Any] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: _Temperature | None = None
    top_p: _TopP | None = None
    top_k: _TopK | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    output_format: dict[str, Any] | None = None  # the structured-outputs beta's older spelling
    mcp_servers: list[Any] | None = None
    container: Any = None
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's extension, as on chat


@dataclass(frozen=True, kw_only=True)
class MessagesRequest:
    """A validated Messages request: the chat request it runs and what the answer needs.

    ``max_tokens`` is the client's; ``chat.sampling.max_tokens`` may become smaller when the prompt
    leaves less room in the context (``anthropic.routes``)."""

    chat: ChatParams
    max_tokens: int


def _refuse(what: str, param: str, hint: str = "") -> ApiError:
    return ApiError(f"{what} is not supported by this server{hint}", param=param)


def _text_of(blocks: Any, where: str, *, allowed: str = "text") -> list[dict[str, str]]:
    """Text blocks -> chat text parts; any other block is a 400 naming it."""
    if isinstance(blocks, str):
        return [{"type": "text", "text": blocks}]
    if not isinstance(blocks, list):
        raise ApiError(f"{where} must be a string or a list of content blocks, got "
                       f"{short(blocks)}", param=where)
    parts = []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind != "text" or not isinstance(block.get("text"), str):
            raise _refuse(f"content block type {short(kind)} at {at}.type", f"{at}.type",
                          f"; supported here: {allowed}")
        parts.append({"type": "text", "text": block["text"]})
    return parts


def _tool_result(block: dict[str, Any], at: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise ApiError(f"{at}.tool_use_id must be a string, got {short(call_id)}",
                       param=f"{at}.tool_use_id")
    content = block.get("content", "")
    parts = _text_of(content, f"{at}.content") if content else []
    text = "\n".join(p["text"] for p in parts)
    if block.get("is_error"):
        # templates have no error flag: the model reads it in the text
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": call_id, "content": text}


_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")  # Anthropic's list


def _image_url(block: dict[str, Any], at: str) -> str:
    """An image block's source as a URL: ``base64`` as a data: URL, ``url`` as it is."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64" and isinstance(source, dict):
        media_type, data = source.get("media_type"), source.get("data")
        if media_type not in _IMAGE_TYPES:
            raise ApiError(f"{at}.source.media_type {short(media_type)} is not one of "
                           f"{', '.join(_IMAGE_TYPES)}", param=f"{at}.source.media_type")
        if not isinstance(data, str):
            raise ApiError(f"{at}.source.data must be a base64 string", param=f"{at}.source.data")
        return f"data:{media_type};base64,{data}"
    if kind == "url" and isinstance(source, dict) and isinstance(source.get("url"), str):
        return str(source["url"])
    raise ApiError(f"{at}.source.type {short(kind)} is not supported; supported: base64 (with "
                   "media_type and data), url (with url)", param=f"{at}.source.type")


def _user(content: Any, at: str, out: list[dict[str, Any]], where: list[str]) -> None:
    """A user turn: its tool results become tool messages, its text one user message."""
    if isinstance(content, str):
        out.append({"role": "user", "content": content})
        where.append(at)
        return
    if not isinstance(content, list):
        raise ApiError(f"{at}.content must be a string or a list of content blocks, got "
                       f"{short(content)}", param=f"{at}.content")
    texts: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        bat = f"{at}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            out.append(_tool_result(block, bat))
            where.append(bat)
        elif kind == "image":
            texts.append({"type": "image_url", "image_url": {"url": _image_url(block, bat)}})
        else:
            texts += _text_of([block], f"{at}.content", allowed="text, image, tool_result")
    if texts:
        out.append({"role": "user", "content": texts})
        where.append(at)


def _assistant(content: Any, at: str) -> dict[str, Any]:
    """An assistant turn: thinking -> reasoning_content, text -> content, tool_use -> calls.
    ``redacted_thinking`` is opaque (another server's encrypted reasoning): not rendered."""
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    if not isinstance(content, list):
        raise ApiError(f"{at}.content must be a string or a list of content blocks, got "
                       f"{short(content)}", param=f"{at}.content")
    text, thinking, calls = [], [], []
    for j, block in enumerate(content):
        bat = f"{at}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            text.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            name, call_input = block.get("name"), block.get("input", {})
            if not isinstance(name, str) or not isinstance(call_input, dict):
                raise ApiError(f"tool_use at {bat} needs a string name and an object input",
                               param=bat)
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": name, "arguments": call_input}})
        else:
            raise _refuse(f"content block type {short(kind)} at {bat}.type", f"{bat}.type",
                          f"; supported: {_BLOCKS}")
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if thinking:
        msg["reasoning_content"] = "".join(thinking)
    if calls:
        msg["tool_calls"] = calls
    return msg


def _messages(body: MessagesBody) -> tuple[list[dict[str, Any]], list[str]]:
    """Chat messages and, for each, the Anthropic path it came from. ``system``-role entries
    inside ``messages`` (Claude Code sends one after the user turn) join the system prompt, in
    order: chat templates put the system prompt first, and many refuse a system turn anywhere
    else."""
    system: list[dict[str, str]] = []
    if body.system is not None:
        system += _text_of(body.system, "system")
    out: list[dict[str, Any]] = []
    where: list[str] = []
    if not body.messages:
        raise ApiError("messages: at least one message is required", param="messages")
    for i, msg in enumerate(body.messages):
        at = f"messages[{i}]"
        role = msg.get("role") if isinstance(msg, dict) else None
        if role == "user":
            _user(msg.get("content"), at, out, where)
        elif role == "assistant":
            out.append(_assistant(msg.get("content"), at))
            where.append(at)
        elif role == "system":
            system += _text_of(msg.get("content"), f"{at}.content")
        else:
            raise ApiError(f"role {short(role)} at {at}.role is not allowed; allowed roles: "
                           "user, assistant (and system)", param=f"{at}.role")
    if system:
        text = "\n\n".join(p["text"] for p in system)
        out.insert(0, {"role": "system", "content": text})
        where.insert(0, "system")
    return out, where


def _tools(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise ApiError(f"{at} must be an object, got {short(tool)}", param=at)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise _refuse(f"tool type {short(kind)} at {at}.type (a server tool)", f"{at}.type",
                          "; it runs custom tools only (name, description, input_schema)")
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str):
            raise ApiError(f"{at}.name must be a string, got {short(name)}", param=f"{at}.name")
        if not isinstance(schema, dict):
            raise ApiError(f"{at}.input_schema must be a JSON Schema object, got "
                           f"{short(schema)}", param=f"{at}.input_schema")
        fn: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: dict[str, Any] | None) -> tuple[str | dict[str, Any] | None, bool]:
    """(chat tool_choice, parallel calls allowed)."""
    if choice is None:
        return None, True
    parallel = not choice.get("disable_parallel_tool_use", False)
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return kind, parallel
    if kind == "any":
        return "required", parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise ApiError(f"tool_choice {short(choice)} is not supported; use type 'auto', 'any', "
                   "'none' or {\"type\": \"tool\", \"name\": ...}", param="tool_choice")


def _thinking(thinking: dict[str, Any] | None, max_tokens: int | None) -> tuple[bool | None, int | None]:
    """(reasoning on (True), off (False) or the model's default (None), the reasoning budget
    or None). ``adaptive`` is on without a budget: the model decides how long it reasons."""
    if thinking is None:
        return None, None
    kind = thinking.get("type")
    if kind == "disabled":
        return False, None
    if kind == "adaptive":
        return True, None
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or \
                budget < _MIN_THINKING_BUDGET:
            raise ApiError(f"thinking.budget_tokens: {short(budget)}; it must be an integer >= "
                           f"{_MIN_THINKING_BUDGET}", param="thinking.budget_tokens")
        if max_tokens is not None and budget >= max_tokens:
            raise ApiError(f"thinking.budget_tokens ({budget}) must be less than max_tokens "
                           f"({max_tokens})", param="thinking.budget_tokens")
        return True, budget
    raise ApiError(f"thinking.type {short(kind)} is not one of 'enabled', 'adaptive', "
                   "'disabled'", param="thinking.type")


def _effort(config: dict[str, Any] | None) -> str | None:
    effort = (config or {}).get("effort")
    if effort is None:
        return None
    if effort not in _EFFORTS:
        raise ApiError(f"output_config.effort {short(effort)} is not one of "
                       f"{', '.join(map(repr, _EFFORTS))}", param="output_config.effort")
    return _EFFORTS[effort]


def _response_format(body: MessagesBody) -> dict[str, Any] | None:
    fmt = (body.output_config or {}).get("format") or body.output_format
    where = "output_config.format" if (body.output_config or {}).get("format") else "output_format"
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or \
            not isinstance(fmt.get("schema"), dict):
        raise ApiError(f"{where} {short(fmt)} is not supported; use {{\"type\": "
                       "\"json_schema\", \"schema\": {...}}", param=where)
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


def _check_unsupported(body: MessagesBody) -> None:
    if body.mcp_servers:
        raise _refuse("mcp_servers (MCP connectors run by the API)", "mcp_servers")
    if body.container is not None:
        raise _refuse("container (code execution)", "container")


_TOOL_PATH = re.compile(r"(tools\[\d+\])\.function\.(name|parameters)")


def _place_tool(text: str) -> str:
    """A chat tool's path (``tools[i].function.name``, ``.parameters``) as the Anthropic path it
    came from (``tools[i].name``, ``.input_schema``)."""
    return _TOOL_PATH.sub(lambda m: m.group(1) + (".name" if m.group(2) == "name"
                                                  else ".input_schema"), text)


def _prefill(messages: list[dict[str, Any]], where: list[str]) -> dict[str, Any]:
    """A final assistant turn is a prefill: the answer continues it (chat's
    ``continue_final_message``), as Anthropic's does; like Anthropic, it may not end in
    whitespace, and it cannot hold a tool call (a call's result must come first)."""
    last = messages[-1] if messages else {}
    if last.get("role") != "assistant":
        return {}
    at = where[-1]
    if last.get("tool_calls"):
        raise ApiError(f"the final assistant turn at {at} ends with tool_use; send its "
                       "tool_result in a user turn after it", param=f"{at}.content")
    if last["content"] != last["content"].rstrip():
        raise ApiError(f"final assistant content at {at} cannot end with trailing whitespace",
                       param=f"{at}.content")
    return {"continue_final_message": True, "add_generation_prompt": False}


def _to_chat(body: MessagesBody, served_models: Sequence[str]) -> ChatParams:
    _check_unsupported(body)
    messages, where = _messages(body)
    tools = _tools(body.tools)
    tool_choice, parallel = _tool_choice(body.tool_choice)
    kwargs = dict(body.chat_template_kwargs or {})
    thinking, budget = _thinking(body.thinking, body.max_tokens)
    if thinking is not None:
        # the switches chat templates read: Qwen3 and most (enable_thinking), DeepSeek V3.1
        kwargs.setdefault("enable_thinking", thinking)
        kwargs.setdefault("thinking", thinking)
    effort = _effort(body.output_config)
    if effort is not None:
        kwargs.setdefault("reasoning_effort", effort)  # what vLLM passes templates, as responses
    chat: dict[str, Any] = {
        "model": body.model, "messages": messages, "stream": body.stream,
        **_prefill(messages, where),
        "max_tokens": body.max_tokens, "stop": body.stop_sequences,
        "temperature": body.temperature, "top_p": body.top_p, "top_k": body.top_k,
        # without tools, auto and none mean the same (chat's rules refuse any / tool)
        "tools": tools or None,
        "tool_choice": tool_choice if tools or tool_choice not in ("auto", "none") else None,
        "parallel_tool_calls": parallel, "response_format": _response_format(body),
        "chat_template_kwargs": kwargs or None, "max_reasoning_tokens": budget,
    }
    params = translated_chat_params(chat, served_models=served_models, what="messages",
                                    where=where, place=_place_tool)
    if budget is not None:
        # Anthropic's budget is a cap: a model without tagged reasoning runs without one (a
        # chat request's max_reasoning_tokens is a 400 there)
        params.sampling.params[REASONING_BUDGET_OPTIONAL] = True
    return params


def parse_messages_request(body: bytes, *, served_models: Sequence[str]) -> MessagesRequest:
    """Decode and validate a Messages body into the chat request it runs; raise ApiError.

    >>> r = parse_messages_request(b'{"model":"m","max_tokens":9,"system":"be brief",'
    ...                            b'"messages":[{"role":"user","content":"hi"}]}',
    ...                            served_models=["m"])
    >>> r.chat.messages, r.chat.sampling.max_tokens
    ([{'role': 'system', 'content': 'be brief'}, {'role': 'user', 'content': 'hi'}], 9)
    """
    req: MessagesBody = decode_body(body, MessagesBody, "messages")
    if req.max_tokens is None:
        raise ApiError("max_tokens: Field required", param="max_tokens")
    return MessagesRequest(chat=_to_chat(req, served_models), max_tokens=req.max_tokens)


def parse_count_tokens_request(body: bytes, *, served_models: Sequence[str]) -> ChatParams:
    """Decode ``/v1/messages/count_tokens`` (a Messages body without ``max_tokens``)."""
    req: MessagesBody = decode_body(body, MessagesBody, "count_tokens")
    return _to_chat(req, served_models)
