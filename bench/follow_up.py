#!/usr/bin/env python3
"""Follow-up turns: a conversation resent with one more turn, through the service.

    .venv/bin/python bench/follow_up.py [--quick] [--json PATH] [--tokens 32000] [--reps N]
        [--model-dir DIR] [--workers 2]

(also ``textproc bench follow-up``.)

Set-up: ``textproc serve`` with the stub engine and ``--workers`` workers on the Qwen3
vocabulary. Per rep, one at a time: a fresh conversation of about ``--tokens`` tokens (turns
cut from the mixed corpus, different text each rep, so every first time is cold) is sent as
``TextClient.tokenize(messages=...)`` (the chat path's render + encode in a worker, with the
round trip), then the same conversation plus one assistant and one short user turn (what an
agent sends next). ``first`` and ``follow-up`` are the round-trip wall times, ``ratio`` =
follow-up / first; ``same ids as HF``: both prompts' ids equal HF ``tokenizers``' on the
rendered text; ``tokenizers`` is HF ``Tokenizer.encode`` of the first rendered prompt in
this process (what an engine that tokenizes in-process pays for it, render not included).
The follow-up is fast when it reaches the worker that holds the conversation's encoded
segments (client affinity) and those segments hit (``core/tok/segments.py``). Medians.
Target: ratio <= 0.15.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from typing import Any

from _common import Serve, print_table, write_json

from textproc.testing.bench_cli import bench_parser, model_dir_arg
from textproc.testing.corpus import mixed_text
from textproc.testing.machine import describe, machine

__all__ = ["main"]


def conversation(hf: Any, n_tokens: int, seed: int) -> list[dict[str, Any]]:
    """System prompt + alternating turns of mixed text, about ``n_tokens`` tokens, ending on a user turn."""
    rng = random.Random(seed)
    text = mixed_text(n_tokens * 5, seed=seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"You are assistant #{seed}."}]
    total, at, turn = 0, 0, 0
    while total < n_tokens:
        size = rng.randint(400, 4000)
        body = text[at:at + size]
        at += size
        messages.append({"role": "user" if turn % 2 == 0 else "assistant", "content": body})
        total += len(hf.encode(body, add_special_tokens=False).ids)
        turn += 1
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "Go on."})
    return messages


async def run(args: argparse.Namespace, serve: Serve, hf: Any) -> list[dict[str, Any]]:
    from textproc.client import TextClient

    rows = []
    async with await TextClient.connect(serve.runtime_dir) as client:
        await client.tokenize(messages=[{"role": "user", "content": "warm up"}])
        firsts, follows, hf_times, n_tok = [], [], [], []
        identical = True
        for rep in range(args.reps):
            messages = conversation(hf, args.tokens, seed=1000 + rep)
            t0 = time.perf_counter()
            prompt, ids = await client.render(messages)
            t1 = time.perf_counter()
            more = messages + [{"role": "assistant", "content": "Here is what I found."},
                               {"role": "user", "content": f"Thanks. One more question, number {rep}?"}]
            t2 = time.perf_counter()
            more_prompt, more_ids = await client.render(more)
            t3 = time.perf_counter()
            h0 = time.process_time()
            want = hf.encode(prompt, add_special_tokens=False).ids
            hf_times.append(time.process_time() - h0)
            identical = identical and ids == want
            identical = identical and more_ids == hf.encode(more_prompt, add_special_tokens=False).ids
            firsts.append(t1 - t0)
            follows.append(t3 - t2)
            n_tok.append(len(ids))
        stats = await client.stats()
    hits = sum(s.counters.get("segment_cache_hits", 0) for s in stats if s.role == "worker")
    misses = sum(s.counters.get("segment_cache_misses", 0) for s in stats if s.role == "worker")
    first, follow = statistics.median(firsts), statistics.median(follows)
    rows.append({
        "tokens": int(statistics.median(n_tok)), "reps": args.reps, "workers": args.workers,
        "first_ms": round(first * 1e3, 2), "follow_up_ms": round(follow * 1e3, 2),
        "ratio": round(follow / first, 3), "tokenizers_cpu_ms": round(statistics.median(hf_times) * 1e3, 2),
        "identical": identical, "segment_hits": hits, "segment_misses": misses, "load": round(os.getloadavg()[0], 1),
    })
    return rows


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="8k tokens, 3 reps (< 1 min)",
                     json_help="append one JSON line per result here")
    p.add_argument("--tokens", type=int, default=32_000, help="conversation size (default 32,000)")
    p.add_argument("--reps", type=int, default=7, help="conversations (default 7)")
    p.add_argument("--workers", type=int, default=2, help="tokenizer workers (default 2)")
    args = p.parse_args(argv)
    if args.quick:
        args.tokens, args.reps = min(args.tokens, 8_000), min(args.reps, 3)
    from tokenizers import Tokenizer as HFTokenizer

    model = model_dir_arg(p, args.model_dir)
    hf = HFTokenizer.from_file(str(model / "tokenizer.json"))
    serve = Serve(model, workers=args.workers, engine="stub", max_model_len=max(40_000, args.tokens * 2))
    try:
        rows = asyncio.run(run(args, serve, hf))
    finally:
        serve.close()
    info = machine()
    print(f"follow-up turns through the service ({describe(info)})")
    print_table(rows, [("tokens", "tokens", ","), ("first ms", "first_ms", ""),
                       ("follow-up ms", "follow_up_ms", ""), ("ratio", "ratio", ""),
                       ("tokenizers CPU ms", "tokenizers_cpu_ms", ""),
                       ("same ids as HF", "identical", ""), ("seg hits", "segment_hits", ""), ("seg misses", "segment_misses", ""),
                       ("load", "load", "")])
    print("(target: ratio <= 0.15)")
    write_json(args.json, rows, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
