"""OpenAI API wire shapes for the HTTP frontend: request validation and response shaping.

Owns the JSON bodies of ``/v1/chat/completions``, ``/v1/completions``, ``/tokenize`` and
``/detokenize`` (msgspec Structs, decoded and validated in one pass) and the bodies sent back
(``chat.completion``, ``chat.completion.chunk``, ``text_completion``, the error object, SSE
framing). Pure functions and small accumulators only: no I/O, no sockets, no event loop, so every
rule here is unit-tested without a process. The server module (``textproc.http.server``) turns
these into HTTP responses.

Invariant: every rejected body raises :class:`ApiError` whose message names the bad value, where
it is (``param``, a JSON path like ``messages[2].role``) and what is allowed.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Annotated, Any, Literal, Sequence

import msgspec

from textproc.errors import TextprocError, short

__all__ = [
    "ApiError",
    "TextPart",
    "SystemMessage",
    "DeveloperMessage",
    "UserMessage",
    "AssistantMessage",
    "ToolMessage",
    "Message",
    "ToolDef",
    "NamedToolChoice",
    "StreamOptions",
    "ChatCompletionRequest",
    "CompletionRequest",
    "TokenizeRequest",
    "DetokenizeRequest",
    "ChatParams",
    "CompletionParams",
    "parse_chat_request",
    "parse_completion_request",
    "parse_tokenize_request",
    "parse_detokenize_request",
    "new_id",
    "usage_body",
    "merge_fragments",
    "ChatAccumulator",
    "chat_chunk",
    "chat_response",
    "completion_chunk",
    "completion_response",
    "models_body",
    "sse_event",
    "SSE_DONE",
    "usage_chunk",
    "tokenize_messages",
    "tokenize_tools",
    "now",
    "MAX_STOP_STRINGS",
]

MAX_STOP_STRINGS = 64  # OpenAI allows 4; more than this is surely a mistake (each costs per-step work)
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # OpenAI's rule, plus '.' and ':' seen in the wild
_SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "logit_bias",
)


class ApiError(TextprocError):
    """A request the API refuses, with the HTTP status and OpenAI error fields it maps to.

    >>> ApiError("bad", param="n").body()["error"]["param"]
    'n'
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


# ---------------------------------------------------------------- request bodies (msgspec)

Int1 = Annotated[int, msgspec.Meta(ge=1)]
Int0 = Annotated[int, msgspec.Meta(ge=0)]


class TextPart(msgspec.Struct, tag="text", tag_field="type"):
    """A content part; only text parts are accepted (no images or audio)."""

    text: str


Content = str | list[TextPart]


class FunctionCall(msgspec.Struct, omit_defaults=True):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(msgspec.Struct, omit_defaults=True):
    function: FunctionCall
    id: str | None = None
    type: Literal["function"] = "function"


class SystemMessage(msgspec.Struct, tag="system", tag_field="role", omit_defaults=True):
    content: Content
    name: str | None = None


class DeveloperMessage(msgspec.Struct, tag="developer", tag_field="role", omit_defaults=True):
    content: Content
    name: str | None = None


class UserMessage(msgspec.Struct, tag="user", tag_field="role", omit_defaults=True):
    content: Content
    name: str | None = None


class AssistantMessage(msgspec.Struct, tag="assistant", tag_field="role", omit_defaults=True):
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning_content: str | None = None


class ToolMessage(msgspec.Struct, tag="tool", tag_field="role", omit_defaults=True):
    content: Content
    tool_call_id: str | None = None
    name: str | None = None


Message = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage


class FunctionDef(msgspec.Struct, omit_defaults=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(msgspec.Struct):
    """``{"type": "function", "function": {"name", "description", "parameters"}}``."""

    type: Literal["function"]
    function: FunctionDef


class NamedFunction(msgspec.Struct):
    name: str


class NamedToolChoice(msgspec.Struct):
    """``{"type": "function", "function": {"name": ...}}``: force a call to this tool."""

    type: Literal["function"]
    function: NamedFunction


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class ResponseFormat(msgspec.Struct):
    type: str


class ChatCompletionRequest(msgspec.Struct, kw_only=True):
    """The body of ``POST /v1/chat/completions``; unknown fields are ignored (like vLLM)."""

    model: str
    messages: list[Message]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Int1 | None = None
    max_completion_tokens: Int1 | None = None
    n: int = 1
    stop: str | list[str] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    top_k: int | None = None
    min_p: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    presence_penalty: Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)] | None = None
    frequency_penalty: Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)] | None = None
    repetition_penalty: Annotated[float, msgspec.Meta(gt=0.0)] | None = None
    seed: int | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: ResponseFormat | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: list[dict[str, Any]] | None = None
    min_tokens: Int0 = 0
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    user: str | None = None


class CompletionRequest(msgspec.Struct, kw_only=True):
    """The body of ``POST /v1/completions`` (legacy API: ``max_tokens`` defaults to 16)."""

    model: str
    prompt: str | list[str | int | list[int]]  # text, token ids, or a batch of one
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Int1 | None = 16
    n: int = 1
    best_of: int | None = None
    echo: bool = False
    suffix: str | None = None
    stop: str | list[str] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    top_k: int | None = None
    min_p: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    presence_penalty: Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)] | None = None
    frequency_penalty: Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)] | None = None
    repetition_penalty: Annotated[float, msgspec.Meta(gt=0.0)] | None = None
    seed: int | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = None
    min_tokens: Int0 = 0
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    user: str | None = None


class TokenizeRequest(msgspec.Struct, kw_only=True):
    """``POST /tokenize``: either ``prompt`` or ``messages`` (rendered with the chat template)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    tools: list[ToolDef] | None = None
    add_special_tokens: bool | None = None  # None: True for a prompt, False for messages
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    """``POST /detokenize``."""

    tokens: list[Int0]
    model: str | None = None
    skip_special_tokens: bool = False


# ---------------------------------------------------------------- validated parameters


class ChatParams(msgspec.Struct, kw_only=True):
    """A validated chat request, in the plain shapes the chat template and TextClient take."""

    model: str
    messages: list[dict[str, Any]]
    stream: bool
    include_usage: bool
    max_tokens: int | None
    stop: list[str]
    tools: list[dict[str, Any]] | None
    tool_choice: str | dict[str, Any]  # "none" | "auto" | "required" | {"type", "function": {"name"}}
    sampling: dict[str, Any]
    chat_template_kwargs: dict[str, Any]
    add_generation_prompt: bool
    continue_final_message: bool
    documents: list[dict[str, Any]] | None
    min_tokens: int
    ignore_eos: bool
    skip_special_tokens: bool
    include_stop_str_in_output: bool


class CompletionParams(msgspec.Struct, kw_only=True):
    """A validated completion request."""

    model: str
    prompt: str | list[int]
    stream: bool
    include_usage: bool
    max_tokens: int | None
    echo: bool
    stop: list[str]
    sampling: dict[str, Any]
    min_tokens: int
    ignore_eos: bool
    skip_special_tokens: bool
    include_stop_str_in_output: bool


_PATH = re.compile(r" - at `\$\.?(.*)`$")


def _decode(body: bytes, kind: type[Any], what: str) -> Any:
    """Decode and type-check ``body`` as ``kind``; msgspec errors become 400 with ``param``."""
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        text = str(exc)
        match = _PATH.search(text)
        param = match.group(1) if match and match.group(1) else None
        if param and param.endswith("role"):
            text += "; allowed roles: system, developer, user, assistant, tool"
        elif param and param.endswith("].type") and ".content[" in param:
            text += "; supported content part types: text"
        raise ApiError(f"invalid {what} body: {text}", param=param) from exc
    except msgspec.DecodeError as exc:
        raise ApiError(
            f"{what} body is not valid JSON ({exc}); send a JSON object", code="invalid_json"
        ) from exc


def _check_model(model: str | None, served_models: Sequence[str]) -> str:
    if model is None or not served_models:
        return served_models[0] if served_models else (model or "")
    if model not in served_models:
        raise ApiError(
            f"model {short(model)} does not exist; served: {', '.join(map(repr, served_models))}",
            status=404,
            param="model",
            code="model_not_found",
        )
    return model


def _text(content: Content | None, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    # several text parts join with "\n" (what vLLM does for string-format templates)
    return "\n".join(part.text for part in content)


def _arguments(arguments: str | dict[str, Any], where: str) -> dict[str, Any]:
    # the API sends arguments as a JSON string; HF chat templates expect a mapping
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        raise ApiError(
            f"tool call arguments {short(arguments)} at {where} are not valid JSON: {exc}",
            param=where,
        ) from exc
    if not isinstance(value, dict):
        raise ApiError(
            f"tool call arguments {short(arguments)} at {where} must be a JSON object",
            param=where,
        )
    return value


def _messages(messages: list[Message]) -> list[dict[str, Any]]:
    if not messages:
        raise ApiError("messages is empty; send at least one message", param="messages")
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        item: dict[str, Any]
        match msg:
            case AssistantMessage():
                # templates do string work on content ('</think>' in message.content, ...):
                # a tool-call-only message gets "" rather than None, as vLLM does
                item = {"role": "assistant", "content": _text(msg.content, where) or ""}
                if msg.reasoning_content is not None:
                    item["reasoning_content"] = msg.reasoning_content
                if msg.tool_calls:
                    item["tool_calls"] = [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": _arguments(
                                    call.function.arguments,
                                    f"{where}.tool_calls[{j}].function.arguments",
                                ),
                            },
                        }
                        for j, call in enumerate(msg.tool_calls)
                    ]
                elif msg.content is None:
                    raise ApiError(
                        f"assistant message at {where} has neither content nor tool_calls",
                        param=f"{where}.content",
                    )
            case ToolMessage():
                item = {"role": "tool", "content": _text(msg.content, where)}
                if msg.tool_call_id is not None:
                    item["tool_call_id"] = msg.tool_call_id
            case SystemMessage() | DeveloperMessage() | UserMessage():
                role = "user" if isinstance(msg, UserMessage) else "system"
                # "developer" is OpenAI's new name for "system"; templates only know "system"
                item = {"role": role, "content": _text(msg.content, where)}
        if msg.name is not None:
            item["name"] = msg.name
        out.append(item)
    return out


def _tools(tools: list[ToolDef] | None) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    seen: set[str] = set()
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}].function"
        fn = tool.function
        if not _TOOL_NAME.fullmatch(fn.name):
            raise ApiError(
                f"tool name {short(fn.name)} at {where}.name is invalid; use 1-64 of "
                "a-z A-Z 0-9 _ - . :",
                param=f"{where}.name",
            )
        if fn.name in seen:
            raise ApiError(
                f"tool name {short(fn.name)} at {where}.name is defined twice", param=f"{where}.name"
            )
        seen.add(fn.name)
        _check_schema(fn.parameters, f"{where}.parameters")
        entry: dict[str, Any] = {"name": fn.name}
        if fn.description is not None:
            entry["description"] = fn.description
        entry["parameters"] = fn.parameters if fn.parameters is not None else {
            "type": "object",
            "properties": {},
        }
        out.append({"type": "function", "function": entry})
    return out


def _check_schema(schema: dict[str, Any] | None, where: str) -> None:
    """Shallow checks of a function's parameters schema: an object schema, sane keywords."""
    if schema is None:
        return
    kind = schema.get("type", "object")
    if kind != "object":
        raise ApiError(
            f"function parameters at {where} must be a JSON Schema of type 'object', "
            f"got type {short(kind)}",
            param=where,
        )
    props = schema.get("properties", {})
    if not isinstance(props, dict) or not all(isinstance(v, (dict, bool)) for v in props.values()):
        raise ApiError(
            f"properties at {where}.properties must map names to schemas, got {short(props)}",
            param=f"{where}.properties",
        )
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ApiError(
            f"required at {where}.required must be a list of property names, got "
            f"{short(required)}",
            param=f"{where}.required",
        )


def _tool_choice(
    choice: str | NamedToolChoice | None, tools: list[dict[str, Any]] | None
) -> str | dict[str, Any]:
    if choice is None:
        return "auto" if tools else "none"
    if isinstance(choice, str):
        if choice == "required" and not tools:
            raise ApiError(
                "tool_choice 'required' needs a non-empty tools list", param="tool_choice"
            )
        return choice
    name = choice.function.name
    names = [t["function"]["name"] for t in tools or []]
    if name not in names:
        raise ApiError(
            f"tool_choice names function {short(name)}, which is not in tools "
            f"(tools: {', '.join(map(repr, names)) or 'none'})",
            param="tool_choice",
        )
    return {"type": "function", "function": {"name": name}}


def _stops(stop: str | list[str] | None) -> list[str]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOP_STRINGS:
        raise ApiError(
            f"stop has {len(stops)} strings; at most {MAX_STOP_STRINGS} are allowed", param="stop"
        )
    for i, text in enumerate(stops):
        if not text:
            raise ApiError(f"stop[{i}] is an empty string; stop strings must be non-empty",
                           param="stop")
    return stops


def _common(req: ChatCompletionRequest | CompletionRequest) -> tuple[bool, dict[str, Any]]:
    if req.n != 1:
        raise ApiError(
            f"n={req.n} is not supported; this server returns exactly one choice (n=1)",
            param="n",
        )
    if req.stream_options is not None and not req.stream:
        raise ApiError("stream_options is only allowed when stream is true",
                       param="stream_options")
    opts = req.stream_options or StreamOptions()
    sampling = {
        name: getattr(req, name) for name in _SAMPLING_FIELDS if getattr(req, name) is not None
    }
    return opts.include_usage, sampling


def parse_chat_request(body: bytes, *, served_models: Sequence[str]) -> ChatParams:
    """Decode and validate a chat completion body; raise :class:`ApiError` on bad input.

    >>> p = parse_chat_request(b'{"model":"m","messages":[{"role":"user","content":"hi"}],'
    ...                        b'"stop":"x"}', served_models=["m"])
    >>> (p.messages, p.stop, p.tool_choice)
    ([{'role': 'user', 'content': 'hi'}], ['x'], 'none')
    """
    req: ChatCompletionRequest = _decode(body, ChatCompletionRequest, "chat completion")
    model = _check_model(req.model, served_models)
    include_usage, sampling = _common(req)
    if req.logprobs or req.top_logprobs:
        raise ApiError("logprobs are not supported by this server; omit logprobs/top_logprobs",
                       param="logprobs")
    if req.response_format is not None and req.response_format.type != "text":
        raise ApiError(
            f"response_format type {short(req.response_format.type)} is not supported; "
            "supported: 'text' (use tools with tool_choice for structured output)",
            param="response_format",
        )
    tools = _tools(req.tools)
    tool_choice = _tool_choice(req.tool_choice, tools)
    messages = _messages(req.messages)
    if req.continue_final_message and not isinstance(req.messages[-1], AssistantMessage):
        raise ApiError(
            "continue_final_message needs the last message to be from the assistant",
            param="continue_final_message",
        )
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else (
        req.max_tokens
    )
    return ChatParams(
        model=model,
        messages=messages,
        stream=req.stream,
        include_usage=include_usage,
        max_tokens=max_tokens,
        stop=_stops(req.stop),
        tools=tools,
        tool_choice=tool_choice,
        sampling=sampling,
        chat_template_kwargs=dict(req.chat_template_kwargs or {}),
        add_generation_prompt=req.add_generation_prompt and not req.continue_final_message,
        continue_final_message=req.continue_final_message,
        documents=req.documents,
        min_tokens=req.min_tokens,
        ignore_eos=req.ignore_eos,
        skip_special_tokens=req.skip_special_tokens,
        include_stop_str_in_output=req.include_stop_str_in_output,
    )


def parse_completion_request(body: bytes, *, served_models: Sequence[str]) -> CompletionParams:
    """Decode and validate a (legacy) completion body; raise :class:`ApiError` on bad input."""
    req: CompletionRequest = _decode(body, CompletionRequest, "completion")
    model = _check_model(req.model, served_models)
    include_usage, sampling = _common(req)
    if req.best_of not in (None, 1):
        raise ApiError(f"best_of={req.best_of} is not supported; only 1", param="best_of")
    if req.suffix:
        raise ApiError("suffix is not supported by this server", param="suffix")
    if req.logprobs is not None:
        raise ApiError("logprobs are not supported by this server", param="logprobs")
    prompt: str | list[int]
    raw: str | list[Any] = req.prompt
    if isinstance(raw, list) and len(raw) == 1 and not isinstance(raw[0], int):
        raw = raw[0]  # a batch of one prompt
    if isinstance(raw, str):
        prompt = raw
    elif raw and all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        prompt = [x for x in raw if isinstance(x, int)]
        if min(prompt) < 0:
            raise ApiError(f"prompt token id {min(prompt)} is negative; ids are >= 0",
                           param="prompt")
    elif raw and all(isinstance(x, (str, list)) for x in raw):
        raise ApiError(
            f"prompt is a batch of {len(raw)} prompts; this server takes one prompt per request",
            param="prompt",
        )
    else:
        raise ApiError(
            "prompt must be a string, a list of token ids, or a list with one of those; got "
            f"{short(raw)}",
            param="prompt",
        )
    if isinstance(prompt, list) and req.echo:
        raise ApiError("echo needs a text prompt, not token ids", param="echo")
    return CompletionParams(
        model=model,
        prompt=prompt,
        stream=req.stream,
        include_usage=include_usage,
        max_tokens=req.max_tokens,
        echo=req.echo,
        stop=_stops(req.stop),
        sampling=sampling,
        min_tokens=req.min_tokens,
        ignore_eos=req.ignore_eos,
        skip_special_tokens=req.skip_special_tokens,
        include_stop_str_in_output=req.include_stop_str_in_output,
    )


def parse_tokenize_request(body: bytes, *, served_models: Sequence[str]) -> TokenizeRequest:
    """Decode ``/tokenize``: exactly one of ``prompt`` and ``messages``."""
    req: TokenizeRequest = _decode(body, TokenizeRequest, "tokenize")
    _check_model(req.model, served_models)
    if (req.prompt is None) == (req.messages is None):
        raise ApiError("send exactly one of 'prompt' and 'messages'", param="prompt")
    if req.messages is not None:
        _messages(req.messages)
    _tools(req.tools)
    return req


def tokenize_messages(req: TokenizeRequest) -> list[dict[str, Any]]:
    """The plain message dicts of a validated tokenize request (empty when it has a prompt)."""
    return _messages(req.messages) if req.messages is not None else []


def tokenize_tools(req: TokenizeRequest) -> list[dict[str, Any]] | None:
    return _tools(req.tools)


def parse_detokenize_request(body: bytes, *, served_models: Sequence[str]) -> DetokenizeRequest:
    """Decode ``/detokenize``: ``tokens`` is a list of non-negative ids."""
    req: DetokenizeRequest = _decode(body, DetokenizeRequest, "detokenize")
    _check_model(req.model, served_models)
    return req


# ---------------------------------------------------------------- response shaping


def new_id(prefix: str) -> str:
    """A fresh response id, e.g. ``chatcmpl-`` + 32 hex digits."""
    return f"{prefix}-{uuid.uuid4().hex}"


def usage_body(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def merge_fragments(fragments: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join runs of text fragments with the same single key, so a step becomes few chunks.

    Tool-call fragments are kept apart (their order and indexes matter).

    >>> merge_fragments([{"content": "a"}, {"content": "b"}, {"reasoning_content": "c"}])
    [{'content': 'ab'}, {'reasoning_content': 'c'}]
    """
    out: list[dict[str, Any]] = []
    for frag in fragments:
        if len(frag) == 1 and out and len(out[-1]) == 1:
            (key, value), = frag.items()
            if key in out[-1] and isinstance(value, str) and key != "tool_calls":
                out[-1] = {key: out[-1][key] + value}
                continue
        out.append(dict(frag))
    return out


class ChatAccumulator:
    """Folds streamed delta fragments into the final assistant message of a non-streamed reply.

    The message equals what a client gets by concatenating the streamed chunks: content and
    reasoning_content joined, tool calls merged by ``index`` (arguments concatenated).
    """

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}

    def feed(self, fragments: Sequence[dict[str, Any]]) -> None:
        for frag in fragments:
            if (text := frag.get("content")) is not None:
                self.content.append(text)
            if (text := frag.get("reasoning_content")) is not None:
                self.reasoning.append(text)
            for call in frag.get("tool_calls") or ():
                index = int(call.get("index", len(self.tool_calls)))
                slot = self.tool_calls.setdefault(
                    index,
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if call.get("id"):
                    slot["id"] = call["id"]
                fn = call.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] = fn["name"]
                if fn.get("arguments"):
                    slot["function"]["arguments"] += fn["arguments"]

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)

    def message(self) -> dict[str, Any]:
        content = "".join(self.content)
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if self.reasoning:
            msg["reasoning_content"] = "".join(self.reasoning)
        if self.tool_calls:
            calls = [self.tool_calls[i] for i in sorted(self.tool_calls)]
            for call in calls:
                if call["id"] is None:
                    call["id"] = new_id("call")
            msg["tool_calls"] = calls
            if not content.strip():
                msg["content"] = None  # OpenAI sends null content with tool calls
        return msg


def chat_chunk(
    response_id: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    *,
    finish_reason: str | None = None,
    include_usage: bool = False,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with one choice (``usage: null`` when include_usage)."""
    chunk: dict[str, Any] = {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        ],
    }
    if include_usage or usage is not None:
        chunk["usage"] = usage
    return chunk


def usage_chunk(
    response_id: str, created: int, model: str, usage: dict[str, int], *, chat: bool = True
) -> dict[str, Any]:
    """The last chunk when ``stream_options.include_usage``: no choices, the request's usage."""
    return {
        "id": response_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage,
    }


def now() -> int:
    """``created``: Unix seconds."""
    return int(time.time())


def chat_response(
    response_id: str,
    created: int,
    model: str,
    message: dict[str, Any],
    finish_reason: str,
    usage: dict[str, int],
) -> dict[str, Any]:
    """A whole ``chat.completion``."""
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage,
    }


def completion_chunk(
    response_id: str,
    created: int,
    model: str,
    text: str,
    *,
    finish_reason: str | None = None,
    include_usage: bool = False,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One streamed ``text_completion`` chunk."""
    chunk: dict[str, Any] = {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        ],
    }
    if include_usage or usage is not None:
        chunk["usage"] = usage
    return chunk


def completion_response(
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    usage: dict[str, int],
) -> dict[str, Any]:
    """A whole ``text_completion``."""
    return {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage,
    }


def models_body(served_models: Sequence[str], created: int, *, max_model_len: int | None) -> dict[
    str, Any
]:
    """``GET /v1/models``."""
    data = []
    for name in served_models:
        entry: dict[str, Any] = {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "textproc",
        }
        if max_model_len is not None:
            entry["max_model_len"] = max_model_len
        data.append(entry)
    return {"object": "list", "data": data}


_ENCODER = msgspec.json.Encoder()
SSE_DONE = b"data: [DONE]\n\n"


def sse_event(obj: Any) -> bytes:
    """One server-sent event: ``data: {json}\\n\\n`` (compact JSON never contains a newline)."""
    return b"data: " + _ENCODER.encode(obj) + b"\n\n"
