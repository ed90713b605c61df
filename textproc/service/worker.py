"""Tokenizer worker process: the serve loop around :class:`~textproc.service.requests.RequestBuilder`.

Binds ROUTER ``worker-i``; the peer's routing id is the client id carried into ``Submit``. Each
frame is decoded by one typed decoder and answered once: a built request goes to the
detokenizer as ONE ``Submit`` and the client gets ``Accepted``; a bad one gets a ``Failure``
naming what was wrong. Never raises out of the loop for one bad frame or request.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import zmq

from textproc.config import Endpoints, ServiceConfig
from textproc.errors import TemplateError, TextprocError
from textproc.protocol import (
    Accepted,
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    Failure,
    Stats,
    StatsRequest,
    TokenizeRequest,
    WorkerInFrame,
)
from textproc.service.bootstrap import ChildRuntime
from textproc.service.requests import RequestBuilder
from textproc.transport import FrameDecoder

__all__ = ["run_worker", "SUBMIT_WAIT_MS"]

_log = logging.getLogger("textproc.worker")


def run_worker(config: ServiceConfig, endpoints: Endpoints, index: int, *, parent_pid: int = 0) -> int:
    """Worker ``index`` entry: bind worker-i, announce Ready, serve until SIGTERM or parent exit."""
    runtime = ChildRuntime(role="worker", index=index, config=config, parent_pid=parent_pid)
    runtime.start()
    builder = RequestBuilder(runtime.load_tokenizer(), config)
    runtime.freeze_heap()
    with runtime:
        front = runtime.bind(zmq.ROUTER, endpoints.workers[index])
        detok = runtime.connect(zmq.PUSH, endpoints.detok_in)
        control = runtime.connect(zmq.PUSH, endpoints.control)
        runtime.send_ready(control)
        _log.info("worker %d ready on %s", index, endpoints.workers[index])
        _serve(builder, runtime, index, front, detok)
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
                    built = (builder.chat(frame, client_id) if isinstance(frame, ChatRequest)
                             else builder.completion(frame, client_id))
                    if gate.send(encode(built.submit)):
                        if builder.last_index_key:  # the detokenizer has this index's table now
                            builder.constraints.sent(builder.last_index_key)
                        counters["prompt_tokens"] += built.prompt_tokens
                        reply = Accepted(frame.request_id, built.prompt_tokens,
                                         built.template_s, built.tokenize_s)
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
                                  {**counters, **decoder.counters(),
                                   **builder.tokenizer.segment_cache.counters(), "pid": os.getpid()})
        except TemplateError as e:
            reply = Failure(frame.request_id, "template", str(e), 400, "messages")
        except TextprocError as e:  # InvalidInput and the other textproc errors
            reply = Failure(frame.request_id, "invalid_input", str(e), 400, e.param)
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
