"""Making ``EngineLink``'s sockets: one engine-in / engine-out pair per shard, and finding the addresses.

Owns the socket options of the engine's side (linger 0, no receive bound on engine-in, the
send bound on engine-out), CURVE client keys (applied before connect), the connect monitor
that lets the link resend ``EngineHello`` after a reconnect, and reading the shards' addresses
from a service's ``endpoints.json``. Does not send or receive anything; every socket it makes
is appended to the caller's list at once, so a failure half way still closes them all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import zmq

from textproc.curve import CurveClientKeys, apply_curve_client
from textproc.errors import InvalidInput

__all__ = ["connect_shard", "read_endpoints", "shown"]


def read_endpoints(runtime_dir: str) -> tuple[list[str], list[str]]:
    """Every detokenizer shard's ``engine_in`` and ``engine_out`` (shard k at k) from the
    ``endpoints.json`` in ``runtime_dir``; ``InvalidInput`` naming the file if it cannot."""
    path = Path(runtime_dir) / "endpoints.json"
    try:
        endpoints = json.loads(path.read_text())["endpoints"]
        shards = endpoints["detokenizers"]
        ins = [str(s["engine_in"]) for s in shards]
        outs = [str(s["engine_out"]) for s in shards]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidInput(f"cannot read the engine endpoints from {path}: {exc!r}") from exc
    return ins, outs


def connect_shard(
    context: zmq.Context[Any],
    address_in: str,
    address_out: str,
    sockets: list[zmq.Socket[Any]],
    *,
    send_hwm_frames: int,
    curve: CurveClientKeys | None,
    with_monitor: bool,
) -> tuple[zmq.Socket[Any], zmq.Socket[Any], zmq.Socket[Any] | None]:
    """One shard's engine-in PULL and engine-out PUSH, connected, and (``with_monitor``) the
    engine-out socket's connect monitor; raises ``zmq.ZMQError`` for a bad address."""
    sock_in = context.socket(zmq.PULL)
    sockets.append(sock_in)
    sock_in.setsockopt(zmq.LINGER, 0)
    # No zmq MAXMSGSIZE here: on a CONNECTING socket libzmq treats an oversized frame
    # as a protocol error and never reconnects (engine-in would be dead for good);
    # the size is checked after receipt instead.
    sock_in.setsockopt(zmq.RCVHWM, 0)  # textproc's PUSH side bounds what it sends
    sock_out = context.socket(zmq.PUSH)
    sockets.append(sock_out)
    sock_out.setsockopt(zmq.LINGER, 0)
    sock_out.setsockopt(zmq.SNDHWM, send_hwm_frames)
    if curve is not None:  # textproc's sockets are CURVE servers: before connect
        apply_curve_client(sock_in, curve)
        apply_curve_client(sock_out, curve)
    monitor = None
    if with_monitor:
        monitor = sock_out.get_monitor_socket(zmq.EVENT_CONNECTED)
        sockets.append(monitor)
    sock_in.connect(address_in)
    sock_out.connect(address_out)
    return sock_in, sock_out, monitor


def shown(addresses: tuple[str, ...]) -> str:
    """One shard's address as a repr, more shards' as a list."""
    return repr(addresses[0]) if len(addresses) == 1 else repr(list(addresses))
