#!/usr/bin/env python3
"""EngineLink cost per engine step vs a raw pyzmq send/recv of the same bytes (issue 6, item 2).

    .venv/bin/python bench/enginelink.py [--quick] [--json PATH] [--steps N] [--actives 1,64,...]

Per step at N active requests the engine calls ``poll_requests() + poll_aborts() +
send_outputs(outputs)`` with one new token for each of the N requests (1-tuples of the step's
``(request_id, [token_id], None)``). Between steps (not timed) the textproc side, bound here with
plain pyzmq over ipc, sends the step's arrivals: N/256 new requests per step (fractional,
accumulated: an average output of 256 tokens) with 1,024-token prompts, 2 stop ids and a
sampling dict, and N/2048 aborts per step; then it reads the step frame.

Columns, per-step microseconds (median and mean over ``--steps`` steps, modes interleaved in
blocks so machine load hits them alike):

- ``raw``: the same engine-in frames drained with ``recv(NOBLOCK)`` until EAGAIN, and the step's
  bytes (encoded beforehand) sent with one ``send`` on sockets set up like EngineLink's;
- ``encode+raw``: ``raw`` plus ``msgspec.msgpack.Encoder().encode`` of the step: the floor of any
  msgpack framing;
- ``link``: EngineLink (decode + validate + unpack prompt ids to ``list[int]`` + encode + send);
- ``ratio`` = link / raw (target <= 1.5) and ``ratio_enc`` = link / encode+raw;
- ``recv raw/link``: the receive half (raw drain vs ``poll_requests + poll_aborts``: decode,
  validate, unpack) and ``send raw/link``: the send half (raw send of ready bytes vs
  ``send_outputs``: encode + send), medians.

It also prints the cost of unpacking a 1,024-token prompt to ``list[int]`` (what EngineLink
does) vs keeping the ``array('I')``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from array import array
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import msgspec  # noqa: E402
import zmq  # noqa: E402

from textproc.engine import EngineLink  # noqa: E402
from textproc.protocol import EngineAbort, EngineRequest, pack_ids  # noqa: E402

__all__ = ["main", "run"]

PROMPT_TOKENS = 1024
ARRIVALS_PER_ACTIVE = 1 / 256
ABORTS_PER_ACTIVE = 1 / 2048
BLOCK = 50  # steps per mode before switching


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "zmq": zmq.zmq_version(),
        "pyzmq": zmq.__version__,
        "msgspec": msgspec.__version__,
        "load_avg_1m": os.getloadavg()[0],
    }


class Peer:
    """The textproc side: PUSH bound at engine-in, PULL bound at engine-out."""

    def __init__(self, ctx: zmq.Context[Any], root: str, name: str) -> None:
        self.engine_in = f"ipc://{root}/{name}-in"
        self.engine_out = f"ipc://{root}/{name}-out"
        self.push = ctx.socket(zmq.PUSH)
        self.push.linger = 0
        self.push.bind(self.engine_in)
        self.pull = ctx.socket(zmq.PULL)
        self.pull.linger = 0
        self.pull.bind(self.engine_out)

    def recv_step(self) -> bytes:
        if not self.pull.poll(10_000):
            raise RuntimeError(f"no step frame on {self.engine_out} within 10 s")
        return self.pull.recv()


class RawEngine:
    """The same two sockets as EngineLink, used directly."""

    def __init__(self, engine_in: str, engine_out: str) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context(io_threads=1)
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.linger = 0
        self.pull.setsockopt(zmq.RCVHWM, 0)
        self.pull.connect(engine_in)
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.linger = 0
        self.push.setsockopt(zmq.SNDHWM, 10_000)
        self.push.connect(engine_out)

    def step(self, data: bytes, split: list[float] | None = None) -> int:
        recv = self.pull.recv
        n = 0
        t0 = time.perf_counter()
        while True:
            try:
                recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            n += 1
        if split is not None:
            split.append(time.perf_counter() - t0)
        self.push.send(data, zmq.NOBLOCK)
        return n

    def close(self) -> None:
        self.pull.close(0)
        self.push.close(0)
        self.ctx.term()


def _wait_arrival(sock_poll: Any) -> None:
    sock_poll(200)
    time.sleep(0.0003)


def run(n_active: int, steps: int) -> dict[str, Any]:
    enc = msgspec.msgpack.Encoder()
    rids = [uuid.uuid4().hex for _ in range(n_active)]
    outputs = [(rid, [1000 + i % 50_000], None) for i, rid in enumerate(rids)]
    step_bytes = enc.encode(("EngineStep", 0, outputs))
    prompt = pack_ids([(i * 7919) % 150_000 for i in range(PROMPT_TOKENS)])
    counter = [0]

    def arrivals(state: dict[str, float]) -> list[bytes]:
        frames: list[bytes] = []
        state["req"] += n_active * ARRIVALS_PER_ACTIVE
        state["abort"] += n_active * ABORTS_PER_ACTIVE
        while state["req"] >= 1:
            state["req"] -= 1
            counter[0] += 1
            frames.append(enc.encode(EngineRequest(
                f"new-{counter[0]}", prompt, 256, [151643, 151645],
                {"temperature": 0.7, "top_p": 0.95})))
        while state["abort"] >= 1:
            state["abort"] -= 1
            frames.append(enc.encode(EngineAbort([rids[counter[0] % n_active]])))
        return frames

    with tempfile.TemporaryDirectory(prefix="tp-bench-") as root:
        ctx: zmq.Context[Any] = zmq.Context()
        peer_link, peer_raw, peer_enc = (Peer(ctx, root, n) for n in ("link", "raw", "enc"))
        link = EngineLink.connect(peer_link.engine_in, peer_link.engine_out)
        raw = RawEngine(peer_raw.engine_in, peer_raw.engine_out)
        rawenc = RawEngine(peer_enc.engine_in, peer_enc.engine_out)
        peer_link.recv_step()  # EngineHello
        times: dict[str, list[float]] = {"raw": [], "encode+raw": [], "link": []}
        state = {m: {"req": 0.0, "abort": 0.0} for m in times}
        raw_recv: list[float] = []
        link_poll: list[float] = []
        received = {m: 0 for m in times}
        link_in = link._in  # noqa: SLF001 - only to wait for arrivals outside the timed part
        assert link_in is not None
        perf = time.perf_counter
        try:
            done = 0
            while done < steps:
                block = min(BLOCK, steps - done)
                for mode in ("raw", "encode+raw", "link"):
                    peer = {"raw": peer_raw, "encode+raw": peer_enc, "link": peer_link}[mode]
                    for _ in range(block):
                        frames = arrivals(state[mode])
                        for f in frames:
                            peer.push.send(f)
                        if frames:
                            poll = {"raw": raw.pull.poll, "encode+raw": rawenc.pull.poll,
                                    "link": link_in.poll}[mode]
                            _wait_arrival(poll)
                        if mode == "raw":
                            t0 = perf()
                            received[mode] += raw.step(step_bytes, raw_recv)
                            t1 = perf()
                        elif mode == "encode+raw":
                            t0 = perf()
                            received[mode] += rawenc.step(enc.encode(("EngineStep", 0, outputs)))
                            t1 = perf()
                        else:
                            t0 = perf()
                            got = link.poll_requests()
                            aborted = link.poll_aborts()
                            tp = perf()
                            link.send_outputs(outputs)
                            t1 = perf()
                            link_poll.append(tp - t0)
                            received[mode] += len(got) + len(aborted)
                        times[mode].append(t1 - t0)
                        peer.recv_step()
                done += block
        finally:
            link.close()
            raw.close()
            rawenc.close()
            for p in (peer_link, peer_raw, peer_enc):
                p.push.close(0)
                p.pull.close(0)
            ctx.term()
    row: dict[str, Any] = {
        "bench": "enginelink",
        "active": n_active,
        "steps": steps,
        "step_bytes": len(step_bytes),
        "arrivals_per_step": n_active * ARRIVALS_PER_ACTIVE,
        "frames_in": received,
    }
    for mode, values in times.items():
        row[f"{mode}_us_p50"] = statistics.median(values) * 1e6
        row[f"{mode}_us_mean"] = statistics.fmean(values) * 1e6
    row["raw_recv_us_p50"] = statistics.median(raw_recv) * 1e6
    row["link_poll_us_p50"] = statistics.median(link_poll) * 1e6
    link_send = [t - p for t, p in zip(times["link"], link_poll)]
    row["link_send_us_p50"] = statistics.median(link_send) * 1e6
    raw_send = [t - r for t, r in zip(times["raw"], raw_recv)]
    row["raw_send_us_p50"] = statistics.median(raw_send) * 1e6
    row["ratio_p50"] = row["link_us_p50"] / row["raw_us_p50"]
    row["ratio_mean"] = row["link_us_mean"] / row["raw_us_mean"]
    row["ratio_enc_p50"] = row["link_us_p50"] / row["encode+raw_us_p50"]
    row["ratio_enc_mean"] = row["link_us_mean"] / row["encode+raw_us_mean"]
    return row


def unpack_cost(reps: int) -> dict[str, Any]:
    data = pack_ids(list(range(PROMPT_TOKENS)))
    perf = time.perf_counter
    best_list = best_array = float("inf")
    for _ in range(5):
        t0 = perf()
        for _ in range(reps):
            a = array("I")
            a.frombytes(data)
            a.tolist()
        best_list = min(best_list, (perf() - t0) / reps)
        t0 = perf()
        for _ in range(reps):
            a = array("I")
            a.frombytes(data)
        best_array = min(best_array, (perf() - t0) / reps)
    return {"bench": "enginelink-unpack", "prompt_tokens": PROMPT_TOKENS,
            "list_us": best_list * 1e6, "array_us": best_array * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few steps (< 1 min)")
    parser.add_argument("--json", type=Path, help="write the results here (one JSON line each)")
    parser.add_argument("--steps", type=int, help="steps per mode and size")
    parser.add_argument("--actives", default="1,64,256,1024", help="active request counts")
    args = parser.parse_args(argv)
    steps = args.steps or (200 if args.quick else 2000)
    actives = [int(x) for x in args.actives.split(",")]
    info = machine()
    print(f"EngineLink cost per step, {steps} steps per mode; {info['cpus']} cpus, "
          f"load {info['load_avg_1m']:.1f}, zmq {info['zmq']}", flush=True)
    header = (f"{'active':>6} {'bytes':>7} {'raw p50':>8} {'enc+raw':>8} {'link p50':>9} "
              f"{'ratio':>6} {'raw mean':>9} {'link mean':>10} {'ratio':>6} {'vs enc':>7} "
              f"{'recv raw/link':>14} {'send raw/link':>14}")
    print(header)
    rows: list[dict[str, Any]] = []
    for n in actives:
        r = run(n, steps)
        rows.append(r)
        print(f"{n:>6} {r['step_bytes']:>7} {r['raw_us_p50']:>8.1f} {r['encode+raw_us_p50']:>8.1f} "
              f"{r['link_us_p50']:>9.1f} {r['ratio_p50']:>6.2f} {r['raw_us_mean']:>9.1f} "
              f"{r['link_us_mean']:>10.1f} {r['ratio_mean']:>6.2f} {r['ratio_enc_p50']:>7.2f} "
              f"{r['raw_recv_us_p50']:>6.1f}/{r['link_poll_us_p50']:<7.1f} "
              f"{r['raw_send_us_p50']:>6.1f}/{r['link_send_us_p50']:<7.1f}", flush=True)
    u = unpack_cost(200 if args.quick else 2000)
    rows.append(u)
    print(f"unpack {PROMPT_TOKENS}-token prompt: list[int] {u['list_us']:.2f} us, "
          f"array {u['array_us']:.2f} us")
    print("(microseconds per step; ratio = link / raw, target <= 1.5; vs enc = link / encode+raw)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps({**r, "machine": info, "when": time.time()}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
