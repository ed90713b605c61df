#!/usr/bin/env python3
"""EngineLink cost per engine step vs a raw pyzmq send/recv of the same bytes.

    .venv/bin/python bench/enginelink.py [--quick] [--json PATH] [--steps N] [--actives 1,64,...]

Per step at N active requests the engine calls ``poll_requests() + poll_aborts() +
send_outputs(outputs)`` with one new token for each of the N requests (1-tuples of the step's
``(request_id, [token_id], None)``). Between steps (not timed) the textproc side, bound here with
plain pyzmq over ipc, sends the step's arrivals: N/256 new requests per step (fractional,
accumulated: an average output of 256 tokens) with 1,024-token prompts, 2 stop ids and a
sampling dict, and N/2048 aborts per step; then it reads the step frame.

Columns, per-step microseconds (median over ``--steps`` steps, modes interleaved in blocks so
machine load hits them alike), each link mode beside a raw send of the bytes IT sends:

- ``raw``: the same engine-in frames drained with ``recv(NOBLOCK)`` until EAGAIN, and the step's
  ``EngineStep`` bytes (encoded beforehand) sent with one ``send`` on sockets set up like
  EngineLink's; ``rawpk``: the same with the ``EngineStepPacked`` bytes;
- ``legacy``: EngineLink(step_format="legacy" / the "auto" default) ``send_outputs(tuples)`` ->
  EngineStep, ratio vs ``raw``;
- ``packed``: EngineLink(step_format="packed") ``send_outputs(tuples)`` -> EngineStepPacked
  (tuples turned into columns), ratio vs ``rawpk``;
- ``columns``: ``send_step(request_ids, array('I') ids)`` -> EngineStepPacked (the engine holds
  columns), ratio vs ``rawpk``;
- ``shards2``: ``send_step`` as in ``columns`` on a link to TWO detokenizer shards
  (``--detokenizers 2``): the step is split by owner (``textproc.engine.routing``) and one
  frame goes to each shard; ratio vs ``columns`` (the one-shard link);
- every link mode also does ``poll_requests() + poll_aborts()`` (decode, validate, prompt ids as
  ``array('I')``); ``send us`` splits off the send half (raw send of ready bytes vs the link's
  encode + send). Target: ratio <= 1.5.

It also prints the cost of unpacking a 1,024-token prompt to ``list[int]`` (what EngineLink
does) vs keeping the ``array('I')``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from array import array
from typing import Any

import msgspec
import zmq

from _common import write_json

from textproc.engine import EngineLink
from textproc.protocol import (
    EngineAbort,
    EngineRequest,
    EngineStepPacked,
    pack_ids,
)
from textproc.sharding import shard_of
from textproc.testing.bench_cli import bench_parser
from textproc.testing.engine import EnginePeer
from textproc.testing.machine import machine

__all__ = ["main", "run"]

PROMPT_TOKENS = 1024
ARRIVALS_PER_ACTIVE = 1 / 256
ABORTS_PER_ACTIVE = 1 / 2048
BLOCK = 50  # steps per mode before switching


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


MODES = ("raw", "raw_packed", "legacy", "packed", "columns", "shards2")


class Arrivals:
    """The engine-in frames of one step: N/256 new 1,024-token requests and N/2048 aborts at N
    active requests (fractions accumulated per mode)."""

    def __init__(self, rids: list[str]) -> None:
        self.rids = rids
        self.enc = msgspec.msgpack.Encoder()
        self.prompt = pack_ids([(i * 7919) % 150_000 for i in range(PROMPT_TOKENS)])
        self.counter = 0

    def frames(self, state: dict[str, float]) -> list[bytes]:
        n_active = len(self.rids)
        frames: list[bytes] = []
        state["req"] += n_active * ARRIVALS_PER_ACTIVE
        state["abort"] += n_active * ABORTS_PER_ACTIVE
        while state["req"] >= 1:
            state["req"] -= 1
            self.counter += 1
            frames.append(self.enc.encode(EngineRequest(
                f"new-{self.counter}", self.prompt, 256, [151643, 151645],
                {"temperature": 0.7, "top_p": 0.95})))
        while state["abort"] >= 1:
            state["abort"] -= 1
            frames.append(self.enc.encode(EngineAbort([self.rids[self.counter % n_active]])))
        return frames


def _connect(root: str, ctx: zmq.Context[Any]) -> tuple[dict[str, EnginePeer], EnginePeer,
                                                      dict[str, RawEngine], dict[str, EngineLink]]:
    """textproc's side of every mode (and shards2's second shard), the raw engines and the
    links, each link's EngineHello read."""
    peers = {m: EnginePeer(root, m.replace("_", "-"), ctx) for m in MODES}
    second = EnginePeer(root, "shards2-1", ctx)  # shards2's shard 1 (shard 0 is peers["shards2"])
    raws = {m: RawEngine(peers[m].engine_in, peers[m].engine_out) for m in ("raw", "raw_packed")}
    links = {
        "legacy": EngineLink.connect(peers["legacy"].engine_in, peers["legacy"].engine_out,
                                     step_format="legacy"),
        "packed": EngineLink.connect(peers["packed"].engine_in, peers["packed"].engine_out,
                                     step_format="packed"),
        "columns": EngineLink.connect(peers["columns"].engine_in, peers["columns"].engine_out),
        "shards2": EngineLink.connect([peers["shards2"].engine_in, second.engine_in],
                                      [peers["shards2"].engine_out, second.engine_out]),
    }
    for m in links:
        peers[m].recv_raw(10.0)  # EngineHello
    second.recv_raw(10.0)
    return peers, second, raws, links


def run(n_active: int, steps: int) -> dict[str, Any]:
    enc = msgspec.msgpack.Encoder()
    rids = [uuid.uuid4().hex for _ in range(n_active)]
    outputs = [(rid, [1000 + i % 50_000], None) for i, rid in enumerate(rids)]
    column_ids = array("I", [1000 + i % 50_000 for i in range(n_active)])
    step_bytes = enc.encode(("EngineStep", 0, outputs))
    packed_bytes = enc.encode(EngineStepPacked(0, rids, pack_ids(column_ids)))
    arrivals = Arrivals(rids).frames

    with tempfile.TemporaryDirectory(prefix="tp-bench-") as root:
        ctx: zmq.Context[Any] = zmq.Context()
        peers, second, raws, links = _connect(root, ctx)
        owning = [p for k, p in enumerate([peers["shards2"], second])
                  if any(shard_of(rid, 2) == k for rid in rids)]
        times: dict[str, list[float]] = {m: [] for m in MODES}
        recv_part: dict[str, list[float]] = {m: [] for m in MODES}
        state = {m: {"req": 0.0, "abort": 0.0} for m in MODES}
        received = {m: 0 for m in MODES}
        perf = time.perf_counter
        try:
            done = 0
            while done < steps:
                block = min(BLOCK, steps - done)
                for mode in MODES:
                    peer = peers[mode]
                    raw = raws.get(mode)
                    link = links.get(mode)
                    if raw is not None:
                        poll = raw.pull.poll
                    else:
                        assert link is not None and link._shard_ins  # noqa: SLF001
                        poll = link._shard_ins[0].poll  # noqa: SLF001 - wait outside the timed part
                    data = step_bytes if mode == "raw" else packed_bytes
                    for _ in range(block):
                        frames = arrivals(state[mode])
                        for f in frames:
                            peer.push.send(f)
                        if frames:
                            _wait_arrival(poll)
                        if raw is not None:
                            t0 = perf()
                            received[mode] += raw.step(data, recv_part[mode])
                            t1 = perf()
                        else:
                            assert link is not None
                            t0 = perf()
                            got = link.poll_requests()
                            aborted = link.poll_aborts()
                            tp = perf()
                            if mode in ("columns", "shards2"):
                                link.send_step(rids, column_ids)
                            else:
                                link.send_outputs(outputs)
                            t1 = perf()
                            recv_part[mode].append(tp - t0)
                            received[mode] += len(got) + len(aborted)
                        times[mode].append(t1 - t0)
                        if mode != "shards2":
                            peer.recv_raw(10.0)
                        else:  # a frame reaches each shard that owns one of the requests
                            for shard_peer in owning:
                                shard_peer.recv_raw(10.0)
                done += block
        finally:
            for lk in links.values():
                lk.close()
            for r in raws.values():
                r.close()
            for p in [*peers.values(), second]:
                p.close()
            ctx.term()
    return _summary(n_active, steps, len(step_bytes), len(packed_bytes), received, times,
                    recv_part)


def _summary(n_active: int, steps: int, step_bytes: int, packed_bytes: int,
             received: dict[str, int], times: dict[str, list[float]],
             recv_part: dict[str, list[float]]) -> dict[str, Any]:
    """One JSON row: per mode the median and mean us per step, its receive and send halves,
    and each link mode's ratio to the raw send of the bytes it sends."""
    row: dict[str, Any] = {
        "bench": "enginelink",
        "active": n_active,
        "steps": steps,
        "step_bytes": step_bytes,
        "packed_bytes": packed_bytes,
        "arrivals_per_step": n_active * ARRIVALS_PER_ACTIVE,
        "frames_in": received,
    }
    for mode in MODES:
        row[f"{mode}_us_p50"] = statistics.median(times[mode]) * 1e6
        row[f"{mode}_us_mean"] = statistics.fmean(times[mode]) * 1e6
        row[f"{mode}_recv_us_p50"] = statistics.median(recv_part[mode]) * 1e6
        row[f"{mode}_send_us_p50"] = statistics.median(
            [t - r for t, r in zip(times[mode], recv_part[mode])]) * 1e6
    # each link mode against the raw send of the bytes it sends
    for mode, base in (("legacy", "raw"), ("packed", "raw_packed"), ("columns", "raw_packed"),
                       ("shards2", "columns")):
        row[f"{mode}_ratio_p50"] = row[f"{mode}_us_p50"] / row[f"{base}_us_p50"]
        row[f"{mode}_ratio_mean"] = row[f"{mode}_us_mean"] / row[f"{base}_us_mean"]
    # "link" = the recommended engine path (send_step with columns), keys as in earlier runs
    row["link_us_p50"] = row["columns_us_p50"]
    row["link_us_mean"] = row["columns_us_mean"]
    row["ratio_p50"] = row["columns_ratio_p50"]
    row["ratio_mean"] = row["columns_ratio_mean"]
    received["link"] = received["columns"]
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
    parser = bench_parser(__doc__, quick="few steps (< 1 min)",
                          json_help="write the results here (one JSON line each)", model=None)
    parser.add_argument("--steps", type=int, help="steps per mode and size")
    parser.add_argument("--actives", default="1,64,256,1024", help="active request counts")
    args = parser.parse_args(argv)
    steps = args.steps or (200 if args.quick else 2000)
    actives = [int(x) for x in args.actives.split(",")]
    info = machine(versions=True)
    print(f"EngineLink cost per step, {steps} steps per mode; {info['nproc']} cpus, "
          f"load {info['load_avg'][0]:.1f}, zmq {info['zmq']}", flush=True)
    header = (f"{'active':>6} {'bytes':>13} {'raw':>6} {'legacy':>7} {'ratio':>6} "
              f"{'rawpk':>6} {'packed':>7} {'ratio':>6} {'columns':>8} {'ratio':>6} "
              f"{'shards2':>8} {'/cols':>6}   "
              f"{'send us: raw/legacy rawpk/packed/columns':>42}")
    print(header)
    rows: list[dict[str, Any]] = []
    for n in actives:
        r = run(n, steps)
        rows.append(r)
        sizes = f"{r['step_bytes']}/{r['packed_bytes']}"
        print(f"{n:>6} {sizes:>13} {r['raw_us_p50']:>6.1f} {r['legacy_us_p50']:>7.1f} "
              f"{r['legacy_ratio_p50']:>6.2f} {r['raw_packed_us_p50']:>6.1f} "
              f"{r['packed_us_p50']:>7.1f} {r['packed_ratio_p50']:>6.2f} "
              f"{r['columns_us_p50']:>8.1f} {r['columns_ratio_p50']:>6.2f} "
              f"{r['shards2_us_p50']:>8.1f} {r['shards2_ratio_p50']:>6.2f}   "
              f"{r['raw_send_us_p50']:>6.1f}/{r['legacy_send_us_p50']:<6.1f} "
              f"{r['raw_packed_send_us_p50']:>6.1f}/{r['packed_send_us_p50']:.1f}/"
              f"{r['columns_send_us_p50']:.1f}", flush=True)
    u = unpack_cost(200 if args.quick else 2000)
    rows.append(u)
    print(f"unpack {PROMPT_TOKENS}-token prompt: list[int] {u['list_us']:.2f} us, "
          f"array {u['array_us']:.2f} us")
    print("(median microseconds per step; ratio = link mode / raw send of the bytes it sends, "
          "target <= 1.5; legacy = EngineStep from send_outputs, packed = EngineStepPacked "
          "from send_outputs tuples, columns = send_step, shards2 = send_step to 2 detokenizer "
          "shards, ratio vs columns)")
    write_json(args.json, rows, info, stamp=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
