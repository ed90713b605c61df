"""The HTTP frontend's ``/health`` listener of its own: a thread with its own socket and loop.

Owns answering ``GET /health`` on the ``--health`` port without the frontend's event loop: a
load balancer's probe on the API port waits behind every connection in the kernel's accept
queue and every callback in the loop (under ``bench/crowd.py``'s 500 leaving streams that was
p99 ~1.1 s). Here the probe has a socket nobody else uses, and a thread that only reads what the
main loop last published (``publish``, from the loop-lag watcher every 50 ms): serving or not,
why not, and when the loop last ran. It must not touch the TextClient, the app or anything
else the main loop owns, and it answers 503 when the loop has not run for ``stale_after_s``
(a frontend whose loop is stuck is not healthy, even if this thread still answers).
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from typing import Any

import msgspec

__all__ = ["HealthResponder", "STALE_AFTER_S"]

STALE_AFTER_S = 10.0  # the loop has not beaten for this long: 503
SWITCH_INTERVAL_S = 0.001
_READ_TIMEOUT_S = 2.0  # a probe must send its request head within this
_MAX_HEAD_BYTES = 8192


class HealthResponder:
    """``GET /health`` (and ``HEAD``) on ``listener`` from a thread; anything else is 404.

    The answer is ``{"status": "ok", "loop_lag_s", "loop_age_s", "pid", "frontend"}`` with 200,
    or ``{"status": "unavailable", "reason", ...}`` with 503 when the last ``publish`` said not
    serving or the main loop has not published for ``stale_after_s``. ``start()`` starts the
    thread; ``close()`` stops it (idempotent).
    """

    def __init__(self, listener: socket.socket, *, frontend: int = 0,
                 stale_after_s: float = STALE_AFTER_S) -> None:
        self.listener = listener
        self.frontend = frontend
        self.stale_after_s = stale_after_s
        # the main loop's last word, replaced whole (one reference assignment: no lock needed)
        self._state: tuple[bool, str, float, float] = (False, "starting", time.monotonic(), 0.0)
        self.answered = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()

    def publish(self, serving: bool, reason: str, loop_lag_s: float) -> None:
        """From the main loop: its current state; also the heartbeat ``stale_after_s`` checks."""
        self._state = (serving, reason, time.monotonic(), loop_lag_s)

    def start(self) -> None:
        """Start the thread; returns once it accepts connections.

        Also lowers the interpreter's switch interval to SWITCH_INTERVAL_S (process-wide): a
        probe takes the interpreter lock a few times, each a wait of up to one interval while
        the busy main loop holds it (5 ms by default). It costs nothing while only one thread
        wants the lock, which is all the time between probes."""
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self.listener.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="health", daemon=True)
        self._thread.start()
        self._started.wait(10)

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)

    def answer(self) -> tuple[int, bytes]:
        """The status and JSON body a probe gets now."""
        serving, reason, beat_at, lag = self._state
        age = time.monotonic() - beat_at
        body: dict[str, Any] = {"status": "ok", "frontend": self.frontend,
                                "loop_lag_s": round(lag, 6), "loop_age_s": round(age, 3)}
        if serving and age > self.stale_after_s:
            serving, reason = False, (f"the frontend's event loop has not run for {age:.1f} s "
                                      f"(over {self.stale_after_s:g} s)")
        if not serving:
            body["status"] = "unavailable"
            body["reason"] = reason
        return (200 if serving else 503), msgspec.json.encode(body)

    def _run(self) -> None:
        # no timers of its own: between probes this thread sleeps in epoll, never taking the
        # interpreter lock from the main loop
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            server = loop.run_until_complete(asyncio.start_server(self._one, sock=self.listener))
            self._started.set()
            loop.run_forever()
            server.close()
        finally:
            self._started.set()
            loop.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            method, _, rest = head[:_MAX_HEAD_BYTES].partition(b" ")
            path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
            if path == b"/health" and method in (b"GET", b"HEAD"):
                status, body = self.answer()
                self.answered += 1
            else:
                status, body = 404, b'{"error": "only GET /health is served on this port"}'
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                         f"content-length: {len(body)}\r\ncache-control: no-store\r\n"
                         "connection: close\r\n\r\n".encode()
                         + (body if method != b"HEAD" else b""))
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                OSError):
            pass  # a probe that left or sent no request head: nothing to answer
        finally:
            writer.close()
