"""The detokenizer's request ledger: which requests are live, how each one ends, what is owed.

The bookkeeping half of :class:`textproc.service.request_table.RequestTable` (which feeds the
engine's steps through each request's output pipeline): live requests and per-client counts,
finished ids (so late engine outputs are dropped), outputs that arrive before their Submit
(buffered, bounded by count and age, then aborted in the engine), how a request ends (finish,
failure, client abort, client gone, engine restart), the counters, and what is to be sent this
round (``outbox``: client id -> outputs; ``engine_aborts``). No sockets.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any, Callable

from textproc.config import ServiceConfig
from textproc.core.deltas import join_text
from textproc.core.logprobs import LogprobTrack
from textproc.core.pipeline import OutputPipeline
from textproc.errors import TextprocError
from textproc.protocol import PROTOCOL_VERSION, EngineHello, RequestOutput, StepOutput, Submit

__all__ = ["RequestLedger", "Request"]

_log = logging.getLogger("textproc.detokenizer")
_DONE_IDS_KEPT = 200_000  # finished ids remembered so late engine outputs are dropped, not buffered
_DONE_IDS_TICKS = 120  # ... and for at most this many housekeeping ticks (0.5 s each: 60 s)


class Request:
    """One live request: its client, its output pipeline, its usage, its logprob track."""

    __slots__ = ("client_id", "state", "prompt_tokens", "completion_tokens", "cached_tokens",
                 "track")

    def __init__(self, client_id: bytes, state: OutputPipeline, prompt_tokens: int) -> None:
        self.client_id = client_id
        self.state = state
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.cached_tokens = 0  # prompt tokens the engine found in its prefix cache
        self.track: LogprobTrack | None = None  # with Submit.logprobs (service/logprob_rows.py)


class RequestLedger:
    """Live requests and their ends, without sockets; ``RequestTable`` feeds them."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.live: dict[str, Request] = {}
        self.per_client: dict[bytes, int] = {}  # live requests per client (max_live_per_client)
        self.early: dict[str, tuple[float, list[StepOutput]]] = {}
        self.early_cached: dict[str, int] = {}  # cached_tokens of requests in ``early``
        self.done: OrderedDict[str, int] = OrderedDict()  # id -> housekeeping tick it ended
        self.tick = 0
        self.outbox: dict[bytes, list[RequestOutput]] = {}
        self.engine_aborts: list[str] = []
        self.engine_instance: str | None = None
        self.tracked: set[str] = set()  # requests with logprobs (pruned at housekeeping)
        # every live request that has had no token yet (and maybe some ended ones: pruned when
        # a step brings first tokens and at housekeeping); a step naming none of them takes
        # the one-pass hot loop
        self.fresh: set[str] = set()
        # called (by the process loop: send the outbox) between a step's first outputs and the
        # rest, so a new request's first token does not wait for every running request's
        self.flush_first: Callable[[], None] | None = None
        self.counters: dict[str, int] = {
            "requests_submitted": 0,
            "requests_finished": 0,
            "requests_failed": 0,
            "requests_aborted": 0,
            "stop_string_aborts": 0,
            "tokens_in": 0,
            "engine_steps": 0,
            "early_outputs_buffered": 0,
            "early_outputs_dropped": 0,
            "engine_restarts": 0,
            "logprobs_missing": 0,  # tokens of requests with logprobs that came without a row
        }

    # -- outputs from the process and the engine ---------------------------------------------

    def on_hello(self, hello: EngineHello) -> bool:
        """A (re)started engine. Returns True when it is a new instance (all live requests fail)."""
        if hello.protocol_version != PROTOCOL_VERSION:
            _log.error("engine speaks protocol %d, textproc %d; its outputs may not decode",
                       hello.protocol_version, PROTOCOL_VERSION)
        previous, self.engine_instance = self.engine_instance, hello.instance_id
        if previous is None or previous == hello.instance_id:
            return previous is None
        self.counters["engine_restarts"] += 1
        # abort them in the new engine too: requests sent while no engine was connected went
        # to it before its hello arrived (an abort of an id it does not know is harmless)
        for rid in list(self.live):
            self._fail(rid, f"request {rid!r}: the engine restarted (instance {previous} -> "
                            f"{hello.instance_id}); the request was lost", abort_engine=True,
                       kind="engine_restarted")
        self.early.clear()
        self.early_cached.clear()
        return True

    def on_abort(self, client_id: bytes, request_ids: list[str]) -> None:
        """A client gave up on these requests: free them and abort them in the engine."""
        for rid in request_ids:
            req = self.live.get(rid)
            if req is None or req.client_id != client_id:
                continue  # finished already, or not this client's (never abort others' work)
            del self.live[rid]
            self._release(client_id)
            self._mark_done(rid)
            self.counters["requests_aborted"] += 1
            self.engine_aborts.append(rid)

    def unknown(self, request_ids: list[str]) -> list[str]:
        return [rid for rid in request_ids if rid not in self.live and rid not in self.early]

    def expire_early(self, now: float) -> None:
        """Drop buffered outputs whose Submit never came, and abort them in the engine."""
        max_age = self.config.early_output_age_s
        for rid in [rid for rid, (t0, _) in self.early.items() if now - t0 > max_age]:
            _, outs = self.early.pop(rid)
            self._mark_done(rid)  # later steps for it (before the engine aborts) are ignored
            self.counters["early_outputs_dropped"] += len(outs)
            if outs[-1].finish_reason is None:
                self.engine_aborts.append(rid)
            _log.warning("dropped outputs for unknown request %r after %.1f s", rid, max_age)
        if self.early_cached:  # (outputs dropped, or their Submit came: theirs are gone)
            self.early_cached = {rid: n for rid, n in self.early_cached.items() if rid in self.early}

    def client_gone(self, client_id: bytes, request_ids: list[str]) -> None:
        """Outputs to ``client_id`` could not be delivered: abort its requests."""
        for rid in request_ids:
            req = self.live.pop(rid, None)
            if req is not None:
                self._release(req.client_id)
                self._mark_done(rid)
                self.counters["requests_aborted"] += 1
                self.engine_aborts.append(rid)

    def all_counters(self) -> dict[str, int]:
        return {**self.counters, "live_requests": len(self.live), "early_requests": len(self.early),
                "live_clients": len(self.per_client), "done_ids_kept": len(self.done)}

    def housekeeping(self) -> None:
        """Every 0.5 s: forget finished ids older than 60 s (late outputs come within steps), so
        the memory they hold is bounded by time, not only by count."""
        self.tick += 1
        if self.tracked:
            self.tracked.intersection_update(self.live)
        self._prune_fresh()
        done, oldest = self.done, self.tick - _DONE_IDS_TICKS
        while done:
            rid = next(iter(done))
            if done[rid] > oldest:
                break
            del done[rid]

    def on_cached(self, cached_tokens: dict[str, int]) -> None:
        """A step's prompt-cache counts (a few requests' first outputs): kept for the usage."""
        live = self.live
        for rid, count in cached_tokens.items():
            req = live.get(rid)
            if req is not None:
                req.cached_tokens = count
            elif rid not in self.done and len(self.early_cached) < self.config.max_early_outputs:
                self.early_cached[rid] = count  # its outputs wait for their Submit in ``early``

    # -- internals -----------------------------------------------------------------------------

    def _buffer_early(self, out: StepOutput) -> None:
        entry = self.early.get(out.request_id)
        if entry is None:
            if len(self.early) >= self.config.max_early_outputs:
                self.counters["early_outputs_dropped"] += 1
                if out.finish_reason is None:
                    self.engine_aborts.append(out.request_id)
                self._mark_done(out.request_id)
                return
            entry = (time.monotonic(), [])
            self.early[out.request_id] = entry
        entry[1].append(out)
        self.counters["early_outputs_buffered"] += 1

    def _pipeline_failed(self, rid: str, e: Exception, *, abort_engine: bool) -> None:
        """The one error classification for a request's output pipeline."""
        if isinstance(e, TextprocError):  # e.g. a token id outside the vocabulary
            self._fail(rid, f"request {rid!r}: {e}", abort_engine=abort_engine, kind="engine_error")
            return
        _log.exception("request %r: output pipeline failed", rid)
        self._fail(rid, f"request {rid!r}: internal error in the detokenizer: "
                        f"{type(e).__name__}: {e}", abort_engine=abort_engine, kind="internal")

    def _finish(self, rid: str, req: Request, deltas: list[dict[str, Any]],
                engine_reason: str | None, *, counted: bool = False) -> None:
        """The request ended (stop string or engine finish): send the last output, free it."""
        state = req.state
        if not counted and engine_reason is None:
            self.engine_aborts.append(rid)
            self.counters["stop_string_aborts"] += 1
        del self.live[rid]
        self._release(req.client_id)
        self._mark_done(rid)
        self.counters["requests_finished"] += 1
        self._emit(req, RequestOutput(rid, join_text(deltas), state.finish_reason,
                                      state.matched_stop, req.prompt_tokens,
                                      req.completion_tokens, cached_tokens=req.cached_tokens))

    def _emit(self, req: Request, output: RequestOutput) -> None:
        box = self.outbox.get(req.client_id)
        if box is None:
            self.outbox[req.client_id] = [output]
        else:
            box.append(output)

    def _fail(self, rid: str, message: str, *, abort_engine: bool, kind: str) -> None:
        req = self.live.pop(rid, None)
        if req is None:
            return
        self._release(req.client_id)
        self._mark_done(rid)
        self.counters["requests_failed"] += 1
        if abort_engine:
            self.engine_aborts.append(rid)
        self._emit(req, RequestOutput(rid, [], "error", None, req.prompt_tokens,
                                      req.completion_tokens, message, kind,
                                      cached_tokens=req.cached_tokens))

    def _fail_new(self, submit: Submit, message: str, kind: str) -> None:
        self.counters["requests_failed"] += 1
        _log.warning("%s", message)
        box = self.outbox.setdefault(submit.client_id, [])
        box.append(RequestOutput(submit.request_id, [], "error", None, submit.prompt_tokens, 0,
                                 message, kind))

    def _release(self, client_id: bytes) -> None:
        n = self.per_client[client_id] - 1
        if n:
            self.per_client[client_id] = n
        else:
            del self.per_client[client_id]

    def _mark_done(self, rid: str) -> None:
        done = self.done
        done[rid] = self.tick
        if len(done) > _DONE_IDS_KEPT:
            done.popitem(last=False)

    def _prune_fresh(self) -> None:
        live = self.live
        self.fresh = {rid for rid in self.fresh
                      if (req := live.get(rid)) is not None and not req.completion_tokens}
