#!/usr/bin/env python3
"""Soak: thousands of concurrent streams against ``textproc serve`` (stub engine) for N minutes.

What it does: starts ``textproc serve --engine stub`` (echo mode, ``--step-ms``) in a subprocess
with its own runtime dir, connects one ``TextClient`` and keeps ``--streams`` chat streams in
flight for the whole run: when one ends the next starts. The mix covers every way per-request
state ends: most streams run to the end (``stop``), some hit ``max_tokens`` (``length``), some
match a stop string (aborted in the engine by the detokenizer), some are cancelled by the
client after a few events (``Abort``), and a few are invalid (refused by the worker, no state).
Every ``--sample-s`` seconds it reads VmRSS of every service process from ``/proc/<pid>/status``
(pids from ``processes.json``, so restarts would show) and prints one table row. At the end it
stops the load, waits for the service to go idle, reads every process's counters (``Stats``) and
prints two verdicts:

- memory: flat when no process's RSS grew by more than ``max(8 MB, 5%)`` between the first
  sample after warm-up (1/4 of the run) and the end (a leak of per-request state at thousands
  of requests per second shows as steady growth; allocator noise does not cross that). The
  detokenizer's bounded memory of finished ids (60 s, column ``done_ids``) is full after the
  first minute, so runs shorter than ~4 minutes may still see it fill. The engine stub's RSS
  is printed but not judged: it is a test tool that keeps per-request stats of its last
  200,000 requests;
- state: the detokenizer's ``live_requests``, ``early_requests`` and ``live_clients`` are back
  to 0 and every stream ended (completed, or with the error its kind expects).

Exit status 0 when both verdicts pass, 1 otherwise.

    .venv/bin/python bench/soak.py [--minutes 10] [--streams 2000] [--quick] [--model-dir DIR]

``--quick``: 30 s, 300 streams. Without ``--model-dir`` it uses ``.cache/models/qwen3`` when
present, else a toy byte-level BPE model built with HF ``tokenizers`` (the soak measures the
service's bookkeeping; the vocabulary only changes the per-token cost).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from textproc.client import TextClient
from textproc.errors import TextprocError
from textproc.service.launcher import ServeProcess
from textproc.testing.bench_cli import bench_parser, model_dir_arg
from textproc.testing.models import REPO_ROOT

WORDS = ["alpha", "beta", "gamma", "delta", "你好", "世界", "😀", "naïve", "café", "x=1;", "\n"]


def _rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _pids(runtime_dir: Path) -> dict[str, int]:
    info = json.loads((runtime_dir / "processes.json").read_text())
    out = {"supervisor": int(info["supervisor"])}
    for key in ("detokenizer", "engine"):
        if info.get(key):
            out[key] = int(info[key])
    for i, pid in sorted(info.get("workers", {}).items()):
        out[f"worker-{i}"] = int(pid)
    return out


class Load:
    """Keeps ``streams`` chats in flight until ``stop`` is set; counts how each ended."""

    def __init__(self, client: TextClient, streams: int, seed: int) -> None:
        self.client = client
        self.streams = streams
        self.rng = random.Random(seed)
        self.stop = asyncio.Event()
        self.counts: dict[str, int] = {}
        self.unexpected: list[str] = []
        self.started = 0
        self.tokens = 0

    def _count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    async def one(self) -> None:
        rng = self.rng
        kind = rng.choices(["full", "length", "stop", "cancel", "invalid"], [60, 15, 10, 10, 5])[0]
        n = rng.randint(5, 60)
        text = " ".join(rng.choice(WORDS) for _ in range(n))
        self.started += 1
        kwargs: dict[str, Any] = {}
        if kind == "length":
            kwargs["max_tokens"] = rng.randint(1, 8)
        elif kind == "stop":
            text += " STOPHERE and more words after it"
            kwargs["stop"] = ["STOPHERE"]
        messages = [{"role": "user" if kind != "invalid" else "", "content": text}]
        events = 0
        try:
            stream = self.client.chat(messages, **kwargs)
            finish = None
            async for event in stream:
                events += 1
                finish = event.finish_reason
                if event.usage is not None:
                    self.tokens += event.usage.completion_tokens
                if kind == "cancel" and events >= 3:
                    break
            if kind == "cancel":
                await stream.aclose()  # type: ignore[attr-defined]
                self._count("cancelled")
            else:
                self._count(f"finish:{finish}")
                expected = {"full": "stop", "length": "length", "stop": "stop"}[kind]
                if finish != expected and not (kind == "length" and finish == "stop"):
                    self.unexpected.append(f"{kind} ended with {finish}")
        except TextprocError as e:
            key = f"error:{getattr(e, 'kind', type(e).__name__)}"
            self._count(key)
            if kind != "invalid":
                self.unexpected.append(f"{kind}: {e}")

    async def run(self) -> None:
        async def lane() -> None:
            while not self.stop.is_set():
                await self.one()

        await asyncio.gather(*(lane() for _ in range(self.streams)))


def _verdict_memory(samples: list[dict[str, int]], warm_index: int) -> tuple[bool, list[str]]:
    lines, ok = [], True
    first, last = samples[warm_index], samples[-1]
    for name in last:
        if name not in first or first[name] <= 0:
            continue
        grew_kb = last[name] - first[name]
        limit_kb = max(8 * 1024, first[name] * 0.05)
        flat = grew_kb <= limit_kb
        judged = name != "engine"  # the stub is a test tool, not textproc (see below)
        ok &= flat or not judged
        lines.append(f"  {name:<12} {first[name] / 1024:8.1f} MB -> {last[name] / 1024:8.1f} MB "
                     f"({grew_kb / 1024:+.1f} MB, limit +{limit_kb / 1024:.1f}) "
                     f"{'flat' if flat else 'GREW'}"
                     + ("" if judged else "  (engine_stub: not judged; it keeps stats of its "
                        "last 200,000 requests, so it grows until then)"))
    return ok, lines


async def soak(args: argparse.Namespace, runtime_dir: Path) -> int:
    duration = args.seconds if args.seconds else args.minutes * 60
    async with await TextClient.connect(runtime_dir, timeout_s=120) as client:
        load = Load(client, args.streams, args.seed)
        runner = asyncio.ensure_future(load.run())
        t0 = time.monotonic()
        samples: list[dict[str, int]] = []
        header = None
        last_started, last_t = 0, t0
        while time.monotonic() - t0 < duration:
            await asyncio.sleep(min(args.sample_s, max(0.0, duration - (time.monotonic() - t0))))
            if runner.done():
                break
            try:
                counters = next(x for x in await client.stats(timeout_s=10)
                                if x.role == "detokenizer").counters
            except TextprocError:
                counters = {}
            pids = _pids(runtime_dir)
            rss = {name: _rss_kb(pid) or 0 for name, pid in pids.items()}
            samples.append(rss)
            now = time.monotonic()
            rate = (load.started - last_started) / max(1e-9, now - last_t)
            last_started, last_t = load.started, now
            if header is None:
                header = list(rss)
                print(f"{'t_s':>6} {'req/s':>7} {'started':>8} {'in-flight':>9} {'detok_live':>10} "
                      f"{'done_ids':>8} " +
                      " ".join(f"{n + '_MB':>14}" for n in header), flush=True)
            print(f"{now - t0:6.0f} {rate:7.0f} {load.started:8d} {client.pending():9d} "
                  f"{counters.get('live_requests', -1):10d} {counters.get('done_ids_kept', -1):8d} " +
                  " ".join(f"{rss.get(n, 0) / 1024:14.1f}" for n in header), flush=True)
        load.stop.set()
        await asyncio.wait_for(runner, 120)
        elapsed = time.monotonic() - t0
        # the service goes idle: aborts and late engine outputs settle
        deadline = time.monotonic() + 20
        while True:
            stats = await client.stats(timeout_s=10)
            detok = next(s for s in stats if s.role == "detokenizer").counters
            idle = detok["live_requests"] == 0 and detok["early_requests"] == 0 and \
                detok["live_clients"] == 0
            if idle or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    print(f"\n{load.started} streams in {elapsed:.0f} s ({load.started / elapsed:.0f}/s), "
          f"{load.tokens} completion tokens; endings: "
          + ", ".join(f"{k}={v}" for k, v in sorted(load.counts.items())))
    keys = ("requests_submitted", "requests_finished", "requests_failed", "requests_aborted",
            "stop_string_aborts", "early_outputs_buffered", "early_outputs_dropped",
            "outputs_unroutable", "live_requests", "early_requests", "live_clients", "engine_backlog")
    print("detokenizer: " + ", ".join(f"{k}={detok.get(k)}" for k in keys))
    state_ok = idle and not load.unexpected
    print(f"state verdict: {'OK' if state_ok else 'FAIL'}: per-request state "
          f"{'back to zero' if idle else 'NOT back to zero'}"
          + (f"; {len(load.unexpected)} unexpected endings, e.g. {load.unexpected[:3]}"
             if load.unexpected else "; every stream ended as its kind expects"))
    mem_ok = True
    if len(samples) >= 4:
        mem_ok, lines = _verdict_memory(samples, len(samples) // 4)
        print(f"memory verdict: {'FLAT' if mem_ok else 'GROWING'} (RSS from the sample at 1/4 of "
              "the run to the last):")
        print("\n".join(lines))
    else:
        print("memory verdict: too few samples (run longer or lower --sample-s)")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({"bench": "soak", "seconds": elapsed, "streams": args.streams,
                                "started": load.started, "counts": load.counts,
                                "detokenizer": detok, "rss_kb": samples,
                                "state_ok": state_ok, "memory_flat": mem_ok}) + "\n")
    return 0 if state_ok and mem_ok else 1


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="30 s, 300 streams",
                     json_help="append the result as one JSON line")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=None, help="overrides --minutes")
    p.add_argument("--streams", type=int, default=2000, help="concurrent streams kept in flight")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--step-ms", type=float, default=20.0, help="stub engine step time")
    p.add_argument("--sample-s", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.quick:
        args.seconds = args.seconds or 30.0
        args.streams = min(args.streams, 300)
        args.sample_s = min(args.sample_s, 2.0)
    scratch = Path(tempfile.mkdtemp(prefix="textproc-soak-"))
    model = model_dir_arg(p, args.model_dir, toy_dir=scratch / "toy")
    runtime_dir = scratch / "rt"
    log_path = scratch / "serve.log"
    print(f"soak: {args.streams} streams, {args.seconds or args.minutes * 60:.0f} s, model "
          f"{model.name}, {args.workers} workers, stub step {args.step_ms} ms, nproc "
          f"{os.cpu_count()}, load {os.getloadavg()[0]:.1f}; service log {log_path}", flush=True)
    env = {**os.environ, "TEXTPROC_LOG_LEVEL": "WARNING"}
    serve = ServeProcess(scratch, model, workers=args.workers, env=env, cwd=REPO_ROOT,
                         args=[f"--stub-arg=--step-ms={args.step_ms}",
                               f"--stub-arg=--max-batch={args.streams + 64}"])
    serve.start(timeout_s=120)
    try:
        return asyncio.run(soak(args, runtime_dir))
    finally:
        serve.stop(timeout_s=30)


if __name__ == "__main__":
    sys.exit(main())
