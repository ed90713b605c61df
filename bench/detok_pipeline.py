#!/usr/bin/env python3
"""RequestTable CPU per request-step, in one process, no sockets: the pipeline and the floor.

    .venv/bin/python bench/detok_pipeline.py [--quick] [--json PATH] [--streams 1024]
        [--steps N] [--k 1,8] [--model-dir DIR]

Complements ``bench/detokenize.py`` (the real process on its sockets) by splitting one request
step into its parts, each in CPU microseconds per request-step (``time.process_time``, best of
``--repeat`` runs: the box is shared) and the tokens/s one core would reach at that cost:

- ``pipeline``: ``OutputPipeline.feed`` of ``k`` ids for each of ``--streams`` pipelines (Qwen
  vocabulary, the mixed corpus of ``textproc/testing/corpus.py``, each stream at its own
  offset), ``plain`` (no stops, no parser) and ``stops+parse`` (3 stop strings that never match,
  reasoning + tools), with the streams inside the ``<think>`` block (``reasoning``) or after it
  (``content``);
- ``core``: ``RequestTable.on_step`` of a decoded ``EngineStep`` plus encoding the ``Outputs``
  frame: the whole per-step work of the process except the sockets (with the process's
  ``gc.freeze()`` and GC thresholds; ``--default-gc`` shows what Python's defaults cost);
- ``floor``: what any pure-Python detokenizer process with this protocol pays per request-step
  even with a free pipeline: decode the step frame (``EngineStep`` / ``EngineStepPacked``),
  one dict lookup per request, build one ``RequestOutput`` with one delta, encode the
  ``Outputs`` frame. 500,000 tokens/s at one token per step means 2 us per request-step for
  everything on one core.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Any, Callable

import msgspec

from _common import print_table, write_json

from textproc.config import ServiceConfig
from textproc.core.pipeline import OutputPipeline
from textproc.core.tokenizer import Tokenizer
from textproc.options import OutputOptions, ParseOptions
from textproc.protocol import (
    EngineOutFrame,
    EngineRequest,
    EngineStep,
    EngineStepPacked,
    Outputs,
    RequestOutput,
    StepOutput,
    Submit,
    pack_ids,
)
from textproc.testing.bench_cli import bench_parser, model_dir_arg
from textproc.testing.corpus import mixed_text
from textproc.testing.machine import describe, machine
from textproc.transport import encoder

__all__ = ["main"]

STOPS = ["<|STOP|>", "END OF ANSWER", "\n@@@@\n"]
MODES: dict[str, dict[str, Any]] = {
    "plain": {},
    "stops+parse": {"stop": STOPS, "reasoning": True, "tools": True},
}


class Work:
    def __init__(self, model: Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self.tok = Tokenizer.from_dir(model)
        hf = HFTokenizer.from_file(str(model / "tokenizer.json"))
        text = mixed_text(80_000, seed=5)
        assert not any(s in text for s in STOPS)
        self.think = hf.encode("<think>\n", add_special_tokens=False).ids
        self.close = hf.encode("\n</think>\n\n", add_special_tokens=False).ids
        self.ids = hf.encode(text, add_special_tokens=False).ids

    def stream(self, i: int, n: int) -> list[int]:
        ids = self.ids
        off = (i * 7919) % len(ids)
        return [ids[(off + k) % len(ids)] for k in range(n)]

    def pipelines(self, streams: int, mode: str, phase: str) -> list[OutputPipeline]:
        pipes = [OutputPipeline(self.tok, request_id=f"r{i}", **MODES[mode]) for i in range(streams)]
        for p in pipes:
            p.feed(self.think)
            if phase == "content":
                p.feed(self.close)
        return pipes


def best(fn: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def bench_pipeline(work: Work, streams: int, steps: int, k: int, mode: str, phase: str,
                   repeat: int) -> float:
    """CPU seconds per request-step of OutputPipeline.feed."""
    per = [work.stream(i, steps * k * repeat) for i in range(streams)]
    pipes = work.pipelines(streams, mode, phase)
    chunks = [[s[j * k:(j + 1) * k] for s in per] for j in range(steps * repeat)]
    rounds = iter(range(repeat))

    def run() -> None:
        r = next(rounds)
        for row in chunks[r * steps:(r + 1) * steps]:
            for p, ids in zip(pipes, row):
                p.feed(ids)

    return best(run, repeat) / (streams * steps)


def _frames(work: Work, streams: int, steps: int, k: int, packed: bool) -> tuple[list[str], list[bytes]]:
    enc = msgspec.msgpack.Encoder()
    rids = [f"r{i}" for i in range(streams)]
    per = [work.stream(i, steps * k) for i in range(streams)]
    frames = []
    for j in range(steps):
        if packed:
            flat = [t for s in per for t in s[j * k:(j + 1) * k]]
            counts = b"" if k == 1 else pack_ids([k] * streams)
            frames.append(enc.encode(EngineStepPacked(j, rids, pack_ids(flat), counts)))
        else:
            frames.append(enc.encode(EngineStep(j, [StepOutput(rid, s[j * k:(j + 1) * k])
                                                    for rid, s in zip(rids, per)])))
    return rids, frames


def bench_core(work: Work, model: Path, streams: int, steps: int, k: int, mode: str,
               repeat: int, packed: bool) -> float:
    from textproc.service.request_table import RequestTable

    core = RequestTable(work.tok, ServiceConfig(model_dir=str(model), n_workers=1))
    rids, frames = _frames(work, streams, steps * repeat, k, packed)
    enc = msgspec.msgpack.Encoder()
    for rid in rids:
        er = enc.encode(EngineRequest(rid, pack_ids([1, 2, 3]), 1 << 30))
        on = mode != "plain"
        core.on_submit(Submit(rid, b"client", 3, 1 << 30, er,
                              output=OutputOptions(stop=STOPS if on else []),
                              parse=ParseOptions(reasoning=True, tools=True) if on else None))
    dec = msgspec.msgpack.Decoder(EngineOutFrame)
    encode = encoder().encode
    rounds = iter(range(repeat))

    def run() -> None:
        r = next(rounds)
        for data in frames[r * steps:(r + 1) * steps]:
            core.on_step(dec.decode(data))
            outbox, core.outbox = core.outbox, {}
            for items in outbox.values():
                encode(Outputs(items))

    return best(run, repeat) / (streams * steps)


def bench_floor(work: Work, streams: int, steps: int, repeat: int, packed: bool) -> float:
    """Decode the step, one dict lookup + one RequestOutput per request, encode Outputs."""
    rids, frames = _frames(work, streams, steps, 1, packed)
    live = {rid: object() for rid in rids}
    dec = msgspec.msgpack.Decoder(EngineOutFrame)
    encode = encoder().encode
    text = "hello"

    def run() -> None:
        for data in frames:
            step = dec.decode(data)
            items = []
            append = items.append
            if packed:
                for rid in step.request_ids:
                    if live.get(rid) is not None:
                        append(RequestOutput(rid, [{"content": text}]))
            else:
                for out in step.outputs:
                    if live.get(out.request_id) is not None:
                        append(RequestOutput(out.request_id, [{"content": text}]))
            encode(Outputs(items))

    return best(run, repeat) / (streams * steps)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="fewer steps (< 1 min)",
                     json_help="append one JSON line per result here")
    p.add_argument("--streams", type=int, default=1024)
    p.add_argument("--steps", type=int, help="steps per run (default 20 quick / 100)")
    p.add_argument("--repeat", type=int, default=3, help="runs per case; the best counts")
    p.add_argument("--k", default="1,8", help="ids per request per step, comma list")
    p.add_argument("--default-gc", action="store_true",
                   help="keep Python's default GC thresholds (the process raises them)")
    args = p.parse_args(argv)
    info = machine()
    print(f"detok_pipeline: {describe(info)}", flush=True)
    model = model_dir_arg(p, args.model_dir)
    steps = args.steps or (20 if args.quick else 100)
    ks = [int(x) for x in args.k.split(",")]
    work = Work(model)
    gc.collect()
    gc.freeze()  # as the detokenizer process does after loading the vocabulary
    if not args.default_gc:
        from textproc.service.request_table import GC_THRESHOLDS

        gc.set_threshold(*GC_THRESHOLDS)  # ... and these thresholds
    rows: list[dict[str, Any]] = []

    def row(part: str, mode: str, phase: str, k: int, sec: float) -> None:
        rows.append({"part": part, "mode": mode, "phase": phase, "k": k, "streams": args.streams,
                     "us_per_request_step": sec * 1e6, "tokens_per_cpu_s": k / sec})
        print(f"  {part:9s} {mode:12s} {phase:10s} k={k}: {sec * 1e6:6.2f} us/request-step, "
              f"{k / sec:10,.0f} tok/s", flush=True)

    for packed in (False, True):
        row("floor", "packed" if packed else "EngineStep", "-", 1,
            bench_floor(work, args.streams, steps, args.repeat, packed))
    for mode in MODES:
        for phase in (("content",) if mode == "plain" else ("reasoning", "content")):
            for k in ks:
                row("pipeline", mode, phase, k,
                    bench_pipeline(work, args.streams, steps, k, mode, phase, args.repeat))
    for mode in MODES:
        for k in ks:
            row("core", mode, "content", k,
                bench_core(work, model, args.streams, steps, k, mode, args.repeat, packed=False))
    print()
    print_table(rows, [("part", "part", "s"), ("mode", "mode", "s"), ("phase", "phase", "s"),
                       ("ids/step", "k", "d"), ("us/req-step", "us_per_request_step", ".2f"),
                       ("CPU tok/s", "tokens_per_cpu_s", ",.0f")])
    write_json(args.json, rows, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
