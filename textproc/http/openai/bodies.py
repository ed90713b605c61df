"""OpenAI API request validation for the HTTP frontend: body bytes -> validated parameters.

Owns every rule a request body must follow beyond its types (``api_types``): the served model
(404), message and tool shapes, logit_bias keys, logprobs ranges (chat: ``logprobs`` +
``top_logprobs`` 0..20; completions: ``logprobs`` 0..5), unsupported features (suffix, batches
of prompts, echo with logprobs; structured-output fields are mapped in
``textproc.http.openai.structured``). The body becomes the request's option values
(``SamplingOptions``, ``OutputOptions``) here, and the fields the worker checks too (n, counts,
stop lists, tool_choice against tools) go through their one check in :mod:`textproc.options`,
so both say the same. Before decoding, ``body_check`` bounds what any JSON value may be (depth,
integer range, valid Unicode). Limits the worker knows better (the vocabulary, max_model_len,
the prompt size) are the worker's. Pure functions: no I/O, no sockets, no event loop, so every
rule is unit-tested without a process.

Invariant: every rejected body raises :class:`ApiError` whose message names the bad value, where
it is (``param``, a JSON path like ``messages[2].role``) and what is allowed.
"""

from __future__ import annotations

import json
import re
from operator import attrgetter
from typing import Any, Callable, Sequence

import msgspec

from textproc.errors import InvalidInput, short
from textproc.http.body_check import check_body
from textproc.options import (
    BODY_OPTIONS,
    OutputOptions,
    SamplingOptions,
    check_output_options,
    check_sampling_options,
    check_tool_choice,
)
from textproc.protocol import MAX_TOKEN_ID, MAX_TOP_LOGPROBS
from textproc.http.openai.structured import structured_spec
from textproc.http.api_types import (
    ApiError,
    AssistantMessage,
    ChatCompletionBody,
    CONTENT_PART_TYPES,
    ChatParams,
    CompletionParams,
    CompletionBody,
    Content,
    DetokenizeBody,
    DeveloperMessage,
    ImageInput,
    ImageUrlPart,
    Message,
    NamedToolChoice,
    StreamOptions,
    SystemMessage,
    TokenizeBody,
    ToolDef,
    ToolMessage,
    UserMessage,
)

__all__ = [
    "decode_body",
    "ERROR_PATH",
    "parse_chat_request",
    "chat_params",
    "translated_chat_params",
    "parse_completion_request",
    "parse_tokenize_request",
    "parse_detokenize_request",
    "tokenize_messages",
    "tokenize_tools",
]

_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # OpenAI's rule, plus '.' and ':' seen in the wild


# the options the bodies carry as they are: their values in BODY_OPTIONS order, and where each goes
_body_values = attrgetter(*(o.name for o in BODY_OPTIONS), "model")  # a tuple, whatever the count
_BODY_PLACES = [(o.owner, o.field) for o in BODY_OPTIONS]
MAX_COMPLETION_LOGPROBS = 5  # the legacy completions API's limit (chat's top_logprobs: 20)
ERROR_PATH = re.compile(r" - at `\$\.?(.*)`$")
_MESSAGE_PATH = re.compile(r"messages\[(\d+)\]")
_MISSING = re.compile(r"Object missing required field `(\w+)`")


def decode_body(body: bytes, kind: type[Any], what: str) -> Any:
    """Decode and type-check a request ``body`` as ``kind`` (every route's one decoder): the raw
    checks first, then msgspec; its errors become a 400 naming ``param``."""
    check_body(body)  # depth, integer range, lone surrogates: before anything recurses into it
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        text = str(exc)
        match = ERROR_PATH.search(text)
        param = match.group(1) if match and match.group(1) else None
        missing = _MISSING.match(text)
        if missing and param is None:  # a top-level field missing: name it
            param = missing.group(1)
        if param and param.endswith("role"):
            text += "; allowed roles: system, developer, user, assistant, tool"
        elif param and param.endswith("].type") and ".content[" in param:
            text += f"; supported content part types: {CONTENT_PART_TYPES}"
        raise ApiError(f"invalid {what} body: {text}", param=param) from exc
    except msgspec.DecodeError as exc:
        raise ApiError(
            f"{what} body is not valid JSON ({exc}); send a JSON object", code="invalid_json"
        ) from exc
    except RecursionError as exc:  # check_body bounds the depth; kept as a last line
        raise ApiError(f"{what} body is nested too deeply to decode", code="invalid_json") from exc


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
    for j, part in enumerate(content):
        if isinstance(part, ImageUrlPart):
            raise ApiError(f"{where}.content[{j}] is an image; images go in user messages only",
                           param=f"{where}.content[{j}]")
    # several text parts join with "\n" (what vLLM does for string-format templates)
    return "\n".join(part.text for part in content if not isinstance(part, ImageUrlPart))


def _user_content(content: Content, where: str,
                  images: list[ImageInput]) -> str | list[dict[str, str]]:
    """A user message's content: text as ``_text`` joins it, or, when it holds an image, the
    parts as chat templates read them (``{"type": "image"}`` where each image goes, its source
    appended to ``images``)."""
    if isinstance(content, str) or not any(isinstance(p, ImageUrlPart) for p in content):
        return _text(content, where) or ""
    parts: list[dict[str, str]] = []
    for j, part in enumerate(content):
        if isinstance(part, ImageUrlPart):
            images.append(ImageInput(param=f"{where}.content[{j}]", url=part.image_url.url))
            parts.append({"type": "image"})
        else:
            parts.append({"type": "text", "text": part.text})
    return parts


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


def _messages(messages: list[Message], images: list[ImageInput]) -> list[dict[str, Any]]:
    """The messages as chat templates read them; image sources go to ``images``."""
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
            case UserMessage():
                item = {"role": "user", "content": _user_content(msg.content, where, images)}
            case SystemMessage() | DeveloperMessage():
                # "developer" is OpenAI's new name for "system"; templates only know "system"
                item = {"role": "system", "content": _text(msg.content, where)}
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
        if fn.strict is not None:  # strict: enforced calls with tool_choice auto too
            entry["strict"] = fn.strict
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
    choice: str | NamedToolChoice | None, tools: list[dict[str, Any]] | None,
    structured: dict[str, Any] | None,
) -> str | dict[str, Any]:
    plain: str | dict[str, Any] = ("auto" if tools else "none") if choice is None else (
        choice if isinstance(choice, str) else
        {"type": "function", "function": {"name": choice.function.name}})
    _checked(check_tool_choice, plain, tools or [], structured)
    return plain


def _checked(check: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A check of :mod:`textproc.options` (the one home of a field's rule, the worker runs the
    same), its InvalidInput as the 400 it is."""
    try:
        return check(*args, **kwargs)
    except InvalidInput as exc:
        raise ApiError(str(exc), param=exc.param) from exc


def _options(req: ChatCompletionBody | CompletionBody, max_tokens: int | None,
             logprobs: int | None, **output: Any) -> tuple[bool, SamplingOptions, OutputOptions]:
    """The body's options as the two values the TextClient takes, checked by their one check."""
    if req.stream_options is not None and not req.stream:
        raise ApiError("stream_options is only allowed when stream is true",
                       param="stream_options")
    opts = req.stream_options or StreamOptions()
    given: dict[str, dict[str, Any]] = {"sampling": {}, "output": {}, "params": {}}
    for (owner, name), value in zip(_BODY_PLACES, _body_values(req)):
        if value is not None:
            given[owner][name] = value
    sampling = SamplingOptions(
        max_tokens=max_tokens, min_tokens=req.min_tokens, n=req.n, params=given["params"],
        logit_bias=_logit_bias(req.logit_bias or {}), **given["sampling"])
    out = OutputOptions(stop=[req.stop] if isinstance(req.stop, str) else list(req.stop or []),
                        stream_calls=req.stream, logprobs=logprobs, **given["output"], **output)
    _checked(check_sampling_options, sampling)
    _checked(check_output_options, out)
    return opts.include_usage, sampling, out


def _logit_bias(bias: dict[str, float]) -> dict[int, float]:
    """OpenAI's logit_bias: token ids as decimal strings (JSON keys) -> -100..100 (the range is
    the type's). Ids outside the vocabulary are the worker's to refuse."""
    out: dict[int, float] = {}
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit() and int(key) <= MAX_TOKEN_ID):
            raise ApiError(f"logit_bias key {short(key)} is not a token id; keys are token ids "
                           "as decimal strings, e.g. {\"1234\": -100}", param="logit_bias")
        out[int(key)] = value
    return out


def parse_chat_request(body: bytes, *, served_models: Sequence[str]) -> ChatParams:
    """Decode and validate a chat completion body; raise :class:`ApiError` on bad input.

    >>> p = parse_chat_request(b'{"model":"m","messages":[{"role":"user","content":"hi"}],'
    ...                        b'"stop":"x"}', served_models=["m"])
    >>> (p.messages, p.output.stop, p.tool_choice)
    ([{'role': 'user', 'content': 'hi'}], ['x'], 'none')
    """
    req: ChatCompletionBody = decode_body(body, ChatCompletionBody, "chat completion")
    return chat_params(req, served_models=served_models)


def chat_params(req: ChatCompletionBody, *, served_models: Sequence[str]) -> ChatParams:
    """Validate a decoded chat completion body (the rules of :func:`parse_chat_request`); the
    Responses API (``textproc.http.responses.bodies``) builds one and comes through here too."""
    model = _check_model(req.model, served_models)
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else (
        req.max_tokens
    )
    include_usage, sampling, output = _options(
        req, max_tokens, _chat_logprobs(req.logprobs, req.top_logprobs),
        parallel_tool_calls=req.parallel_tool_calls is not False)
    for name in ("max_reasoning_tokens", "thinking_token_budget"):
        budget = getattr(req, name)
        if budget is not None:
            if isinstance(budget, bool) or budget < 0:
                raise ApiError(f"{name}={short(budget)} must be an integer >= 0", param=name)
            sampling.params["max_reasoning_tokens"] = budget
    structured = structured_spec(req)
    tools = _tools(req.tools)
    tool_choice = _tool_choice(req.tool_choice, tools, structured)
    images: list[ImageInput] = []
    messages = _messages(req.messages, images)
    if req.continue_final_message and not isinstance(req.messages[-1], AssistantMessage):
        raise ApiError(
            "continue_final_message needs the last message to be from the assistant",
            param="continue_final_message",
        )
    return ChatParams(
        model=model,
        messages=messages,
        stream=req.stream,
        include_usage=include_usage,
        tools=tools,
        tool_choice=tool_choice,
        chat_template_kwargs=dict(req.chat_template_kwargs or {}),
        add_generation_prompt=req.add_generation_prompt and not req.continue_final_message,
        continue_final_message=req.continue_final_message,
        documents=req.documents,
        structured=structured,
        sampling=sampling,
        output=output,
        images=images,
    )


def translated_chat_params(chat: dict[str, Any], *, served_models: Sequence[str], what: str,
                           where: Sequence[str],
                           place: Callable[[str], str] | None = None) -> ChatParams:
    """The rules of :func:`chat_params` on ``chat``, the chat completion body (its fields that
    are None left out) that another API's body was translated to (the Responses and Messages
    APIs' bodies come through here). An error names the place in the body the client sent:
    ``place`` rewrites the chat paths it knows in the message and ``param``, then
    ``messages[k]`` becomes ``where[k]``; a type error reads ``invalid {what} body: ...``."""
    def placed(text: str) -> str:
        text = place(text) if place is not None else text
        return _MESSAGE_PATH.sub(lambda m: where[int(m.group(1))]
                                 if int(m.group(1)) < len(where) else m.group(0), text)

    try:
        body = msgspec.convert({k: v for k, v in chat.items() if v is not None},
                               ChatCompletionBody)
        params = chat_params(body, served_models=served_models)
        for image in params.images:
            image.param = placed(image.param)
        return params
    except msgspec.ValidationError as exc:
        match = ERROR_PATH.search(str(exc))
        param = placed(match.group(1)) if match and match.group(1) else None
        raise ApiError(f"invalid {what} body: {placed(str(exc))}", param=param) from exc
    except ApiError as exc:
        exc.message = placed(exc.message)
        exc.args = (exc.message,)
        exc.param = placed(exc.param) if exc.param else exc.param
        raise


def _chat_logprobs(logprobs: bool | None, top_logprobs: int | None) -> int | None:
    """Chat's ``logprobs`` (a switch) and ``top_logprobs`` (0..20, needs the switch, as
    OpenAI) as the alternatives per token, or None when off."""
    if top_logprobs is not None:
        if not logprobs:
            raise ApiError("top_logprobs needs logprobs set to true", param="top_logprobs")
        if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise ApiError(f"top_logprobs={top_logprobs} is out of range; allowed: "
                           f"0..{MAX_TOP_LOGPROBS}", param="top_logprobs")
        return top_logprobs
    return 0 if logprobs else None


def parse_completion_request(body: bytes, *, served_models: Sequence[str]) -> CompletionParams:
    """Decode and validate a (legacy) completion body; raise :class:`ApiError` on bad input."""
    req: CompletionBody = decode_body(body, CompletionBody, "completion")
    model = _check_model(req.model, served_models)
    if req.best_of not in (None, 1):
        raise ApiError(f"best_of={req.best_of} is not supported; only 1", param="best_of")
    if req.suffix:
        raise ApiError("suffix is not supported by this server", param="suffix")
    if req.logprobs is not None and not 0 <= req.logprobs <= MAX_COMPLETION_LOGPROBS:
        raise ApiError(f"logprobs={req.logprobs} is out of range; allowed: "
                       f"0..{MAX_COMPLETION_LOGPROBS}", param="logprobs")
    if req.logprobs is not None and req.echo:
        raise ApiError("echo with logprobs would need the prompt's logprobs, which this server "
                       "does not compute; drop echo or logprobs", param="echo")
    prompt: str | list[int]
    raw: str | list[Any] = req.prompt
    if isinstance(raw, list) and len(raw) == 1 and not isinstance(raw[0], int):
        raw = raw[0]  # a batch of one prompt
    if isinstance(raw, str):
        prompt = raw
    elif raw and all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        prompt = [x for x in raw if isinstance(x, int)]  # 0..MAX_TOKEN_ID (the type's range)
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
    include_usage, sampling, output = _options(req, req.max_tokens, req.logprobs)
    return CompletionParams(
        model=model,
        prompt=prompt,
        stream=req.stream,
        include_usage=include_usage,
        echo=req.echo,
        structured=structured_spec(req),
        sampling=sampling,
        output=output,
    )


def parse_tokenize_request(body: bytes, *, served_models: Sequence[str]) -> TokenizeBody:
    """Decode ``/tokenize``: exactly one of ``prompt`` and ``messages``."""
    req: TokenizeBody = decode_body(body, TokenizeBody, "tokenize")
    _check_model(req.model, served_models)
    if (req.prompt is None) == (req.messages is None):
        raise ApiError("send exactly one of 'prompt' and 'messages'", param="prompt")
    if req.messages is not None:
        tokenize_messages(req)
    _tools(req.tools)
    return req


def tokenize_messages(req: TokenizeBody) -> list[dict[str, Any]]:
    """The plain message dicts of a validated tokenize request (empty when it has a prompt)."""
    if req.messages is None:
        return []
    images: list[ImageInput] = []
    messages = _messages(req.messages, images)
    if images:
        raise ApiError(f"{images[0].param} is an image; /tokenize takes text messages only",
                       param=images[0].param)
    return messages


def tokenize_tools(req: TokenizeBody) -> list[dict[str, Any]] | None:
    return _tools(req.tools)


def parse_detokenize_request(body: bytes, *, served_models: Sequence[str]) -> DetokenizeBody:
    """Decode ``/detokenize``: ``tokens`` is a list of non-negative ids."""
    req: DetokenizeBody = decode_body(body, DetokenizeBody, "detokenize")
    _check_model(req.model, served_models)
    return req
