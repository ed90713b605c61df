"""Both sides of the engine sockets for tests and benchmarks: an engine that serves requests one
token per step (``StepEngine``, in a process of its own with ``EngineProcess``), and textproc's
side bound with plain pyzmq (``EnginePeer``).

``StepEngine`` is what a benchmark needs from an engine and no more: every running request gets
one token per step from a fixed cycle of ids, ``length`` at ``max_tokens``; a constrained
request (``guide``) takes the cycle's token when its mask allows it and else the guide's
completion token, and ends with ``stop`` when the guide is finished. It can pace its steps
(``step_ms``), do a fixed amount of work per step (``work``) and record when each request
arrived and when each step was sent (``time.perf_counter``: CLOCK_MONOTONIC, the same clock in
every process of the machine), so a client can subtract the engine's own time from what it
measured. ``engine_stub`` is the scripted fake engine ``serve --engine stub`` runs; this one is
driven in-process or started as ``python -m textproc.testing.engine``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import msgspec
import zmq

from textproc.engine import EngineLink
from textproc.protocol import EngineOutFrame
from textproc.transport import new_context

__all__ = ["StepEngine", "EngineProcess", "EnginePeer", "main"]

_ENC = msgspec.msgpack.Encoder()
_OUT = msgspec.msgpack.Decoder(EngineOutFrame)


class StepEngine:
    """One token per running request per step, on ``link``.

    ``stride``: request k starts at position ``k * stride`` of ``token_ids`` (0: every request
    starts at the first id). ``record``: keep ``arrivals`` (request_id -> [t_arrived,
    first_step, tokens]) and ``step_times`` (when each step was sent).
    """

    def __init__(self, link: EngineLink, token_ids: Sequence[int], *, stride: int = 0,
                 work: Callable[[], object] | None = None, record: bool = False) -> None:
        self.link = link
        self.token_ids = list(token_ids)
        self.stride = stride
        self.work = work
        self.record = record
        # request_id -> [position, generated, max_tokens, first step]
        self.running: dict[str, list[int]] = {}
        self.guides: dict[str, Any] = {}  # request_id -> Guide, for constrained requests
        self.arrivals: dict[str, list[float]] = {}  # request_id -> [t_arrived, first_step, tokens]
        self.step_times: list[float] = []
        self.step_index = 0
        self.counter = 0
        self.constrained_steps = 0

    def take(self) -> None:
        """Take the requests and aborts that arrived: stamped now, they join the next step."""
        new = self.link.poll_requests()
        aborted = self.link.poll_aborts()
        now = time.perf_counter()
        n_ids = len(self.token_ids)
        for req in new:
            self.counter += 1
            self.running[req.request_id] = [(self.counter * self.stride) % n_ids, 0,
                                            req.max_tokens, self.step_index]
            if req.guide is not None:
                self.guides[req.request_id] = req.guide
            if self.record:
                self.arrivals[req.request_id] = [now, self.step_index, 0]
        for rid in aborted:
            st = self.running.pop(rid, None)
            if st is not None:
                self._note(rid, st)
            self.guides.pop(rid, None)

    def _note(self, rid: str, st: list[int]) -> None:
        # a request's first step and token count, kept once it leaves the running set
        entry = self.arrivals.get(rid)
        if entry is not None:
            entry[1], entry[2] = st[3], st[1]

    def step(self) -> int:
        """One step over the running requests (none: nothing sent); returns how many."""
        running = self.running
        if not running:
            return 0
        if self.work is not None:
            self.work()
        ids = self.token_ids
        n_ids = len(ids)
        guides = self.guides
        outputs: list[tuple[Any, ...]] = []
        done = []
        for rid, st in running.items():
            token = ids[st[0] % n_ids]
            if st[1] == 0:
                st[3] = self.step_index
            st[0] += 1
            st[1] += 1
            finish = "length" if st[1] >= st[2] else None
            guide = guides.get(rid)
            if guide is not None:
                token, finish = self._guided(guide, token, finish)
            if finish is None:
                outputs.append((rid, [token]))
            else:
                outputs.append((rid, [token], finish))
                done.append(rid)
        for rid in done:
            self._note(rid, running.pop(rid))
            guides.pop(rid, None)
        self.link.send_outputs(outputs)
        if self.record:
            self.step_times.append(time.perf_counter())
        self.step_index += 1
        return len(outputs)

    def _guided(self, guide: Any, token: int, finish: str | None) -> tuple[int, str | None]:
        # one mask read and one advance per step: the work a real engine's sampler adds
        self.constrained_steps += 1
        mask = guide.allowed_mask()
        if not mask[token >> 3] >> (token & 7) & 1:
            token = guide.completion_token()
            if token < 0:
                token = guide.index.end_ids[0]
        guide.advance(token)
        return token, "stop" if guide.is_finished else finish

    def run(self, *, step_ms: float, should_stop: Callable[[], bool]) -> None:
        """Step until ``should_stop()``, a step at most every ``step_ms`` while requests run.

        Requests arriving during the wait for a step boundary are stamped when they arrive, so
        that wait counts as the engine's time.
        """
        link = self.link
        perf = time.perf_counter
        step_s = step_ms / 1000
        next_step = perf()
        while not should_stop():
            self.take()
            if not self.running:
                link.wait(0.05)
                next_step = perf()
                continue
            while step_s and not should_stop():
                delay = next_step - perf()
                if delay <= 0:
                    break
                if link.wait(delay):
                    self.take()
            next_step = max(next_step + step_s, perf())
            self.step()

    def timings(self) -> dict[str, Any]:
        """{"requests": {request_id: [t_arrived, first_step, tokens]}, "steps": [t_sent, ...]}."""
        for rid, st in self.running.items():
            self._note(rid, st)
        return {"requests": self.arrivals, "steps": self.step_times}


class EngineProcess:
    """A ``StepEngine`` in a process of its own (``python -m textproc.testing.engine``),
    connected to every detokenizer shard given; ``stop()`` ends it and returns its timings."""

    def __init__(self, engine_in: str | Sequence[str], engine_out: str | Sequence[str],
                 token_ids: Sequence[int], *, step_ms: float = 0.0, timings: bool = True,
                 cwd: Path | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tp-engine-"))
        self.out = self.root / "timings.json"
        ins = [engine_in] if isinstance(engine_in, str) else list(engine_in)
        outs = [engine_out] if isinstance(engine_out, str) else list(engine_out)
        self.command = [sys.executable, "-m", "textproc.testing.engine",
                        *[flag for a, b in zip(ins, outs) for flag in ("--engine-in", a, "--engine-out", b)],
                        "--tokens", ",".join(map(str, token_ids)), "--step-ms", str(step_ms),
                        *(["--timings", str(self.out)] if timings else [])]
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EngineProcess:
        self.proc = subprocess.Popen(self.command, cwd=self.cwd, stdin=subprocess.DEVNULL)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "EngineProcess.start() was not called"
        return self.proc.pid

    def stop(self) -> dict[str, Any]:
        """SIGTERM, wait (kill after 30 s), and the timings it wrote (empty when it wrote none)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        try:
            data: dict[str, Any] = json.loads(self.out.read_text())
            return data
        except (OSError, ValueError):
            return {"requests": {}, "steps": []}
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class EnginePeer:
    """textproc's side of the engine sockets: PUSH bound on ``ipc://<root>/<name>-in``, PULL
    bound on ``ipc://<root>/<name>-out``, both with linger 0."""

    def __init__(self, root: Path | str, name: str = "engine",
                 ctx: zmq.Context[Any] | None = None) -> None:
        self.own_ctx = ctx is None
        self.ctx: zmq.Context[Any] = new_context() if ctx is None else ctx
        self.engine_in = f"ipc://{root}/{name}-in"
        self.engine_out = f"ipc://{root}/{name}-out"
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.linger = 0
        self.push.bind(self.engine_in)
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.linger = 0
        self.pull.bind(self.engine_out)

    def send(self, frame: Any) -> None:
        """``frame`` as is when it is bytes, else msgpack-encoded."""
        self.push.send(frame if isinstance(frame, bytes) else _ENC.encode(frame))

    def silence(self, timeout_s: float) -> str:
        """What to say when nothing arrives within ``timeout_s``."""
        return f"nothing on {self.engine_out} within {timeout_s} s"

    def recv_raw(self, timeout_s: float = 5.0) -> bytes:
        """The next frame's bytes; AssertionError (``silence``) when none comes in time."""
        if not self.pull.poll(int(timeout_s * 1000)):
            raise AssertionError(self.silence(timeout_s))
        data: bytes = self.pull.recv()
        return data

    def recv(self, timeout_s: float = 5.0) -> Any:
        """The next frame, decoded."""
        return _OUT.decode(self.recv_raw(timeout_s))

    def drain(self) -> int:
        """Read every frame waiting now; returns how many."""
        n = 0
        while True:
            try:
                self.pull.recv(zmq.NOBLOCK)
            except zmq.Again:
                return n
            n += 1

    def close(self) -> None:
        self.push.close(0)
        self.pull.close(0)
        if self.own_ctx:
            self.ctx.term()


def main(argv: list[str] | None = None) -> int:
    """``python -m textproc.testing.engine``: a StepEngine until SIGTERM or SIGINT."""
    p = argparse.ArgumentParser(prog="python -m textproc.testing.engine")
    p.add_argument("--engine-in", required=True, action="append")  # once per detokenizer shard
    p.add_argument("--engine-out", required=True, action="append")
    p.add_argument("--tokens", required=True, help="comma-separated ids, cycled")
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--timings", help="write the timings here as JSON on exit")
    a = p.parse_args(argv)
    stop = [False]

    def on_term(signum: int, frame: Any) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    tokens = [int(x) for x in a.tokens.split(",")]
    with EngineLink.connect(a.engine_in, a.engine_out) as link:  # lists: one per shard
        engine = StepEngine(link, tokens, record=a.timings is not None)
        engine.run(step_ms=a.step_ms, should_stop=lambda: stop[0])
    if a.timings:
        tmp = a.timings + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(engine.timings(), fh)
        os.replace(tmp, a.timings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
