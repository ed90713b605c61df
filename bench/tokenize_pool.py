#!/usr/bin/env python3
"""Tokenizer pool throughput: the service's workers vs HF ``tokenizers`` with all threads.

    .venv/bin/python bench/tokenize_pool.py [--quick] [--json PATH] [--workers 1,2] [--plot PNG] [--model-dir DIR]

Prompts: cut from the generated mixed corpus of ``textproc/testing/corpus.py`` (prose, code, 20+
scripts, emoji, digits...), ``long`` ~8,000 tokens and ``short`` ~50 tokens (Qwen vocabulary),
every prompt different.

- ``tokenizers``: ``Tokenizer.encode_batch(prompts, add_special_tokens=False)`` in this process,
  all Rayon threads (= cores), wall time of the whole batch; the ids are the reference.
- ``textproc``: ``textproc serve --engine external --workers W`` (no engine needed: a
  ``TokenizeRequest`` ends at the worker); this process drives it with
  ``TextClient.tokenize(text)`` from one asyncio (uvloop) client, ``--concurrency`` requests in
  flight (default 8 per worker for long prompts, 64 per worker for short), least-busy worker
  first. Wall time from the first send to the last answer. Pass 1 runs on freshly started workers
  (empty word caches), pass 2 repeats the same prompts (warm). ``identical`` compares every
  returned id list with ``tokenizers``'.

Also printed: tokens per CPU second (the workers' CPU from /proc for textproc, every thread of
this process for ``tokenizers``), which depends less on what else runs on the machine, and
``vs HF`` = textproc tokens/s / tokenizers tokens/s (wall clock).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from _common import Progress, Serve, make_prompts, print_table, pyplot, save_figure, write_json

from textproc.testing.bench_cli import bench_parser, model_dir_arg
from textproc.testing.machine import describe, machine

__all__ = ["main"]


def _hf(model: Path) -> Any:
    from tokenizers import Tokenizer as HFTokenizer

    return HFTokenizer.from_file(str(model / "tokenizer.json"))


def hf_batch(hf: Any, prompts: list[str], reps: int) -> tuple[float, float, list[list[int]]]:
    """Best wall and best CPU seconds (all threads of this process) over ``reps`` batches."""
    best = best_cpu = float("inf")
    ids: list[list[int]] = []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        encs = hf.encode_batch(prompts, add_special_tokens=False)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        ids = [e.ids for e in encs]
    return best, best_cpu, ids


async def _drive(runtime_dir: Path, prompts: list[str], concurrency: int, passes: int,
                 progress: Progress, on_warm: Any) -> tuple[list[float], list[list[int]]]:
    from textproc.client import TextClient

    async with await TextClient.connect(runtime_dir, timeout_s=60) as client:
        # every worker answers a few small requests first (connections up, first-call costs paid)
        for _ in range(3):
            await asyncio.gather(*(client.tokenize("warm up, 123 ü") for _ in range(2 * client.n_workers)))
        on_warm()
        walls: list[float] = []
        results: list[list[int]] = [[] for _ in prompts]
        for p in range(passes):
            next_i = 0
            done = 0

            async def one() -> None:
                nonlocal next_i, done
                while next_i < len(prompts):
                    i = next_i
                    next_i += 1
                    results[i] = await client.tokenize(prompts[i])
                    done += 1
                    progress(f"pass {p + 1}: {done}/{len(prompts)}")

            t0 = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(concurrency)))
            walls.append(time.perf_counter() - t0)
            on_warm()
        return walls, results


def run_service(model: Path, workers: int, prompts: list[str], concurrency: int,
                ref_ids: list[list[int]]) -> dict[str, Any]:
    import uvloop

    serve = Serve(model, workers=workers, engine="external")
    snaps: list[float] = []  # workers' CPU seconds after the warm-up and after each pass

    def snap() -> None:
        snaps.append(sum(v for k, v in serve.cpu().items() if k.startswith("worker")))

    try:
        progress = Progress(f"{workers} workers")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            walls, ids = runner.run(_drive(serve.runtime_dir, prompts, concurrency, 2, progress,
                                           snap))
    finally:
        serve.close()
    cpu = [b - a for a, b in zip(snaps, snaps[1:])]
    return {"walls": walls, "identical": ids == ref_ids, "worker_cpu_s": cpu}


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """Tokens/s against workers, per case: textproc first/warm pass, tokenizers as a line."""
    plt = pyplot()
    if plt is None:
        return False
    cases = [c for c in ("long", "short") if any(r["case"] == c for r in rows)]
    fig, axes = plt.subplots(1, len(cases), figsize=(5.5 * len(cases), 3.8), squeeze=False)
    for ax, case in zip(axes[0], cases):
        for impl, style in (("textproc first", "o-"), ("textproc warm", "s-")):
            pts = sorted((r["workers"], r["tokens_per_s"] / 1e6) for r in rows
                         if r["case"] == case and r["impl"] == impl)
            if pts:
                ax.plot([w for w, _ in pts], [v for _, v in pts], style, label=impl)
        for r in rows:
            if r["case"] == case and r["impl"].startswith("tokenizers"):
                ax.axhline(r["tokens_per_s"] / 1e6, color="grey", linestyle="--",
                           label=f"tokenizers encode_batch ({r['threads']} threads)")
        ax.set_xlabel("tokenizer workers")
        ax.set_ylabel("M prompt tokens/s")
        ax.set_title(f"{case} prompts")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    save_figure(fig, path)
    return True


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="few prompts, N workers only (< 1 min)",
                     json_help="append one JSON line per result here")
    p.add_argument("--workers", help="comma list (default 1..cores)")
    p.add_argument("--long", type=int, help="number of ~8k-token prompts")
    p.add_argument("--short", type=int, help="number of ~50-token prompts")
    p.add_argument("--long-tokens", type=int, default=8000)
    p.add_argument("--short-tokens", type=int, default=50)
    p.add_argument("--concurrency", type=int, help="requests in flight (default 8/64 per worker)")
    p.add_argument("--plot", type=Path, help="PNG: tokens/s against workers")
    args = p.parse_args(argv)
    model = model_dir_arg(p, args.model_dir)
    cores = os.cpu_count() or 1
    workers = [int(x) for x in args.workers.split(",")] if args.workers else \
        [cores] if args.quick else list(range(1, cores + 1))
    n_long = args.long or (4 if args.quick else 32)
    n_short = args.short or (200 if args.quick else 4000)
    info = machine()
    print(f"tokenize: {describe(info)}", flush=True)
    hf = _hf(model)

    cases = {
        "long": make_prompts(hf, args.long_tokens, n_long, seed=11),
        "short": make_prompts(hf, args.short_tokens, n_short, seed=12),
    }
    rows: list[dict[str, Any]] = []
    for case, prompts in cases.items():
        hf_s, hf_cpu, ref = hf_batch(hf, prompts, 2 if args.quick else 3)
        tokens = sum(len(x) for x in ref)
        hf_row = {"bench": "tokenize", "case": case, "impl": "tokenizers encode_batch",
                  "threads": cores, "requests": len(prompts), "tokens": tokens,
                  "wall_s": hf_s, "tokens_per_s": tokens / hf_s, "requests_per_s": len(prompts) / hf_s,
                  "cpu_s": hf_cpu, "tokens_per_cpu_s": tokens / hf_cpu,
                  "load_avg_1m": os.getloadavg()[0]}
        rows.append(hf_row)
        print(f"{case}: {len(prompts)} prompts, {tokens} tokens; tokenizers encode_batch "
              f"{tokens / hf_s / 1e6:.3f} M tok/s", flush=True)
        for w in workers:
            conc = args.concurrency or (8 * w if case == "long" else 64 * w)
            r = run_service(model, w, prompts, conc, ref)
            for label, wall, cpu in zip(("first", "warm"), r["walls"], r["worker_cpu_s"]):
                row = {"bench": "tokenize", "case": case, "impl": f"textproc {label}",
                       "workers": w, "concurrency": conc, "requests": len(prompts),
                       "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                       "requests_per_s": len(prompts) / wall,
                       "vs_hf": (tokens / wall) / hf_row["tokens_per_s"],
                       "identical": r["identical"],
                       "cpu_s": cpu, "tokens_per_cpu_s": tokens / cpu if cpu > 0 else None,
                       "load_avg_1m": os.getloadavg()[0]}
                rows.append(row)
            print(f"  {w} workers: first {rows[-2]['tokens_per_s'] / 1e6:.3f}, warm "
                  f"{rows[-1]['tokens_per_s'] / 1e6:.3f} M tok/s, identical={r['identical']}",
                  flush=True)
    print()
    for r in rows:
        r["mtok_s"] = r["tokens_per_s"] / 1e6
        r["mtok_cpu_s"] = r["tokens_per_cpu_s"] / 1e6 if r.get("tokens_per_cpu_s") else None
    print_table(rows, [("case", "case", ""), ("impl", "impl", ""), ("workers", "workers", "d"),
                       ("threads", "threads", "d"), ("requests", "requests", "d"),
                       ("tokens", "tokens", "d"), ("M tok/s", "mtok_s", ".3f"),
                       ("req/s", "requests_per_s", ".1f"), ("vs HF", "vs_hf", ".2f"),
                       ("M tok/CPU-s", "mtok_cpu_s", ".3f"),
                       ("identical", "identical", ""), ("load", "load_avg_1m", ".1f")])
    print("(vs HF = textproc tokens/s / tokenizers encode_batch tokens/s on the same prompts, wall "
          "clock; M tok/CPU-s = tokens per CPU second of the workers (textproc, from /proc) or of "
          "this process's threads (tokenizers): less disturbed by other load)")
    if args.plot and plot(rows, args.plot):
        print(f"plot: {args.plot}")
    write_json(args.json, rows, info)
    ok = all(r.get("identical", True) for r in rows)
    if not ok:
        print("ERROR: textproc ids differ from tokenizers' on some prompt", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
