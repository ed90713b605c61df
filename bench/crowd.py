#!/usr/bin/env python3
"""Crowd: hundreds of HTTP streams that read a few events and leave, against an engine that
steps as fast as it can. Loopback only; stops by itself.

What it does: starts ``textproc serve`` with the stub engine in random mode (``--step-ms 0``,
``--max-batch 1024``) and the HTTP frontend on a free loopback port. Then ``--rounds`` times:
``--streams`` raw-socket clients at once each POST a streamed chat completion with
``max_tokens`` ``--max-tokens``, read ``--events`` SSE events and close the connection. All the
while a prober GETs ``/health`` every 50 ms on a new connection. It reports:

- ``health_ms``: p50 / p99 / max latency of ``/health`` on the API port during the crowd
  (``health_on_accept``: how many of ``health_probes`` were answered where their connection was
  accepted, ``textproc.http.probe``, summed over the frontends), and
  ``health_port_ms`` the same on the ``--health`` port (``python -m textproc.http.health``, a
  process of its own; what a load balancer should probe; target: < 100 ms), with
  ``health_port_failed`` probes that got no 200;
- ``aborted``: of the streams that left early, how many the engine saw end with ``abort``
  (``ran_to_length``: the disconnect did not reach it in time; ``finished_before_leaving``:
  the client read the end of its stream among its events, so there was nothing to abort), the
  tokens the engine had generated for them when the abort arrived (p50 / max; fewer = noticed
  sooner), and ``abort_ms``: from the client dropping its connection to the engine ending
  the request (p50 / p99 / max; CLOCK_MONOTONIC in both processes); of the streams that ran to
  ``length``, ``ran_to_length_after_leaving`` is how many ended only after their client had
  left (the others had ended before it left: it was still reading what the frontend had not yet
  sent), with the longest such wait;
- ``http_rss_mb``: the HTTP processes' RSS (summed over ``--http-workers``) before, at peak,
  and 5 s after the crowd left;
- ``worker_shares``: ``textproc_worker_requests_total`` per worker (how the load spread);
- ``stall_s``: the longest gap between two reads of a stream once its response had started;
- ``loop_lag``: the frontend's own ``textproc_http_loop_lag_seconds`` (how late its event loop
  ran a 50 ms timer): the worst, and how many probes were over 100 ms. ``/health`` is probed
  from its own process, so its latency also holds the kernel's accept queue and, on a loaded
  box, the time before the scheduler runs the frontend at all.

    .venv/bin/python bench/crowd.py [--streams 500] [--rounds 5] [--events 5]
        [--max-tokens 4000] [--workers 2] [--http-workers 1] [--quick] [--json PATH]
        [--model-dir DIR]

``--quick``: 100 streams, 2 rounds. ``CROWD_DEBUG=1`` also prints the worst probes (and when
in their round they came) and the service log. Without ``--model-dir`` it uses ``.cache/models/qwen3`` if
present, else the toy model (``textproc.testing.models.build_toy_model``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import Serve, pct, write_json

from textproc.testing.bench_cli import bench_parser, model_dir_arg
from textproc.testing.machine import machine

PROBE_EVERY_S = 0.05
SETTLE_S = 5.0  # after the crowd: wait this long before the last RSS sample


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _probe_main(host: str, port: int) -> int:
    """``crowd.py --probe HOST PORT``: GET /health every PROBE_EVERY_S on a new connection
    until stdin closes; then print one JSON list of [start, latency_s, ok] (its own process, so
    the crowd's client loop does not delay the measurement)."""
    import select
    import socket

    out: list[tuple[float, float, bool]] = []
    while not out or not select.select([sys.stdin], [], [], 0)[0]:  # at least one probe
        t0 = time.perf_counter()
        try:
            data = b""
            with socket.create_connection((host, port), timeout=10) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                while chunk := sock.recv(65536):
                    data += chunk
            out.append((t0, time.perf_counter() - t0, data.startswith(b"HTTP/1.1 200")))
        except OSError:
            out.append((t0, 10.0, False))
        time.sleep(PROBE_EVERY_S)
    print(json.dumps(out), flush=True)
    return 0


async def _one_stream(host: str, port: int, body: bytes, events: int,
                      gaps: list[float]) -> tuple[str, float, float, bool] | None:
    """POST a stream, read ``events`` SSE events, leave; (request id, when it connected, when
    it left, whether it read the stream's end first), None if refused."""
    posted = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                     b"content-type: application/json\r\ncontent-length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        data = b""
        last = time.perf_counter()
        while data.count(b"\n\n") < events + 2:  # the header block + role chunk + events
            chunk = await asyncio.wait_for(reader.read(65536), 60)
            now = time.perf_counter()
            if b"\r\n\r\n" in data:  # streaming: a gap, not the wait for acceptance
                gaps.append(now - last)
            last = now
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return None
        first = rest.split(b"\n\n", 1)[0]
        start = first.find(b"data: ")
        try:
            rid = str(json.loads(first[start + 6:])["id"])
        except (ValueError, KeyError):
            return None
        writer.transport.abort()  # leave at once, like a client that gave up
        return rid, posted, time.monotonic(), b'"finish_reason":"' in rest
    finally:
        writer.transport.abort()


def _stub_entries(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()).get("requests", {}))
    except (OSError, ValueError):
        return {}


def _metrics(host: str, port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


class Rounds:
    """What the crowd's streams saw: per stream id, when it connected and left and whether it
    saw its end; how many were refused; when each round started and how long the crowd took."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.left_at: dict[str, float] = {}
        self.stay_s: dict[str, float] = {}  # connect to leaving: what the engine ran meanwhile
        self.saw_end: set[str] = set()
        self.refused = 0
        self.round_at: list[float] = []
        self.gaps: list[float] = []
        self.crowd_s = 0.0

    async def run(self, args: argparse.Namespace, host: str, port: int, model: str) -> None:
        rng = random.Random(0)
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            self.round_at.append(time.perf_counter())
            bodies = [json.dumps({
                "model": model, "stream": True, "max_tokens": args.max_tokens,
                "messages": [{"role": "user", "content": f"tell me a story {rng.random()}"}],
            }).encode() for _ in range(args.streams)]
            got = await asyncio.gather(*(_one_stream(host, port, b, args.events, self.gaps)
                                         for b in bodies), return_exceptions=True)
            for g in got:
                if isinstance(g, tuple):
                    self.ids.append(g[0])
                    self.left_at[g[0]] = g[2]
                    self.stay_s[g[0]] = g[2] - g[1]
                    if g[3]:
                        self.saw_end.add(g[0])
                else:
                    self.refused += 1
        self.crowd_s = time.perf_counter() - t0


async def _engine_view(rounds: Rounds, stats_file: Path) -> dict[str, Any]:
    """How many of the disconnects reached the engine, and how fast (stats file: every 0.5 s)."""
    ids, left_at, stay_s = rounds.ids, rounds.left_at, rounds.stay_s
    deadline = time.monotonic() + 20
    entries: dict[str, Any] = {}
    while time.monotonic() < deadline:
        entries = _stub_entries(stats_file)
        if all(entries.get(i, {}).get("finish_reason") for i in ids):
            break
        await asyncio.sleep(0.5)
    reasons = [entries.get(i, {}).get("finish_reason") for i in ids]
    generated = sorted(float(entries[i]["generated"]) for i in ids
                       if entries.get(i, {}).get("finish_reason") == "abort")
    abort_s = sorted(max(0.0, float(entries[i]["ended_at"]) - left_at[i]) for i in ids
                     if entries.get(i, {}).get("finish_reason") == "abort")
    ran_on = [i for i in ids if entries.get(i, {}).get("finish_reason") == "length"]
    return {
        "left_early": len(ids), "refused": rounds.refused,
        "aborted": reasons.count("abort"),
        "ran_to_length": len([i for i in ran_on if i not in rounds.saw_end]),
        "finished_before_leaving": len([i for i in ran_on if i in rounds.saw_end]),
        "unfinished": reasons.count(None),
        "abort_ms_p50": round(pct(abort_s, 50) * 1000, 1) if abort_s else None,
        "abort_ms_p99": round(pct(abort_s, 99) * 1000, 1) if abort_s else None,
        "abort_ms_max": round(abort_s[-1] * 1000, 1) if abort_s else None,
        # connect to leaving (reading the role chunk and --events events): the engine runs
        # the stream meanwhile, so a stay longer than max_tokens steps runs it to length
        "stay_s_p50": round(pct(sorted(stay_s.values()), 50), 2) if stay_s else None,
        "stay_s_max": round(max(stay_s.values()), 2) if stay_s else None,
        "stay_s_of_ran_to_length_min": round(min(stay_s[i] for i in ran_on), 2)
        if ran_on else None,
        # of those that ran to length: how many the engine ended only after their client left
        # (the rest had ended already: the client was still reading the backlog), and the
        # longest such wait (an abort that was too slow, or lost)
        "ran_to_length_after_leaving": sum(1 for i in ran_on
                                           if float(entries[i]["ended_at"]) > left_at[i]),
        "ran_to_length_after_leaving_ms_max": round(max(
            [(float(entries[i]["ended_at"]) - left_at[i]) * 1000 for i in ran_on] + [0.0]), 1),
        "generated_at_abort_p50": pct(generated, 50) if generated else None,
        "generated_at_abort_max": generated[-1] if generated else None,
    }


def _health_view(probes: list[Any], port_probes: list[Any], host: str, port: int) -> dict[str, Any]:
    """The probes on the API port and on the health port, and the frontend's own metrics."""
    health = [latency for _, latency, _ in probes]
    port_health = [latency for _, latency, _ in port_probes]
    shares = {}
    lag: dict[str, float] = {}
    on_accept = 0
    for line in _metrics(host, port).splitlines():
        if line.startswith("textproc_worker_requests_total{"):
            shares[line.split('"')[1]] = int(float(line.split()[-1]))
        elif line.startswith(("textproc_http_loop_lag_max_seconds ",
                              'textproc_http_loop_lag_seconds_bucket{le="0.1"}',
                              "textproc_http_loop_lag_seconds_count")):
            lag[line.split()[0]] = float(line.split()[-1])
        elif line.startswith("textproc_http_health_on_accept_total "):
            on_accept = int(float(line.split()[-1]))
    return {
        "health_ms_p50": round(pct(health, 50) * 1000, 1),
        "health_ms_p99": round(pct(health, 99) * 1000, 1),
        "health_ms_max": round(max(health, default=float("nan")) * 1000, 1),
        "health_probes": len(health),
        "health_on_accept": on_accept,
        "health_port_ms_p50": round(pct(port_health, 50) * 1000, 1),
        "health_port_ms_p99": round(pct(port_health, 99) * 1000, 1),
        "health_port_ms_max": round(max(port_health, default=float("nan")) * 1000, 1),
        "health_port_probes": len(port_health),
        "health_port_failed": sum(1 for _, _, ok in port_probes if not ok),
        "worker_shares": shares,
        # the frontend's own view: how late its loop ran a 50 ms timer during the run
        "loop_lag_ms_max": round(lag.get("textproc_http_loop_lag_max_seconds", 0) * 1000, 1),
        "loop_lags_over_100ms": int(lag.get("textproc_http_loop_lag_seconds_count", 0)
                                    - lag.get('textproc_http_loop_lag_seconds_bucket{le="0.1"}', 0)),
    }


async def _crowd(args: argparse.Namespace, host: str, port: int, http_pids: list[int],
                 health: tuple[str, int], stats_file: Path) -> dict[str, Any]:
    stop = asyncio.Event()
    load_start = os.getloadavg()[0]

    def rss() -> float:
        return sum(_rss_mb(pid) for pid in http_pids)

    rss_before = rss()
    peak = [rss_before]

    async def sample_rss() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss())
            await asyncio.sleep(0.25)

    prober, health_prober = [await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--probe", h, str(p), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE) for h, p in ((host, port), health)]
    sampler = asyncio.ensure_future(sample_rss())
    import urllib.request

    with urllib.request.urlopen(f"http://{host}:{port}/v1/models", timeout=10) as resp:
        model = json.loads(resp.read())["data"][0]["id"]
    rounds = Rounds()
    await rounds.run(args, host, port, model)
    stop.set()
    results = []
    for proc in (prober, health_prober):
        assert proc.stdin is not None
        proc.stdin.close()
        results.append(json.loads((await proc.communicate())[0]))
    probes, port_probes = results
    if os.environ.get("CROWD_DEBUG"):
        worst = sorted(((latency, t) for t, latency, _ in probes), reverse=True)[:8]
        print("worst probes (latency s, since round start s):",
              [(round(h, 3), round(t - max(r for r in rounds.round_at if r <= t), 2))
               for h, t in worst], file=sys.stderr)
    await sampler
    engine = await _engine_view(rounds, stats_file)
    await asyncio.sleep(SETTLE_S)
    rss_after = rss()
    return {
        "streams": args.streams, "rounds": args.rounds, "events": args.events,
        "max_tokens": args.max_tokens, "http_workers": args.http_workers,
        "crowd_s": round(rounds.crowd_s, 2),
        **engine,
        **_health_view(probes, port_probes, host, port),
        "stall_s_max": round(max(rounds.gaps), 3) if rounds.gaps else None,
        "http_rss_mb_before": round(rss_before, 1), "http_rss_mb_peak": round(peak[0], 1),
        "http_rss_mb_after": round(rss_after, 1),
        "load_avg_start": load_start,
        "load_avg": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--probe"]:
        return _probe_main(argv[1], int(argv[2]))
    p = bench_parser(__doc__, quick="100 streams, 2 rounds", json_help="append the result as a JSON line",
                     prog="bench/crowd.py")
    p.add_argument("--streams", type=int, default=500, help="streams at once (default 500)")
    p.add_argument("--rounds", type=int, default=5, help="crowds one after the other (default 5)")
    p.add_argument("--events", type=int, default=5, help="SSE events each reads (default 5)")
    p.add_argument("--max-tokens", type=int, default=4000, help="per stream (default 4000)")
    p.add_argument("--workers", type=int, default=2, help="tokenizer workers (default 2)")
    p.add_argument("--http-workers", type=int, default=1,
                   help="HTTP frontend processes on the port (default 1)")
    args = p.parse_args(argv)
    if args.quick:
        args.streams, args.rounds = 100, 2
    tmp = Path(tempfile.mkdtemp(prefix="tp-crowd-"))
    model = model_dir_arg(p, args.model_dir, toy_dir=tmp / "toy")
    serve = Serve(model, workers=args.workers, engine="stub", max_model_len=args.max_tokens + 512,
                  extra=["--stub-mode", "random", "--stub-arg=--step-ms=0",
                         "--stub-arg=--max-batch=1024", "--http", "127.0.0.1:0",
                         "--http-workers", str(args.http_workers), "--health", "127.0.0.1:0"])
    stats_file = serve.serve.stats_file  # the launcher's engine_stub --stats-file
    try:
        deadline = time.monotonic() + 60
        http_file = serve.runtime_dir / "http.json"
        while not http_file.is_file():
            if time.monotonic() > deadline:
                raise RuntimeError("no HTTP frontend:\n" + serve.log()[-3000:])
            time.sleep(0.05)
        info = json.loads(http_file.read_text())
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            health = (info["health"]["host"], int(info["health"]["port"]))
            row = runner.run(_crowd(args, info["host"], int(info["port"]),
                                    [int(p) for p in info["pids"]], health, stats_file))
    finally:
        if os.environ.get("CROWD_DEBUG"):
            print(serve.log()[-4000:], file=sys.stderr)
        serve.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(row), flush=True)
    write_json(args.json, [row], machine(), stamp=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
