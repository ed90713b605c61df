"""The one child launcher: every process the supervisor starts is a :class:`Child` built here.

Owns, for the tokenizer workers, the detokenizer shards, the engine, the HTTP frontends and the
health port alike: the command line (a fresh interpreter; a textproc child gets
``lifecycle.child_flags``, which its entry reads back with ``lifecycle.add_child_arguments``),
how the child says it is ready (:data:`READY_FRAME`, :data:`READY_FILE` or
:data:`READY_SPAWNED`), starting it so that it dies with the supervisor, and stopping a set of
them. The children's own side (log format, parent watch) is ``textproc.lifecycle``.

Used by :mod:`textproc.service.supervisor`, which decides when to start, restart and stop them.
It names the HTTP processes only by their command lines: the service layer never imports
``textproc.http``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from textproc.lifecycle import child_flags
from textproc.ports import frontend_file

__all__ = ["Child", "METRICS_DIR_ENV", "READY_FILE", "READY_FRAME", "READY_SPAWNED", "address_ready",
           "engine_child", "frontend_child", "health_child", "service_child", "spawn",
           "stop_children"]

_log = logging.getLogger("textproc.supervisor")
_LINUX = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG = 1

# How a child says it serves:
READY_FRAME = "frame"  # a Ready frame on the supervisor's control socket (workers, detokenizer
                       # shards; the engine's EngineHello, relayed by each shard as Ready)
READY_FILE = "file"  # its address file in the runtime dir names its pid (HTTP frontends)
# prometheus_client's multi-process mode: the directory of every frontend's value files
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
READY_SPAWNED = "spawned"  # ready once started: the health port reads files, serves nothing else


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the supervisor dies, even by kill -9.

    textproc's own children also watch their parent (``lifecycle.ParentWatch``); this covers
    the engine too, whatever it does.
    """
    import ctypes  # here: it runs in the forked child before exec, the only place it is used

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


@dataclass
class Child:
    """One supervised process: what starts it, how it says it is ready, its current process."""

    role: str
    index: int
    command: list[str]
    ready_by: str = READY_FRAME
    ready_file: Path | None = None  # READY_FILE: the address file that names its pid
    pass_fds: tuple[int, ...] = ()  # inherited by the child (a listening socket it serves)
    env: dict[str, str] = field(default_factory=dict)  # added to the inherited environment
    sharded: bool = False  # one of several detokenizer shards: named with its index
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    fast_failures: int = 0
    restart_at: float | None = None
    ready: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        if self.role == "http":
            return f"http-{self.index}"
        return self.role if self.role != "worker" and not self.sharded else f"{self.role}-{self.index}"


def service_child(role: str, index: int, *, config_json: str, endpoints_json: str,
                  parent_pid: int, sharded: bool = False) -> Child:
    """A tokenizer worker or detokenizer shard: ``python -m textproc.cli _child ROLE INDEX``
    with the service's settings as JSON (its log level among them)."""
    command = [sys.executable, "-m", "textproc.cli", "_child", role, str(index),
               "--config", config_json, "--endpoints", endpoints_json,
               *child_flags(parent_pid=parent_pid)]
    return Child(role, index, command, sharded=sharded)


def engine_child(command: list[str]) -> Child:
    """The engine process (its adapter's command line); it is ready when its EngineHello has
    reached every detokenizer shard."""
    return Child("engine", 0, command)


def frontend_child(index: int, n: int, *, runtime_dir: Path, address: str, listen_fd: int,
                   health_file: Path | None, parent_pid: int, log_level: str,
                   metrics_dir: Path, extra_args: Sequence[str] = ()) -> Child:
    """HTTP frontend ``index`` of ``n`` (``python -m textproc.http``) serving the inherited
    listening socket ``listen_fd``; ready once it has written its address file.
    ``metrics_dir``: the frontends' shared prometheus_client files (its multi-process mode,
    which it reads from the environment). ``extra_args``: the user's ``--http-arg`` flags."""
    ready_file = runtime_dir / frontend_file(index)
    command = [sys.executable, "-m", "textproc.http", "--runtime-dir", str(runtime_dir),
               "--http", address, "--listen-fd", str(listen_fd), "--frontend", f"{index}/{n}",
               "--http-file", str(ready_file)]
    if health_file is not None:
        command += ["--health-file", str(health_file)]
    command += [*child_flags(parent_pid=parent_pid, log_level=log_level), *extra_args]
    return Child("http", index, command, ready_by=READY_FILE, ready_file=ready_file,
                 pass_fds=(listen_fd,), env={METRICS_DIR_ENV: str(metrics_dir)})


def health_child(listen_fd: int, state_files: Sequence[Path], *, parent_pid: int,
                 log_level: str) -> Child:
    """The ``--health`` port's process (``python -m textproc.http.health``) serving the
    inherited ``listen_fd`` from the frontends' ``state_files``."""
    command = [sys.executable, "-m", "textproc.http.health", "--listen-fd", str(listen_fd),
               *(f"--state={path}" for path in state_files),
               *child_flags(parent_pid=parent_pid, log_level=log_level)]
    return Child("health", 0, command, ready_by=READY_SPAWNED, pass_fds=(listen_fd,))


def spawn(child: Child) -> None:
    """Start ``child``'s command (on Linux it gets SIGTERM when this process dies)."""
    child.ready = child.ready_by == READY_SPAWNED
    env = {**os.environ, **child.env} if child.env else None  # None: inherit as it is
    child.process = subprocess.Popen(child.command, stdin=subprocess.DEVNULL,
                                     pass_fds=child.pass_fds, env=env,
                                     preexec_fn=_die_with_parent if _LINUX else None)
    child.started_at = time.monotonic()
    child.restart_at = None


def address_ready(child: Child) -> dict[str, Any] | None:
    """A READY_FILE child's address record once the file names its current process (None: not
    written yet, or the previous process's); marks the child ready."""
    assert child.ready_file is not None and child.process is not None
    try:
        info = json.loads(child.ready_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("pid") != child.process.pid:
        return None
    child.ready = True
    return info


def stop_children(children: list[Child], timeout_s: float, *, engine_timeout_s: float = 0.0) -> None:
    """SIGTERM every live child, then wait: ``timeout_s`` for each, the longer of it and
    ``engine_timeout_s`` for the engine; kill what is still running then."""
    engine_grace_s = max(timeout_s, engine_timeout_s)
    live = [(c.process, engine_grace_s if c.role == "engine" else timeout_s)
            for c in children if c.process is not None and c.process.poll() is None]
    for proc, _ in live:
        proc.terminate()
    started = time.monotonic()
    for proc, grace_s in live:
        try:
            proc.wait(max(0.0, started + grace_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            _log.warning("pid %d did not exit %.1f s after SIGTERM; killing it", proc.pid, grace_s)
            proc.kill()
            proc.wait(5)
