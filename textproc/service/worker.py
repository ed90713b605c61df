"""Tokenizer worker process: client request -> chat template -> token ids -> engine request.

Owns validation of everything a client sends (messages, tools, tool_choice, stop lists, token
limits, sampling fields): a bad request gets a ``Failure`` naming the bad value and what is
allowed, and nothing else is disturbed. A good one becomes ONE ``Submit`` frame to the
detokenizer (output setup + the encoded ``EngineRequest``), then ``Accepted`` to the client.
Binds ROUTER ``worker-i``; the peer's routing id is the client id carried into ``Submit``.
Never raises out of the loop for one bad frame or request.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

import zmq

from textproc.config import Endpoints, ServiceConfig
from textproc.errors import InvalidInput, TemplateError, TextprocError, short
from textproc.protocol import (
    Accepted,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResult,
    EngineRequest,
    Failure,
    Stats,
    StatsRequest,
    Submit,
    TokenizeRequest,
    TokenizeResult,
    WorkerInFrame,
    pack_ids,
    unpack_ids,
)
from textproc.transport import (
    ChildRuntime,
    FrameDecoder,
    close_sockets,
    encoder,
    load_server_keys,
    make_socket,
    start_authenticator,
)

__all__ = ["RequestBuilder", "run_worker", "MAX_REQUEST_ID_CHARS"]

_log = logging.getLogger("textproc.worker")
MAX_REQUEST_ID_CHARS = 256
_TOOL_CHOICES = ("none", "auto", "required")
_STOP_TOKEN_NAMES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>")
_RESERVED_TEMPLATE_VARS = frozenset(
    {"messages", "tools", "add_generation_prompt", "continue_final_message", "documents"}
)
_SCALARS = (str, int, float, bool, type(None))


def _check_request_id(request_id: str) -> None:
    if not request_id or len(request_id) > MAX_REQUEST_ID_CHARS:
        raise InvalidInput(
            f"request_id {short(request_id)} must be 1-{MAX_REQUEST_ID_CHARS} characters"
        )


class RequestBuilder:
    """Turns client frames into engine requests and Submit frames, validating on the way.

    Pure translation with no sockets, so it is unit-testable: ``chat(req, client_id)`` and
    ``completion(req, client_id)`` return ``(Submit, prompt_tokens)`` or raise InvalidInput /
    TemplateError whose message says what was wrong with the request.
    """

    def __init__(self, tokenizer: Any, config: ServiceConfig) -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.encode = encoder().encode
        added: dict[str, int] = dict(getattr(tokenizer, "added_tokens", {}) or {})
        self.has_think = "<think>" in added and "</think>" in added
        self.has_tool_tags = "<tool_call>" in added
        ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        ids += [added[name] for name in _STOP_TOKEN_NAMES if name in added]
        self.default_stop_ids: list[int] = sorted(set(ids))
        self.special_vars: dict[str, Any] = dict(getattr(tokenizer, "special_tokens_map", {}) or {})
        # stage timings of the last chat()/completion(), reported on Accepted
        self.last_template_s = 0.0
        self.last_tokenize_s = 0.0

    # -- chat ----------------------------------------------------------------------------------

    def chat(self, req: ChatRequest, client_id: bytes) -> tuple[Submit, int]:
        _check_request_id(req.request_id)
        tools = self._check_tools(req.tools)
        tool_choice, forced_name = self._check_tool_choice(req.tool_choice, tools)
        t0 = time.perf_counter()
        prompt = self.render(req.messages, tools if tool_choice != "none" else None,
                             add_generation_prompt=req.add_generation_prompt,
                             continue_final_message=req.continue_final_message,
                             chat_template_kwargs=req.chat_template_kwargs)
        t1 = time.perf_counter()
        prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        self.last_template_s, self.last_tokenize_s = t1 - t0, time.perf_counter() - t1
        reasoning = self.has_think
        starts_in_reasoning = False
        if reasoning:
            from textproc.core.chat.template import prompt_starts_in_reasoning

            starts_in_reasoning = prompt_starts_in_reasoning(prompt)
        constraint = None
        if tool_choice == "required" or forced_name is not None:
            from textproc.core.constraints.schema import tool_call_pattern

            # A prompt that leaves the model inside <think> must close it first, or the
            # forced call would be parsed as reasoning.
            prefix = "</think>\n\n" if starts_in_reasoning else ""
            constraint = tool_call_pattern(tools, forced_name, prefix=prefix)
        parse_tools = bool(tools) and tool_choice != "none"
        return self._submit(req.request_id, client_id, prompt_ids, req.max_tokens, req.min_tokens,
                            req.stop, req.include_stop, req.skip_special_tokens, req.sampling,
                            req.stop_token_ids, req.ignore_eos, constraint,
                            reasoning=reasoning, tools=parse_tools,
                            starts_in_reasoning=starts_in_reasoning)

    def render(self, messages: Any, tools: list[dict[str, Any]] | None, *,
               add_generation_prompt: bool = True, continue_final_message: bool = False,
               chat_template_kwargs: dict[str, Any] | None = None) -> str:
        from textproc.core.chat.template import render_chat

        self._check_messages(messages)
        template = self.tokenizer.chat_template
        if template is None:
            raise InvalidInput(
                f"the model in {self.config.model_dir} has no chat_template; use a completion "
                "request, or add a chat_template to tokenizer_config.json"
            )
        kwargs = dict(chat_template_kwargs or {})
        bad = [k for k in kwargs if not isinstance(k, str) or not k.isidentifier()
               or k in _RESERVED_TEMPLATE_VARS]
        if bad:
            raise InvalidInput(
                f"chat_template_kwargs keys {short(bad)} are not allowed; use identifiers other "
                f"than {sorted(_RESERVED_TEMPLATE_VARS)}"
            )
        if add_generation_prompt and continue_final_message:
            raise InvalidInput("add_generation_prompt and continue_final_message cannot both be true")
        prompt: str = render_chat(template, messages, tools,
                                  add_generation_prompt=add_generation_prompt,
                                  continue_final_message=continue_final_message,
                                  **{**self.special_vars, **kwargs})
        if len(prompt) > self.config.max_prompt_chars:
            raise InvalidInput(
                f"the rendered prompt has {len(prompt)} characters, over the limit of "
                f"{self.config.max_prompt_chars}"
            )
        return prompt

    # -- completion ----------------------------------------------------------------------------

    def completion(self, req: CompletionRequest, client_id: bytes) -> tuple[Submit, int]:
        _check_request_id(req.request_id)
        if req.prompt_token_ids is not None:
            if req.prompt:
                raise InvalidInput(
                    f"request {req.request_id!r}: give prompt or prompt_token_ids, not both")
            prompt_ids = self._check_ids(req.prompt_token_ids, "prompt_token_ids")
        else:
            if len(req.prompt) > self.config.max_prompt_chars:
                raise InvalidInput(
                    f"prompt has {len(req.prompt)} characters, over the limit of "
                    f"{self.config.max_prompt_chars}")
            t0 = time.perf_counter()
            prompt_ids = self.tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens)
            self.last_tokenize_s = time.perf_counter() - t0
        return self._submit(req.request_id, client_id, prompt_ids, req.max_tokens, req.min_tokens,
                            req.stop, req.include_stop, req.skip_special_tokens, req.sampling,
                            req.stop_token_ids, req.ignore_eos, None,
                            reasoning=False, tools=False, starts_in_reasoning=False)

    # -- tokenize / detokenize -----------------------------------------------------------------

    def tokenize(self, req: TokenizeRequest) -> TokenizeResult:
        _check_request_id(req.request_id)
        if (req.text is None) == (req.messages is None):
            raise InvalidInput(f"request {req.request_id!r}: give exactly one of text or messages")
        if req.messages is not None:
            tools = self._check_tools(req.tools)
            prompt = self.render(req.messages, tools or None,
                                 add_generation_prompt=req.add_generation_prompt,
                                 chat_template_kwargs=req.chat_template_kwargs)
            ids = self.tokenizer.encode(prompt, add_special_tokens=req.add_special_tokens)
            return TokenizeResult(req.request_id, pack_ids(ids), prompt)
        assert req.text is not None
        if len(req.text) > self.config.max_prompt_chars:
            raise InvalidInput(f"text has {len(req.text)} characters, over the limit of "
                               f"{self.config.max_prompt_chars}")
        ids = self.tokenizer.encode(req.text, add_special_tokens=req.add_special_tokens)
        return TokenizeResult(req.request_id, pack_ids(ids))

    def detokenize(self, req: DetokenizeRequest) -> DetokenizeResult:
        _check_request_id(req.request_id)
        ids = self._check_ids(req.token_ids, "token_ids", allow_empty=True)
        text = self.tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens)
        return DetokenizeResult(req.request_id, text)

    # -- validation ----------------------------------------------------------------------------

    def _submit(self, request_id: str, client_id: bytes, prompt_ids: list[int],
                max_tokens: int | None, min_tokens: int, stop: list[str], include_stop: bool,
                skip_special_tokens: bool, sampling: dict[str, Any], stop_token_ids: list[int],
                ignore_eos: bool, constraint: str | None, *, reasoning: bool, tools: bool,
                starts_in_reasoning: bool) -> tuple[Submit, int]:
        n_prompt = len(prompt_ids)
        limit = self.config.max_model_len
        if n_prompt == 0:
            raise InvalidInput(f"request {request_id!r}: the prompt encodes to no tokens")
        if n_prompt >= limit:
            raise InvalidInput(
                f"request {request_id!r}: the prompt has {n_prompt} tokens, the model's "
                f"max_model_len is {limit}; shorten the prompt")
        if max_tokens is None:
            max_tokens = limit - n_prompt
        elif isinstance(max_tokens, bool) or max_tokens < 1:
            raise InvalidInput(f"request {request_id!r}: max_tokens={max_tokens!r}; allowed: >= 1")
        elif n_prompt + max_tokens > limit:
            raise InvalidInput(
                f"request {request_id!r}: prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) "
                f"= {n_prompt + max_tokens} is over max_model_len={limit}; lower max_tokens to "
                f"at most {limit - n_prompt}")
        if min_tokens < 0 or min_tokens > max_tokens:
            raise InvalidInput(
                f"request {request_id!r}: min_tokens={min_tokens!r}; allowed: 0..max_tokens "
                f"({max_tokens})")
        self._check_stops(stop)
        extra_ids = self._check_stop_token_ids(stop_token_ids)
        self._check_sampling(sampling)
        stop_ids = sorted(set(extra_ids if ignore_eos else self.default_stop_ids + extra_ids))
        engine_request = EngineRequest(request_id, pack_ids(prompt_ids), max_tokens, stop_ids,
                                       sampling, constraint, min_tokens, ignore_eos)
        submit = Submit(request_id, client_id, n_prompt, max_tokens, self.encode(engine_request),
                        stop, include_stop, min_tokens, skip_special_tokens, reasoning, tools,
                        starts_in_reasoning)
        return submit, n_prompt

    def _check_messages(self, messages: Any) -> None:
        if not isinstance(messages, list) or not messages:
            raise InvalidInput(f"messages must be a non-empty list, got {short(messages)}")
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise InvalidInput(f"messages[{i}] must be an object, got {short(message)}")
            role = message.get("role")
            if not isinstance(role, str) or not role:
                raise InvalidInput(f"messages[{i}].role must be a non-empty string, got {short(role)}")

    def _check_tools(self, tools: Any) -> list[dict[str, Any]]:
        if tools is None:
            return []
        if not isinstance(tools, list):
            raise InvalidInput(f"tools must be a list, got {short(tools)}")
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) else None
            name = fn.get("name") if isinstance(fn, dict) else None
            if not isinstance(tool, dict) or tool.get("type", "function") != "function" or \
                    not isinstance(name, str) or not name:
                raise InvalidInput(
                    f"tools[{i}] must be {{'type': 'function', 'function': {{'name': str, ...}}}}, "
                    f"got {short(tool)}")
        return tools

    def _check_tool_choice(self, tool_choice: Any,
                           tools: list[dict[str, Any]]) -> tuple[str, str | None]:
        names = [t["function"]["name"] for t in tools]
        if isinstance(tool_choice, str):
            if tool_choice not in _TOOL_CHOICES:
                raise InvalidInput(
                    f"tool_choice {tool_choice!r} is not allowed; use 'none', 'auto', 'required' "
                    "or {'type': 'function', 'function': {'name': ...}}")
            if tool_choice == "required" and not tools:
                raise InvalidInput("tool_choice 'required' needs at least one tool in tools")
            return tool_choice, None
        fn = tool_choice.get("function") if isinstance(tool_choice, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise InvalidInput(
                f"tool_choice {short(tool_choice)} must name a function: "
                "{'type': 'function', 'function': {'name': ...}}")
        if name not in names:
            raise InvalidInput(f"tool_choice names unknown tool {name!r}; tools are {short(names)}")
        return "named", name

    def _check_stops(self, stop: list[str]) -> None:
        if len(stop) > self.config.max_stops:
            raise InvalidInput(f"{len(stop)} stop strings; at most {self.config.max_stops} allowed")
        for i, s in enumerate(stop):
            if not s:
                raise InvalidInput(f"stop[{i}] is empty; stop strings must be non-empty")
            if len(s) > self.config.max_stop_chars:
                raise InvalidInput(f"stop[{i}] has {len(s)} characters; at most "
                                   f"{self.config.max_stop_chars} allowed")

    def _check_stop_token_ids(self, ids: list[int]) -> list[int]:
        vocab = self.tokenizer.vocab_size
        for i, t in enumerate(ids):
            if not 0 <= t < vocab:
                raise InvalidInput(f"stop_token_ids[{i}]={t!r} is outside the vocabulary "
                                   f"[0, {vocab})")
        return list(ids)

    def _check_sampling(self, sampling: dict[str, Any]) -> None:
        for key, value in sampling.items():
            if not isinstance(value, _SCALARS) and not (
                    isinstance(value, list) and all(isinstance(v, _SCALARS) for v in value)):
                raise InvalidInput(f"sampling[{key!r}]={short(value)}; allowed: numbers, strings, "
                                   "booleans, null or lists of them")

    def _check_ids(self, data: bytes, what: str, *, allow_empty: bool = False) -> list[int]:
        try:
            ids = unpack_ids(data)
        except ValueError as e:
            raise InvalidInput(f"{what}: {e}") from e
        if not ids and not allow_empty:
            raise InvalidInput(f"{what} is empty")
        vocab = self.tokenizer.vocab_size
        bad = [t for t in ids if t >= vocab]
        if bad:
            raise InvalidInput(f"{what} has ids outside the vocabulary [0, {vocab}): {short(bad[:10])}")
        return ids


def run_worker(config: ServiceConfig, endpoints: Endpoints, index: int, *, parent_pid: int = 0) -> int:
    """Worker ``index`` entry: bind worker-i, announce Ready, serve until SIGTERM or parent exit."""
    runtime = ChildRuntime(role="worker", index=index, parent_pid=parent_pid,
                           log_level=config.log_level)
    runtime.start()
    from textproc.core.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_dir(config.model_dir)
    # build the lazy BPE merge table before Ready, not on the first request (0.3-1 s on Qwen)
    tokenizer.validate()
    builder = RequestBuilder(tokenizer, config)
    # the vocabulary's millions of long-lived objects: keep them out of every GC pass
    # (measured in the detokenizer: ~1.5x more request-steps per second on Qwen3)
    gc.collect()
    gc.freeze()
    ctx: zmq.Context[Any] = zmq.Context()
    opts: dict[str, Any] = {"max_frame_bytes": config.max_frame_bytes, "hwm": config.hwm}
    keys = load_server_keys(config.curve_dir) if config.curve_dir else None
    auth = start_authenticator(ctx, keys) if keys is not None else None
    client_keys = keys.as_client() if keys is not None else None
    front = make_socket(ctx, zmq.ROUTER, **opts, curve_server=keys)
    detok = make_socket(ctx, zmq.PUSH, **opts, curve_client=client_keys)
    control = make_socket(ctx, zmq.PUSH, **opts, curve_client=client_keys)
    try:
        front.bind(endpoints.workers[index])
        detok.connect(endpoints.detok_in)
        control.connect(endpoints.control)
        runtime.send_ready(control)
        _log.info("worker %d ready on %s", index, endpoints.workers[index])
        _serve(builder, runtime, index, front, detok)
    finally:
        close_sockets([front, detok, control])
        if auth is not None:
            auth.stop()
        ctx.term()
    return 0


def _serve(builder: RequestBuilder, runtime: ChildRuntime, index: int,
           front: zmq.Socket[Any], detok: zmq.Socket[Any]) -> None:
    name = f"worker-{index}"
    decoder: FrameDecoder[WorkerInFrame] = FrameDecoder(WorkerInFrame, socket_name=name)
    encode = builder.encode
    counters = {"requests": 0, "failures": 0, "prompt_tokens": 0, "submit_blocked": 0}
    gate = _SubmitGate(detok, counters)
    poller = zmq.Poller()
    poller.register(front, zmq.POLLIN)
    next_parent_check = time.monotonic() + 1.0
    while not runtime.should_stop:
        ready = poller.poll(200)
        now = time.monotonic()
        if now >= next_parent_check:  # by time, so a busy worker notices too
            next_parent_check = now + 1.0
            if not runtime.parent_alive():
                _log.error("supervisor %d is gone; exiting", runtime.parent_pid)
                return
        if not ready:
            continue
        client_id, frame = decoder.decode_routed(front.recv_multipart(copy=True))
        if frame is None:
            continue
        counters["requests"] += 1
        reply: Any
        try:
            match frame:
                case ChatRequest() | CompletionRequest():
                    builder.last_template_s = builder.last_tokenize_s = 0.0
                    if isinstance(frame, ChatRequest):
                        submit, n_prompt = builder.chat(frame, client_id)
                    else:
                        submit, n_prompt = builder.completion(frame, client_id)
                    if gate.send(encode(submit)):
                        counters["prompt_tokens"] += n_prompt
                        reply = Accepted(frame.request_id, n_prompt,
                                         builder.last_template_s, builder.last_tokenize_s)
                    else:
                        reply = Failure(frame.request_id, "overloaded",
                                        f"request {frame.request_id!r}: the detokenizer is not "
                                        "accepting requests (restarting or overloaded); retry", 503)
                case TokenizeRequest():
                    reply = builder.tokenize(frame)
                case DetokenizeRequest():
                    reply = builder.detokenize(frame)
                case StatsRequest():
                    reply = Stats(frame.request_id, "worker", index,
                                  {**counters, **decoder.counters(), "pid": os.getpid()})
        except TemplateError as e:
            reply = Failure(frame.request_id, "template", str(e), 400)
        except TextprocError as e:  # InvalidInput and the other textproc errors
            reply = Failure(frame.request_id, "invalid_input", str(e), 400)
        except Exception as e:  # one request's bug must not take the worker down
            _log.exception("request %r failed in worker %d", frame.request_id, index)
            reply = Failure(frame.request_id, "internal",
                            f"internal error in worker {index}: {type(e).__name__}: {e}", 500)
        if isinstance(reply, Failure):
            counters["failures"] += 1
        try:
            front.send_multipart([client_id, encode(reply)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as e:
            _log.warning("reply to client %s for %r not delivered: %s", client_id.hex(),
                         frame.request_id, e)


SUBMIT_WAIT_MS = 2000


class _SubmitGate:
    """Sends Submits to the detokenizer; after one wait for it failed, refuses at once for
    SUBMIT_WAIT_MS instead of stalling every queued request for the full wait."""

    __slots__ = ("detok", "counters", "blocked_until")

    def __init__(self, detok: zmq.Socket[Any], counters: dict[str, int]) -> None:
        self.detok = detok
        self.counters = counters
        self.blocked_until = 0.0  # time.monotonic() before which the detokenizer counts as down

    def send(self, data: bytes) -> bool:
        """Send one Submit; False when the detokenizer is down or its queue stays full."""
        # a PUSH blocks when the detokenizer is down or its queue is full: wait, then refuse
        wait_ms = 0 if time.monotonic() < self.blocked_until else SUBMIT_WAIT_MS
        if self.detok.poll(wait_ms, zmq.POLLOUT):
            self.detok.send(data, flags=zmq.NOBLOCK)
            return True
        if wait_ms:
            self.blocked_until = time.monotonic() + SUBMIT_WAIT_MS / 1000
        self.counters["submit_blocked"] += 1
        return False
