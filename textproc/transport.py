"""ZeroMQ sockets and frame decoding for every textproc process: options, typed decoders, counters.

Owns how a context is made (its I/O thread scheduled SCHED_BATCH) and how a socket is made (linger 0, high-water marks, ZMQ_MAXMSGSIZE on receive, ROUTER_MANDATORY,
short reconnect intervals) and how a received frame becomes a typed struct. A frame that does not
decode is counted per socket and logged with the socket name and peer, never raised: one bad peer
must not take a process down. Does not know what the frames mean (workers, the detokenizer and the
client do) and never pickles anything.

CURVE keys and the ZAP allow-list are in :mod:`textproc.curve`; ``make_socket`` applies them.
"""

from __future__ import annotations

import logging
import os
import socket as _socket
from typing import Any, Generic, TypeVar, overload

import zmq.asyncio

import msgspec
import zmq
import zmq.utils.z85

from textproc.config import Endpoints
from textproc.curve import CurveClientKeys, CurveServerKeys, apply_curve_client, apply_curve_server

__all__ = [
    "FrameDecoder",
    "encoder",
    "new_context",
    "make_socket",
    "close_sockets",
    "pick_free_ports",
    "remove_ipc_files",
    "RECONNECT_IVL_MS",
]

T = TypeVar("T")
RECONNECT_IVL_MS = 50  # a restarted process is reconnected to within ~50 ms
RECONNECT_IVL_MAX_MS = 500
_LOG_FIRST_N = 20  # malformed frames logged in full per socket, then every _LOG_EVERY-th
_LOG_EVERY = 1000
_RECEIVING = {zmq.PULL, zmq.ROUTER, zmq.DEALER, zmq.SUB, zmq.PAIR}

_log = logging.getLogger("textproc.transport")
_ENCODER = msgspec.msgpack.Encoder()


def encoder() -> msgspec.msgpack.Encoder:
    """The shared msgpack encoder (reused: building one per frame costs more than encoding)."""
    return _ENCODER


@overload
def new_context(kind: type[zmq.asyncio.Context]) -> zmq.asyncio.Context: ...
@overload
def new_context(kind: type[zmq.Context[Any]] = ...) -> zmq.Context[Any]: ...


def new_context(kind: Any = zmq.Context) -> Any:
    """A zmq context (``zmq.Context`` or ``zmq.asyncio.Context``) whose I/O thread runs
    SCHED_BATCH where the OS has it (Linux).

    Every send that finds its pipe idle wakes the context's I/O thread; as an ordinary thread
    that just slept it preempts the sender on the spot, so the sending process stops for the
    hop: a paced 300-byte ipc send took 29-35 us mean, p99 79-92 us, on the shared 2-core box
    (load 2.5), 12-14 us mean, p99 25-34 us with the I/O thread SCHED_BATCH (which does not
    preempt on wake-up). It changes when the thread runs, not how much CPU it gets.
    """
    context = kind()
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is not None:
        try:
            context.set(zmq.THREAD_SCHED_POLICY, policy)  # before the first socket starts it
        except zmq.ZMQError:  # a libzmq built without it: the default scheduling
            pass
    return context


class FrameDecoder(Generic[T]):
    """One typed decoder for one socket; counts frames and malformed frames.

    ``decode(data, peer=...)`` returns the struct, or None after counting and logging a frame
    that is not valid MessagePack, has an unknown tag or wrong field types.
    """

    def __init__(self, frame_type: Any, *, socket_name: str) -> None:
        self.socket_name = socket_name
        self.received = 0
        self.malformed = 0
        self._decoder: msgspec.msgpack.Decoder[T] = msgspec.msgpack.Decoder(frame_type)

    def decode(self, data: bytes | memoryview, *, peer: str = "") -> T | None:
        self.received += 1
        try:
            return self._decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            self.count_malformed(f"{type(e).__name__}: {e}", data=data, peer=peer)
            return None
        except RecursionError:  # a small frame nested ~1000 deep inside an Any field
            self.count_malformed("nested too deep to decode", data=data, peer=peer)
            return None

    def decode_routed(self, parts: list[bytes]) -> tuple[bytes, T | None]:
        """``[client id, frame]`` as received on a ROUTER: the client id and the struct, or
        None (counted and logged) for a frame that does not decode or a wrong part count."""
        if len(parts) != 2:
            self.count_malformed(f"expected [client id, frame], got {len(parts)} parts",
                                 data=parts[-1], peer=parts[0].hex())
            return parts[0], None
        client_id, data = parts
        return client_id, self.decode(data, peer=client_id.hex())

    def count_malformed(self, why: str, *, data: bytes | memoryview = b"", peer: str = "") -> None:
        """Count one malformed frame on this socket and log it (rate-limited)."""
        self.malformed += 1
        if self.malformed <= _LOG_FIRST_N or self.malformed % _LOG_EVERY == 0:
            head = bytes(data[:32])
            _log.warning(
                "malformed frame #%d on %s from peer %r (%d bytes, starts %r): %s",
                self.malformed,
                self.socket_name,
                peer,
                len(data),
                head,
                why[:300],
            )

    def counters(self) -> dict[str, int]:
        return {
            f"frames_received.{self.socket_name}": self.received,
            f"frames_malformed.{self.socket_name}": self.malformed,
        }


def make_socket(
    ctx: zmq.Context[Any],
    kind: int,
    *,
    max_frame_bytes: int,
    hwm: int,
    routing_id: bytes | None = None,
    curve_server: CurveServerKeys | None = None,
    curve_client: CurveClientKeys | None = None,
) -> zmq.Socket[Any]:
    """A socket with textproc's options: linger 0, HWMs, MAXMSGSIZE where it receives.

    ``curve_server`` (a socket this process binds) or ``curve_client`` (one it connects) turn
    on CURVE encryption and authentication.
    """
    sock: zmq.Socket[Any] = ctx.socket(kind)
    if curve_server is not None:
        apply_curve_server(sock, curve_server)
    elif curve_client is not None:
        apply_curve_client(sock, curve_client)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
    if kind in _RECEIVING:
        sock.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
    if kind == zmq.ROUTER:
        # unroutable outputs raise EHOSTUNREACH instead of vanishing: the request is aborted
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    if routing_id is not None:
        sock.setsockopt(zmq.ROUTING_ID, routing_id)
    return sock


def close_sockets(sockets: list[Any], context: zmq.Context[Any] | None = None) -> None:
    """Close every socket with linger 0, then terminate ``context`` if given (safe to call twice).

    The one socket-close helper: children, the supervisor, ``TextClient`` and ``EngineLink``
    all close through it (``None`` entries, for sockets never made, are skipped).
    """
    for sock in sockets:
        if sock is not None and not sock.closed:
            sock.close(linger=0)
    if context is not None and not context.closed:
        context.term()


def pick_free_ports(host: str, n: int) -> list[int]:
    """``n`` distinct TCP ports free on ``host`` right now (bound to port 0, then released)."""
    family = _socket.AF_INET6 if ":" in host else _socket.AF_INET
    held: list[_socket.socket] = []
    try:
        for _ in range(n):
            s = _socket.socket(family, _socket.SOCK_STREAM)
            s.bind((host, 0))
            held.append(s)
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def remove_ipc_files(endpoints: Endpoints) -> list[str]:
    """Unlink the socket files of ipc:// endpoints; returns the paths removed."""
    removed = []
    addresses = [endpoints.control, endpoints.events, *endpoints.workers]
    for shard in endpoints.detokenizers:
        addresses += [shard.detok_in, shard.detok_front, shard.engine_in, shard.engine_out]
    for address in addresses:
        if address.startswith("ipc://"):
            path = address[len("ipc://"):]
            try:
                os.unlink(path)
                removed.append(path)
            except FileNotFoundError:
                pass
    return removed
