"""A supervised child process: its record, its command line, how it is started so that it
dies with the supervisor, and how a set of them is stopped.

Used by :mod:`textproc.service.supervisor`, which decides when to start, restart and stop them.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Child", "child_command", "spawn", "stop_children"]

_log = logging.getLogger("textproc.supervisor")
_LINUX = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the supervisor dies, even by kill -9.

    textproc's own children also watch ``os.getppid()``; this covers the engine stub and the
    HTTP frontend as well, whatever they do.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def child_command(role: str, index: int, config_json: str, endpoints_json: str,
                  parent_pid: int) -> list[str]:
    """The command line of a textproc child process (a fresh interpreter)."""
    return [sys.executable, "-m", "textproc.cli", "_child", role, str(index),
            "--config", config_json, "--endpoints", endpoints_json,
            "--parent-pid", str(parent_pid)]


@dataclass
class Child:
    role: str
    index: int
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    fast_failures: int = 0
    restart_at: float | None = None
    ready: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    pass_fds: tuple[int, ...] = ()  # inherited by the child (an HTTP frontend's listeners)

    sharded: bool = False  # one of several detokenizer shards: named with its index

    @property
    def name(self) -> str:
        if self.role == "http":
            return f"http-{self.index}"
        return self.role if self.role != "worker" and not self.sharded else f"{self.role}-{self.index}"


def spawn(child: Child) -> None:
    """Start ``child``'s command (on Linux it gets SIGTERM when this process dies)."""
    child.ready = False
    child.process = subprocess.Popen(child.command, stdin=subprocess.DEVNULL,
                                     pass_fds=child.pass_fds,
                                     preexec_fn=_die_with_parent if _LINUX else None)
    child.started_at = time.monotonic()
    child.restart_at = None


def stop_children(children: list[Child], timeout_s: float) -> None:
    live = [c.process for c in children if c.process is not None and c.process.poll() is None]
    for proc in live:
        proc.terminate()
    deadline = time.monotonic() + timeout_s
    for proc in live:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _log.warning("pid %d did not exit %.1f s after SIGTERM; killing it", proc.pid, timeout_s)
            proc.kill()
            proc.wait(5)
