#!/usr/bin/env python3
"""Long prompts: time to first token through the service against workers, vs tokenizing in the engine.

    .venv/bin/python bench/long_prompt.py [--quick] [--json PATH] [--sizes 8000,32000,200000]
        [--reps N] [--workers 1,2] [--path chat|completion] [--no-unsplit] [--model-dir DIR]

(also ``textproc bench long-prompt``: the CLI maps ``-`` to ``_``.)

Set-up: one service per pool in ``--workers``, all running at once (plus, for the largest pool,
the same pool with ``--split-min-chars 0``, i.e. every prompt encoded by the one worker that got
it, unless ``--no-unsplit``): ``textproc serve --engine external --workers N``, each with the
timing engine of ``textproc.testing.engine`` (no step delay: a request's single token is sent in
the engine's next loop turn; it records when the request arrived and when that step was sent).
Each prompt goes to each pool in turn, so the pools share the machine's load alike; every prompt
is new to each pool's workers (no piece or segment cache holds it). Prompts: ``--reps``
different prompts per size cut from the mixed corpus of ``textproc/testing/corpus.py`` (prose,
code, 20+ scripts, emoji). ``--path chat`` (default) sends each as the user message of a chat
request (the worker renders the template and encodes); ``completion`` sends the raw text.

Per prompt, one at a time (nothing else in flight):

- ``TTFT``: send -> the first (only) token at the client (``max_tokens=1``), wall clock;
  ``textproc part`` = TTFT - (engine sent the step - request arrived at the engine);
- ``worker CPU``: CPU seconds all workers spent (from /proc, 10 ms ticks) during that request,
  and the ``busiest worker``'s: the CPU on the request's critical path, what TTFT comes down to
  where each worker has a core of its own;
- the references, in this process, after the services (same run, same prompts): HF
  ``tokenizers`` ``Tokenizer.encode`` of the rendered prompt (chat) or the text (completion),
  one thread, as an engine would do it in its own process (CPU = ``time.process_time``, and
  wall), and ``textproc.core.tokenizer.Tokenizer.encode`` (CPU);
- ``TTFT / HF CPU``: the ratio the issue's target is written in; ``best TTFT``: the fastest
  rep (on a shared box the median carries other jobs' bursts; the best shows what the pool
  can do when it gets the cores).

Medians over the reps; the load average beside every row (a 2-core box shared with other jobs
shows in wall times first).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import Serve, letter_ids, make_prompts, print_table, write_json

from textproc.testing.bench_cli import bench_parser, model_dir_arg
from textproc.testing.engine import EngineProcess
from textproc.testing.machine import cpu_seconds, describe, machine

__all__ = ["main"]

MAX_MODEL_LEN = 400_000


def _messages(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


async def _drive(pools: list[tuple[str, Serve]], prompts: dict[int, list[str]],
                 path: str) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """Each prompt to each pool in turn (so every pool sees the same load), one at a time."""
    from contextlib import AsyncExitStack

    from textproc.client import TextClient

    perf = time.perf_counter
    out: dict[str, dict[int, list[dict[str, Any]]]] = {label: {} for label, _ in pools}
    async with AsyncExitStack() as stack:
        clients = []
        for label, serve in pools:
            client = await stack.enter_async_context(
                await TextClient.connect(serve.runtime_dir, timeout_s=120))
            pids = [v for k, v in serve.pids().items() if k.startswith("worker")]
            clients.append((label, client, pids))
            for i in range(2 * client.n_workers):  # connections up, first-call costs paid
                async for _ in client.complete("warm up " * 20, max_tokens=1, request_id=f"warm-{i}"):
                    pass
                if path == "chat":  # the template compiles on a worker's first chat (~50 ms)
                    async for _ in client.chat(_messages("warm up"), max_tokens=1,
                                               request_id=f"warmc-{i}"):
                        pass
        for size, texts in prompts.items():
            for k, text in enumerate(texts):
                for label, client, worker_pids in clients:
                    rid = f"long-{size}-{k}"
                    stream = (client.chat(_messages(text), max_tokens=1, request_id=rid)
                              if path == "chat" else
                              client.complete(text, max_tokens=1, request_id=rid))
                    cpu0 = [cpu_seconds(p) for p in worker_pids]
                    t0 = perf()
                    first = None
                    prompt_tokens = 0
                    async for ev in stream:
                        if first is None:
                            first = perf()
                        if ev.usage is not None:
                            prompt_tokens = ev.usage.prompt_tokens
                    await asyncio.sleep(0.05)  # let /proc catch up with the worker's last tick
                    cpus = [cpu_seconds(p) - c for p, c in zip(worker_pids, cpu0)]
                    assert first is not None
                    load = os.getloadavg()[0]
                    out[label].setdefault(size, []).append({
                        "rid": rid, "t_send": t0, "t_first": first, "prompt_tokens": prompt_tokens,
                        "worker_cpu_s": sum(cpus), "busiest_cpu_s": max(cpus), "load": load})
                    print(f"  {label}: {size:>7} tokens #{k + 1}: TTFT {(first - t0) * 1000:8.1f} ms "
                          f"({prompt_tokens} prompt tokens), load {load:.1f}", flush=True)
        for label, client, _ in clients:
            split: dict[str, int] = {}
            for stats in await client.stats():
                for key, value in stats.counters.items():
                    if key.startswith("split_"):
                        split[key] = split.get(key, 0) + value
            print(f"  {label}: {split}", flush=True)
            for recs in out[label].values():
                for rec in recs:
                    rec["split"] = split
    return out


def _label(workers: int, split: bool) -> str:
    return f"{workers} worker{'s' if workers > 1 else ''}{'' if split or workers == 1 else ', unsplit'}"


def _run_pools(model: Path, hf: Any, prompts: dict[int, list[str]], runs: list[tuple[int, bool]],
               path: str) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """Start every pool (a service + the timing fake engine each), drive them, stop them."""
    import uvloop

    started: list[tuple[str, Serve, EngineProcess]] = []
    try:
        for workers, split in runs:
            serve = Serve(model, workers=workers, engine="external", max_model_len=MAX_MODEL_LEN,
                          extra=[] if split else ["--split-min-chars", "0"])
            engine = EngineProcess(serve.engine_in, serve.engine_out, letter_ids(hf), step_ms=0.0).start()
            started.append((_label(workers, split), serve, engine))
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            got = runner.run(_drive([(label, serve) for label, serve, _ in started], prompts, path))
    finally:
        timings = {}
        for label, serve, engine in started:
            timings[label] = engine.stop()
            serve.close()
    for label, by_size in got.items():
        for recs in by_size.values():
            for rec in recs:
                arrived, s0, _ = timings[label]["requests"][rec["rid"]]
                rec["engine_s"] = timings[label]["steps"][s0] - arrived
    return got


def _references(model: Path, hf: Any, prompts: dict[int, list[str]],
                path: str) -> dict[int, list[dict[str, Any]]]:
    """HF tokenizers (wall, CPU) and textproc's in-process encode (CPU) on the same prompts."""
    from textproc.core.chat.template import render_chat
    from textproc.core.tokenizer import Tokenizer

    tp = Tokenizer.from_dir(model)
    warm = "warm up: first-call costs, 123 ü 日本 🙂 def f(x): return x"
    tp.encode(warm)
    hf.encode(warm)
    out: dict[int, list[dict[str, Any]]] = {}
    for size, texts in prompts.items():
        for text in texts:
            if path == "chat":
                assert isinstance(tp.chat_template, str)
                variables: dict[str, Any] = dict(tp.special_tokens_map)
                prompt = render_chat(tp.chat_template, _messages(text), add_generation_prompt=True,
                                     **variables)
                special = False
            else:
                prompt, special = text, True
            w0, c0 = time.perf_counter(), time.process_time()
            ids = hf.encode(prompt, add_special_tokens=special).ids
            hf_wall, hf_cpu = time.perf_counter() - w0, time.process_time() - c0
            c0 = time.process_time()
            tp_ids = tp.encode(prompt, add_special_tokens=special)
            tp_cpu = time.process_time() - c0
            out.setdefault(size, []).append({"ids": len(ids), "same": tp_ids == ids,
                                             "hf_wall_s": hf_wall, "hf_cpu_s": hf_cpu,
                                             "tp_cpu_s": tp_cpu})
    return out


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="8k and 32k, 1 rep (< 1 min)",
                     json_help="append one JSON line per pool and size here")
    p.add_argument("--sizes", help="prompt sizes in tokens (default 8000,32000,200000)")
    p.add_argument("--reps", type=int, help="different prompts per size (default 1 quick / 3)")
    p.add_argument("--workers", default=None,
                   help="pool sizes, comma-separated (default 1 and the core count, if more)")
    p.add_argument("--path", choices=("chat", "completion"), default="chat")
    p.add_argument("--no-unsplit", action="store_true",
                   help="skip the largest pool with --split-min-chars 0")
    args = p.parse_args(argv)
    model = model_dir_arg(p, args.model_dir)
    sizes = [int(x) for x in (args.sizes or ("8000,32000" if args.quick else "8000,32000,200000")).split(",")]
    reps = args.reps or (1 if args.quick else 3)
    pools = sorted({int(x) for x in (args.workers or f"1,{os.cpu_count() or 1}").split(",")})
    runs = [(n, True) for n in pools]
    if not args.no_unsplit and pools[-1] > 1:
        runs.append((pools[-1], False))
    info = machine()
    print(f"long-prompt: {describe(info)}", flush=True)
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer.from_file(str(model / "tokenizer.json"))
    prompts = {size: make_prompts(hf, size, reps, seed=31 + size % 97) for size in sizes}
    results = _run_pools(model, hf, prompts, runs, args.path)
    refs = _references(model, hf, prompts, args.path)
    med = statistics.median
    rows: list[dict[str, Any]] = []
    for workers, split in runs:
        got = results[_label(workers, split)]
        for size in sizes:
            recs, ref = got[size], refs[size]
            for rec, r in zip(recs, ref):
                if not r["same"] or r["ids"] != rec["prompt_tokens"]:
                    print(f"WARNING: {rec['rid']}: textproc in-process same ids: {r['same']}, "
                          f"service {rec['prompt_tokens']} / tokenizers {r['ids']} tokens",
                          file=sys.stderr)
            ttft = med(x["t_first"] - x["t_send"] for x in recs)
            hf_cpu = med(x["hf_cpu_s"] for x in ref)
            rows.append({
                "bench": "long-prompt", "path": args.path, "workers": workers, "split": split,
                "size": size, "reps": reps, "prompt_tokens": int(med(x["prompt_tokens"] for x in recs)),
                "ttft_ms": ttft * 1000,
                "ttft_min_ms": min(x["t_first"] - x["t_send"] for x in recs) * 1000,
                "textproc_ms": med(x["t_first"] - x["t_send"] - x["engine_s"] for x in recs) * 1000,
                "worker_cpu_ms": med(x["worker_cpu_s"] for x in recs) * 1000,
                "busiest_worker_cpu_ms": med(x["busiest_cpu_s"] for x in recs) * 1000,
                "hf_wall_ms": med(x["hf_wall_s"] for x in ref) * 1000, "hf_cpu_ms": hf_cpu * 1000,
                "textproc_encode_cpu_ms": med(x["tp_cpu_s"] for x in ref) * 1000,
                "ttft_vs_hf_cpu": ttft / hf_cpu, "ttft_vs_hf": ttft / med(x["hf_wall_s"] for x in ref),
                "load_avg_1m": max(x["load"] for x in recs),
                # the pool's counters over all sizes (service/prompt_shares.py)
                "pool_split_prompts": recs[0]["split"].get("split_prompts", 0),
                "pool_chunks_taken_back": recs[0]["split"].get("split_chunks_taken_back", 0)})
    print()
    print_table(rows, [("workers", "workers", "d"), ("split", "split", ""), ("size", "size", "d"),
                       ("prompt tokens", "prompt_tokens", "d"), ("TTFT ms", "ttft_ms", ".1f"),
                       ("best TTFT ms", "ttft_min_ms", ".1f"),
                       ("textproc part ms", "textproc_ms", ".1f"),
                       ("worker CPU ms", "worker_cpu_ms", ".1f"),
                       ("busiest worker CPU ms", "busiest_worker_cpu_ms", ".1f"),
                       ("tokenizers CPU ms", "hf_cpu_ms", ".1f"), ("tokenizers ms", "hf_wall_ms", ".1f"),
                       ("textproc encode CPU ms", "textproc_encode_cpu_ms", ".1f"),
                       ("TTFT / HF CPU", "ttft_vs_hf_cpu", ".2f"), ("load", "load_avg_1m", ".1f")])
    print(f"(medians; path {args.path}; tokenizers = HF Tokenizer.encode in this process, one "
          "thread, what an engine would block its loop for; textproc part = TTFT minus the "
          "engine's own time; load = the highest 1-minute load average during the pool's run)")
    write_json(args.json, rows, info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
