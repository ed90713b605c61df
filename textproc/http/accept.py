"""Accepting connections in batches: what uvicorn's server does on uvloop, minus one accept per
loop iteration.

Owns the listening socket's read side in a frontend. libuv (uvloop's core) accepts ONE
connection per event-loop iteration since libuv 1.45 (libuv/libuv#3696); asyncio's own loop
accepts up to the backlog per readiness. With 500 streams connecting at once a busy frontend
then took 500 iterations to accept them all, and a ``/health`` probe queued behind them in the
kernel's accept queue waited 0.3-1.6 s (``bench/crowd.py``, on an idle box: the wait was all
between the probe's ``connect()`` returning and ``connection_made``). :class:`BatchAcceptor`
accepts up to ``BATCH`` connections per readiness (a burst at once, as asyncio does) and hands
each to the loop with ``connect_accepted_socket``; :class:`BatchAcceptingServer` is uvicorn's
server listening through it. Frontends sharing one socket (``serve --http-workers``) still
share a burst: the one that is busy is not polling, so the idle one takes it. Measured
(``bench/crowd.py``, 500 streams x 5 rounds, idle 2-core box): a batch of 16 gave p99 400-510
ms, 64 gave 200-240 ms, 512 (all) 136-212 ms.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Any

import uvicorn

__all__ = ["BatchAcceptor", "BatchAcceptingServer", "BATCH", "RETRY_AFTER_S"]

_log = logging.getLogger("textproc.http")
BATCH = 512  # connections accepted per readiness (asyncio: up to the backlog)
RETRY_AFTER_S = 1.0  # out of file descriptors or memory: stop accepting this long (as asyncio)
_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class BatchAcceptor:
    """Accepts connections on ``sock`` (listening) up to ``batch`` per readiness and gives each
    to ``protocol_factory`` on ``loop``. Has what uvicorn needs of an ``asyncio.Server``:
    ``close()``, ``wait_closed()``, ``sockets``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 protocol_factory: Callable[[], asyncio.Protocol], *, batch: int = BATCH) -> None:
        self.loop = loop
        self.sock = sock
        self.protocol_factory = protocol_factory
        self.batch = batch
        self.accepted = 0
        self.errors = 0  # accept or hand-over failures (resource limits, aborted handshakes)
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self._handovers: set[asyncio.Task[Any]] = set()
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._accept)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self.sock,)

    def _accept(self) -> None:
        for _ in range(self.batch):
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
                    self.loop.remove_reader(self.sock.fileno())
                    self._retry = self.loop.call_later(RETRY_AFTER_S, self._resume)
                    return
                raise
            self.accepted += 1
            task = self.loop.create_task(self._hand_over(conn))
            self._handovers.add(task)
            task.add_done_callback(self._handovers.discard)

    async def _hand_over(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.protocol_factory, conn)
        except OSError:  # reset between accept and hand-over
            self.errors += 1
            conn.close()

    def _resume(self) -> None:
        self._retry = None
        if not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        """Stop accepting (the socket itself stays open: its owner closes it)."""
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        else:
            self.loop.remove_reader(self.sock.fileno())

    async def wait_closed(self) -> None:
        if self._handovers:
            await asyncio.wait(set(self._handovers))


class BatchAcceptingServer(uvicorn.Server):
    """uvicorn's server, listening on the given sockets through :class:`BatchAcceptor`s
    (uvicorn's own startup makes the lifespan and the state; it listens on nothing here)."""

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

        self.servers = [BatchAcceptor(loop, sock, create_protocol)  # type: ignore[misc]
                        for sock in sockets or []]
