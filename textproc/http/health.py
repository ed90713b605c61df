"""The ``--health`` port: a process of its own answering ``GET /health`` for the frontends.

A load balancer's probe on the API port waits behind every connection in the kernel's accept
queue and every callback in the frontend's event loop (under ``bench/crowd.py``'s 500 leaving
streams, p99 ~1 s); a thread inside the frontend still waits for the interpreter lock the busy
loop holds (p99 243 ms in the same run where a separate process answered in 11 ms). So the
answer comes from ``python -m textproc.http.health``, which shares no lock with any frontend:
each frontend publishes its state (``StatePublisher``: serving or not and why, its loop lag,
when its loop last ran) every 50 ms into a small file, and this process reads those files per
probe. It must not talk to the service or the frontends in any other way.

Owns the state record (``<dd?H`` + reason + CRC32: a torn read is detected and retried) and the
answer: 200 when at least one frontend serves and its loop ran within its ``stale_after_s``
(the frontends share one accept queue, and a stuck one takes no new connections), else 503;
the body lists every frontend.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import struct
import time
import zlib
from pathlib import Path
from typing import Any, Sequence

import msgspec

from textproc.errors import TextprocError
from textproc.http.probe import http_reply
from textproc.lifecycle import ParentWatch, add_child_arguments, setup_logging
from textproc.ports import DEFAULT_HEALTH, listen

__all__ = ["StatePublisher", "read_state", "answer", "main", "STALE_AFTER_S", "pid_alive"]

_log = logging.getLogger("textproc.http.health")
STALE_AFTER_S = 10.0  # a frontend whose loop has not run for this long is not serving
# beat_at (CLOCK_MONOTONIC), loop lag, stale_after_s, pid, serving, reason length
_HEAD = struct.Struct("<dddIBH")
_REASON_BYTES = 240
_RECORD = _HEAD.size + _REASON_BYTES
_READ_TIMEOUT_S = 2.0  # a probe must send its request head within this


def pid_alive(pid: int) -> bool:
    """The process exists and is not a zombie (killed, not yet reaped by its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped by the supervisor) is gone too
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b") ", 1)[-1][:1] != b"Z"
    except OSError:
        return True  # no /proc: the signal test is all there is


class StatePublisher:
    """A frontend's side: ``publish(...)`` rewrites its record in ``path`` (one ``pwrite``)."""

    def __init__(self, path: Path, *, stale_after_s: float = STALE_AFTER_S) -> None:
        self.path = path
        self.stale_after_s = stale_after_s
        self._fd: int | None = None
        self._warned = False

    def publish(self, serving: bool, reason: str, loop_lag_s: float) -> None:
        """Rewrite the record; a file that cannot be written (the runtime dir is going away at
        shutdown) is logged once and skipped: the health port then sees the record go stale."""
        text = reason.encode("utf-8", "replace")[:_REASON_BYTES]
        body = _HEAD.pack(time.monotonic(), loop_lag_s, self.stale_after_s, os.getpid(),
                          serving, len(text)) + text.ljust(_REASON_BYTES, b"\0")
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            os.pwrite(self._fd, body + struct.pack("<I", zlib.crc32(body)), 0)
            self._warned = False
        except OSError as e:
            if not self._warned:
                _log.warning("cannot publish the health state to %s: %s", self.path, e)
            self._warned = True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_state(path: Path) -> dict[str, Any] | None:
    """A frontend's last record: serving, reason, loop_lag_s, loop_age_s, stale_after_s, pid
    and whether that process is alive; None when there is none (not started yet) or it stays
    unreadable."""
    for _ in range(3):  # a read that raced the frontend's write fails its CRC: read again
        try:
            with open(path, "rb") as f:
                data = f.read(_RECORD + 4)
        except OSError:
            return None
        if len(data) < _RECORD + 4:
            return None
        body, crc = data[:_RECORD], struct.unpack("<I", data[_RECORD:])[0]
        if zlib.crc32(body) != crc:
            continue
        beat_at, lag, stale_after, pid, serving, n = _HEAD.unpack_from(body)
        return {"serving": bool(serving), "pid": pid, "alive": pid_alive(pid),
                "reason": body[_HEAD.size:_HEAD.size + n].decode("utf-8", "replace"),
                "loop_lag_s": round(lag, 6), "loop_age_s": round(time.monotonic() - beat_at, 3),
                "stale_after_s": stale_after}
    return None


def answer(paths: Sequence[Path]) -> tuple[int, bytes]:
    """The status and JSON body for a probe now, from the frontends' records."""
    frontends = []
    ok = False
    for index, path in enumerate(paths):
        state = read_state(path)
        entry: dict[str, Any] = {"frontend": index}
        if state is None:
            entry.update(status="unavailable", reason="the frontend has not started")
        elif not state["alive"]:  # killed: its last record would look fine until it is stale
            entry.update(status="unavailable",
                         reason=f"the frontend (pid {state['pid']}) is not running")
        elif not state["serving"]:
            entry.update(status="unavailable", reason=state["reason"])
        elif state["loop_age_s"] > state["stale_after_s"]:
            entry.update(status="unavailable", reason=(
                f"the frontend's event loop has not run for {state['loop_age_s']:.1f} s "
                f"(over {state['stale_after_s']:g} s)"))
        else:
            entry["status"] = "ok"
            if state["reason"]:  # serving, with a part down (an engine rank)
                entry["degraded"] = state["reason"]
            ok = True
        if state is not None:
            entry.update(loop_lag_s=state["loop_lag_s"], loop_age_s=state["loop_age_s"])
        frontends.append(entry)
    body: dict[str, Any] = {"status": "ok" if ok else "unavailable", "frontends": frontends}
    if not ok:
        body["reason"] = "; ".join(f"frontend {e['frontend']}: {e['reason']}" for e in frontends)
    return (200 if ok else 503), msgspec.json.encode(body)


async def _one(paths: Sequence[Path], reader: asyncio.StreamReader,
               writer: asyncio.StreamWriter) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
        method, _, rest = head.partition(b" ")
        path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
        if path == b"/health" and method in (b"GET", b"HEAD"):
            status, body = answer(paths)
        else:
            status, body = 404, b'{"error": "only GET /health is served on this port"}'
        writer.write(http_reply(status, body, head_only=method == b"HEAD"))
        await writer.drain()
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
            OSError):
        pass  # a probe that left or sent no request head: nothing to answer
    finally:
        writer.close()


async def _serve(listener: socket.socket, paths: Sequence[Path], parent: ParentWatch) -> None:
    server = await asyncio.start_server(lambda r, w: _one(paths, r, w), sock=listener)
    _log.info("/health on http://%s:%d for %d frontend(s)", *listener.getsockname()[:2],
              len(paths))
    async with server:
        await parent.wait_gone()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m textproc.http.health (--listen-fd FD | --health HOST:PORT) --state FILE...``"""
    p = argparse.ArgumentParser(prog="python -m textproc.http.health",
                                description="answer GET /health from the frontends' states")
    p.add_argument("--health", default=None, metavar="HOST:PORT",
                   help="listen here (default: --listen-fd)")
    p.add_argument("--listen-fd", type=int, default=None, metavar="FD",
                   help="serve this inherited listening socket (default: none)")
    p.add_argument("--state", action="append", default=[], metavar="FILE",
                   help="a frontend's state file (its --health-file), one per frontend")
    add_child_arguments(p)
    args = p.parse_args(argv)
    setup_logging("health", args.log_level)
    if not args.state:
        p.error("name each frontend's state file with --state")
    try:
        listener = (socket.socket(fileno=args.listen_fd) if args.listen_fd is not None
                    else listen(args.health or DEFAULT_HEALTH, flag="--health"))
    except (TextprocError, OSError) as e:
        _log.error("%s", e)
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor stops children in order
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    asyncio.run(_serve(listener, [Path(s) for s in args.state], ParentWatch(args.parent_pid)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
