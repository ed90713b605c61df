"""The front of a vLLM deployment: textproc's detokenizer on one side (an ``EngineLink``, as any
engine), vLLM's own engine processes on the other, over vLLM's own wire
(:mod:`textproc.vllm_front.wire`).

Binds, on ``--data-parallel-address``: the handshake socket (``--data-parallel-rpc-port``), and
per rank an input ROUTER and an output PULL (free ports), the addresses it hands each engine in
the handshake. Engines dial in: the ranks of this machine, which it starts itself (one vLLM
headless launcher per rank, :mod:`textproc.vllm_front.launch`, restarted when it dies), and
the ranks of other machines, started there with ``textproc engine --headless`` or vLLM's own
``vllm serve --headless`` command. An engine is used from the moment its ready message
arrives; the link to the detokenizer starts (its ``EngineHello``: the service is ready) with the
first one, and a rank that never comes is named in the log every ``missing_log_s`` and in the
stats file.

Per request (:class:`Front`): a rank by :class:`textproc.vllm_front.routing.PrefixRouter`
(the longest cached prefix unless overloaded, else the least loaded), its compiled constraint
sent to that engine once (a utility call, before the request on the same socket; a request on
a partial index waits here for the whole one), then vLLM's ``EngineCoreRequest``. Outputs go
back to the detokenizer as they come, one step frame per engine step; aborts go to the engine
that holds the request.

Faults: an engine is dead when its launcher exits, it sends ``ENGINE_CORE_DEAD``, or its
connection drops (a ZeroMQ disconnect; heartbeats find a silent network within
``HEARTBEAT_TIMEOUT_MS``) and it does not dial again within ``RECONNECT_GRACE_S`` (until then
it takes no new requests, and its own go on if it comes back: the engine never lost them).
A dead engine's requests end with ``error`` (the log names the engine), the others go on, new
requests go to the living engines, and a restarted (or reconnected) engine takes work again.
Imports nothing of vLLM.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import zmq
import zmq.utils.monitor

from textproc.engine import EngineLink, IncomingRequest, link_counters, write_stats_file
from textproc.engine.calls import call_args
from textproc.transport import new_context
from textproc.vllm_front import wire
from textproc.vllm_front.launch import headless_command, rank_cpu_binding
from textproc.vllm_front.routing import PrefixRouter

__all__ = ["FrontSettings", "Front", "parse_args", "main"]

_log = logging.getLogger("textproc.vllm_front")

HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 5000
RESTART_BACKOFF_S = (1.0, 5.0, 15.0, 30.0)
PROBE_INTERVAL_S = 2.0  # how often a dead engine whose process may live is asked if it is back
RECONNECT_GRACE_S = 10.0  # how long an engine whose connection dropped has to dial again (a busy
# box may take seconds: a transient drop of every connection at once was seen under load)
SUSPECT_PROBE_S = 0.5  # how often it is asked meanwhile
SLOWEST_KEPT = 8  # the slowest first outputs the stats file lists


@dataclass(frozen=True)
class FrontSettings:
    engine_in: tuple[str, ...]
    engine_out: tuple[str, ...]
    model_dir: str
    engine_python: str
    data_parallel_size: int = 1
    data_parallel_size_local: int = -1  # -1: all of them
    address: str = "127.0.0.1"
    rpc_port: int = 0  # 0: a free port
    vllm_args: tuple[str, ...] = ()
    routing: str = "prefix"
    restart: bool = True
    stats_file: str | None = None
    stats_interval_s: float = 0.5
    missing_log_s: float = 30.0
    curve_client_key: str | None = None
    curve_server_key: str | None = None

    @property
    def local_ranks(self) -> int:
        n = self.data_parallel_size_local
        return self.data_parallel_size if n < 0 else n


@dataclass
class Engine:
    """One rank as the front sees it."""

    rank: int
    local: bool
    inputs: Any  # zmq ROUTER
    outputs: Any  # zmq PULL
    monitor: Any
    input_address: str
    output_address: str
    identity: bytes = b""  # its routing id on the sockets: the rank, 2 bytes little-endian
    # waiting (never connected) / connected (loading) / ready / suspect (its connection
    # dropped: it may dial again, RECONNECT_GRACE_S) / dead
    state: str = "waiting"
    suspect_since: float = 0.0
    probed_at: float = 0.0
    calls_before: int = 0  # the last utility call sent before it left ready: answers to later
    # ones (probes) prove the way to it works again
    pending_aborts: list[str] = field(default_factory=list)  # for when a suspect dials again
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    restart_at: float = 0.0
    died: str = ""  # why it last died
    info: dict[str, Any] = field(default_factory=dict)  # its EngineCoreReadyResponse
    indexes: set[str] = field(default_factory=set)  # constraint indexes it holds
    requests: set[str] = field(default_factory=set)  # request ids it runs
    # ids of requests ended here (it was declared dead) that it still streams: aborted once
    # each while the way to it works (an abort sent while it is cut off is lost)
    orphans: set[str] = field(default_factory=set)
    # an operator's pause or sleep in "abort" mode was sent and not answered yet: the aborts
    # vLLM sends meanwhile are that pause's (the clients hear "abort", not "error")
    operator_abort: bool = False
    requests_sent: int = 0
    indexes_sent: int = 0
    aborts_sent: int = 0
    engine_running: int = 0  # the engine's own count, from its last stats
    steps: int = 0
    cached_tokens: int = 0
    prompt_tokens: int = 0
    state_at: float = field(default_factory=time.monotonic)  # when it entered its state

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "state" and getattr(self, "state", value) != value:
            object.__setattr__(self, "state_at", time.monotonic())
        object.__setattr__(self, name, value)


@dataclass
class _Gathering:
    """The ranks' answers to one operator's call."""

    method: str
    left: set[int] = field(default_factory=set)  # utility call ids not answered yet
    results: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def combined(self) -> Any:
        """One answer for all ranks: a state any rank is in (paused, sleeping), a success
        every rank had (a reset, a full wake-up), else None."""
        if self.method in ("is_sleeping", "is_scheduler_paused"):
            return any(bool(r) for r in self.results)
        if self.method in ("reset_prefix_cache", "wake_up"):
            return all(bool(r) for r in self.results)
        return None


class Front:
    """The loop. ``run()`` returns when ``stop()`` is called (SIGTERM/SIGINT in main)."""

    def __init__(self, settings: FrontSettings) -> None:
        self.settings = settings
        self.router = PrefixRouter(settings.data_parallel_size, policy=settings.routing)
        self.engines: list[Engine] = []
        self.owner: dict[str, int] = {}  # request id -> rank
        # request id -> (sent at, prompt blocks the router matched, each rank's load then),
        # until its first output; the slowest first outputs since start, for the stats file
        self.sent: dict[str, tuple[float, int, tuple[int, ...]]] = {}
        self.slowest: list[dict[str, Any]] = []
        self.held: list[IncomingRequest] = []  # waiting for a whole index
        self.calls = 0  # utility call ids
        # operators' calls (textproc.engine.calls), one utility call per ready rank:
        # utility call id -> (EngineCall id, rank); EngineCall id -> its gathering answers
        self.operator_calls: dict[int, tuple[str, int]] = {}
        self.gathering: dict[str, _Gathering] = {}
        self.failed_requests = 0
        self.link: EngineLink | None = None
        self._stop = threading.Event()
        self._context: zmq.Context[Any] | None = None
        self.handshake: Any = None
        self.rpc_port = settings.rpc_port

    # lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        s = self.settings
        ctx = self._context = new_context()
        self.handshake = ctx.socket(zmq.ROUTER)
        self.handshake.setsockopt(zmq.LINGER, 0)
        host = f"tcp://{s.address}"
        if self.rpc_port:
            self.handshake.bind(f"{host}:{self.rpc_port}")
        else:
            self.rpc_port = self.handshake.bind_to_random_port(host)
        for rank in range(s.data_parallel_size):
            inputs = ctx.socket(zmq.ROUTER)
            outputs = ctx.socket(zmq.PULL)
            for sock in (inputs, outputs):
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
                sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
            inputs.setsockopt(zmq.ROUTER_MANDATORY, 1)
            inputs.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a reconnecting engine takes its rank back
            if s.rpc_port:  # fixed: engines that outlive a restart of this process find it again
                in_port, out_port = s.rpc_port + 1 + 2 * rank, s.rpc_port + 2 + 2 * rank
                inputs.bind(f"{host}:{in_port}")
                outputs.bind(f"{host}:{out_port}")
            else:
                in_port = inputs.bind_to_random_port(host)
                out_port = outputs.bind_to_random_port(host)
            monitor = inputs.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            self.engines.append(Engine(rank, rank < s.local_ranks, inputs, outputs, monitor,
                                       f"{host}:{in_port}", f"{host}:{out_port}",
                                       identity=rank.to_bytes(2, "little")))
        _log.info("waiting for %d vLLM engine(s) at %s:%d (%d started here)", s.data_parallel_size,
                  s.address, self.rpc_port, s.local_ranks)
        for engine in self.engines:
            if engine.local:
                self._launch(engine)

    def _launch(self, engine: Engine) -> None:
        s = self.settings
        command = headless_command(s.engine_python, s.model_dir, size=s.data_parallel_size,
                                   rank=engine.rank, address=s.address, rpc_port=self.rpc_port,
                                   args=s.vllm_args)
        env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        bind = env.get("VLLM_CPU_OMP_THREADS_BIND")
        if bind:  # "0|1": each rank its own CPUs, as vLLM's own data-parallel launch gives them
            env["VLLM_CPU_OMP_THREADS_BIND"] = rank_cpu_binding(bind, engine.rank, s.local_ranks)
        _log.info("starting engine rank %d: %s", engine.rank, " ".join(command))
        engine.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, env=env,
                                       start_new_session=True, preexec_fn=_die_with_parent)
        engine.state = "waiting"

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        for engine in self.engines:
            proc = engine.proc
            if proc is not None and proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 15
        for engine in self.engines:
            proc = engine.proc
            if proc is None:
                continue
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
        if self.link is not None:
            self.link.close()
        if self._context is not None:
            for engine in self.engines:
                for sock in (engine.inputs, engine.outputs, engine.monitor):
                    sock.close(0)
            self.handshake.close(0)
            self._context.term()

    # the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        s = self.settings
        poller = zmq.Poller()
        poller.register(self.handshake, zmq.POLLIN)
        by_socket: dict[Any, tuple[str, Engine]] = {}
        for engine in self.engines:
            for kind, sock in (("in", engine.inputs), ("out", engine.outputs), ("mon", engine.monitor)):
                poller.register(sock, zmq.POLLIN)
                by_socket[sock] = (kind, engine)
        next_check = next_stats = next_probe = time.monotonic()
        next_missing = time.monotonic() + s.missing_log_s
        link_registered = False
        while not self._stop.is_set():
            if self.link is not None and not link_registered:
                for sock in self.link.input_sockets:
                    poller.register(sock, zmq.POLLIN)
                link_registered = True
            timeout = 2 if self.held else 100
            for sock, _ in poller.poll(timeout):
                if sock is self.handshake:
                    self._on_handshake()
                    continue
                entry = by_socket.get(sock)
                if entry is None:
                    continue  # the link's: drained below
                kind, engine = entry
                try:
                    if kind == "out":
                        self._on_outputs(engine)
                    elif kind == "in":
                        self._on_ready(engine)
                    else:
                        self._on_monitor(engine)
                except Exception:  # noqa: BLE001 - one bad frame must not stop every engine
                    _log.exception("engine rank %d: a frame textproc could not handle", engine.rank)
            if self.link is not None:
                self._take_requests()
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 0.2
                self._check_procs(now)
                self._check_suspects(now)
            if now >= next_probe:
                next_probe = now + PROBE_INTERVAL_S
                self._probe_dead()
            if s.stats_file and now >= next_stats:
                next_stats = now + s.stats_interval_s
                write_stats_file(s.stats_file, self.stats())
            if now >= next_missing:
                next_missing = now + s.missing_log_s
                missing = [e for e in self.engines if e.state == "waiting"]
                if missing:
                    _log.warning("engine rank(s) %s have not connected to %s:%d for %s s",
                                 [e.rank for e in missing], s.address, self.rpc_port,
                                 "/".join(f"{now - e.state_at:.0f}" for e in missing))

    # engines -----------------------------------------------------------------------------

    def _on_handshake(self) -> None:
        identity, data = self.handshake.recv_multipart()
        rank = int.from_bytes(identity, "little")
        try:
            message = wire.decode_handshake(data)
        except ValueError as exc:
            _log.error("handshake from rank %d: %s", rank, exc)
            return
        if not 0 <= rank < len(self.engines):
            _log.error("an engine of rank %d dialled in; this deployment has ranks 0..%d "
                       "(--data-parallel-size %d)", rank, len(self.engines) - 1, len(self.engines))
            return
        engine = self.engines[rank]
        status = message.get("status")
        if status == "HELLO":
            if engine.state in ("ready", "suspect"):  # a new process: the old one's requests are lost
                self._engine_died(engine, "started again while it was serving", end_launcher=False)
            engine.identity = identity
            self.handshake.send_multipart(
                [identity, wire.handshake_reply([engine.input_address], [engine.output_address])])
            engine.state = "connected"
            _log.info("engine rank %d connected (%s); loading", rank,
                      "headless" if message.get("headless") else "local")
        elif status == "READY":
            _log.info("engine rank %d loaded its model", rank)
        else:
            _log.error("engine rank %d sent handshake status %r", rank, status)

    def _on_ready(self, engine: Engine) -> None:
        while True:
            try:
                identity, data = engine.inputs.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                info = wire.decode_ready(data)
            except ValueError as exc:
                _log.error("engine rank %d: %s", engine.rank, exc)
                continue
            engine.identity = identity
            engine.info = info
            engine.state = "ready"
            engine.indexes.clear()
            self.router.ready(engine.rank, block_size=info.get("block_size"),
                              capacity_blocks=info.get("num_gpu_blocks"))
            _log.info("engine rank %d ready: vLLM %s, max_model_len %s, %s KV blocks of %s tokens",
                      engine.rank, info.get("vllm_version"), info.get("max_model_len"),
                      info.get("num_gpu_blocks"), info.get("block_size"))
            if str(info.get("vllm_version", "")).split("+")[0] != wire.VLLM_VERSION:
                _log.warning("engine rank %d runs vLLM %s; textproc speaks the wire of %s",
                             engine.rank, info.get("vllm_version"), wire.VLLM_VERSION)
            if self.link is None:
                self._start_link()

    def _start_link(self) -> None:
        s = self.settings
        curve = None
        if s.curve_client_key is not None:
            # here: textproc.curve loads zmq.auth, which a service without keys never needs
            from textproc.curve import load_client_keys

            curve = load_client_keys(client_secret_file=s.curve_client_key,
                                     server_public_file=s.curve_server_key)
        self.link = EngineLink(s.engine_in, s.engine_out, curve=curve)
        self.link.start()

    def _on_monitor(self, engine: Engine) -> None:
        try:
            event = zmq.utils.monitor.recv_monitor_message(engine.monitor, zmq.NOBLOCK)
        except zmq.Again:
            return
        if event["event"] != zmq.EVENT_DISCONNECTED:
            return
        if engine.state == "ready":
            engine.state = "suspect"
            engine.calls_before = self.calls
            engine.suspect_since = time.monotonic()
            engine.probed_at = 0.0
            self.router.pause(engine.rank)
            _log.warning("engine rank %d: its connection dropped; waiting %.0f s for it to dial "
                         "again (its %d request(s) wait too)", engine.rank, RECONNECT_GRACE_S,
                         len(engine.requests))
        elif engine.state == "connected":
            self._engine_died(engine, "its connection dropped while it loaded")

    def _check_suspects(self, now: float) -> None:
        for engine in self.engines:
            if engine.state != "suspect":
                continue
            if now - engine.suspect_since > RECONNECT_GRACE_S:
                self._engine_died(engine, f"its connection dropped and it did not dial again "
                                          f"within {RECONNECT_GRACE_S:.0f} s")
            elif now - engine.probed_at >= SUSPECT_PROBE_S:
                engine.probed_at = now
                self._probe(engine)

    def _check_procs(self, now: float) -> None:
        for engine in self.engines:
            proc = engine.proc
            code = proc.poll() if proc is not None else None
            if code is not None and engine.restart_at == 0.0:
                engine.proc = None
                if engine.state == "dead":  # its core went first; the front ended the launcher
                    _log.info("engine rank %d: its launcher exited with %s", engine.rank, code)
                else:
                    self._engine_died(engine, f"its process exited with {code}")
                if self.settings.restart and not self._stop.is_set():
                    delay = RESTART_BACKOFF_S[min(engine.restarts, len(RESTART_BACKOFF_S) - 1)]
                    engine.restart_at = now + delay
            if engine.proc is None and engine.restart_at and now >= engine.restart_at:
                engine.restart_at = 0.0
                engine.restarts += 1
                self._launch(engine)

    def _probe_dead(self) -> None:
        """Ask each engine that dropped off the network (its process not ours to see, or
        alive) whether it is back: a cheap utility call of vLLM's own; its answer revives it."""
        for engine in self.engines:
            if engine.state not in ("dead", "waiting") or engine.restart_at:
                continue
            if engine.proc is not None and engine.proc.poll() is not None:
                continue
            self._probe(engine)

    def _probe(self, engine: Engine) -> None:
        self.calls += 1
        try:
            engine.inputs.send_multipart([engine.identity, wire.UTILITY, wire.utility_call(
                self.calls, "is_sleeping", [])], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # not connected (yet)

    def _engine_died(self, engine: Engine, why: str, *, end_launcher: bool = True) -> None:
        lost = sorted(engine.requests)
        if engine.state != "suspect":
            engine.calls_before = self.calls
        engine.state = "dead"
        engine.died = why
        engine.requests.clear()
        engine.indexes.clear()
        engine.orphans.clear()
        engine.pending_aborts.clear()
        self.router.gone(engine.rank)
        _log.error("engine rank %d is gone (%s); ending its %d request(s) with an error",
                   engine.rank, why, len(lost))
        if lost and self.link is not None:
            for rid in lost:
                self.owner.pop(rid, None)
                self.sent.pop(rid, None)
            self.failed_requests += len(lost)
            self.link.send_outputs([(rid, [], "error") for rid in lost])
        if end_launcher and engine.proc is not None and engine.proc.poll() is None:
            # a local rank whose core failed or went silent: its launcher would notice late
            # (or never); end it now, and it is started afresh
            _kill_group(engine.proc)

    def _on_outputs(self, engine: Engine) -> None:
        link = self.link
        for _ in range(64):
            try:
                frames = engine.outputs.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            if frames[0] == wire.ENGINE_CORE_DEAD:
                self._engine_died(engine, "vLLM reported a fatal error (ENGINE_CORE_DEAD)")
                continue
            try:
                step = wire.decode_outputs(frames)
            except (ValueError, TypeError) as exc:
                _log.error("engine rank %d sent an output frame textproc cannot read: %s",
                           engine.rank, str(exc)[:300])
                continue
            answer = step.utility_output
            if answer is not None and isinstance(answer[0], int) \
                    and answer[0] in self.operator_calls:
                self._operator_answer(answer)
            if (engine.state in ("dead", "waiting", "suspect") and answer is not None
                    and isinstance(answer[0], int) and answer[0] > engine.calls_before):
                # the answer to a probe, which went out on its input socket: reconnected after
                # a network loss, or serving since before this process started (its ranks dial
                # fixed ports); both ways work again (other frames prove only the way back)
                if engine.state == "suspect":
                    _log.info("engine rank %d dialled again; its %d request(s) go on",
                              engine.rank, len(engine.requests))
                else:
                    _log.info("engine rank %d is back", engine.rank)
                engine.state = "ready"
                engine.orphans.clear()  # aborts sent while it was cut off never reached it
                self.router.ready(engine.rank)
                if engine.pending_aborts:
                    aborts, engine.pending_aborts = engine.pending_aborts, []
                    self._send(engine, wire.ABORT, wire.abort_requests(aborts))
                    engine.aborts_sent += len(aborts)
                if self.link is None:
                    self._start_link()
            stats = step.scheduler_stats
            if isinstance(stats, dict):
                engine.engine_running = int(stats.get("num_running_reqs") or 0)
                self.router.stats(engine.rank, waiting=int(stats.get("num_waiting_reqs") or 0),
                                  kv_usage=float(stats.get("kv_cache_usage") or 0.0))
            if step.utility_output is not None and step.utility_output[1]:
                _log.error("engine rank %d: %s", engine.rank, step.utility_output[1])
            if not step.outputs or link is None:
                continue
            engine.steps += 1
            entries: list[Any] = []
            cached: dict[str, int] = {}  # the usage's cached_tokens, with first outputs
            orphans: list[str] = []
            for out in step.outputs:
                rid = out.request_id
                if rid not in engine.requests:
                    # ended here already (its engine was declared dead)
                    if out.finish_reason is not None:
                        engine.orphans.discard(rid)
                    elif rid not in engine.orphans:
                        engine.orphans.add(rid)
                        orphans.append(rid)
                    continue
                reason = None if out.finish_reason is None else wire.FINISH_REASONS[out.finish_reason]
                prefill = out.prefill_stats
                if isinstance(prefill, dict):
                    engine.prompt_tokens += int(prefill.get("num_prompt_tokens") or 0)
                    cached[rid] = int(prefill.get("num_cached_tokens") or 0)
                    engine.cached_tokens += cached[rid]
                sent = self.sent.pop(rid, None)
                if sent is not None:
                    self._first_output(rid, engine, sent, prefill)
                if reason is not None:
                    engine.requests.discard(rid)
                    self.owner.pop(rid, None)
                    self.sent.pop(rid, None)
                    self.router.finished(engine.rank)
                    if reason == "abort" and not engine.operator_abort:
                        # not textproc's (those left engine.requests) nor an operator's pause:
                        # vLLM's own, an engine shutting down refusing it; the client must
                        # hear of it
                        reason = "error"
                if out.new_logprobs is not None and out.new_token_ids:
                    logprobs, top_ids = wire.logprob_rows(out.new_logprobs)
                    entries.append((rid, out.new_token_ids, reason, logprobs, top_ids))
                else:
                    entries.append((rid, out.new_token_ids, reason))
            if entries:
                link.send_outputs(entries, cached_tokens=cached)
            if orphans:
                self._send(engine, wire.ABORT, wire.abort_requests(orphans))
                engine.aborts_sent += len(orphans)

    # requests ----------------------------------------------------------------------------

    def _take_requests(self) -> None:
        link = self.link
        assert link is not None
        requests = link.poll_requests()
        if self.held:
            waiting, self.held = self.held, []
            requests = [*waiting, *requests]
        refused: list[Any] = []
        # only engines that may dial again: a request waits for them (at most their grace)
        wait = (not any(e.state == "ready" for e in self.engines)
                and any(e.state == "suspect" for e in self.engines))
        for request in requests:
            guide = request.guide
            if wait or (guide is not None and (not guide.ready or guide.index.partial)):
                self.held.append(request)  # an engine, or its whole index, comes later
                continue
            problem = self._add(request)
            if problem:
                _log.error("request %r: %s", request.request_id, problem)
                refused.append((request.request_id, [], "error"))
        aborts = link.poll_aborts()
        if aborts:
            gone = set(aborts)
            self.held = [r for r in self.held if r.request_id not in gone]
            by_rank: dict[int, list[str]] = {}
            for rid in aborts:
                self.sent.pop(rid, None)
                rank = self.owner.pop(rid, None)
                if rank is not None:
                    by_rank.setdefault(rank, []).append(rid)
            for rank, rids in by_rank.items():
                engine = self.engines[rank]
                engine.requests.difference_update(rids)
                for _ in rids:
                    self.router.finished(rank)
                if engine.state == "ready":
                    self._send(engine, wire.ABORT, wire.abort_requests(rids))
                    engine.aborts_sent += len(rids)
                elif engine.state == "suspect":
                    engine.pending_aborts.extend(rids)
        if refused:
            self.failed_requests += len(refused)
            link.send_outputs(refused)
        for call in link.poll_calls():
            self._operator_call(call)

    def _operator_call(self, call: Any) -> None:
        """An operator's call to every ready rank, as vLLM's own utility call (vLLM's
        ``EngineCore`` method of that name); answered once every rank has answered."""
        link = self.link
        assert link is not None
        if call.method in ("load_lora_adapter", "unload_lora_adapter"):
            link.answer_call(call.call_id, error="vLLM's own engine processes get no LoRA "
                             "adapters from textproc yet", status=501)
            return
        ready = [e for e in self.engines if e.state == "ready"]
        if not ready:
            link.answer_call(call.call_id, error="no vLLM engine is ready for "
                             f"{call.method!r}", status=503)
            return
        gathering = _Gathering(call.method)
        args = call_args(call)
        aborting = call.method in ("pause_scheduler", "sleep") and "abort" in args
        for engine in ready:
            self.calls += 1
            if self._send(engine, wire.UTILITY, wire.utility_call(self.calls, call.method, args)):
                self.operator_calls[self.calls] = (call.call_id, engine.rank)
                gathering.left.add(self.calls)
                engine.operator_abort = engine.operator_abort or aborting
            else:
                gathering.errors.append(f"engine rank {engine.rank} is unreachable")
        if gathering.left:
            self.gathering[call.call_id] = gathering
        else:
            link.answer_call(call.call_id, error="; ".join(gathering.errors), status=503)

    def _operator_answer(self, answer: list[Any]) -> None:
        """One rank's answer to an operator's call; the call's answer once all are in."""
        call_id, rank = self.operator_calls.pop(answer[0])
        self.engines[rank].operator_abort = False  # its pause's aborts came before this
        gathering = self.gathering.get(call_id)
        if gathering is None:
            return
        gathering.left.discard(answer[0])
        if answer[1]:
            gathering.errors.append(f"engine rank {rank}: {answer[1]}")
        else:
            result = answer[2] if len(answer) > 2 else None
            # vLLM's UtilityResult on the wire: (type info, value); the type info is None
            # unless its insecure serialization is on
            gathering.results.append(result[1] if isinstance(result, list) and len(result) == 2
                                     else result)
        if gathering.left or self.link is None:
            return
        del self.gathering[call_id]
        if gathering.errors:
            self.link.answer_call(call_id, error="; ".join(gathering.errors), status=500)
        else:
            self.link.answer_call(call_id, gathering.combined())

    def _add(self, request: IncomingRequest) -> str:
        """Send one request to an engine; what went wrong, or ''."""
        if request.images:
            # TODO(images): EngineCoreRequest.mm_features (vLLM's MultiModalFeatureSpec per
            # image) from EngineImage; until then a request with images is refused, not run blind
            return ("this vLLM engine path does not carry images yet; the request has "
                    f"{len(request.images)}")
        rank, keys = self.router.choose(request.prompt_token_ids)
        loads = tuple(e.running for e in self.router.engines)
        if rank < 0:
            states = ", ".join(f"rank {e.rank}: {e.state}{' (' + e.died + ')' if e.died else ''}"
                               for e in self.engines)
            return f"no vLLM engine is ready ({states})"
        engine = self.engines[rank]
        if request.guide is not None and request.index_key not in engine.indexes:
            self.calls += 1
            tables = request.guide.index.pack()
            if not self._send(engine, wire.UTILITY, wire.utility_call(
                    self.calls, "textproc_put_index", [request.index_key, tables])):
                return f"engine rank {rank} is unreachable"
            engine.indexes.add(request.index_key)
            engine.indexes_sent += 1
        payload = wire.add_request(request.request_id, request.prompt_token_ids,
                                   wire.sampling_params(request), time.time(),
                                   priority=request.priority)
        if not self._send(engine, wire.ADD, payload):
            return f"engine rank {rank} is unreachable"
        self.router.routed(rank, keys)
        self.sent[request.request_id] = (time.monotonic(), self.router.last_match, loads)
        engine.requests.add(request.request_id)
        engine.requests_sent += 1
        self.owner[request.request_id] = rank
        return ""

    def _first_output(self, rid: str, engine: Engine, sent: tuple[float, int, tuple[int, ...]],
                      prefill: Any) -> None:
        """Keep the request among the slowest first outputs (from its ADD to its first output
        here: the engine's queue and prefill, and this loop) if it is one."""
        seconds = time.monotonic() - sent[0]
        if len(self.slowest) >= SLOWEST_KEPT and seconds <= self.slowest[-1]["first_output_s"]:
            return
        prefill = prefill if isinstance(prefill, dict) else {}
        self.slowest.append({
            "request_id": rid, "rank": engine.rank, "first_output_s": round(seconds, 3),
            "prompt_tokens": int(prefill.get("num_prompt_tokens") or 0),
            "cached_tokens": int(prefill.get("num_cached_tokens") or 0),
            "matched_blocks": sent[1], "running_at_send": list(sent[2]),
            "at": round(time.time(), 3)})
        self.slowest.sort(key=lambda r: -r["first_output_s"])
        del self.slowest[SLOWEST_KEPT:]

    def _send(self, engine: Engine, kind: bytes, payload: bytes) -> bool:
        try:
            engine.inputs.send_multipart([engine.identity, kind, payload], zmq.NOBLOCK, copy=False)
            return True
        except zmq.ZMQError as exc:  # EHOSTUNREACH: gone; EAGAIN: its queue is full
            if engine.state == "ready":
                _log.error("engine rank %d: cannot send (%s)", engine.rank, exc)
                self._engine_died(engine, f"sending to it failed: {exc}")
            return False

    # stats -------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        router = self.router
        now = time.monotonic()
        return {
            "pid": os.getpid(),
            "engine": "vllm",
            "front": True,
            "written_at": time.time(),
            "handshake": f"{self.settings.address}:{self.rpc_port}",
            "routing": router.policy,
            "failed_requests": self.failed_requests,
            "held": len(self.held),
            "prefix_blocks_routed": router.routed_blocks,
            "prefix_blocks_matched": router.matched_blocks,
            "slowest_first_outputs": self.slowest,
            "engines": [{
                "rank": e.rank, "local": e.local, "state": e.state, "died": e.died,
                "state_for_s": round(now - e.state_at, 1),
                "restarts": e.restarts, "running": len(e.requests), "requests_sent": e.requests_sent,
                "indexes_sent": e.indexes_sent, "aborts_sent": e.aborts_sent,
                "engine_running": e.engine_running,
                "steps": e.steps, "prompt_tokens": e.prompt_tokens, "cached_tokens": e.cached_tokens,
                "waiting": router.engines[e.rank].waiting,
                "kv_usage": router.engines[e.rank].kv_usage,
                "pid": e.proc.pid if e.proc is not None else None,
            } for e in self.engines],
            "link": link_counters(self.link) if self.link is not None else {},
        }


def _die_with_parent() -> None:
    """In a launched engine, before it runs: SIGTERM when this process dies, however it dies
    (Linux's parent-death signal; elsewhere nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def parse_args(argv: Sequence[str] | None = None) -> FrontSettings:
    p = argparse.ArgumentParser(prog="python -m textproc.vllm_front",
                                description="textproc in front of vLLM's own engine processes, over vLLM's wire.")
    p.add_argument("--engine-in", required=True, action="append",
                   help="textproc's engine-in address; once per detokenizer shard, in order")
    p.add_argument("--engine-out", required=True, action="append")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--engine-python", required=True, help="the Python of vLLM's environment")
    p.add_argument("--data-parallel-size", type=int, default=1)
    p.add_argument("--data-parallel-size-local", type=int, default=-1)
    p.add_argument("--data-parallel-address", default="127.0.0.1")
    p.add_argument("--data-parallel-rpc-port", type=int, default=0)
    p.add_argument("--routing", default="prefix", choices=("prefix", "round_robin", "least_loaded"))
    p.add_argument("--no-restart", action="store_true")
    p.add_argument("--stats-file")
    p.add_argument("--curve-client-key", metavar="FILE")
    p.add_argument("--curve-server-key", metavar="FILE")
    p.add_argument("--vllm-arg", action="append", default=[], help="one more `vllm serve` flag")
    a = p.parse_args(argv)
    if a.data_parallel_size < 1 or not -1 <= a.data_parallel_size_local <= a.data_parallel_size:
        p.error("--data-parallel-size must be >= 1 and --data-parallel-size-local 0..size")
    return FrontSettings(
        engine_in=tuple(a.engine_in), engine_out=tuple(a.engine_out), model_dir=a.model_dir,
        engine_python=a.engine_python, data_parallel_size=a.data_parallel_size,
        data_parallel_size_local=a.data_parallel_size_local, address=a.data_parallel_address,
        rpc_port=a.data_parallel_rpc_port, vllm_args=tuple(a.vllm_arg), routing=a.routing,
        restart=not a.no_restart, stats_file=a.stats_file, curve_client_key=a.curve_client_key,
        curve_server_key=a.curve_server_key)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s vllm-front[{os.getpid()}] %(levelname)s %(message)s")
    settings = parse_args(argv)
    front = Front(settings)

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        front.stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    front.start()
    try:
        front.run()
    finally:
        front.close()
    return 0
