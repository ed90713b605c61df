"""The detokenizer's request table: every live request's output state and its end, no sockets.

Owns what happens to a request between its Submit and its end: the per-request output pipeline
(detokenizer -> stops -> parser), the engine's steps fed through it (one pass per step, the
common case inlined), a step's first tokens sent ahead, stop-string aborts, logprob entries,
and the Outputs each client gets this round; and the bookkeeping around them: live requests and
per-client counts, finished ids (so late engine outputs are dropped), outputs that arrive before
their Submit (buffered, bounded by count and age, then aborted in the engine), how a request
ends (finish, failure, client abort, client gone, engine restart), the counters, and what is to
be sent this round (``outbox``: client id -> outputs; ``engine_aborts``). Frames in, frames to
send out; the detokenizer process (:mod:`textproc.service.detokenizer_process`) moves them.

Invariants: per engine step the work is O(new tokens); each client gets at most one Outputs
frame per round; per-request state is freed on finish, abort and error; a new engine instance
fails every live request. Never raises for one bad request.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any, Callable

from textproc.config import ServiceConfig
from textproc.core.deltas import join_text
from textproc.core.detokenizer import DetokenizerVocab
from textproc.core.logprobs import MISSING_LOGPROB, LogprobTrack
from textproc.core.pipeline import FINISH_REASONS as PIPELINE_FINISH_REASONS, OutputPipeline
from textproc.errors import ProtocolError, TextprocError
from textproc.protocol import (
    ENGINE_FINISH_REASONS,
    PROTOCOL_VERSION,
    EngineHello,
    EngineStep,
    EngineStepPacked,
    GeneratedIds,
    RequestOutput,
    StepOutput,
    Submit,
    pack_floats,
    pack_ids,
    step_entries,
)
from textproc.service import logprob_rows as lp

__all__ = ["RequestTable", "Request", "GC_THRESHOLDS"]

_log = logging.getLogger("textproc.detokenizer")
# A step allocates a few containers per request (decoded StepOutput, RequestOutput, deltas) that
# are alive together and freed by reference counting: at the default gen0 threshold (700) the
# collector ran ~7 times per 1,024-request step, with a full pass every few steps over every live
# pipeline, 23-31% of the CPU of RequestTable.on_step + Outputs encoding (bench/detok_pipeline.py,
# gc.callbacks). Collections now run only when 100k objects outlive their step (new requests).
GC_THRESHOLDS = (100_000, 50, 100)
_RID, _IDS, _REASON = (attrgetter("request_id"), attrgetter("token_ids"),
                       attrgetter("finish_reason"))  # EngineStep entries as columns
_DONE_IDS_KEPT = 200_000  # finished ids remembered so late engine outputs are dropped, not buffered
_DONE_IDS_TICKS = 120  # ... and for at most this many housekeeping ticks (0.5 s each: 60 s)


class Request:
    """One live request: its client, its output pipeline, its usage, its logprob track, and
    the engine's ids not yet sent (``output.return_token_ids`` only)."""

    __slots__ = ("client_id", "state", "prompt_tokens", "completion_tokens", "cached_tokens",
                 "track", "ids", "rows")

    def __init__(self, client_id: bytes, state: OutputPipeline, prompt_tokens: int) -> None:
        self.client_id = client_id
        self.state = state
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.cached_tokens = 0  # prompt tokens the engine found in its prefix cache
        self.track: LogprobTrack | None = None  # with Submit.logprobs (service/logprob_rows.py)
        self.ids: list[int] | None = None  # with output.return_token_ids: ids since the last output
        # ... and with logprobs k too: the ids' rows (1 + k logprobs, k alternative ids each)
        self.rows: tuple[list[float], list[int], int] | None = None


class RequestTable:
    """The detokenizer's state machine, without sockets: frames in, frames to send out.

    ``on_submit`` / ``on_step`` / ``on_abort`` return nothing; what they produce collects in
    ``self.outbox`` (client id -> outputs for this round) and ``self.engine_aborts``; the loop
    flushes both after each batch of frames, so each client gets one Outputs frame per round.
    A step that brings some requests their first tokens is fed in two parts: those requests
    first, then ``flush_first`` (the loop's flush, when set), then the running ones; so a new
    request's first token leaves before the work of every running request's (bench/e2e.py at
    500 req/s: the first token's way back p99 4.5-5.8 -> 2.6-3.7 ms), at the price of a second
    Outputs frame per client in such steps. (Not while a request with logprobs or generated
    ids is live: those steps take the one-pass ``_on_step_tracked``.)"""

    def __init__(self, tokenizer: DetokenizerVocab, config: ServiceConfig) -> None:
        self.tokenizer = tokenizer
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
        # requests with logprobs or generated ids (pruned at housekeeping): while any is live,
        # steps take the per-request path, so the hot loop checks neither
        self.tracked: set[str] = set()
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

    # -- inputs --------------------------------------------------------------------------------

    def on_submit(self, submit: Submit) -> bytes | None:
        """Register a request; returns the engine request bytes to forward, or None if refused."""
        rid = submit.request_id
        if rid in self.live:
            self._fail_new(submit, f"duplicate request_id {rid!r}: a request with this id is live",
                           "invalid_input")
            return None
        if len(self.live) >= self.config.max_live_requests:
            self._fail_new(submit, f"overloaded: {len(self.live)} live requests, "
                                   f"max_live_requests={self.config.max_live_requests}",
                           "overloaded")
            return None
        n_client = self.per_client.get(submit.client_id, 0)
        if n_client >= self.config.max_live_per_client:
            self._fail_new(submit, f"too many requests: this client has {n_client} live requests, "
                                   f"max_live_per_client={self.config.max_live_per_client}; retry "
                                   "after some finish", "rate_limited")
            return None
        try:
            state = OutputPipeline(self.tokenizer, submit.output, submit.parse,
                                   min_tokens=submit.min_tokens, request_id=rid)
        except TextprocError as e:
            self._fail_new(submit, f"request {rid!r}: {e}", "invalid_input")
            return None
        except Exception as e:  # a bug in the output setup fails this request, not the process
            _log.exception("request %r: output pipeline setup failed", rid)
            self._fail_new(submit, f"request {rid!r}: internal error in the detokenizer: "
                                   f"{type(e).__name__}: {e}", "internal")
            return None
        self.counters["requests_submitted"] += 1
        self.done.pop(rid, None)
        req = Request(submit.client_id, state, submit.prompt_tokens)
        if submit.output.logprobs is not None:
            req.track = lp.new_track(self.tokenizer, state, submit.output.logprobs)
            self.tracked.add(rid)
        if submit.output.return_token_ids:
            req.ids = []
            self.tracked.add(rid)
            if submit.output.logprobs is not None:
                req.rows = ([], [], submit.output.logprobs)
        self.live[rid] = req
        if self.early_cached:
            req.cached_tokens = self.early_cached.pop(rid, 0)
        self.fresh.add(rid)
        self.per_client[submit.client_id] = n_client + 1
        buffered = self.early.pop(rid, None)
        if buffered is not None:
            for out in buffered[1]:
                if rid not in self.live:
                    break
                self.counters["tokens_in"] += len(out.token_ids)
                if req.track is None:
                    self._feed(rid, req, out.token_ids, out.finish_reason)
                else:
                    try:
                        rows = lp.step_rows(EngineStep(0, [out]))[0][3]
                    except ValueError:  # rows that do not fit: entries without logprobs
                        rows = None
                    self._feed_tracked(rid, req, out.token_ids, out.finish_reason, rows)
        return submit.engine_request

    def on_step(self, step: EngineStep | EngineStepPacked) -> None:
        """Feed one engine step; raises ProtocolError (nothing done) for a packed step whose
        columns do not fit together."""
        entries: Iterable[tuple[str, Sequence[int], str | None]]
        if step.cached_tokens:  # (a few steps: those with requests' first outputs)
            self.on_cached(step.cached_tokens)
        if self.tracked or (type(step) is EngineStepPacked and step.logprobs):
            self._on_step_tracked(step)
            return
        if type(step) is EngineStepPacked:
            try:
                columns = step_entries(step)
            except ValueError as e:
                raise ProtocolError(str(e)) from e
            rids: Iterable[str] = columns[0]
            entries = zip(*columns)
        else:
            assert isinstance(step, EngineStep)
            outs = step.outputs
            rids = map(_RID, outs)
            entries = zip(map(_RID, outs), map(_IDS, outs), map(_REASON, outs))
        self.counters["engine_steps"] += 1
        if self.fresh and not self.fresh.isdisjoint(rids):
            self._feed_running(step, self._feed_first(entries), counted=True)
        else:
            self._feed_running(step, entries)

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

    # -- feeding the engine's steps ------------------------------------------------------------

    def _feed_first(self, entries: Iterable[tuple[str, Sequence[int], str | None]],
                    ) -> list[tuple[str, Sequence[int], str | None]]:
        """A step that brings some requests their first tokens: feed those, hand what they
        made to ``flush_first``, return the other entries (counted in ``tokens_in`` here)."""
        live = self.live
        n_tokens = 0
        rest: list[tuple[str, Sequence[int], str | None]] = []
        running = False
        for entry in entries:
            rid, token_ids, reason = entry
            req = live.get(rid)
            if req is not None:
                n_tokens += len(token_ids)
                if not req.completion_tokens:
                    self._feed(rid, req, token_ids, reason)
                    continue
                running = True
            rest.append(entry)
        self.counters["tokens_in"] += n_tokens
        self._prune_fresh()
        if running and self.outbox and self.flush_first is not None:
            self.flush_first()  # may end requests (a client gone): they are done, not fed
        return rest

    def _feed_running(self, step: EngineStep | EngineStepPacked,
                      entries: Iterable[tuple[str, Sequence[int], str | None]], *,
                      counted: bool = False) -> None:
        """The hot loop, once per request per engine step: running requests' next tokens
        (``_feed`` inlined for the common case: no finish, no error)."""
        live, done, outbox = self.live, self.done, self.outbox
        feed = self._feed
        n_tokens = 0
        early: list[tuple[str, Sequence[int], str | None]] = []
        for rid, token_ids, reason in entries:
            req = live.get(rid)
            if req is None:
                if rid not in done:
                    early.append((rid, token_ids, reason))
                continue
            n = len(token_ids)
            n_tokens += n
            state = req.state
            if reason is not None or not n or state.is_finished:
                feed(rid, req, token_ids, reason)
                continue
            req.completion_tokens += n
            try:
                deltas = state.feed(token_ids)
            except Exception as e:  # one request's failure must not stop the others
                self._pipeline_failed(rid, e, abort_engine=True)
                continue
            if state.is_finished:  # a stop string matched: the engine must stop too
                self._finish(rid, req, deltas, None)
            elif deltas:
                item = RequestOutput(rid, deltas if len(deltas) == 1 else join_text(deltas))
                box = outbox.get(req.client_id)
                if box is None:
                    outbox[req.client_id] = [item]
                else:
                    box.append(item)
        if not counted:
            self.counters["tokens_in"] += n_tokens  # once per step, not per request
        if early:
            self._buffer_step_early(step, early)

    def _buffer_step_early(self, step: EngineStep | EngineStepPacked,
                           early: list[tuple[str, Sequence[int], str | None]]) -> None:
        by_rid = {o.request_id: o for o in step.outputs} if type(step) is EngineStep else {}
        for rid, token_ids, reason in early:
            out = StepOutput(rid, list(token_ids), reason)
            if rid in by_rid:  # keep its logprob rows (protocol 8)
                out.logprobs, out.top_ids = by_rid[rid].logprobs, by_rid[rid].top_ids
            self._buffer_early(out)

    def _on_step_tracked(self, step: EngineStep | EngineStepPacked) -> None:
        """``on_step`` while some request wants logprobs: their entries go with their text."""
        try:
            rows = lp.step_rows(step)
        except ValueError as e:
            raise ProtocolError(str(e)) from e
        self.counters["engine_steps"] += 1
        live = self.live
        n_tokens = 0
        for rid, token_ids, reason, lp_rows in rows:
            req = live.get(rid)
            if req is None:
                if rid not in self.done:
                    self._buffer_early(lp.early_output(rid, token_ids, reason, lp_rows))
                continue
            n_tokens += len(token_ids)
            if req.track is None:
                self._feed(rid, req, token_ids, reason)
            else:
                self._feed_tracked(rid, req, token_ids, reason, lp_rows)
        self.counters["tokens_in"] += n_tokens

    def _feed_tracked(self, rid: str, req: Request, token_ids: Sequence[int],
                      engine_reason: str | None, rows: lp.Rows | None) -> None:
        """``_feed`` for a request with logprobs: the entries whose bytes reached the text go
        on the output it produced (or a new one)."""
        track = req.track
        assert track is not None
        state = req.state
        if req.rows is not None and token_ids:  # before _feed sends the ids
            _keep_rows(req.rows, len(token_ids), rows)
        if not state.is_finished and token_ids:
            if rows is not None:
                track.feed(token_ids, *rows)
            else:
                missing = track.missing
                track.feed(token_ids, None)
                self.counters["logprobs_missing"] += track.missing - missing
        self._feed(rid, req, token_ids, engine_reason)
        if rid in self.live and not state.is_finished:
            entries = track.release(state.unreleased_bytes())
        elif state.finish_reason is not None and state.finish_reason != "abort":
            entries = track.release(state.unreleased_bytes(), final=True)
            self.tracked.discard(rid)  # failures and aborts: pruned at housekeeping
        else:  # failed or aborted: no more output
            return
        if entries:
            lp.attach(self.outbox.setdefault(req.client_id, []), rid, entries)

    def _feed(self, rid: str, req: Request, token_ids: Sequence[int],
              engine_reason: str | None) -> None:
        """The one path an engine output takes into a live request: new ids, maybe its end.

        The caller counts ``tokens_in``. The common case (a running request's next tokens) is
        first and inlines ``_emit``: this runs once per request per engine step. A request's
        first tokens always give an output, with no deltas when the pipeline holds all their
        text (a tool call's opening, a partial character): the client's stream starts at the
        engine's first output (the HTTP role chunk), as vLLM's server starts it.
        """
        state = req.state
        first = not req.completion_tokens
        req.completion_tokens += len(token_ids)
        ids = req.ids
        if ids is not None:
            ids.extend(token_ids)
        try:
            deltas = state.feed(token_ids) if token_ids else []
            if engine_reason is None and not state.is_finished:
                if deltas or (first and token_ids) or ids:
                    item = RequestOutput(rid, join_text(deltas))
                    if ids:  # (return_token_ids: every step's ids go out with that step)
                        _take_ids(req, item)
                    box = self.outbox.get(req.client_id)
                    if box is None:
                        self.outbox[req.client_id] = [item]
                    else:
                        box.append(item)
                return
            if state.is_finished:  # a stop string matched: the engine must stop too
                if engine_reason is None:
                    self.engine_aborts.append(rid)
                    self.counters["stop_string_aborts"] += 1
            elif engine_reason in PIPELINE_FINISH_REASONS:
                deltas += state.finish(engine_reason)
            else:
                what = (f"the engine reported an error for request {rid!r}" if engine_reason == "error"
                        else f"engine sent unknown finish_reason {engine_reason!r} for request "
                             f"{rid!r}; expected one of {sorted(ENGINE_FINISH_REASONS)}")
                self._fail(rid, what, abort_engine=False, kind="engine_error")
                return
        except Exception as e:  # one request's failure must not stop the others
            # fail it here: feeding the same ids again could duplicate text the pipeline took
            self._pipeline_failed(rid, e, abort_engine=engine_reason is None)
            return
        self._finish(rid, req, deltas, engine_reason, counted=True)

    # -- how a request ends --------------------------------------------------------------------

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
        last = RequestOutput(rid, join_text(deltas), state.finish_reason, state.matched_stop,
                             req.prompt_tokens, req.completion_tokens,
                             cached_tokens=req.cached_tokens)
        if req.ids:
            _take_ids(req, last)
        self._emit(req, last)

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


def _keep_rows(kept: tuple[list[float], list[int], int], n: int, rows: lp.Rows | None) -> None:
    """Keep the logprob rows of a step's ``n`` ids, cut to the request's k (a step's rows are
    as wide as the most any request of it asked); ids that came without rows get
    MISSING_LOGPROB and no alternatives' ids (0)."""
    floats, alts, k = kept
    if rows is None:
        floats.extend([MISSING_LOGPROB] * ((1 + k) * n))
        alts.extend([0] * (k * n))
        return
    step_floats, step_alts, width, row = rows
    for j in range(row, row + n):
        floats.extend(step_floats[j * width:j * width + 1 + k])
        alts.extend(step_alts[j * (width - 1):j * (width - 1) + k])


def _take_ids(req: Request, item: RequestOutput) -> None:
    """Move the request's ids (and their logprob rows) not sent yet onto ``item``."""
    ids = req.ids
    assert ids is not None
    item.ids = GeneratedIds(pack_ids(ids))
    ids.clear()
    rows = req.rows
    if rows is not None:
        item.ids.logprobs = pack_floats(rows[0])
        item.ids.top_ids = pack_ids(rows[1])
        rows[0].clear()
        rows[1].clear()
