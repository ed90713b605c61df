"""Accepting connections in batches: what uvicorn's server does on uvloop, minus one accept per
loop iteration.

Owns the listening socket's read side in a frontend. libuv (uvloop's core) accepts ONE
connection per event-loop iteration since libuv 1.45 (libuv/libuv#3696); asyncio's own loop
accepts up to the backlog per readiness. With 500 streams connecting at once a busy frontend
then took 500 iterations to accept them all, and a ``/health`` probe queued behind them in the
kernel's accept queue waited 0.6-1.2 s (``bench/crowd.py``, on an idle box: the wait was all
between the probe's ``connect()`` returning and ``connection_made``).

:class:`BatchAcceptor` takes every waiting connection at once (up to ``BATCH`` per readiness),
and hands them to the loop (``connect_accepted_socket``: uvicorn's protocol, its parse, the
request) at most ``HAND_PER_TURN`` per loop iteration, newest first. Taking them at once gets
a probe out of the kernel's queue; handing them over in slices keeps each iteration short
(setting up a connection costs ~0.15-0.3 ms of CPU, 500 at once held the loop 60-90 ms); newest
first lets a connection that arrives during a burst (a probe, a short request) start before the
burst's backlog, which is served in the next iterations anyway. At most ``MAX_PENDING``
connections wait for their hand-over: past it the acceptor stops reading the listening socket,
so the kernel's backlog applies, until half have been handed over. Measured (500 streams x 5
rounds, 2-core box, load 1.4-2.6): API-port ``/health`` p99 646-1,212 ms with uvicorn's own
server, 118-192 ms taking all at once and handing all over at once, 110-226 ms handing over
64 per iteration oldest first, 65-160 ms newest first. With ``answer`` (the frontend passes
:func:`textproc.http.probe.reply`'s ``/health``), a connection whose first bytes are already a
whole request that ``answer`` can reply to is answered and closed where it is accepted, never
handed over: a probe then waits for one loop iteration, not three or four.
:class:`BatchAcceptingServer` is uvicorn's server listening through it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Any

import uvicorn

from textproc.http.probe import PEEK_BYTES

__all__ = ["BatchAcceptor", "BatchAcceptingServer", "BATCH", "HAND_PER_TURN", "MAX_PENDING",
           "RETRY_AFTER_S"]

_log = logging.getLogger("textproc.http")
BATCH = 512  # connections accepted per readiness of the listening socket
HAND_PER_TURN = 64  # accepted connections handed to the loop per iteration
MAX_PENDING = 2048  # accepted, not yet handed over: past it, stop accepting
RETRY_AFTER_S = 1.0  # out of file descriptors or memory: stop accepting this long (as asyncio)
_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class BatchAcceptor:
    """Accepts connections on ``sock`` (listening) in batches and gives each to
    ``protocol_factory`` on ``loop``, a few per loop iteration, newest first. ``answer``
    (optional) gets the first bytes a new connection has sent (peeked, possibly none) and
    returns the whole reply to send before closing it, or None to hand it over. Has what
    uvicorn needs of an ``asyncio.Server``: ``close()``, ``wait_closed()``, ``sockets``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 protocol_factory: Callable[[], asyncio.Protocol], *, batch: int = BATCH,
                 per_turn: int = HAND_PER_TURN, max_pending: int = MAX_PENDING,
                 answer: Callable[[bytes], bytes | None] | None = None) -> None:
        self.loop = loop
        self.sock = sock
        self.protocol_factory = protocol_factory
        self.answer = answer
        self.answered = 0  # connections answered and closed on accept (never handed over)
        self.batch = batch
        self.per_turn = per_turn
        self.max_pending = max_pending
        self.accepted = 0
        self.errors = 0  # accept or hand-over failures (resource limits, aborted handshakes)
        self._closed = False
        self._reading = False  # the listening socket is registered with the loop
        self._retry: asyncio.TimerHandle | None = None
        self._pending: list[socket.socket] = []  # accepted, not yet handed over (oldest first)
        self._handing = False  # a _hand_some call is scheduled
        self._handovers: set[asyncio.Task[Any]] = set()
        sock.setblocking(False)
        self._read(True)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self.sock,)

    def _read(self, on: bool) -> None:
        if on and not self._reading and not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)
            self._reading = True
        elif not on and self._reading:
            self.loop.remove_reader(self.sock.fileno())
            self._reading = False

    def _accept(self) -> None:
        pending = self._pending
        before = len(pending)
        try:
            self._take(min(self.batch, self.max_pending - before))
        finally:
            if len(pending) >= self.max_pending:
                self._read(False)  # the kernel's backlog holds the rest until we catch up
            if len(pending) > before and not self._handing:
                self._handing = True
                self.loop.call_soon(self._hand_some)

    def _take(self, limit: int) -> None:
        for _ in range(limit):
            try:
                conn, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # the client left before we took it
                self.errors += 1
                continue
            except OSError as e:
                self.errors += 1
                if e.errno in _RESOURCE_ERRORS:
                    _log.error("cannot accept connections (%s); pausing %.0f s",
                               e.strerror or e, RETRY_AFTER_S)
                    self._read(False)
                    self._retry = self.loop.call_later(RETRY_AFTER_S, self._resume)
                    return
                raise
            self.accepted += 1
            if self.answer is None or not self._answer_now(conn, self.answer):
                self._pending.append(conn)

    def _answer_now(self, conn: socket.socket, answer: Callable[[bytes], bytes | None]) -> bool:
        try:
            data = conn.recv(PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:  # nothing sent yet (BlockingIOError), or reset: uvicorn's to handle
            return False
        try:
            reply = answer(data) if data else None
        except Exception:  # our bug: log it, and let uvicorn serve the request as usual
            _log.exception("answering a new connection's first bytes on accept failed")
            return False
        if reply is None:
            return False
        try:
            conn.recv(len(data), socket.MSG_DONTWAIT)  # read it: a close with unread bytes resets
            conn.send(reply, socket.MSG_DONTWAIT)  # a new connection's send buffer holds it
        except OSError:  # the client left meanwhile: nothing more to do for it
            self.errors += 1
        conn.close()
        self.answered += 1
        return True

    def _hand_some(self) -> None:
        pending = self._pending
        for _ in range(min(self.per_turn, len(pending))):
            task = self.loop.create_task(self._hand_over(pending.pop()))  # newest first
            self._handovers.add(task)
            task.add_done_callback(self._handovers.discard)
        if pending:
            self.loop.call_soon(self._hand_some)
        else:
            self._handing = False
        if len(pending) <= self.max_pending // 2 and self._retry is None:
            self._read(True)

    async def _hand_over(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.protocol_factory, conn)
        except OSError:  # reset between accept and hand-over
            self.errors += 1
            conn.close()

    def _resume(self) -> None:
        self._retry = None
        self._read(True)

    def close(self) -> None:
        """Stop accepting and close the connections not yet handed over (the listening socket
        itself stays open: its owner closes it)."""
        if self._closed:
            return
        self._read(False)
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        while self._pending:
            self._pending.pop().close()

    async def wait_closed(self) -> None:
        if self._handovers:
            await asyncio.wait(set(self._handovers))


class BatchAcceptingServer(uvicorn.Server):
    """uvicorn's server, listening on the given sockets through :class:`BatchAcceptor`s
    (uvicorn's own startup makes the lifespan and the state; it listens on nothing here).
    ``answer``: what each acceptor answers on accept (see :class:`BatchAcceptor`)."""

    def __init__(self, config: uvicorn.Config,
                 answer: Callable[[bytes], bytes | None] | None = None) -> None:
        super().__init__(config)
        self.answer = answer

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=[])
        if self.should_exit:
            return
        loop = asyncio.get_running_loop()
        config = self.config

        def create_protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state,
                app_state=self.lifespan.state, _loop=loop)

        self.servers = [BatchAcceptor(loop, sock, create_protocol,  # type: ignore[misc]
                                      answer=self.answer)
                        for sock in sockets or []]
