#!/usr/bin/env python3
"""Round trips of a 100-byte message to an echo process: what one process hop and back costs on
this machine, at this moment, under whatever else runs (``e2e.py`` runs it before each
transport, idle, and beside every load level).

    .venv/bin/python bench/hop_probe.py [--quick] [--json PATH] [--count N] [--interval-ms X]
        [--transport ipc|tcp]

It starts one echo process and alternates two kinds of round trip to it, one every
``--interval-ms``: pyzmq (REQ -> REP over ipc or loopback tcp, each side with its context's I/O thread, as
every textproc hop has) and a plain unix SOCK_SEQPACKET socket (one syscall each way, no I/O
thread: the operating system's own floor). It stops after ``--count`` round trips of each kind
(0: until its stdin is closed) and prints one JSON line: p50 / p99 / max in ms of each kind.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import pct, write_json

from textproc.testing.bench_cli import bench_parser
from textproc.testing.machine import machine

__all__ = ["main"]

MESSAGE = b"x" * 100


def serve_echo(zmq_address: str, unix_path: str) -> None:
    """The echo process: answers both sockets with what they sent, until b"quit" on either."""
    import zmq

    ctx: zmq.Context[Any] = zmq.Context()
    rep = ctx.socket(zmq.REP)
    rep.bind(zmq_address)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(unix_path)
    listener.listen(1)
    print("ready", flush=True)
    conn, _ = listener.accept()
    poller = zmq.Poller()
    poller.register(rep, zmq.POLLIN)
    poller.register(conn.fileno(), zmq.POLLIN)
    try:
        while True:
            for which, _ in poller.poll():
                if which is rep:
                    m = rep.recv()
                    rep.send(m)
                else:
                    m = conn.recv(65536)
                    if m:
                        conn.send(m)
                if not m or m == b"quit":
                    return
    finally:
        rep.close(0)
        ctx.term()
        conn.close()
        listener.close()


def probe(count: int, interval_s: float, transport: str = "ipc") -> dict[str, Any]:
    import zmq

    with tempfile.TemporaryDirectory(prefix="tp-bench-hop-") as root:
        zmq_address, unix_path = f"ipc://{root}/zmq", f"{root}/unix"
        if transport == "tcp":
            from textproc.transport import pick_free_ports

            zmq_address = f"tcp://127.0.0.1:{pick_free_ports('127.0.0.1', 1)[0]}"
        echo = subprocess.Popen([sys.executable, __file__, "--echo", zmq_address, unix_path],
                                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        ctx: zmq.Context[Any] = zmq.Context()
        req = ctx.socket(zmq.REQ)
        req.linger = 0
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        rtts: dict[str, list[float]] = {"zmq": [], "unix": []}
        perf = time.perf_counter
        stdin = [sys.stdin] if count == 0 else []
        try:
            assert echo.stdout is not None
            if echo.stdout.readline() != b"ready\n":
                raise RuntimeError(f"the echo process did not start (exit {echo.wait()})")
            req.connect(zmq_address)
            unix.connect(unix_path)
            unix.settimeout(10)
            i = 0
            while count == 0 or i < count + 20:
                t0 = perf()
                req.send(MESSAGE)
                if not req.poll(10_000):
                    raise RuntimeError(f"no echo from {zmq_address}")
                req.recv()
                t1 = perf()
                if select.select(stdin, [], [], interval_s)[0]:
                    break
                t2 = perf()
                unix.send(MESSAGE)
                unix.recv(65536)
                t3 = perf()
                if i >= 20:  # the first ones connect and warm up
                    rtts["zmq"].append(t1 - t0)
                    rtts["unix"].append(t3 - t2)
                i += 1
                if select.select(stdin, [], [], interval_s)[0]:
                    break
            unix.send(b"quit")
            echo.wait(10)
        finally:
            req.close(0)
            ctx.term()
            unix.close()
            if echo.poll() is None:  # an error above: it would wait for us forever
                echo.kill()
                echo.wait()
    row: dict[str, Any] = {"zmq_transport": transport, "round_trips": len(rtts["zmq"]),
                           "load_avg_1m": os.getloadavg()[0]}
    for kind, values in rtts.items():
        for q in (50, 99):
            row[f"{kind}_ms_p{q}"] = pct(values, q) * 1000
        row[f"{kind}_ms_max"] = max(values, default=float("nan")) * 1000
    return row


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="100 round trips of each kind",
                     json_help="append the JSON line here too", model=None)
    p.add_argument("--count", type=int, help="round trips of each kind (default 1000, --quick "
                   "100; 0: until stdin closes)")
    p.add_argument("--interval-ms", type=float, default=2.5, help="pause between round trips")
    p.add_argument("--transport", choices=("ipc", "tcp"), default="ipc",
                   help="the pyzmq round trip's transport (tcp: loopback)")
    p.add_argument("--echo", nargs=2, metavar=("ZMQ_ADDRESS", "UNIX_PATH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.echo:
        serve_echo(*args.echo)
        return 0
    count = args.count if args.count is not None else (100 if args.quick else 1000)
    row = {"bench": "hop-probe", **probe(count, args.interval_ms / 1000, args.transport)}
    print(json.dumps(row), flush=True)
    write_json(args.json, [row], machine())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
