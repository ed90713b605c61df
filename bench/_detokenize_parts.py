"""The parts of ``bench/detokenize.py`` around the measurement: the detokenizer process with
this process's sockets in the worker, engine and client roles (``DetokProcess``), a py-spy
profile summary, and the ``--send-costs`` micro-benchmark.

See ``bench/detokenize.py`` for what is measured and how.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import msgspec
import zmq

from textproc.config import ServiceConfig, ipc_endpoints
from textproc.protocol import EngineHello, FrontOutFrame, Hello, Ready, Welcome
from textproc.testing.models import REPO_ROOT

__all__ = ["CLIENT_ID", "DetokProcess", "summarize_profile", "send_costs"]

CLIENT_ID = b"cbench-detok0001"


class DetokProcess:
    """The detokenizer child + this process's sockets in the worker, engine and client roles."""

    def __init__(self, model: Path, profile_to: Path | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tp-bench-detok-"))
        self.endpoints = ipc_endpoints(str(self.root), 1)
        config = ServiceConfig(model_dir=str(model), n_workers=1, log_level="WARNING")
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.control = self._sock(zmq.PULL, bind=self.endpoints.control)
        cmd = [sys.executable, "-m", "textproc.cli", "_child", "detokenizer", "0",
               "--config", config.to_json(), "--endpoints", json.dumps(self.endpoints.to_dict()),
               "--parent-pid", str(os.getpid())]
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.dec = msgspec.msgpack.Decoder(Ready)
        self._wait_ready("detokenizer")
        self.submit = self._sock(zmq.PUSH, connect=self.endpoints.detokenizers[0].detok_in)
        self.engine_in = self._sock(zmq.PULL, connect=self.endpoints.detokenizers[0].engine_in)
        self.engine_out = self._sock(zmq.PUSH, connect=self.endpoints.detokenizers[0].engine_out)
        self.front = self._sock(zmq.DEALER, connect=self.endpoints.detokenizers[0].detok_front)
        self.enc = msgspec.msgpack.Encoder()
        self.front_dec = msgspec.msgpack.Decoder(FrontOutFrame)
        self.engine_out.send(self.enc.encode(EngineHello("bench-engine")))
        self._wait_ready("engine")
        self.front.send(self.enc.encode(Hello()))
        if not self.front.poll(30_000):
            raise RuntimeError("no Welcome from the detokenizer")
        assert isinstance(self.front_dec.decode(self.front.recv()), Welcome)
        self.profiler: subprocess.Popen[bytes] | None = None
        self.profile_to = profile_to

    def _sock(self, kind: int, *, bind: str | None = None, connect: str | None = None) -> Any:
        s = self.ctx.socket(kind)
        s.linger = 0
        s.sndhwm = 0
        s.rcvhwm = 0
        if kind == zmq.DEALER:
            s.setsockopt(zmq.ROUTING_ID, CLIENT_ID)
        if bind:
            s.bind(bind)
        if connect:
            s.connect(connect)
        return s

    def _wait_ready(self, role: str) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the detokenizer exited with {self.proc.returncode}")
            if self.control.poll(200):
                if self.dec.decode(self.control.recv()).role == role:
                    return
        raise RuntimeError(f"no Ready({role}) from the detokenizer within 120 s")

    def drain_engine_in(self) -> int:
        n = 0
        while True:
            try:
                self.engine_in.recv(zmq.NOBLOCK)
            except zmq.Again:
                return n
            n += 1

    def start_profile(self, name: str) -> None:
        if self.profile_to is None:
            return
        spy = Path(sys.executable).parent / "py-spy"
        self.profile_to.mkdir(parents=True, exist_ok=True)
        self.profiler = subprocess.Popen(
            [str(spy), "record", "--pid", str(self.pid), "--rate", "250", "--format", "raw",
             "--output", str(self.profile_to / f"{name}.txt"), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # let it attach

    def stop_profile(self) -> Path | None:
        if self.profiler is None:
            return None
        self.profiler.send_signal(signal.SIGINT)
        try:
            self.profiler.wait(30)
        except subprocess.TimeoutExpired:
            self.profiler.kill()
        self.profiler = None
        outs = sorted(self.profile_to.glob("*.txt"), key=lambda p: p.stat().st_mtime) \
            if self.profile_to else []
        return outs[-1] if outs else None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for s in (self.control, self.submit, self.engine_in, self.engine_out, self.front):
            s.close(0)
        self.ctx.term()
        shutil.rmtree(self.root, ignore_errors=True)


def summarize_profile(path: Path, top: int = 12) -> list[tuple[str, float, float]]:
    """py-spy raw (collapsed) stacks -> [(function (file), % own, % inclusive)] by own time."""
    import re

    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    if not total:
        return []
    return [(name, 100 * n / total, 100 * incl[name] / total) for name, n in own.most_common(top)]


_DRAIN = """
import sys, zmq
c = zmq.Context().socket(zmq.DEALER)
c.setsockopt(zmq.ROUTING_ID, sys.argv[2].encode())
c.rcvhwm = 0
c.connect(sys.argv[1])
c.send(b"hi")
while True:
    if len(c.recv(copy=False)) == 1:
        break
"""


def send_costs() -> list[dict[str, Any]]:
    """What one Outputs send costs the detokenizer: ROUTER -> a DEALER in another process (ipc),
    ``send_multipart`` (as ``_send_front`` does) vs two ``send`` calls with int flags, copy on/off,
    for a small (300 B) and a big (200 KB, ~4,096 streams) frame. CPU of all threads of this
    process (pyzmq's zero-copy completion thread included), best of 3."""
    root = tempfile.mkdtemp(prefix="tp-bench-send-")
    address = f"ipc://{root}/front"
    ctx: zmq.Context[Any] = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.sndhwm = 0
    router.linger = 0
    router.bind(address)
    cid = "cbench-send-0001"
    child = subprocess.Popen([sys.executable, "-c", _DRAIN, address, cid], stdin=subprocess.DEVNULL)
    rows: list[dict[str, Any]] = []
    try:
        if not router.poll(30_000):
            raise RuntimeError("the drain process did not connect")
        router.recv_multipart()
        cid_b = cid.encode()
        nb, nbm = int(zmq.NOBLOCK), int(zmq.NOBLOCK | zmq.SNDMORE)
        ways: dict[str, Callable[[bytes], Any]] = {
            "send_multipart copy=False": lambda d: router.send_multipart([cid_b, d], flags=zmq.NOBLOCK, copy=False),
            "send_multipart copy=True": lambda d: router.send_multipart([cid_b, d], flags=zmq.NOBLOCK, copy=True),
            "2 x send, int flags, copy=True": lambda d: (router.send(cid_b, nbm), router.send(d, nb)),
            "2 x send, int flags, copy=False": lambda d: (router.send(cid_b, nbm), router.send(d, nb, copy=False)),
        }
        for size, n in ((300, 20_000), (200_000, 1_000)):
            data = os.urandom(size)
            for name, fn in ways.items():
                best_wall = best_cpu = float("inf")
                for _ in range(3):
                    c0, t0 = time.process_time(), time.perf_counter()
                    for _ in range(n):
                        fn(data)
                    best_wall = min(best_wall, (time.perf_counter() - t0) / n)
                    best_cpu = min(best_cpu, (time.process_time() - c0) / n)
                    time.sleep(0.2)
                rows.append({"bench": "detokenize-send", "way": name, "bytes": size,
                             "us_wall": best_wall * 1e6, "us_cpu": best_cpu * 1e6,
                             "load_avg_1m": os.getloadavg()[0]})
        router.send_multipart([cid_b, b"x"])
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        router.close(0)
        ctx.term()
        shutil.rmtree(root, ignore_errors=True)
    return rows
