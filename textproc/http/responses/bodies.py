"""The Responses API's request side: a ``POST /v1/responses`` body -> the chat request it is.

Owns the mapping of Responses ``input`` items (messages with content parts, ``input_image`` as
a chat ``image_url`` part, ``function_call``
(namespaced too), ``function_call_output``, ``reasoning`` with its text or ``encrypted_content``),
``instructions``, ``tools`` / ``tool_choice`` (through ``responses.tools``), ``text.format``,
``max_output_tokens`` and ``temperature`` / ``top_p`` onto a chat completions body, which then
passes the same rules (``openai.bodies.chat_params``) and the same ``TextClient.chat`` call as
``/v1/chat/completions``: templates, tool formats, forced calls, structured outputs and
reasoning come from there, not from a second copy here. Owns the bounded in-memory
:class:`ResponseStore` behind ``previous_response_id`` too.

Nothing is silently ignored: a feature this server does not run (files, ``background``,
``conversation``, stored prompts) is a 400 naming the field, with a JSON path into the Responses
body (``input[2].content[0].type``). Two things are named in the response's ``warnings``
instead, so that agents which always send them keep working: tools this server cannot run (not
offered to the model) and reasoning items whose ``encrypted_content`` this service did not seal
(their visible text, if any, is used). ``prompt_cache_key``, ``safety_identifier`` and
``client_metadata`` are accepted (the first two echoed); they change nothing here. Pure: no I/O.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import msgspec

from textproc.errors import short
from textproc.http.api_types import ApiError, ChatParams, Int1
from textproc.http.openai.bodies import decode_body, translated_chat_params
from textproc.http.responses.reasoning import ReasoningSeal
from textproc.http.responses.tools import ResponsesTools, chat_tool_choice, flat_name, parse_tools

__all__ = [
    "ResponsesBody",
    "ResponsesRequest",
    "ResponseStore",
    "parse_responses_request",
    "STORE_MAX_ENTRIES",
    "STORE_TTL_S",
    "STORE_MAX_BYTES",
    "ENCRYPTED_REASONING_INCLUDE",
]

STORE_MAX_ENTRIES = 1024  # responses kept for previous_response_id (oldest evicted first)
STORE_TTL_S = 3600.0  # each is kept this long after it finished
STORE_MAX_BYTES = 64 * 1024 * 1024  # JSON size of all kept conversations together

_ITEM_TYPES = "message, function_call, function_call_output, reasoning"
_ROLES = ("user", "system", "developer", "assistant")
_TEXT_PARTS = ("input_text", "output_text", "text")
_SUMMARIES = ("auto", "concise", "detailed", "none")
ENCRYPTED_REASONING_INCLUDE = "reasoning.encrypted_content"  # reasoning items come back sealed


class ResponsesBody(msgspec.Struct, kw_only=True):
    """The body of ``POST /v1/responses``; unknown fields are ignored (like vLLM).

    Items, tools and formats stay plain JSON here: their many shapes are checked by hand below
    so that an error names the Responses field, not a union member."""

    input: str | list[Any] | None = None
    model: str | None = None
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: Int1 | None = None
    temperature: float | None = None
    top_p: float | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    truncation: str | None = None
    background: bool | None = None
    top_logprobs: int | None = None
    include: list[str] | None = None
    max_tool_calls: int | None = None
    conversation: Any = None
    prompt: Any = None
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's extension, as on chat
    prompt_cache_key: str | None = None  # accepted and echoed: prefix caching is the engine's
    prompt_cache_retention: str | None = None
    safety_identifier: str | None = None
    client_metadata: dict[str, Any] | None = None  # Codex CLI's session ids: accepted, unused
    priority: int = 0  # vLLM's extension, as on chat (its range checked there)


@dataclass(frozen=True, kw_only=True)
class ResponsesRequest:
    """A validated Responses request: the chat request it runs, and what the response repeats.

    ``history`` is the conversation without the instructions (OpenAI does not carry
    ``instructions`` over to a follow-up), in chat-body message shape; the store keeps it plus
    the answer. ``echo`` holds the request fields every Response object repeats. ``tools``
    names calls back (namespaces); ``seal`` is set when reasoning items must carry
    ``encrypted_content``; ``warnings`` go into the response as they are."""

    chat: ChatParams
    history: list[dict[str, Any]]
    echo: dict[str, Any]
    tools: ResponsesTools
    seal: ReasoningSeal | None = None
    warnings: tuple[dict[str, Any], ...] = ()


class ResponseStore:
    """The conversations behind ``previous_response_id``, bounded in count, age and size.

    Keeps at most ``max_entries`` responses, each for ``ttl_s`` seconds after it finished, and
    at most ``max_bytes`` of their JSON in all (oldest evicted first; a conversation larger
    than that is not kept). One frontend process's memory: a restart forgets everything.
    Holds the service's :class:`ReasoningSeal` too (``seal``; a random one by default), which
    outlives both: a client that keeps reasoning items itself needs no stored conversation.
    """

    def __init__(self, *, max_entries: int = STORE_MAX_ENTRIES, ttl_s: float = STORE_TTL_S,
                 max_bytes: int = STORE_MAX_BYTES, seal: ReasoningSeal | None = None) -> None:
        self.seal = seal if seal is not None else ReasoningSeal.random()
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self.bytes = 0
        # response id -> (monotonic deadline, JSON size, conversation messages)
        self._entries: OrderedDict[str, tuple[float, int, list[dict[str, Any]]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, response_id: str, messages: list[dict[str, Any]]) -> None:
        size = len(msgspec.json.encode(messages))
        if size > self.max_bytes or self.max_entries <= 0:
            return
        self._expire(time.monotonic())
        while self._entries and (len(self._entries) >= self.max_entries
                                 or self.bytes + size > self.max_bytes):
            self._drop_oldest()
        self._entries[response_id] = (time.monotonic() + self.ttl_s, size, messages)
        self.bytes += size

    def get(self, response_id: str) -> list[dict[str, Any]] | None:
        self._expire(time.monotonic())
        entry = self._entries.get(response_id)
        return None if entry is None else entry[2]

    def _expire(self, now_s: float) -> None:
        while self._entries and next(iter(self._entries.values()))[0] <= now_s:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, (_, size, _) = self._entries.popitem(last=False)
        self.bytes -= size




def _refuse(message: str, param: str) -> ApiError:
    return ApiError(f"{message} is not supported by this server", param=param)


def _check_unsupported(req: ResponsesBody) -> None:
    if req.background:
        raise _refuse("background=true", "background")
    if req.conversation is not None:
        raise _refuse("conversation (use previous_response_id)", "conversation")
    if req.prompt is not None:
        raise _refuse("prompt (stored prompt templates)", "prompt")
    if req.max_tool_calls is not None:
        raise _refuse("max_tool_calls", "max_tool_calls")
    for i, name in enumerate(req.include or []):
        if name != LOGPROBS_INCLUDE and ("logprobs" in name or name.endswith("image_url")
                                         or name.endswith("results")):
            raise _refuse(f"include {short(name)}", f"include[{i}]")
    if req.top_logprobs is not None and LOGPROBS_INCLUDE not in (req.include or []):
        raise ApiError(f"top_logprobs needs include [{LOGPROBS_INCLUDE!r}] (logprobs come with "
                       "the output text only when included)", param="top_logprobs")
    summary = (req.reasoning or {}).get("summary")
    if summary is not None and summary not in _SUMMARIES:
        raise ApiError(f"reasoning.summary {short(summary)} is not one of "
                       f"{', '.join(map(repr, _SUMMARIES))}", param="reasoning.summary")
    if req.truncation not in (None, "disabled", "auto"):
        raise ApiError(f"truncation {short(req.truncation)} is not one of 'disabled', 'auto'",
                       param="truncation")


def _text_parts(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A message's content as chat content: a string, or text and image parts (the chat path
    joins the text, and refuses an image outside a user message)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(f"{where} must be a string or a list of content parts, got "
                       f"{short(content)}", param=where)
    parts = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                raise ApiError(f"{at}.image_url must be a data: or http(s) URL, got "
                               f"{short(url)} (file_id images are not supported)",
                               param=f"{at}.image_url")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            raise ApiError(f"content part type {short(kind)} at {at}.type is not supported; "
                           "supported: input_text, output_text, refusal, input_image",
                           param=f"{at}.type")
    return parts


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ApiError(f"{where}.{key} must be a string, got {short(value)}",
                       param=f"{where}.{key}")
    return value


def _reasoning_text(item: dict[str, Any], at: str, seal: ReasoningSeal | None,
                    warnings: list[dict[str, Any]]) -> str:
    """A reasoning input item's text: its ``encrypted_content`` opened when this service sealed
    it, else its visible ``content`` (or ``summary``) text, with a warning."""
    sealed = item.get("encrypted_content")
    if isinstance(sealed, str) and sealed:
        text = seal.open(sealed) if seal is not None else None
        if text is not None:
            return text
        warnings.append({"code": "reasoning_not_restored", "param": f"{at}.encrypted_content",
                         "message": f"{at}.encrypted_content was not sealed by this service "
                                    "(another server, or its key changed); the item's visible "
                                    "text, if any, stands in for it"})
    parts = item.get("content") or item.get("summary") or []
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))


def _input_messages(items: list[Any], where: list[str], seal: ReasoningSeal | None,
                    warnings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses items -> chat messages; ``where`` gets each message's source path."""
    out: list[dict[str, Any]] = []
    reasoning = ""  # a reasoning item goes with the assistant turn that follows it

    def assistant() -> dict[str, Any]:
        nonlocal reasoning
        msg: dict[str, Any] = {"role": "assistant", "content": ""}
        if reasoning:
            msg["reasoning_content"], reasoning = reasoning, ""
        return msg

    for i, item in enumerate(items):
        at = f"input[{i}]"
        if not isinstance(item, dict):
            raise ApiError(f"{at} must be an object (an input item), got {short(item)}",
                           param=at)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise ApiError(f"role {short(role)} at {at}.role is not allowed; allowed roles: "
                               f"{', '.join(_ROLES)}", param=f"{at}.role")
            content = _text_parts(item.get("content"), f"{at}.content")
            msg = assistant() if role == "assistant" else {"role": role}
            msg["content"] = content
            out.append(msg)
            where.append(at)
        elif kind == "function_call":
            name = _string(item, "name", at)
            if isinstance(item.get("namespace"), str) and item["namespace"]:
                name = flat_name(item["namespace"], name)  # as the model was offered it
            call = {"id": _string(item, "call_id", at), "type": "function",
                    "function": {"name": name,
                                 "arguments": _string(item, "arguments", at)}}
            if not (out and out[-1]["role"] == "assistant" and not reasoning):
                out.append(assistant())
                where.append(at)
            out[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": _string(item, "call_id", at),
                        "content": _text_parts(output, f"{at}.output")})
            where.append(at)
        elif kind == "reasoning":
            reasoning += _reasoning_text(item, at, seal, warnings)
        elif kind == "item_reference":
            raise ApiError(f"{at} is an item_reference; this server keeps whole conversations "
                           "only: use previous_response_id", param=f"{at}.type")
        else:
            raise ApiError(f"input item type {short(kind)} at {at}.type is not supported; "
                           f"supported: {_ITEM_TYPES}", param=f"{at}.type")
    return out


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        assert isinstance(fmt, dict)
        if fmt.get("schema") is None:
            raise ApiError("text.format type 'json_schema' needs text.format.schema",
                           param="text.format.schema")
        spec = {k: fmt[k] for k in ("name", "schema", "strict", "description")
                if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": spec}
    raise ApiError(f"text.format type {short(kind)} is not supported; supported: 'text', "
                   "'json_object', 'json_schema'", param="text.format.type")


LOGPROBS_INCLUDE = "message.output_text.logprobs"  # the include that turns logprobs on


def _echo_choice(name: str, tools: ResponsesTools) -> dict[str, Any]:
    namespace, own = tools.call_name(name)
    choice = {"type": "function", "name": own}
    return choice if namespace is None else {**choice, "namespace": namespace}


def _previous(response_id: str | None, store: ResponseStore | None) -> list[dict[str, Any]]:
    """The stored conversation of ``previous_response_id`` (none without one)."""
    if response_id is None:
        return []
    found = store.get(response_id) if store is not None else None
    if found is None:
        raise ApiError(
            f"previous_response_id {short(response_id)} is not known here: it "
            f"was not stored (store=false), has expired (responses are kept "
            f"{STORE_TTL_S:.0f} s, at most {STORE_MAX_ENTRIES} of them) or was served by "
            "another frontend process; send the whole conversation as input instead",
            status=404 if store is not None else 400, param="previous_response_id",
            code="previous_response_not_found")
    return list(found)


def parse_responses_request(body: bytes, *, served_models: Sequence[str],
                            store: ResponseStore | None = None) -> ResponsesRequest:
    """Decode and validate a Responses body into the chat request it runs; raise ApiError.

    >>> r = parse_responses_request(b'{"model":"m","input":"hi","instructions":"be brief"}',
    ...                             served_models=["m"])
    >>> r.chat.messages
    [{'role': 'system', 'content': 'be brief'}, {'role': 'user', 'content': 'hi'}]
    """
    req = decode_body(body, ResponsesBody, "responses")
    _check_unsupported(req)
    if req.input is None or req.input == "" or req.input == []:
        raise ApiError("input is empty; send a string or a list of input items", param="input")
    items: list[Any] = ([{"type": "message", "role": "user", "content": req.input}]
                        if isinstance(req.input, str) else req.input)
    history = _previous(req.previous_response_id, store)
    where = ["previous_response_id"] * len(history)
    warnings: list[dict[str, Any]] = []
    seal = store.seal if store is not None else None
    history += _input_messages(items, where, seal, warnings)
    messages = history
    if req.instructions:
        messages = [{"role": "system", "content": req.instructions}, *history]
        where.insert(0, "instructions")
    tools = parse_tools(req.tools)
    warnings[:0] = tools.warnings
    template_kwargs = dict(req.chat_template_kwargs or {})
    effort = (req.reasoning or {}).get("effort")
    if effort is not None:
        template_kwargs.setdefault("reasoning_effort", effort)  # what vLLM passes templates
    chat: dict[str, Any] = {
        "model": req.model, "messages": messages, "stream": req.stream,
        "max_tokens": req.max_output_tokens, "temperature": req.temperature,
        "top_p": req.top_p, "tools": tools.chat,
        "tool_choice": chat_tool_choice(req.tool_choice),
        "parallel_tool_calls": req.parallel_tool_calls,
        "response_format": _response_format(req.text),
        "chat_template_kwargs": template_kwargs or None, "user": req.user,
        "priority": req.priority,
    }
    if LOGPROBS_INCLUDE in (req.include or []):  # chat's rules: top_logprobs 0..20
        chat["logprobs"] = True
        chat["top_logprobs"] = req.top_logprobs
    if req.model is None:
        chat["model"] = served_models[0] if served_models else ""
    params = translated_chat_params(chat, served_models=served_models, what="responses",
                                    where=where)
    choice = params.tool_choice
    echo = {
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "metadata": req.metadata or {},
        "parallel_tool_calls": params.output.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": effort, "summary": (req.reasoning or {}).get("summary")},
        "prompt_cache_key": req.prompt_cache_key,
        "safety_identifier": req.safety_identifier,
        "store": req.store,
        "temperature": req.temperature,
        "text": {"format": (req.text or {}).get("format") or {"type": "text"}},
        "tool_choice": (_echo_choice(choice["function"]["name"], tools)
                        if isinstance(choice, dict) else choice),
        "tools": tools.echo,
        "top_p": req.top_p,
        "top_logprobs": req.top_logprobs or 0,
        "truncation": req.truncation or "disabled",
        "user": req.user,
    }
    sealed = ENCRYPTED_REASONING_INCLUDE in (req.include or [])
    return ResponsesRequest(chat=params, history=history, echo=echo, tools=tools,
                            seal=seal if sealed and seal is not None else None,
                            warnings=tuple(warnings))
