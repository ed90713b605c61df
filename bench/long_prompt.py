#!/usr/bin/env python3
"""Long prompts: time to first token through the service vs tokenizing in the engine (issue 6, item 6).

    .venv/bin/python bench/long_prompt.py [--quick] [--json PATH] [--sizes 8000,32000,128000]
        [--reps N] [--model-dir DIR]

(also ``textproc bench long-prompt``: the CLI maps ``-`` to ``_``.)

Set-up: ``textproc serve --engine external --workers N --max-model-len 140000`` and the fake
engine of ``bench/_common.py`` (no step delay: a request's single token is sent in the engine's
next loop turn; it records when the request arrived and when that step was sent). Prompts: ``--reps``
different prompts per size cut from the mixed corpus of ``tests/corpus.py`` (prose, code, 20+
scripts, emoji), each used once per implementation so every tokenizer sees it cold.

Per prompt, one at a time (nothing else in flight):

- ``TTFT``: ``TextClient.complete(prompt, max_tokens=1)`` send -> the first (only) token at the
  client, wall clock; ``textproc part`` = TTFT - (engine sent the step - request arrived at the
  engine): what textproc itself took (ship the text to a worker, encode, validate, Submit, forward
  to the engine, detokenize the token, deliver it);
- ``worker CPU``: CPU seconds the workers spent (from /proc) during that request;
- ``tokenizers``: HF ``Tokenizer.encode(prompt)`` in this process, as an engine would do it in
  its own process (wall and CPU), and ``textproc encode``: ``textproc.core.tokenizer.Tokenizer.encode``
  in this process (CPU), both on the same prompts;
- ``TTFT / HF`` = TTFT / tokenizers wall time.

Medians over the reps. The point: with textproc the engine spends nothing on the prompt's text
(its loop is free), at the price of TTFT; with in-process tokenization the engine loop is blocked
for the ``tokenizers`` time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    FakeEngine,
    Serve,
    cpu_seconds,
    describe,
    letter_ids,
    machine,
    make_prompts,
    model_dir,
    print_table,
    write_json,
)

__all__ = ["main"]

MAX_MODEL_LEN = 140_000


async def _drive(serve: Serve, prompts: dict[int, list[str]]) -> dict[int, list[dict[str, Any]]]:
    from textproc.client import TextClient

    perf = time.perf_counter
    out: dict[int, list[dict[str, Any]]] = {}
    worker_pids = {k: v for k, v in serve.pids().items() if k.startswith("worker")}
    async with await TextClient.connect(serve.runtime_dir, timeout_s=120) as client:
        for i in range(2 * client.n_workers):  # connections up, first-call costs paid
            async for _ in client.complete("warm up " * 20, max_tokens=1, request_id=f"warm-{i}"):
                pass
        for size, texts in prompts.items():
            for k, text in enumerate(texts):
                rid = f"long-{size}-{k}"
                cpu0 = sum(cpu_seconds(p) for p in worker_pids.values())
                t0 = perf()
                first = None
                prompt_tokens = 0
                async for ev in client.complete(text, max_tokens=1, request_id=rid):
                    if first is None:
                        first = perf()
                    if ev.usage is not None:
                        prompt_tokens = ev.usage.prompt_tokens
                await asyncio.sleep(0.05)  # let /proc catch up with the worker's last tick
                cpu = sum(cpu_seconds(p) for p in worker_pids.values()) - cpu0
                assert first is not None
                out.setdefault(size, []).append({"rid": rid, "t_send": t0, "t_first": first,
                                                 "prompt_tokens": prompt_tokens, "worker_cpu_s": cpu})
                print(f"  {size:>7} tokens #{k + 1}: TTFT {(first - t0) * 1000:8.1f} ms "
                      f"({prompt_tokens} prompt tokens), load {os.getloadavg()[0]:.1f}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="8k and 32k, 1 rep (< 1 min)")
    p.add_argument("--json", type=Path, help="append one JSON line per size here")
    p.add_argument("--model-dir", help="default .cache/models/qwen3")
    p.add_argument("--sizes", help="prompt sizes in tokens (default 8000,32000,128000)")
    p.add_argument("--reps", type=int, help="different prompts per size (default 1 quick / 3)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    model = model_dir(args.model_dir)
    sizes = [int(x) for x in (args.sizes or ("8000,32000" if args.quick else "8000,32000,128000")).split(",")]
    reps = args.reps or (1 if args.quick else 3)
    info = machine()
    print(f"long-prompt: {describe(info)}", flush=True)
    import uvloop
    from tokenizers import Tokenizer as HFTokenizer

    from textproc.core.tokenizer import Tokenizer

    hf = HFTokenizer.from_file(str(model / "tokenizer.json"))

    prompts = {size: make_prompts(hf, size, reps, seed=31 + size % 97) for size in sizes}
    serve = Serve(model, workers=args.workers, engine="external", max_model_len=MAX_MODEL_LEN)
    engine = FakeEngine(serve.engine_in, serve.engine_out, letter_ids(hf), step_ms=0.0)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            got = runner.run(_drive(serve, prompts))
    finally:
        timings = engine.stop()
        serve.close()
    tp = Tokenizer.from_dir(model)
    warm = "warm up: first-call costs, 123 ü 日本 🙂 def f(x): return x"
    tp.encode(warm)
    hf.encode(warm)
    rows: list[dict[str, Any]] = []
    for size in sizes:
        ttft, part, wcpu, hf_wall, hf_cpu, tp_cpu, ntok = [], [], [], [], [], [], []
        for rec, text in zip(got[size], prompts[size]):
            arrived, s0, _ = timings["requests"][rec["rid"]]
            engine_s = timings["steps"][s0] - arrived
            ttft.append(rec["t_first"] - rec["t_send"])
            part.append(ttft[-1] - engine_s)
            wcpu.append(rec["worker_cpu_s"])
            ntok.append(rec["prompt_tokens"])
            w0, c0 = time.perf_counter(), time.process_time()
            ids = hf.encode(text, add_special_tokens=True).ids
            hf_wall.append(time.perf_counter() - w0)
            hf_cpu.append(time.process_time() - c0)
            c0 = time.process_time()
            tp_ids = tp.encode(text, add_special_tokens=True)
            tp_cpu.append(time.process_time() - c0)
            if tp_ids != ids or len(ids) != rec["prompt_tokens"]:
                print(f"WARNING: {rec['rid']}: textproc {len(tp_ids)} / service "
                      f"{rec['prompt_tokens']} / tokenizers {len(ids)} tokens", file=sys.stderr)
        med = statistics.median
        row = {"bench": "long-prompt", "size": size, "reps": reps, "prompt_tokens": int(med(ntok)),
               "ttft_ms": med(ttft) * 1000, "textproc_ms": med(part) * 1000,
               "worker_cpu_ms": med(wcpu) * 1000, "hf_wall_ms": med(hf_wall) * 1000,
               "hf_cpu_ms": med(hf_cpu) * 1000, "textproc_encode_cpu_ms": med(tp_cpu) * 1000,
               "ttft_vs_hf": med(ttft) / med(hf_wall), "load_avg_1m": os.getloadavg()[0],
               "workers": args.workers}
        rows.append(row)
    print()
    print_table(rows, [("size", "size", "d"), ("prompt tokens", "prompt_tokens", "d"),
                       ("TTFT ms", "ttft_ms", ".1f"), ("textproc part ms", "textproc_ms", ".1f"),
                       ("worker CPU ms", "worker_cpu_ms", ".1f"),
                       ("tokenizers ms", "hf_wall_ms", ".1f"), ("tokenizers CPU ms", "hf_cpu_ms", ".1f"),
                       ("textproc encode CPU ms", "textproc_encode_cpu_ms", ".1f"),
                       ("TTFT / HF", "ttft_vs_hf", ".2f"), ("load", "load_avg_1m", ".1f")])
    print("(medians; tokenizers = HF Tokenizer.encode in this process, what an engine would block "
          "its loop for; textproc part = TTFT minus the engine's own time)")
    write_json(args.json, rows, info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
