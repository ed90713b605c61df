#!/usr/bin/env python3
"""End to end: requests/s and the latency textproc adds, over ipc and tcp.

    .venv/bin/python bench/e2e.py [--quick] [--json PATH] [--rates 50,100,...] [--endpoints ipc,tcp]
        [--duration S] [--step-ms X] [--max-tokens N] [--workers N] [--detokenizers N] [--plot PNG]
        [--probe]

Set-up: ``textproc serve --engine external --workers N`` and the timing engine of
``textproc.testing.engine`` (``EngineProcess``: an ``EngineLink`` step loop with a fixed
``--step-ms`` cadence, default 10 ms, like a GPU decode step; every running request gets one
token per step, ``length`` at ``max_tokens``; it records when each request arrived and when each
step was sent). It is used instead of ``engine_stub`` because the stub does not record per-token
send times. The output tokens are single ASCII letters, so the characters a client has received
= tokens received.

Load: one asyncio (uvloop) ``TextClient`` in this process, open loop: Poisson arrivals at each
``--rates`` value for ``--duration`` seconds; each request is ``complete(prompt, max_tokens=32,
stop=[2 strings that never match])`` with a different ~50-token prompt of mixed real text
(``textproc/testing/corpus.py``). Levels go up until saturation (achieved < 90% of offered, or
errors).

Per request, with ``perf_counter`` (CLOCK_MONOTONIC, shared by all processes):

- ``TTFT``: client send -> first token at the client; ``engine TTFT``: request arrived at the
  engine -> step with its first token sent; ``TTFT added`` = TTFT - engine TTFT (client ->
  worker -> detokenizer -> engine, and engine -> detokenizer -> client for the first token);
- ``token delay`` = when a token reached the client - when the engine sent its step: what
  textproc adds to every token (the output path, including the client's own loop);
- ``ITL added`` = client inter-token gap - engine inter-step gap for the same tokens.

Percentiles p50/p99 over all requests (TTFT) or all tokens (delay, ITL) of a level. The
``floor`` line (``bench/hop_probe.py``, before the service starts): round trips to an echo
process, paced, pyzmq and a plain unix socket: what any hop between processes costs on this
machine (TTFT added crosses 5 hops: client -> worker -> detokenizer -> engine -> detokenizer ->
client; a token's delay 2). ``--probe`` runs the same probe beside every level, so the floor
under that very load is printed next to it (the probe's own wake-ups add to the load). Target:
under 2 ms added at p99 at 500 requests/s. ``--plot`` writes a PNG of the latency
distributions per level (needs matplotlib, the ``bench`` extra).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    Progress,
    Serve,
    letter_ids,
    make_prompts,
    pct,
    print_table,
    pyplot,
    save_figure,
    write_json,
)

from textproc.testing.bench_cli import bench_parser, model_dir_arg
from textproc.testing.engine import EngineProcess
from textproc.testing.machine import cpu_seconds, describe, machine

__all__ = ["main"]

STOPS = ["<|NEVER|>", "\n@@@@\n"]
HOP_PROBE = Path(__file__).resolve().parent / "hop_probe.py"


class Record:
    __slots__ = ("rid", "t_send", "times", "counts", "error")

    def __init__(self, rid: str, t_send: float) -> None:
        self.rid = rid
        self.t_send = t_send
        self.times: list[float] = []  # client event times
        self.counts: list[int] = []  # tokens received so far at that event
        self.error: str | None = None


async def _level(client: Any, prompts: list[str], rate: float, duration: float, max_tokens: int,
                 tag: str, seed: int, alive: Any) -> tuple[list[Record], float, float]:
    rng = random.Random(seed)
    perf = time.perf_counter
    records: list[Record] = []
    tasks: list[asyncio.Task[None]] = []
    progress = Progress(f"{tag} {rate:g} req/s")

    async def one(i: int) -> None:
        rid = f"{tag}-{rate:g}-{i}"
        rec = Record(rid, perf())
        records.append(rec)
        n = 0
        try:
            async for ev in client.complete(prompts[i % len(prompts)], max_tokens=max_tokens,
                                            stop=STOPS, request_id=rid):
                t = perf()
                got = len(ev.text)
                if got:
                    n += got
                    rec.times.append(t)
                    rec.counts.append(n)
        except Exception as e:  # noqa: BLE001 - counted and shown, the run goes on
            rec.error = f"{type(e).__name__}: {e}"

    t0 = perf()
    end = t0 + duration
    next_t = t0
    i = 0
    while True:
        next_t += rng.expovariate(rate)
        if next_t >= end:
            break
        delay = next_t - perf()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
        i += 1
        progress(lambda: f"{i} sent, {sum(1 for r in records if r.counts and r.counts[-1] >= max_tokens)} done")
    deadline = perf() + 60
    pending = set(tasks)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=0.5)
        problem = alive()
        if pending and (problem or perf() > deadline):
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise RuntimeError(problem or f"{len(pending)} requests still open 60 s after the last "
                                          "arrival")
    return records, t0, perf()


def analyse(records: list[Record], timings: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    steps = timings["steps"]
    reqs = timings["requests"]
    ttft: list[float] = []
    ttft_added: list[float] = []
    engine_ttft: list[float] = []
    to_engine: list[float] = []  # client send -> the engine has the request
    first_back: list[float] = []  # the first token's step sent -> the first token at the client
    delay: list[float] = []
    itl: list[float] = []
    itl_added: list[float] = []
    errors = 0
    complete = 0
    for rec in records:
        eng = reqs.get(rec.rid)
        if rec.error is not None or eng is None or not rec.counts:
            errors += 1
            continue
        arrived, s0, _ = eng
        if rec.counts[-1] >= max_tokens:
            complete += 1
        # client time at which token k (0-based) arrived
        tok_time: list[float] = []
        for t, c in zip(rec.times, rec.counts):
            while len(tok_time) < c:
                tok_time.append(t)
        if s0 + len(tok_time) > len(steps):
            errors += 1
            continue
        emit = steps[s0:s0 + len(tok_time)]
        t_first = tok_time[0] - rec.t_send
        e_first = emit[0] - arrived
        ttft.append(t_first)
        engine_ttft.append(e_first)
        ttft_added.append(t_first - e_first)
        to_engine.append(arrived - rec.t_send)
        first_back.append(tok_time[0] - emit[0])
        for k in range(len(tok_time)):
            delay.append(tok_time[k] - emit[k])
            if k:
                gap = tok_time[k] - tok_time[k - 1]
                itl.append(gap)
                itl_added.append(gap - (emit[k] - emit[k - 1]))
    ms = 1000.0
    return {
        "requests": len(records), "completed": complete, "errors": errors,
        "ttft_ms_p50": pct(ttft, 50) * ms, "ttft_ms_p99": pct(ttft, 99) * ms,
        "engine_ttft_ms_p50": pct(engine_ttft, 50) * ms,
        "ttft_added_ms_p50": pct(ttft_added, 50) * ms, "ttft_added_ms_p99": pct(ttft_added, 99) * ms,
        "to_engine_ms_p50": pct(to_engine, 50) * ms, "to_engine_ms_p99": pct(to_engine, 99) * ms,
        "first_back_ms_p50": pct(first_back, 50) * ms, "first_back_ms_p99": pct(first_back, 99) * ms,
        "delay_ms_p50": pct(delay, 50) * ms, "delay_ms_p99": pct(delay, 99) * ms,
        "itl_ms_p50": pct(itl, 50) * ms, "itl_ms_p99": pct(itl, 99) * ms,
        "itl_added_ms_p50": pct(itl_added, 50) * ms, "itl_added_ms_p99": pct(itl_added, 99) * ms,
        "_ttft_added": ttft_added, "_delay": delay,
    }


def run_endpoints(model: Path, kind: str, workers: int, rates: list[float], duration: float,
                  max_tokens: int, step_ms: float, prompts: list[str], ids: list[int],
                  warm: int, *, detokenizers: int = 1, probe: bool = False) -> list[dict[str, Any]]:
    import uvloop

    from textproc.client import TextClient

    serve = Serve(model, workers=workers, engine="external", endpoints=kind,
                  extra=["--detokenizers", str(detokenizers)])
    engine = EngineProcess(serve.engine_ins, serve.engine_outs, ids, step_ms=step_ms).start()
    results: list[tuple[float, list[Record], float, float, dict[str, float], float]] = []
    floors: list[dict[str, Any] | None] = []  # the hop probe beside each level

    def alive() -> str | None:
        if engine.proc.poll() is not None:
            return f"the fake engine exited with {engine.proc.returncode}"
        if serve.exit_code() is not None:
            return f"textproc serve exited with {serve.exit_code()}:\n{serve.log()[-2000:]}"
        return None

    try:
        async def drive() -> None:
            async with await TextClient.connect(serve.runtime_dir, timeout_s=120) as client:
                # warm-up: every worker and the detokenizer see a few requests first
                await _level(client, prompts, max(20.0, warm / 2.0), 2.0, max_tokens, f"warm-{kind}", 0,
                             alive)
                for k, rate in enumerate(rates):
                    pids = {**serve.pids(), "engine": engine.pid, "bench": os.getpid()}
                    cpu0 = {n: cpu_seconds(p) for n, p in pids.items()}
                    # 5 ms apart (200 wake-ups/s of the echo): less load than the idle floor's
                    prober = start_probe(kind, interval_ms=5.0) if probe else None
                    try:
                        records, t0, t1 = await _level(client, prompts, rate, duration,
                                                       max_tokens, kind, k + 1, alive)
                    finally:
                        floors.append(finish_probe(prober) if prober is not None else None)
                    cpu = {n: cpu_seconds(p) - cpu0[n] for n, p in pids.items()}
                    results.append((rate, records, t0, t1, cpu, os.getloadavg()[0]))
                    done = sum(1 for r in records if r.error is None and r.counts
                               and r.counts[-1] >= max_tokens)
                    achieved = done / (t1 - t0)
                    print(f"  {kind} {rate:>6g} req/s offered: {achieved:7.1f} completed/s, "
                          f"{sum(1 for r in records if r.error)} errors, load "
                          f"{os.getloadavg()[0]:.1f}", flush=True)
                    if achieved < 0.9 * rate or any(r.error for r in records):
                        print(f"  {kind}: saturated at {rate:g} req/s offered", flush=True)
                        break

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(drive())
    finally:
        timings = engine.stop()
        serve.close()
    rows = []
    for (rate, records, t0, t1, cpu, load), floor in zip(results, floors):
        a = analyse(records, timings, max_tokens)
        rows.append({"bench": "e2e", "endpoints": kind, "workers": workers, "detokenizers": detokenizers, "offered_rps": rate,
                     "achieved_rps": a["completed"] / (t1 - t0), "duration_s": t1 - t0,
                     "max_tokens": max_tokens, "step_ms": step_ms,
                     "tokens_per_s": a["completed"] * max_tokens / (t1 - t0),
                     "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
                     "load_avg_1m": load, "floor_beside": floor, **a})
    return rows


def start_probe(kind: str, count: int = 0, interval_ms: float = 2.5) -> subprocess.Popen[str]:
    """``hop_probe.py`` in its own process: round trips to an echo process (pyzmq over ``kind``,
    and a unix socket), one every ``interval_ms``, until ``count`` of each, or (0) until
    ``finish_probe``."""
    return subprocess.Popen([sys.executable, str(HOP_PROBE), "--count", str(count),
                             "--transport", kind, "--interval-ms", str(interval_ms)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def finish_probe(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """Stop a probe (closing its stdin ends a ``count`` 0 probe) and take its JSON line."""
    out, _ = proc.communicate(timeout=60)
    if proc.returncode != 0 or not out.strip():
        raise RuntimeError(f"bench/hop_probe.py exited with {proc.returncode}")
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return row


def hop_floor(kind: str, n: int) -> dict[str, Any]:
    """The machine's floor for one process hop and back, idle (before the service starts)."""
    return {**finish_probe(start_probe(kind, n)), "bench": "e2e-hop-floor", "endpoints": kind}


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    kinds = sorted({r["endpoints"] for r in rows})
    fig, axes = plt.subplots(len(kinds), 2, figsize=(11, 3.6 * len(kinds)), squeeze=False)
    for row_i, kind in enumerate(kinds):
        for col, (key, title) in enumerate((("_ttft_added", "TTFT added (ms)"),
                                            ("_delay", "token delay (ms)"))):
            ax = axes[row_i][col]
            for r in rows:
                if r["endpoints"] != kind or not r[key]:
                    continue
                xs = sorted(v * 1000 for v in r[key])
                ys = [(i + 1) / len(xs) for i in range(len(xs))]
                ax.plot(xs, ys, label=f"{r['offered_rps']:g} req/s")
            ax.set_xscale("log")
            ax.set_title(f"{kind}: {title}, CDF")
            ax.axvline(2.0, color="grey", linestyle=":", linewidth=1)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    save_figure(fig, path)
    return True


def _floor_text(f: dict[str, Any]) -> str:
    return (f"round trip to an echo process, pyzmq {f['zmq_transport']} p50 {f['zmq_ms_p50']:.3f} "
            f"/ p99 {f['zmq_ms_p99']:.3f} ms, unix socket p50 {f['unix_ms_p50']:.3f} / p99 "
            f"{f['unix_ms_p99']:.3f} ms ({f['round_trips']} each, load {f['load_avg_1m']:.1f})")


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="two low rates, ipc only, short (< 1 min)",
                     json_help="append one JSON line per level here")
    p.add_argument("--rates", help="offered requests/s, comma list")
    p.add_argument("--endpoints", help="ipc,tcp (default both; quick: ipc)")
    p.add_argument("--duration", type=float, help="seconds per level (default 3 quick / 8)")
    p.add_argument("--step-ms", type=float, default=10.0, help="the engine's step cadence")
    p.add_argument("--max-tokens", type=int, help="tokens per request (default 16 quick / 32)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--detokenizers", type=int, default=1,
                   help="detokenizer shards (serve --detokenizers); the fake engine connects to each")
    p.add_argument("--plot", type=Path, help="PNG with the latency CDFs")
    p.add_argument("--probe", action="store_true",
                   help="run bench/hop_probe.py beside every level: the floor of one round trip "
                   "under the same load (it adds two processes waking 200 times/s, which raises "
                   "the TTFT+ tail it sits beside)")
    args = p.parse_args(argv)
    model = model_dir_arg(p, args.model_dir)
    rates = [float(x) for x in (args.rates or ("20,100" if args.quick else
                                               "50,100,200,300,500,750,1000,1500")).split(",")]
    kinds = (args.endpoints or ("ipc" if args.quick else "ipc,tcp")).split(",")
    duration = args.duration or (3.0 if args.quick else 8.0)
    max_tokens = args.max_tokens or (16 if args.quick else 32)
    info = machine()
    print(f"e2e: {describe(info)}", flush=True)
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer.from_file(str(model / "tokenizer.json"))
    prompts = make_prompts(hf, 50, 500, seed=21)
    ids = letter_ids(hf)
    rows: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    for kind in kinds:
        floors.append(hop_floor(kind, 100 if args.quick else 1000))
        rows += run_endpoints(model, kind, args.workers, rates, duration, max_tokens,
                              args.step_ms, prompts, ids, int(rates[0]),
                              detokenizers=args.detokenizers, probe=args.probe)
    print()
    print_table(rows, [("endpoints", "endpoints", ""), ("offered/s", "offered_rps", "g"),
                       ("done/s", "achieved_rps", ".1f"), ("err", "errors", "d"),
                       ("TTFT p50", "ttft_ms_p50", ".2f"), ("TTFT p99", "ttft_ms_p99", ".2f"),
                       ("eng TTFT p50", "engine_ttft_ms_p50", ".2f"),
                       ("TTFT+ p50", "ttft_added_ms_p50", ".2f"), ("TTFT+ p99", "ttft_added_ms_p99", ".2f"),
                       ("to eng p50", "to_engine_ms_p50", ".2f"), ("to eng p99", "to_engine_ms_p99", ".2f"),
                       ("1st back p99", "first_back_ms_p99", ".2f"),
                       ("delay p50", "delay_ms_p50", ".2f"), ("delay p99", "delay_ms_p99", ".2f"),
                       ("ITL p50", "itl_ms_p50", ".2f"), ("ITL+ p99", "itl_added_ms_p99", ".2f"),
                       ("load", "load_avg_1m", ".1f")])
    print(f"(ms; engine step {args.step_ms:g} ms, {max_tokens} tokens per request; TTFT+ = TTFT - "
          "engine TTFT = (to eng: client send -> engine has it) + (1st back: its first step sent -> "
          "first token at the client), delay = token at client - step sent by engine, ITL+ = "
          "client gap - engine gap; target: < 2 ms added at p99 at 500 req/s)")
    for r in rows:
        per = {k: v / max(1, r["completed"]) * 1000 for k, v in r["cpu_s"].items()}
        print(f"CPU per request, {r['endpoints']} {r['offered_rps']:g} req/s (ms): "
              + ", ".join(f"{k} {v:.3f}" for k, v in per.items()))
    for f in floors:
        print(f"floor, {f['endpoints']}, idle: {_floor_text(f)}; TTFT+ crosses 5 process hops (2.5 "
              "round trips), delay 2 hops")
    for r in rows:
        if r["floor_beside"] is not None:
            print(f"floor beside {r['endpoints']} {r['offered_rps']:g} req/s: "
                  f"{_floor_text(r['floor_beside'])}")
    if args.plot:
        if plot(rows, args.plot):
            print(f"plot: {args.plot}")
    for r in rows:
        r.pop("_ttft_added", None)
        r.pop("_delay", None)
    write_json(args.json, rows + floors, info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
