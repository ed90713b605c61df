"""The supervisor (``textproc serve``'s main process): runtime dir, child processes, restarts, events.

Owns the runtime directory (mode 0700: ipc socket files, ``endpoints.json``, ``processes.json``),
the ``control`` PULL socket children announce ``Ready`` on, the ``events`` PUB socket
(``Ready`` / ``ProcessDied``), and every child process: the detokenizer (or its shards,
``--detokenizers N``: one process per shard, each restarted on its own), N tokenizer workers and,
with ``engine="stub"``, ``python -m engine_stub`` (textproc never imports engine_stub). Children
are started as fresh interpreters (``python -m textproc.cli _child ...``, settings as JSON on the
command line: no pickle, nothing inherited). A child that exits is reported on ``events`` and
restarted. ``close()`` terminates children (kill after ``stop_timeout_s``), removes socket files and
the runtime directory it created; it is idempotent and registered with ``weakref.finalize``.
"""

from __future__ import annotations

import dataclasses

import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

import msgspec
import zmq
from prometheus_client.multiprocess import mark_process_dead

from textproc.config import Endpoints, ServeConfig, ipc_endpoints, tcp_endpoints, tcp_port_count
from textproc.errors import InvalidInput, StartupTimeout, TokenizerFileError, WorkerDied
from textproc.lifecycle import ParentWatch
from textproc.placement import pin, text_cpus_for
from textproc.ports import ENGINE_STATS_FILE, HTTP_FILE, check_private_dir, listen, state_file
from textproc.protocol import PROTOCOL_VERSION, ProcessDied, Ready
from textproc.service.children import (
    READY_FILE,
    READY_FRAME,
    Child,
    address_ready,
    engine_child,
    frontend_child,
    health_child,
    service_child,
    spawn,
    stop_children,
)
from textproc.transport import (
    FrameDecoder,
    close_sockets,
    encoder,
    make_socket,
    new_context,
    pick_free_ports,
    remove_ipc_files,
)
from textproc.curve import CURVE_FILES, CurveServerKeys, load_server_keys, start_authenticator
from textproc.launchers import engine_adapter
from textproc.vision.families import load_vision

__all__ = ["Supervisor", "ENDPOINTS_FILE", "PROCESSES_FILE"]

_log = logging.getLogger("textproc.supervisor")
ENDPOINTS_FILE = "endpoints.json"
PROCESSES_FILE = "processes.json"
_POLL_MS = 50
_MAX_RESTART_DELAY_S = 5.0
_PROGRESS_EVERY_S = 5.0  # a "still waiting for ..." line while children start


METRICS_DIR = "prometheus"  # the HTTP frontends' prometheus_client files, in the runtime dir
INDEX_STORE_DIR = "indexes"  # the workers' shared index store in the runtime dir, by default

class Supervisor:
    """Starts, watches and stops one service. ``start()`` returns once every child is Ready."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.runtime_dir: Path | None = None
        self.engine_stats_file: str | None = None  # the engine's stats, read by /health
        self.endpoints: Endpoints | None = None
        self.children: list[Child] = []
        self._created_dir = False
        self._index_store: Path | None = None  # the runtime dir's store (no --constraint-cache-dir)
        self._ctx: zmq.Context[Any] | None = None
        self._sockets: list[zmq.Socket[Any]] = []
        self._control: zmq.Socket[Any] | None = None
        self._events: zmq.Socket[Any] | None = None
        self._stop_requested = False
        self._closed = False
        self._finalizer: weakref.finalize[Any, Supervisor] | None = None
        self._curve: CurveServerKeys | None = None
        self._auth: Any = None  # the ZAP handler (zmq.auth ThreadAuthenticator) with CURVE
        self._ready_decoder: FrameDecoder[Ready] = FrameDecoder(Ready, socket_name="control")
        self._listeners: list[socket.socket] = []  # the HTTP (and health) ports, shared
        self._parent_pid = os.getppid()  # exit_with_parent: who started us
        self._text_cpus: frozenset[int] | None = None  # where text processes go (placement)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        cfg = self.config
        service = cfg.service
        if service.curve_dir is not None:  # bad key files stop the start here, with their name
            self._curve = load_server_keys(service.curve_dir)
            if not engine_adapter(cfg.engine).takes_curve_keys:
                raise InvalidInput(
                    f"--curve-dir with --engine {cfg.engine}: that engine connects without CURVE "
                    "keys; use --engine external with an engine that applies "
                    "textproc.curve.apply_curve_client to its sockets")
        if cfg.runtime_dir is None:
            self.runtime_dir = Path(tempfile.mkdtemp(prefix="textproc-"))
            self._created_dir = True
        else:
            self.runtime_dir = Path(cfg.runtime_dir).absolute()
            self._created_dir = not self.runtime_dir.exists()
            self.runtime_dir.mkdir(parents=True, exist_ok=True)
        check_private_dir(self.runtime_dir)
        self._finalizer = weakref.finalize(self, _cleanup, self.children, self._sockets,
                                           self.runtime_dir, self._created_dir)
        n_shards = service.n_detokenizers
        if cfg.endpoints == "ipc":
            self.endpoints = ipc_endpoints(str(self.runtime_dir), service.n_workers, n_shards)
        else:
            n_ports = tcp_port_count(service.n_workers, n_shards)
            ports = list(range(cfg.tcp_port_base, cfg.tcp_port_base + n_ports)) \
                if cfg.tcp_port_base else pick_free_ports(cfg.tcp_host, n_ports)
            self.endpoints = tcp_endpoints(cfg.tcp_host, ports, service.n_workers, n_shards)
        ep = self.endpoints
        self._ctx = new_context()
        if self._curve is not None:
            self._auth = start_authenticator(self._ctx, self._curve)
        opts: dict[str, Any] = {"max_frame_bytes": service.max_frame_bytes, "hwm": service.hwm,
                                "curve_server": self._curve}
        self._control = make_socket(self._ctx, zmq.PULL, **opts)
        self._events = make_socket(self._ctx, zmq.PUB, **opts)
        self._sockets += [self._control, self._events]
        self._control.bind(ep.control)
        self._events.bind(ep.events)

        if service.constraint_cache_dir is None:  # the workers share their compiles still
            self._index_store = self.runtime_dir / INDEX_STORE_DIR
            service = dataclasses.replace(service, constraint_cache_dir=str(self._index_store))
        config_json = service.to_json()
        endpoints_json = json.dumps(ep.to_dict())
        me = os.getpid()
        for k in range(n_shards):
            self.children.append(service_child(
                "detokenizer", k, config_json=config_json, endpoints_json=endpoints_json,
                parent_pid=me, sharded=n_shards > 1))
        for i in range(service.n_workers):
            self.children.append(service_child(
                "worker", i, config_json=config_json, endpoints_json=endpoints_json,
                parent_pid=me))
        self.engine_stats_file = cfg.stub_stats_file
        brief = False
        if self.engine_stats_file is None and (cfg.data_parallel.engaged or cfg.engine == "vllm"):
            # the front of several engines names its ranks there, for the frontends' /health;
            # every vLLM engine writes its scheduler's gauges there, for their /metrics (only
            # those: its per-request records cost its loop milliseconds per write)
            self.engine_stats_file = str(self.runtime_dir / ENGINE_STATS_FILE)
            brief = True
        engine_command = engine_adapter(cfg.engine).command(
            dataclasses.replace(cfg, stub_stats_file=self.engine_stats_file,
                                engine_stats_brief=brief),
            [d.engine_in for d in ep.detokenizers], [d.engine_out for d in ep.detokenizers])
        if engine_command is not None:
            self.children.append(engine_child(engine_command))
        for child in self.children:
            self._spawn(child)
        self._wait_ready(self.children)
        # the engine is ready (its threads bound): where the text processes go (--text-cpus)
        engine = [c.process.pid for c in self.children if c.role == "engine" and c.process]
        self._text_cpus = text_cpus_for(cfg.text_cpus, engine[0] if engine else None)
        for child in self.children:
            self._place(child)
        self._write_files()
        if cfg.http is not None:  # clients of the running service, so started last
            self._start_http(me)
        if not self.runs_engine:
            _log.info("waiting for an external engine: its EngineLink connects PULL to %s and "
                      "PUSH to %s", [d.engine_in for d in ep.detokenizers],
                      [d.engine_out for d in ep.detokenizers])

    @property
    def runs_engine(self) -> bool:
        """Whether the engine is this service's child (False: the user runs it)."""
        return any(c.role == "engine" for c in self.children)

    def request_stop(self) -> None:
        """Ask ``run()`` to return (called from a signal handler)."""
        self._stop_requested = True

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: object) -> None:
            self.request_stop()

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def run(self, *, duration_s: float | None = None) -> None:
        """Watch children until ``request_stop()`` (SIGINT/SIGTERM) or ``duration_s`` passes,
        or (``exit_with_parent``) the process that started this one is gone."""
        deadline = None if duration_s is None else time.monotonic() + duration_s
        parent = ParentWatch(self._parent_pid if self.config.exit_with_parent else 0)
        while not self._stop_requested and (deadline is None or time.monotonic() < deadline):
            self._poll_once()
            if not parent.alive():  # reparented: our launcher died
                _log.error("the process that started textproc serve (pid %d) is gone; "
                           "stopping", parent.parent_pid)
                return

    def close(self) -> None:
        """Stop every child (terminate, then kill), remove socket files and the runtime dir."""
        if self._closed:
            return
        self._closed = True
        timeout = self.config.service.stop_timeout_s
        stop_children(self.children, timeout,
                      engine_timeout_s=engine_adapter(self.config.engine).stop_timeout_s)
        for listener in self._listeners:
            listener.close()
        close_sockets(self._sockets)
        if self._auth is not None:
            self._auth.stop()
        if self._ctx is not None:
            self._ctx.term()
        if self.endpoints is not None:
            remove_ipc_files(self.endpoints)
        if self.runtime_dir is not None:
            for name in (ENDPOINTS_FILE, PROCESSES_FILE, HTTP_FILE):
                (self.runtime_dir / name).unlink(missing_ok=True)
            for path in self.runtime_dir.glob("http-*"):  # each frontend's files, if left
                path.unlink(missing_ok=True)
            shutil.rmtree(self.runtime_dir / METRICS_DIR, ignore_errors=True)
            if self._index_store is not None:  # the workers' store for this run only
                shutil.rmtree(self._index_store, ignore_errors=True)
            if self._created_dir:
                shutil.rmtree(self.runtime_dir, ignore_errors=True)
        if self._finalizer is not None:
            self._finalizer.detach()

    # -- internals -----------------------------------------------------------------------------

    def _spawn(self, child: Child) -> None:
        spawn(child)
        assert child.process is not None
        self._place(child)
        _log.info("started %s (pid %d)", child.name, child.process.pid)

    def _place(self, child: Child) -> None:
        if self._text_cpus is not None and child.role != "engine" and child.process is not None:
            pin(child.process.pid, self._text_cpus)

    def _wait_ready(self, children: list[Child]) -> None:
        """Wait until each of ``children`` is ready by its own handshake (``children.READY_*``):
        the service's ``startup_timeout_s``, or the engine adapter's own (longer) one while only
        the engine is awaited, with a progress line every ``_PROGRESS_EVERY_S`` so a slow engine
        is never a silent wait. A child that exits meanwhile fails the start, naming it."""
        started = time.monotonic()
        waiting = {(c.role, c.index) for c in children if c.ready_by == READY_FRAME}
        if any(c.role == "engine" for c in children):
            # Ready(role="engine", index=k): the engine's EngineHello reached shard k
            waiting |= {("engine", k) for k in range(self.config.service.n_detokenizers)}
        by_file = [c for c in children if c.ready_by == READY_FILE]
        timeout_s = self.config.service.startup_timeout_s
        engine_timeout_s = max(timeout_s, engine_adapter(self.config.engine).startup_timeout_s)
        next_progress = started + _PROGRESS_EVERY_S
        while waiting or not all(c.ready for c in by_file):
            if self._stop_requested:
                raise StartupTimeout("startup interrupted by a signal")
            for child in children:
                code = child.process.poll() if child.process is not None else None
                if code is not None:
                    raise WorkerDied(f"{child.name} exited with code {code} during startup "
                                     f"(command: {' '.join(child.command[:4])} ...); see its log above")
            now = time.monotonic()
            only_engine = all(role == "engine" for role, _ in waiting) and \
                all(c.ready for c in by_file)
            limit_s = engine_timeout_s if only_engine else timeout_s
            if now >= started + limit_s:
                sharded = self.config.service.n_detokenizers > 1
                names = sorted([f"{r}-{i}" if r == "worker" or sharded else r for r, i in waiting]
                               + [c.name for c in by_file if not c.ready])
                raise StartupTimeout(
                    f"waited {limit_s:.0f} s for Ready from "
                    f"{', '.join(names)}" + (" (the engine's EngineHello reaches the detokenizer "
                    "on engine-out)" if any(r == "engine" for r, _ in waiting) else ""))
            if now >= next_progress:
                still = {r for r, _ in waiting} | {c.role for c in by_file if not c.ready}
                _log.info("starting: %.0f s, still waiting for %s (gives up at %.0f s)",
                          now - started, ", ".join(sorted(still)), limit_s)
                next_progress = now + _PROGRESS_EVERY_S
            for child in by_file:
                if not child.ready:
                    self._check_http_ready(child)
            # an address file is looked for every 20 ms; a Ready frame wakes the poll at once
            wait_ms = 20 if by_file else min(100, (started + limit_s - now) * 1000)
            ready = self._recv_ready(int(wait_ms) + 1)
            if ready is not None:
                waiting.discard((ready.role, ready.index))

    def _start_http(self, me: int) -> None:
        """Bind the HTTP (and health) port once, here: a taken address fails the start at once,
        naming it, and port 0 is one port for all. Start ``http_workers`` frontends sharing the
        socket (the kernel's one accept queue; it outlives any frontend, so a restart loses no
        queued connection) and the health process, and wait until every frontend serves."""
        cfg = self.config
        assert self.runtime_dir is not None and cfg.http is not None
        listener = listen(cfg.http)
        self._listeners.append(listener)
        host, port = listener.getsockname()[:2]
        runtime, level, n = self.runtime_dir, cfg.service.log_level, cfg.http_workers
        engine_stats = [] if self.engine_stats_file is None else [
            "--engine-stats-file", self.engine_stats_file]
        metrics_dir = runtime / METRICS_DIR  # cleaned: counters start at 0 with the service
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(mode=0o700)
        started: list[Child] = []
        if cfg.health is not None:  # its own process: it shares no lock with a frontend
            health = listen(cfg.health, flag="--health")
            self._listeners.append(health)
            started.append(health_child(health.fileno(), [runtime / state_file(i) for i in range(n)],
                                        parent_pid=me, log_level=level))
        for i in range(n):
            started.append(frontend_child(
                i, n, runtime_dir=runtime, address=f"{host}:{port}", listen_fd=listener.fileno(),
                health_file=runtime / state_file(i) if cfg.health else None, parent_pid=me,
                log_level=level, metrics_dir=metrics_dir,
                extra_args=[*cfg.http_args, *engine_stats]))
        for child in started:
            self.children.append(child)
            self._spawn(child)
        # every pid is known now: a frontend answers /health before it writes its address file,
        # so a tool reading processes.json at its first healthy /health must find it listed
        self._write_files()
        self._wait_ready(started)

    def _check_http_ready(self, child: Child) -> bool:
        """Whether frontend ``child`` serves now (its address file names its pid); once every
        frontend does, (re)write processes.json and then http.json (the address, the first
        frontend's pid, every frontend's pid): http.json means every frontend serves."""
        assert self.runtime_dir is not None
        info = address_ready(child)
        if info is None:
            return False
        frontends = [c for c in self.children if c.role == "http"]
        if not all(c.ready for c in frontends):
            return True
        self._write_files()
        info["pids"] = [c.process.pid if c.process is not None else None for c in frontends]
        info["pid"] = info["pids"][0]
        info.pop("frontend", None)
        if len(self._listeners) > 1:  # --health
            h_host, h_port = self._listeners[1].getsockname()[:2]
            info["health"] = {"host": h_host, "port": h_port}
        tmp = self.runtime_dir / (HTTP_FILE + ".tmp")
        tmp.write_bytes(msgspec.json.encode(info))
        os.replace(tmp, self.runtime_dir / HTTP_FILE)
        return True

    def _recv_ready(self, timeout_ms: int) -> Ready | None:
        assert self._control is not None
        if not self._control.poll(timeout_ms):
            return None
        data = self._control.recv(copy=True)
        ready = self._ready_decoder.decode(data, peer="control")
        if ready is None:
            return None
        if ready.protocol_version != PROTOCOL_VERSION:
            _log.error("%s-%d speaks protocol %d, supervisor %d", ready.role, ready.index,
                       ready.protocol_version, PROTOCOL_VERSION)
        for child in self.children:
            if child.role == ready.role and child.index == ready.index:
                child.ready = True
                if ready.pid:
                    child.extra["ready_pid"] = ready.pid
        self._publish(ready)
        return ready

    def _publish(self, frame: Ready | ProcessDied) -> None:
        assert self._events is not None
        try:
            self._events.send(encoder().encode(frame), flags=zmq.NOBLOCK)
        except zmq.Again:
            _log.warning("events socket full; dropped %r", frame)

    def _poll_once(self) -> None:
        if self._recv_ready(_POLL_MS) is not None:
            self._write_files()
        now = time.monotonic()
        for child in self.children:
            if child.ready_by == READY_FILE and not child.ready and child.restart_at is None:
                self._check_http_ready(child)  # a restarted frontend serves again?
            proc = child.process
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self._spawn(child)
                    if child.ready_by != READY_FRAME:  # no Ready frame: the new pid is known now
                        self._write_files()
                continue
            if proc is None:
                continue
            code = proc.poll()
            if code is None:
                continue
            lived = now - child.started_at
            child.fast_failures = child.fast_failures + 1 if lived < 2.0 else 0
            delay = min(_MAX_RESTART_DELAY_S, 0.05 * (2 ** child.fast_failures)) \
                if child.fast_failures else 0.0
            _log.error("%s (pid %d) exited with code %d after %.1f s; restarting in %.2f s",
                       child.name, proc.pid, code, lived, delay)
            self._publish(ProcessDied(child.role, child.index, code, proc.pid))
            if child.role == "http" and self.runtime_dir is not None:
                # its live gauges (requests running, queues) leave the sums; counters stay
                mark_process_dead(proc.pid,  # type: ignore[no-untyped-call]
                                  str(self.runtime_dir / METRICS_DIR))
            child.restart_at = now + delay

    def _write_files(self) -> None:
        assert self.runtime_dir is not None and self.endpoints is not None
        service = self.config.service
        info = {
            "protocol_version": PROTOCOL_VERSION,
            "n_workers": service.n_workers,
            "n_detokenizers": service.n_detokenizers,
            "model_dir": service.model_dir,
            "max_model_len": service.max_model_len,
            "reads_images": _reads_images(service.model_dir),
            "max_frame_bytes": service.max_frame_bytes,
            "hwm": service.hwm,
            "engine": self.config.engine,
            "supervisor_pid": os.getpid(),
            "endpoints": self.endpoints.to_dict(),
        }
        if self._curve is not None and service.curve_dir is not None:
            # local clients (who can read this 0700 directory) use the service's key pair by
            # default; remote ones bring client.key_secret + server.key
            info["curve"] = {
                "server_public_key": self._curve.public.decode(),
                "client_key_file": str(Path(service.curve_dir).absolute() / CURVE_FILES["server_secret"]),
            }
        # "detokenizer" is shard 0's pid (one-shard readers), "detokenizers" every shard's
        pids: dict[str, Any] = {"supervisor": os.getpid(), "workers": {}, "detokenizers": {}}
        for child in self.children:
            pid = child.process.pid if child.process is not None else None
            if child.role == "worker":
                pids["workers"][str(child.index)] = pid
            elif child.role == "http":  # "http": the first frontend's, as before --http-workers
                pids.setdefault("http_frontends", {})[str(child.index)] = pid
                pids.setdefault("http", pid)
            elif child.role == "detokenizer":
                pids["detokenizers"][str(child.index)] = pid
                if child.index == 0:
                    pids["detokenizer"] = pid
            else:
                pids[child.role] = pid
        for name, obj in ((ENDPOINTS_FILE, info), (PROCESSES_FILE, pids)):
            tmp = self.runtime_dir / (name + ".tmp")
            tmp.write_bytes(msgspec.json.encode(obj))
            os.replace(tmp, self.runtime_dir / name)


def _cleanup(children: list[Child], sockets: list[zmq.Socket[Any]], runtime_dir: Path,
             created: bool) -> None:
    """Finalizer: the same as close() when a Supervisor is dropped without it."""
    stop_children(children, 2.0)
    close_sockets(sockets)
    if created:
        shutil.rmtree(runtime_dir, ignore_errors=True)


def _reads_images(model_dir: str) -> bool:
    """Whether the model takes images (the HTTP frontend refuses them before fetching when
    not); a vision model no family declares is the workers' to report at start."""
    try:
        return load_vision(model_dir) is not None
    except TokenizerFileError:
        return False
