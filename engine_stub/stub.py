"""The fake engine: a continuous-batching step loop on ``textproc.engine.EngineLink``.

Owns the loop a real engine runs: per step, take new requests and aborts from the link, admit
waiting requests up to ``max_batch`` (the rest queue, first come first served), spend the step
time, give every running request its next 1..K tokens, and send ONE ``EngineStep``.

Step time: ``--step-busy`` does a FIXED amount of GIL-holding Python work per step, calibrated
at start-up to take ``--step-ms`` on an idle interpreter (like a real engine's scheduler: when
something else in the process wants the interpreter lock, the step gets slower, which is what
the interference benchmark measures); otherwise the step sleeps ``--step-ms`` (GPU-like, lock
released).

Aborts: an aborted request stops at once and is dropped WITHOUT an output (like vLLM: the side
that sent the abort already ended the request); ``--report-aborts`` sends
``(request_id, [], "abort")`` instead. Constraints are enforced through the request's guide
(``IncomingRequest.guide``; see ``engine_stub.scripts``): every constrained request ends with
an output its constraint accepts unless ``max_tokens`` is below the shortest completion; the
stats count constrained requests.

Stats (``--stats-file``, JSON, rewritten atomically every ``--stats-interval-s`` and on exit):
step time p50/p99/mean/max in ms over busy steps, tokens generated per request with its finish
reason and end time (``requests``: {request_id: {"generated": n, "finish_reason": r,
"ended_at": time.monotonic()}}; bounded, oldest
dropped), aborted ids, link counters. Imports only ``textproc.engine`` and, for echo and replay,
``textproc.core.tokenizer``: what a real engine would have.
"""

from __future__ import annotations

from array import array
import logging
import os
import random
import signal
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Sequence

from textproc.engine import EngineLink, IncomingRequest, link_counters, write_stats_file
from textproc.engine.calls import call_args

from engine_stub.settings import StubSettings, parse_args
from engine_stub.scripts import (
    EchoScripts,
    LogprobRow,
    RandomScripts,
    ReplayScripts,
    RequestState,
    ScriptMaker,
    TokenizerLike,
)

__all__ = ["StubEngine", "busy_work", "calibrate_busy", "make_scripts", "main"]

_log = logging.getLogger("engine_stub")

MAX_TRACKED_REQUESTS = 200_000  # per-request stats kept (oldest dropped)
MAX_STEP_SAMPLES = 100_000  # step times kept for percentiles (most recent)
IDLE_WAIT_S = 0.05  # how long an idle loop blocks on engine-in before checking signals/stats
HELD_WAIT_S = 0.005  # how long a step whose every running request is held waits for its index


def busy_work(n: int) -> int:
    """``n`` units of pure-Python work that hold the interpreter lock (about 50 ns each)."""
    acc = 0
    for i in range(n):
        acc = (acc + i * i) & 0xFFFF
    return acc


def calibrate_busy(step_ms: float) -> int:
    """Units of :func:`busy_work` that take ``step_ms`` here now (best of 5 short runs)."""
    if step_ms <= 0:
        return 0
    probe = 20_000
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        busy_work(probe)
        best = min(best, time.perf_counter() - t0)
    return max(1, int(probe * (step_ms / 1000.0) / best))


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


class StubEngine:
    """The step loop. ``run()`` returns when ``stop()`` is called (or SIGTERM/SIGINT in main)."""

    def __init__(self, settings: StubSettings, make_state: ScriptMaker) -> None:
        self.settings = settings
        self.make_state = make_state
        curve = None
        if settings.curve_client_key is not None:
            from textproc.curve import load_client_keys

            curve = load_client_keys(client_secret_file=settings.curve_client_key,
                                     server_public_file=settings.curve_server_key)
        self.link = EngineLink(settings.engine_in, settings.engine_out, curve=curve)
        self.waiting: deque[IncomingRequest] = deque()
        self.running: dict[str, RequestState] = {}
        self.requests: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.aborted: deque[str] = deque(maxlen=MAX_TRACKED_REQUESTS)
        self.step_times_s: deque[float] = deque(maxlen=MAX_STEP_SAMPLES)
        self.steps = 0
        self.tokens_generated = 0
        self.max_running_seen = 0
        self.fast_forwarded = 0  # ids of finished requests appended without sampling (forced_ids)
        # reasoning budgets (textproc.core.constraints.plans.reasoning_budget), from the tokenizer when one is given
        self.budgets: Any = None
        if settings.model_dir:
            from textproc.core.constraints.plans.reasoning_budget import ReasoningBudgets

            tok: Any = None

            def _tok() -> Any:
                nonlocal tok
                if tok is None:
                    tok = _load_tokenizer(settings.model_dir or "")
                return tok

            self.budgets = ReasoningBudgets(lambda i: _tok().token_bytes(i),
                                            lambda text: _tok().encode(text))
        self.constrained_requests = 0
        self.finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.busy_units = 0
        self.backpressure_waits = 0
        self._stop = threading.Event()
        self._started_at = 0.0
        # operators' calls (textproc.engine.calls), as vLLM's engine core answers them: a pause
        # holds new requests in ``waiting`` ("new": running ones go on; "all": nothing steps),
        # sleeping holds the tags vLLM's executor would have put to sleep
        self.paused: str | None = None
        self.sleeping: set[str] = set()
        self.pause_waits: list[tuple[str, int | None]] = []  # "wait" mode: (call id, sleep level)
        self.loras = set(settings.lora_modules)  # adapter names (the stub has no weights)

    def stop(self) -> None:
        self._stop.set()

    # the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        s = self.settings
        self.busy_units = calibrate_busy(s.step_ms) if s.step_busy else 0
        self._started_at = time.time()
        self.link.start()
        next_stats = time.monotonic()  # the first stats file at once, then every interval
        try:
            while not self._stop.is_set():
                if s.stats_file and time.monotonic() >= next_stats:
                    self.write_stats()
                    next_stats = time.monotonic() + s.stats_interval_s
                if self._idle():
                    self.link.wait(IDLE_WAIT_S)
                elif not self.link.writable():
                    # textproc is behind (send queue full): wait rather than drop tokens
                    self.backpressure_waits += 1
                    time.sleep(0.001)
                    continue
                self.step()
        finally:
            if s.stats_file:
                self.write_stats()
            self.link.close()

    def step(self) -> None:
        """One engine step (no-op when nothing is running or waiting)."""
        t0 = time.perf_counter()
        link = self.link
        arrived = link.poll_requests()
        for request in arrived:
            self.waiting.append(request)
            self._track(request.request_id, request.priority, request.lora)
            if request.constraint is not None:
                self.constrained_requests += 1
        if arrived and self.settings.scheduling_policy == "priority" and len(self.waiting) > 1:
            # a stable sort: arrival order within one priority, as vLLM's (priority, arrival)
            self.waiting = deque(sorted(self.waiting, key=_priority))
        outputs: list[tuple[str, list[int], str | None]] = []
        aborts = link.poll_aborts()
        if aborts:
            self._abort(aborts, outputs)
        for call in link.poll_calls():
            self._on_call(call, outputs)
        if self.pause_waits and not self.running:  # "wait": the running requests have ended
            self._end_pause_waits()
        held: list[IncomingRequest] = []  # a reasoning budget needs the whole index
        while self.waiting and len(self.running) < self.settings.max_batch and not self.paused:
            request = self.waiting.popleft()
            guide = request.guide
            budget = self.budgets is not None and "max_reasoning_tokens" in request.sampling
            if guide is not None and budget and (not guide.ready or guide.index.partial):
                held.append(request)
                continue
            state = self.make_state(request)
            if guide is not None:
                if budget:
                    self.budgets.apply(guide, request.sampling)
                state.constrain(request.guide, random.Random(f"{self.settings.seed}:{request.request_id}"))
            self.running[request.request_id] = state
        self.waiting.extendleft(reversed(held))
        if not self.running or self.paused == "all":
            if outputs:
                _send_columns(link, outputs)
            return
        self.max_running_seen = max(self.max_running_seen, len(self.running))
        s = self.settings
        if self.busy_units:
            busy_work(self.busy_units)
        elif s.step_ms > 0:
            time.sleep(s.step_ms / 1000.0)
        k = s.tokens_per_step
        done: list[tuple[str, str]] = []
        rows: dict[int, list[LogprobRow]] = {}  # index into outputs -> its tokens' logprobs
        for request_id, state in self.running.items():
            new, reason = state.take(k)
            if not new and reason is None:
                continue  # held: its partial index has no mask for its state yet
            if state.logprobs is not None and new:
                rows[len(outputs)] = state.logprob_rows(new, state.generated - len(new))
            outputs.append((request_id, new, reason))
            self.tokens_generated += len(new)
            if reason is not None:
                done.append((request_id, reason))
        for request_id, reason in done:
            state = self.running.pop(request_id)
            self.fast_forwarded += state.fast_forwarded
            self.finished[reason] = self.finished.get(reason, 0) + 1
            self._record(request_id, state.generated, reason)
        if not outputs:
            # every running request is held until more of its index arrives: wait for input
            # (the index comes on engine-in) instead of spinning empty steps at the detokenizer
            link.wait(HELD_WAIT_S)
            return
        _send_columns(link, outputs, rows)
        self.steps += 1
        self.step_times_s.append(time.perf_counter() - t0)

    def _abort(self, request_ids: list[str], outputs: list[tuple[str, list[int], str | None]]) -> None:
        gone = set(request_ids)
        for request_id in request_ids:
            state = self.running.pop(request_id, None)
            if state is None:
                continue
            self.aborted.append(request_id)
            self.finished["abort"] += 1
            self._record(request_id, state.generated, "abort")
            if self.settings.report_aborts:
                outputs.append((request_id, [], "abort"))
        if self.waiting and any(r.request_id in gone for r in self.waiting):
            kept: deque[IncomingRequest] = deque()
            for request in self.waiting:
                if request.request_id in gone:
                    self.aborted.append(request.request_id)
                    self.finished["abort"] += 1
                    self._record(request.request_id, 0, "abort")
                    if self.settings.report_aborts:
                        outputs.append((request.request_id, [], "abort"))
                else:
                    kept.append(request)
            self.waiting = kept

    # operators' calls ----------------------------------------------------------------------

    def _idle(self) -> bool:
        """Nothing to step: no requests, or none that a pause lets run."""
        if self.paused == "all" or (self.paused and not self.running):
            return True
        return not self.running and not self.waiting

    def _on_call(self, call: Any, outputs: list[tuple[str, list[int], str | None]]) -> None:
        """One operator's call, answered as vLLM's ``EngineCore`` answers it (the stub has no
        prefix cache and no weights: resetting the one always succeeds, sleeping only stops
        scheduling)."""
        args = call_args(call)
        link = self.link
        match call.method:
            case "reset_prefix_cache":
                link.answer_call(call.call_id, True)
            case "pause_scheduler":
                self._pause(call.call_id, args[0], None, outputs)
            case "sleep":
                self._pause(call.call_id, args[1], args[0], outputs)
            case "resume_scheduler":
                if self.pause_waits:  # vLLM refuses it too
                    link.answer_call(call.call_id, error="resume called while a pause is still "
                                     "waiting for running requests to end; resume once the "
                                     "pause has answered", status=409)
                    return
                self.paused = None
                link.answer_call(call.call_id, None)
            case "wake_up":
                tags = [t for t in (args[0] or []) if t != "scheduling"] if args[0] else None
                if tags is None:
                    self.sleeping.clear()
                else:
                    self.sleeping.difference_update(tags)
                if not self.sleeping and not self.pause_waits:
                    self.paused = None
                link.answer_call(call.call_id, not self.sleeping)
            case "is_sleeping":
                link.answer_call(call.call_id, bool(self.paused or self.sleeping))
            case "load_lora_adapter":
                if args[0] in self.loras:
                    link.answer_call(call.call_id, error=f"The lora adapter {args[0]!r} has "
                                     "already been loaded.", status=400)
                else:
                    self.loras.add(args[0])
                    link.answer_call(call.call_id, True)
            case "unload_lora_adapter":
                if args[0] not in self.loras:
                    link.answer_call(call.call_id, error=f"The lora adapter {args[0]!r} cannot "
                                     "be found.", status=404)
                else:
                    self.loras.discard(args[0])
                    link.answer_call(call.call_id, True)
            case "is_scheduler_paused":
                link.answer_call(call.call_id, self.paused is not None)
            case _:
                link.answer_call(call.call_id, error=f"the stub engine has no method "
                                 f"{call.method!r}", status=501)

    def _pause(self, call_id: str, mode: str, sleep_level: int | None,
               outputs: list[tuple[str, list[int], str | None]]) -> None:
        """vLLM's pause modes: "abort" ends every request (each client hears "abort"), "keep"
        freezes them, "wait" lets the running ones finish and answers then; new requests wait
        in every mode. A sleep (level >= 1) also sleeps the weights and the KV cache."""
        if mode == "abort":
            for request_id, state in self.running.items():
                self._record(request_id, state.generated, "abort")
                outputs.append((request_id, [], "abort"))
            for request in self.waiting:
                self._record(request.request_id, 0, "abort")
                outputs.append((request.request_id, [], "abort"))
            self.finished["abort"] += len(self.running) + len(self.waiting)
            self.running.clear()
            self.waiting.clear()
        self.paused = "all" if mode == "keep" else "new"
        if mode == "wait" and self.running:
            self.pause_waits.append((call_id, sleep_level))
            return
        if sleep_level:
            self.sleeping.update(("weights", "kv_cache"))
        self.link.answer_call(call_id, None)

    def _end_pause_waits(self) -> None:
        waits, self.pause_waits = self.pause_waits, []
        for call_id, sleep_level in waits:
            if sleep_level:
                self.sleeping.update(("weights", "kv_cache"))
            self.link.answer_call(call_id, None)

    # stats -----------------------------------------------------------------------------------

    def _track(self, request_id: str, priority: int = 0, lora: str = "") -> None:
        self.requests[request_id] = {"generated": 0, "finish_reason": None, "priority": priority,
                                     "lora": lora}
        while len(self.requests) > MAX_TRACKED_REQUESTS:
            self.requests.popitem(last=False)

    def _record(self, request_id: str, generated: int, reason: str | None) -> None:
        entry = self.requests.get(request_id)
        if entry is not None:
            entry["generated"] = generated
            entry["finish_reason"] = reason
            # CLOCK_MONOTONIC, the same in every process: bench/crowd.py subtracts when the
            # client left to get how long its abort took to arrive
            entry["ended_at"] = time.monotonic()

    def stats(self) -> dict[str, Any]:
        """Everything the stats file holds (running requests' counts are current)."""
        for request_id, state in self.running.items():
            entry = self.requests.get(request_id)
            if entry is not None:
                entry["generated"] = state.generated
        times = sorted(self.step_times_s)
        link = self.link
        return {
            "pid": os.getpid(),
            "instance_id": link.instance_id,
            "mode": self.settings.mode,
            "started_at": self._started_at,
            "written_at": time.time(),
            "steps": self.steps,
            "fast_forwarded": sum(st.fast_forwarded for st in self.running.values()) + self.fast_forwarded,
            "step_ms": {
                "p50": _percentile(times, 0.50) * 1000,
                "p99": _percentile(times, 0.99) * 1000,
                "mean": (sum(times) / len(times) * 1000) if times else 0.0,
                "max": (times[-1] * 1000) if times else 0.0,
                "samples": len(times),
            },
            "busy_units_per_step": self.busy_units,
            "tokens_generated": self.tokens_generated,
            "running": len(self.running),
            "waiting": len(self.waiting),
            "paused": self.paused,
            "sleeping": sorted(self.sleeping),
            "max_running_seen": self.max_running_seen,
            "finished": dict(self.finished),
            "constrained_requests": self.constrained_requests,
            "backpressure_waits": self.backpressure_waits,
            "aborted": list(self.aborted),
            "link": link_counters(link),
            "requests": self.requests,
        }

    def write_stats(self) -> None:
        path = self.settings.stats_file
        if not path:
            return
        write_stats_file(path, self.stats())


def _priority(request: IncomingRequest) -> int:
    return request.priority


def _load_tokenizer(model_dir: str) -> TokenizerLike:
    from textproc.core.tokenizer import Tokenizer

    return Tokenizer.from_dir(model_dir)


def make_scripts(settings: StubSettings,
                 load_tokenizer: Callable[[str], TokenizerLike] = _load_tokenizer) -> ScriptMaker:
    """The token source for ``settings.mode``."""
    tok = load_tokenizer(settings.model_dir) if settings.model_dir else None
    if settings.mode == "random":
        if tok is not None:
            return RandomScripts(settings.vocab_size or tok.vocab_size, tok.special_ids,
                                 seed=settings.seed)
        assert settings.vocab_size is not None
        return RandomScripts(settings.vocab_size, frozenset(), seed=settings.seed)
    assert tok is not None
    if settings.mode == "replay":
        assert settings.replay_file is not None
        return ReplayScripts(tok, Path(settings.replay_file).read_text(encoding="utf-8"))
    return EchoScripts(tok)


def main(argv: Sequence[str] | None = None, *,
         load_tokenizer: Callable[[str], TokenizerLike] = _load_tokenizer) -> int:
    """Run the stub until SIGTERM/SIGINT; 0 on a clean stop, 1 when start-up fails."""
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s engine_stub[{os.getpid()}] %(levelname)s %(message)s")
    settings = parse_args(argv)
    try:
        scripts = make_scripts(settings, load_tokenizer)
    except Exception as exc:  # noqa: BLE001 - process entry: report and exit non-zero
        _log.error("cannot load the tokenizer from %r: %s", settings.model_dir, exc)
        return 1
    engine = StubEngine(settings, scripts)

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        engine.stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        engine.run()
    except Exception as exc:  # noqa: BLE001 - bad address and the like: one line, exit 1
        _log.error("engine_stub failed: %s", exc)
        return 1
    _log.info("engine_stub stopped after %d steps, %d tokens", engine.steps, engine.tokens_generated)
    return 0


def _send_columns(link: EngineLink, outputs: list[tuple[str, list[int], str | None]],
                  rows: dict[int, list[LogprobRow]] | None = None) -> None:
    """Send one step as columns (``EngineLink.send_step``): cheaper to decode for textproc.

    ``rows``: logprobs of the outputs (by index) whose requests asked; the step's rows are
    ``1 + k`` wide for the largest k, other requests' rows padded with zeros."""
    request_ids: list[str] = []
    token_ids = array("I")
    counts = array("I")
    finished: dict[int, str] = {}
    for index, (request_id, new_ids, reason) in enumerate(outputs):
        request_ids.append(request_id)
        token_ids.extend(new_ids)
        counts.append(len(new_ids))
        if reason is not None:
            finished[index] = reason
    if not rows:
        link.send_step(request_ids, token_ids, counts=counts, finished=finished)
        return
    k = max(len(alts) for lp in rows.values() for _, alts in lp)
    logprobs = array("f")
    top_ids = array("I")
    for index, (_, new_ids, _) in enumerate(outputs):
        lp = rows.get(index)
        for j in range(len(new_ids)):
            value, alts = lp[j] if lp is not None else (0.0, [])
            logprobs.append(value)
            logprobs.extend([alt_lp for _, alt_lp in alts] + [0.0] * (k - len(alts)))
            top_ids.extend([alt for alt, _ in alts] + [0] * (k - len(alts)))
    link.send_step(request_ids, token_ids, counts=counts, finished=finished, logprobs=logprobs,
                   top_ids=top_ids)
