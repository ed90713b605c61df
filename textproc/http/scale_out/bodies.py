"""Request bodies of the scale-out routes: render bodies (each API's own), vLLM's
``GenerateRequest`` and the abort body, as validated parameters.

Owns the translation of vLLM's ``sampling_params`` (its ``SamplingParams`` as JSON) into the
request's option values (:mod:`textproc.options`) and back (:func:`sampling_params_body`, what a
render answers), so a body one server renders generates the same ids on the other. The render
bodies are the chat, completion, Messages and Responses bodies, parsed by their own API's
``bodies`` (the same rules, the same 400s). Pure: no I/O.

Invariant: every rejected body raises :class:`ApiError` naming the field (``param``, a JSON path
such as ``sampling_params.top_p``) and what is allowed. A ``sampling_params`` key this server
does not know is ignored, as vLLM's ``SamplingParams`` ignores it; a key it knows but cannot
honour (``bad_words``, ``prompt_logprobs``, ...) set to anything but its default is a 400.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace
from typing import Any, Literal, Sequence

import msgspec

from textproc.errors import InvalidInput, short
from textproc.http.api_types import ApiError, ChatParams, CompletionParams
from textproc.http.openai.bodies import (
    decode_body,
    parse_chat_request,
    parse_completion_request,
)
from textproc.http.openai.structured import structured_spec
from textproc.options import (
    MAX_TOP_LOGPROBS,
    OutputOptions,
    SamplingOptions,
    check_output_options,
    check_sampling_options,
)
from textproc.protocol import MAX_TOKEN_ID

__all__ = [
    "DerenderParams",
    "DerenderState",
    "GenerateBody",
    "GenerateParams",
    "StreamOptionsBody",
    "parse_abort_request",
    "parse_completion_render",
    "parse_derender_request",
    "parse_generate_request",
    "sampling_params_body",
]

# vLLM's SamplingParams defaults of the values the engine reads by name: a generate body that
# leaves one out samples with this, as vLLM's /inference/v1/generate does (not with the model's
# generation_config.json, which the render step already applied)
_PARAM_DEFAULTS: dict[str, float | int] = {
    "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
    "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
}
_GREEDY_EPS = 1e-5  # vLLM's _SAMPLING_EPS: a temperature below it is greedy
# keys vLLM's SamplingParams knows that change nothing here (delivery, cloning, buffering)
_IGNORED = frozenset({"output_kind", "skip_clone", "skip_reading_prefix_cache", "stream_interval",
                      "output_text_buffer_length", "flat_logprobs", "detokenize", "extra_args",
                      "watermarking"})
# keys vLLM knows that this server cannot honour: allowed only at vLLM's default (None, [], ...)
_UNSUPPORTED = ("bad_words", "allowed_token_ids", "prompt_logprobs", "prompt_logprob_token_ids",
                "prompt_logprob_start", "logprob_token_ids", "logits_processors")


class StreamOptionsBody(msgspec.Struct, kw_only=True):
    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class GenerateBody(msgspec.Struct, kw_only=True):
    """vLLM's ``GenerateRequest`` (``/inference/v1/generate``), as sent."""

    request_id: str | None = None
    token_ids: list[int]
    sampling_params: dict[str, Any]
    token_offsets: Any = None
    features: Any = None
    content_parts: Any = None
    model: str | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: dict[str, Any] | None = None
    return_token_ids: bool | None = None
    output_mode: Literal["tokens", "text"] = "tokens"
    stream: bool | None = False
    stream_options: StreamOptionsBody | None = None
    cache_salt: str | None = None
    priority: int = 0
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None


class GenerateParams(msgspec.Struct, kw_only=True):
    """A validated generate request: ids in, the options the service takes."""

    request_id: str | None  # the caller's (the answer's is ``generate-tokens-`` + it)
    model: str
    completion: CompletionParams  # prompt: the ids; output.return_token_ids set
    text_mode: bool  # output_mode "text": the answer carries the text too
    return_prompt_ids: bool
    include_usage: bool
    continuous_usage: bool
    stop_token_ids: list[int]  # the body's own (a choice they end names its id as stop_reason)


def _bad(message: str, param: str) -> ApiError:
    return ApiError(message, param=param)


def _model(model: str | None, served_models: Sequence[str]) -> str:
    if model is None or model in served_models:
        return model if model is not None else (served_models[0] if served_models else "")
    raise ApiError(f"The model `{model}` does not exist. Valid aliases: "
                   f"{', '.join(served_models)}.", status=404, param="model",
                   type="NotFoundError", code="model_not_found")


def _number(sp: dict[str, Any], key: str, kind: type) -> Any:
    value = sp[key]
    ok = (isinstance(value, (int, float)) if kind is float else isinstance(value, int))
    if isinstance(value, bool) or not ok:
        raise _bad(f"sampling_params.{key}={short(value)} must be "
                   f"{'a number' if kind is float else 'an integer'}", f"sampling_params.{key}")
    return value


def _flag(sp: dict[str, Any], key: str, default: bool) -> bool:
    value = sp.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(f"sampling_params.{key}={short(value)} must be true or false",
                   f"sampling_params.{key}")
    return value


def _ids(value: Any, where: str) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_TOKEN_ID
            for t in value):
        raise _bad(f"{where}={short(value)} must be a list of token ids in 0..{MAX_TOKEN_ID}",
                   where)
    return list(value)


def _structured(value: Any) -> dict[str, Any] | None:
    """vLLM's ``structured_outputs`` as the service's constraint spec."""
    where = "sampling_params.structured_outputs"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad(f"{where}={short(value)} must be an object", where)
    given = {k: v for k, v in value.items()
             if v is not None and not k.startswith("_") and v is not False}
    given.pop("disable_any_whitespace", None)
    given.pop("disable_additional_properties", None)
    given.pop("whitespace_pattern", None)
    if given.get("json_object") is True and len(given) == 1:
        return {"json": {"type": "object"}}
    if not given:
        return None
    try:
        return structured_spec(SimpleNamespace(structured_outputs=given))
    except ApiError as exc:
        exc.param = "sampling_params." + (exc.param or "structured_outputs")
        exc.message = exc.message.replace("structured_outputs", where, 1)
        exc.args = (exc.message,)
        raise


def options_from_sampling_params(sp: dict[str, Any]) -> tuple[SamplingOptions, OutputOptions,
                                                              dict[str, Any] | None]:
    """vLLM's ``SamplingParams`` JSON as the service's sampling, output and constraint."""
    for key in _UNSUPPORTED:
        if sp.get(key) not in (None, [], {}):
            raise _bad(f"sampling_params.{key}={short(sp[key])} is not supported by this server",
                       f"sampling_params.{key}")
    if sp.get("spaces_between_special_tokens") is False:
        raise _bad("sampling_params.spaces_between_special_tokens=false is not supported by "
                   "this server", "sampling_params.spaces_between_special_tokens")
    params: dict[str, Any] = {}
    for key, default in _PARAM_DEFAULTS.items():
        params[key] = _number(sp, key, type(default)) if sp.get(key) is not None else default
    if sp.get("seed") is not None:
        params["seed"] = _number(sp, "seed", int)
    if params["temperature"] < _GREEDY_EPS:  # vLLM's greedy: the other filters are off
        params.update(top_p=1.0, top_k=0, min_p=0.0)
    n = _number(sp, "n", int) if sp.get("n") is not None else 1
    max_tokens = _number(sp, "max_tokens", int) if sp.get("max_tokens") is not None else None
    min_tokens = _number(sp, "min_tokens", int) if sp.get("min_tokens") is not None else 0
    logprobs = _number(sp, "logprobs", int) if sp.get("logprobs") is not None else None
    if logprobs is not None and not 0 <= logprobs <= MAX_TOP_LOGPROBS:
        raise _bad(f"sampling_params.logprobs={logprobs} is out of range; allowed: "
                   f"0..{MAX_TOP_LOGPROBS}", "sampling_params.logprobs")
    bias = sp.get("logit_bias") or {}
    if not isinstance(bias, dict):
        raise _bad(f"sampling_params.logit_bias={short(bias)} must be an object of token id "
                   "-> bias", "sampling_params.logit_bias")
    logit_bias: dict[int, float] = {}
    for key, value in bias.items():
        if not (str(key).isascii() and str(key).isdigit() and int(key) <= MAX_TOKEN_ID):
            raise _bad(f"sampling_params.logit_bias key {short(key)} is not a token id",
                       "sampling_params.logit_bias")
        logit_bias[int(key)] = value
    stop = sp.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list):
        raise _bad(f"sampling_params.stop={short(stop)} must be a string or a list of strings",
                   "sampling_params.stop")
    sampling = SamplingOptions(
        max_tokens=max_tokens, min_tokens=min_tokens,
        stop_token_ids=_ids(sp.get("stop_token_ids"), "sampling_params.stop_token_ids"),
        ignore_eos=_flag(sp, "ignore_eos", False), n=n, params=params, logit_bias=logit_bias)
    output = OutputOptions(
        stop=stops, include_stop=_flag(sp, "include_stop_str_in_output", False),
        skip_special_tokens=_flag(sp, "skip_special_tokens", True), logprobs=logprobs,
        return_token_ids=True)
    try:
        check_sampling_options(sampling)
        check_output_options(output)
    except InvalidInput as exc:  # the field, under sampling_params
        param = f"sampling_params.{exc.param}" if exc.param else "sampling_params"
        raise _bad(f"sampling_params: {exc}", param) from exc
    return sampling, output, _structured(sp.get("structured_outputs"))


def parse_generate_request(body: bytes, *, served_models: Sequence[str]) -> GenerateParams:
    """Decode and validate ``/inference/v1/generate``'s body (vLLM's ``GenerateRequest``).

    >>> p = parse_generate_request(b'{"token_ids":[1,2],"sampling_params":{"max_tokens":3}}',
    ...                            served_models=["m"])
    >>> p.completion.prompt, p.completion.sampling.max_tokens, p.text_mode
    ([1, 2], 3, False)
    """
    req: GenerateBody = decode_body(body, GenerateBody, "generate")
    model = _model(req.model, served_models)
    if not req.token_ids:
        raise _bad("token_ids is empty; send at least one token id", "token_ids")
    ids = _ids(req.token_ids, "token_ids")
    for name in ("features", "content_parts"):
        if getattr(req, name) is not None:
            raise _bad(f"{name}: multimodal input is not supported by this server", name)
    for name in ("kv_transfer_params", "ec_transfer_params", "cache_salt"):
        if getattr(req, name) is not None:
            raise _bad(f"{name} is not supported by this server", name)
    sampling, output, structured = options_from_sampling_params(req.sampling_params)
    sampling = dataclasses.replace(sampling, priority=req.priority)
    try:
        check_sampling_options(sampling)
    except InvalidInput as e:
        raise _bad(str(e), e.param or "priority") from e
    if output.logprobs is not None and req.output_mode == "text":
        # vLLM's text mode spells each token as text: this frontend has no tokenizer
        raise _bad("sampling_params.logprobs with output_mode 'text' is not supported by this "
                   "server; use output_mode 'tokens' (logprobs by token id)",
                   "sampling_params.logprobs")
    stream = bool(req.stream)
    if req.stream_options is not None and not stream:
        raise _bad("stream_options is only allowed when stream is true", "stream_options")
    opts = req.stream_options or StreamOptionsBody(include_usage=False)
    return GenerateParams(
        request_id=req.request_id, model=model,
        completion=CompletionParams(model=model, prompt=ids, stream=stream,
                                    include_usage=bool(opts.include_usage), echo=False,
                                    structured=structured, sampling=sampling, output=output),
        text_mode=req.output_mode == "text", return_prompt_ids=bool(req.return_token_ids),
        include_usage=bool(opts.include_usage),
        continuous_usage=bool(opts.continuous_usage_stats),
        stop_token_ids=sampling.stop_token_ids)


def parse_completion_render(body: bytes, *, served_models: Sequence[str]
                            ) -> list[CompletionParams]:
    """``/v1/completions/render``'s body: a completion body whose ``prompt`` may be a batch
    (strings or lists of ids), one CompletionParams per prompt, each by the completion rules."""
    raw = _object(body, "completion")
    prompt = raw.get("prompt")
    if (isinstance(prompt, list) and len(prompt) > 1
            and all(isinstance(p, (str, list)) for p in prompt)):
        return [parse_completion_request(json.dumps({**raw, "prompt": p}).encode(),
                                         served_models=served_models) for p in prompt]
    return [parse_completion_request(body, served_models=served_models)]


def _object(body: bytes, what: str) -> dict[str, Any]:
    decoded = decode_body(body, dict, what)
    assert isinstance(decoded, dict)
    return decoded


def parse_abort_request(body: bytes) -> list[str]:
    """``/inference/v1/abort_requests``: ``{"request_ids": [...]}``, the ids generate answered
    with (``generate-tokens-...``)."""
    raw = _object(body, "abort_requests")
    ids = raw.get("request_ids")
    if ids is None:
        raise _bad("Missing 'request_ids' in request body", "request_ids")
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _bad(f"request_ids={short(ids)} must be a list of request id strings",
                   "request_ids")
    return ids


def sampling_params_body(sampling: SamplingOptions, output: OutputOptions,
                         structured: dict[str, Any] | None, *, stream: bool,
                         max_tokens: int | None) -> dict[str, Any]:
    """The ``sampling_params`` of a rendered ``GenerateRequest``, in vLLM's spelling (its
    ``SamplingParams`` as vLLM's render writes it: the values it always writes, the others when
    set). ``max_tokens`` None leaves it out (the generate server then takes the room the
    context leaves, as vLLM does)."""
    params = sampling.params
    body: dict[str, Any] = {}
    if sampling.n != 1:
        body["n"] = sampling.n
    for key in ("presence_penalty", "frequency_penalty", "repetition_penalty", "temperature"):
        body[key] = float(params.get(key, _PARAM_DEFAULTS[key]))
    if body["temperature"] >= _GREEDY_EPS:  # greedy: vLLM drops the filters
        body["top_p"] = float(params.get("top_p", 1.0))
        if params.get("top_k") not in (None, 0, -1):
            body["top_k"] = params["top_k"]
        body["min_p"] = float(params.get("min_p", 0.0))
    if params.get("seed") is not None:
        body["seed"] = params["seed"]
    body["stop"] = list(output.stop)
    body["stop_token_ids"] = list(sampling.stop_token_ids)
    if sampling.ignore_eos:
        body["ignore_eos"] = True
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if sampling.min_tokens:
        body["min_tokens"] = sampling.min_tokens
    if output.logprobs is not None:
        body["logprobs"] = output.logprobs
    if not output.skip_special_tokens:
        body["skip_special_tokens"] = False
    if output.include_stop:
        body["include_stop_str_in_output"] = True
    body["output_kind"] = 1 if stream else 2  # vLLM's RequestOutputKind DELTA / FINAL_ONLY
    body["skip_clone"] = True
    if sampling.logit_bias:
        body["logit_bias"] = {str(k): float(v) for k, v in sampling.logit_bias.items()}
    if structured is not None:
        body["structured_outputs"] = {k: v for k, v in structured.items() if k != "strict"}
    body["bad_words"] = []
    body["skip_reading_prefix_cache"] = False
    return body


# -- derender ------------------------------------------------------------------------------------


class GenerateChoiceBody(msgspec.Struct, kw_only=True):
    index: int = 0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class GenerateAnswerBody(msgspec.Struct, kw_only=True):
    """A generate answer or stream chunk in ``output_mode`` "tokens" (the fields derender
    reads; the others are ignored)."""

    request_id: str = ""
    choices: list[GenerateChoiceBody] = []
    output_mode: Literal["tokens"] = "tokens"


class DerenderState(msgspec.Struct, kw_only=True):
    """The state a streaming derender client carries between calls (vLLM's
    ``DerenderStreamState`` field names; this server reads ``output_token_ids`` (the ids so
    far), ``logprob_text_offset`` (the characters sent so far) and ``role_sent``)."""

    prev_tokens: list[str] = []
    prefix_offset: int = 0
    read_offset: int = 0
    role_sent: bool = False
    logprob_context_token_ids: list[int] = []
    logprob_text_offset: int = 0
    output_token_ids: list[int] = []
    output_chunk_lens: list[int] = []
    tools_streamed: bool = False
    last_tool_call_ids: list[str] = []


class DerenderBody(msgspec.Struct, kw_only=True):
    """``/v1/chat/completions/derender`` and ``/v1/completions/derender``: one whole answer
    (chat: ``generate_response``; completions: ``generate_responses``) or, with ``stream``,
    one chunk (``generate_chunk``) and the state of the previous call."""

    stream: bool = False
    model: str | None = None
    generate_response: GenerateAnswerBody | None = None
    generate_responses: list[GenerateAnswerBody] | None = None
    generate_chunk: GenerateAnswerBody | None = None
    stream_state: DerenderState | None = None
    prompt_tokens: int | list[int] | None = None
    prompt_token_ids: Any = None
    chat_request: dict[str, Any] | None = None
    completion_request: dict[str, Any] | None = None


class DerenderParams(msgspec.Struct, kw_only=True):
    """A validated derender request: the answers (or the one chunk), and the original request's
    output options (special tokens, stop strings)."""

    model: str
    stream: bool
    answers: list[GenerateAnswerBody]  # stream: the one chunk
    prompt_tokens: list[int]
    state: DerenderState
    skip_special_tokens: bool
    stops: list[str]
    include_stop: bool
    chat: ChatParams | None  # the chat request the ids answer (chat derender with chat_request)


def parse_derender_request(body: bytes, *, chat: bool,
                           served_models: Sequence[str]) -> DerenderParams:
    """Decode a derender body (chat when ``chat``, else completions)."""
    what = "chat derender" if chat else "completion derender"
    req: DerenderBody = decode_body(body, DerenderBody, what)
    model = _model(req.model, served_models)
    answers: list[GenerateAnswerBody]
    if req.stream:
        if req.generate_chunk is None:
            raise _bad("generate_chunk: Field required (stream is true)", "generate_chunk")
        answers = [req.generate_chunk]
    elif chat:
        if req.generate_response is None:
            raise _bad("generate_response: Field required", "generate_response")
        answers = [req.generate_response]
    else:
        if req.generate_responses is None:
            raise _bad("generate_responses: Field required", "generate_responses")
        answers = req.generate_responses
    counts = req.prompt_tokens
    if isinstance(counts, list):
        if len(counts) != len(answers):
            raise _bad(f"prompt_tokens length ({len(counts)}) must equal generate_responses "
                       f"length ({len(answers)})", "prompt_tokens")
        prompt_tokens = counts
    else:
        prompt_tokens = [counts or 0] * len(answers)
    for a, answer in enumerate(answers):
        for c, choice in enumerate(answer.choices):
            _ids(choice.token_ids, f"generate_response.choices[{c}].token_ids" if chat else
                 f"generate_responses[{a}].choices[{c}].token_ids")
    original = (req.chat_request if chat else req.completion_request) or {}
    stop = original.get("stop")
    stops = [stop] if isinstance(stop, str) else [s for s in stop or [] if isinstance(s, str)]
    chat_params = None
    if chat and req.chat_request is not None:
        given = {"model": model, **req.chat_request}
        try:
            chat_params = parse_chat_request(json.dumps(given).encode(),
                                             served_models=served_models)
        except ApiError as exc:
            exc.param = f"chat_request.{exc.param}" if exc.param else "chat_request"
            exc.message = f"chat_request: {exc.message}"
            exc.args = (exc.message,)
            raise
    state = req.stream_state or DerenderState()
    if sum(state.output_chunk_lens) != len(state.output_token_ids):
        raise _bad("stream_state.output_chunk_lens must sum to len(output_token_ids)",
                   "stream_state.output_chunk_lens")
    return DerenderParams(model=model, stream=req.stream, answers=answers,
                          prompt_tokens=prompt_tokens, state=state,
                          skip_special_tokens=original.get("skip_special_tokens") is not False,
                          stops=stops,
                          include_stop=original.get("include_stop_str_in_output") is True,
                          chat=chat_params)
