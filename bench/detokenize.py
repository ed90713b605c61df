#!/usr/bin/env python3
"""Detokenizer throughput: one detokenizer process vs a DecodeStream loop.

    .venv/bin/python bench/detokenize.py [--quick] [--json PATH] [--streams 1,64,1024,4096]
        [--tokens N] [--profile DIR] [--model-dir DIR]

The detokenizer process is started exactly as the supervisor starts it (``python -m
textproc.cli _child detokenizer 0 --config ... --endpoints ...``, ipc sockets in a temp dir);
this process plays every other part on its sockets: the worker (``Submit`` frames on
``detok-in``), the engine (``EngineHello``, then ``EngineStep`` frames on ``engine-out``, each
carrying one new token for every stream, encoded beforehand; ``engine-in`` is drained) and the
client (a DEALER on ``detok-front``: Hello, then it reads ``Outputs``). Steps are sent as fast
as the sockets take them; after the last one a final step ends every stream with
``finish_reason="length"``; the clock stops when every stream's last output has arrived.

Output tokens: the Qwen encoding of ``<think>`` + mixed text + ``</think>`` + mixed text (the
generated corpus of ``textproc/testing/corpus.py``: prose, code, 20+ scripts, emoji; its own
think and tool-call tags removed), each stream from a different offset into the content part.
``text ok``: stream 0's text (content + reasoning) equals ``tokenizers``' decode of its ids (in
``stops+parse`` mode up to the whitespace the parser drops around the think tags). Modes:

- ``plain``: no stop strings, no parsing (``reasoning=False, tools=False``);
- ``stops+parse``: 3 stop strings that never match (so every token is checked and the streams
  run to the end), ``reasoning=True`` (the ``<think>`` part becomes ``reasoning_content``) and
  ``tools=True`` (content is scanned for ``<tool_call>``).

Columns: ``textproc`` = tokens/s through the process (wall clock, first step sent -> last output
read), ``CPU tok/s`` = tokens per CPU second of the detokenizer process (from /proc; less
disturbed by other load on a shared machine), ``core`` = the same ``RequestTable`` core fed the
same step frames in this process (decode the step, ``on_step``, encode the Outputs; no sockets;
``gc.freeze()`` first, as the process does),
``DecodeStream`` = ``tokenizers.decoders.DecodeStream.step`` per token per stream in this
process (both in tokens per CPU second of this process: ``time.process_time``, one thread), plus ``StopChecker.feed`` of each chunk in ``stops+parse`` mode (HF has no parser; that
part is textproc only), ``vs DS`` = textproc CPU tok/s / DecodeStream CPU tok/s. Target: 500,000 tokens/s at
1,024 streams with stops and parsing on.

``--profile DIR``: run ``py-spy record`` on the detokenizer process for each case and print its
top functions by own time (needs py-spy: ``pip install py-spy``). ``--send-costs``: only time one
Outputs send the way the detokenizer does it against alternatives (see ``send_costs``).
``--floor``: only the least per-token Python work a step can do (see ``run_floor``).
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import time
from pathlib import Path
from typing import Any

import msgspec
import zmq

from _common import Progress, print_table, write_json
from _detokenize_parts import CLIENT_ID, DetokProcess, send_costs, summarize_profile

from textproc.config import ServiceConfig
from textproc.options import OutputOptions, ParseOptions
from textproc.protocol import (
    EngineHello,
    EngineRequest,
    EngineStep,
    Outputs,
    StepOutput,
    Submit,
    pack_floats,
    pack_ids,
)
from textproc.testing.bench_cli import bench_parser, model_dir_arg
from textproc.testing.corpus import mixed_text
from textproc.testing.machine import cpu_seconds, describe, machine

__all__ = ["main"]

STOP_CANDIDATES = ["<|STOP|>", "END OF ANSWER", "\n@@@@\n", "~~~~~~", "\x00STOP"]
TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


class Workload:
    """Token ids: a reasoning prefix then a content cycle; stream i starts at its own offset."""

    def __init__(self, model: Path, n_chars: int) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self.hf = HFTokenizer.from_file(str(model / "tokenizer.json"))
        text = mixed_text(n_chars + 4000, seed=5)
        # the corpus has chat-like pieces with think / tool-call tags: drop them, so the only
        # tags the parser meets are the reasoning block below (and the text check holds)
        for tag in TAGS:
            text = text.replace(tag, "")
        reasoning, content = text[:3000], text[3000:n_chars + 3000]
        self.prefix = self.hf.encode("<think>\n" + reasoning + "\n</think>\n\n",
                                     add_special_tokens=False).ids
        self.content = self.hf.encode(content, add_special_tokens=False).ids
        self.stops = [s for s in STOP_CANDIDATES if s not in text][:3]

    def ids(self, stream: int, start: int, n: int) -> list[int]:
        p, c = self.prefix, self.content
        off = (stream * 7919) % len(c)
        out = []
        for k in range(start, start + n):
            out.append(p[k] if k < len(p) else c[(off + k - len(p)) % len(c)])
        return out


def _rows(token_id: int, k: int) -> tuple[bytes, bytes]:
    """One token's logprob row as an engine sends it: its logprob, then k alternatives'."""
    value = -((token_id * 2654435761) % 1000) / 200.0
    return (pack_floats([value] + [value - 0.5 * (i + 1) for i in range(k)]),
            pack_ids([(token_id + i + 1) % 150_000 for i in range(k)]))


def _case_frames(work: Workload, streams: int, steps: int, tag: str,
                 top_logprobs: int | None = None) -> tuple[list[str], list[bytes]]:
    enc = msgspec.msgpack.Encoder()
    rids = [f"{tag}-{i}" for i in range(streams)]
    per_stream = [work.ids(i, 0, steps) for i in range(streams)]
    frames = []
    for k in range(steps):
        if top_logprobs is None:
            outs = [StepOutput(rid, [per_stream[i][k]]) for i, rid in enumerate(rids)]
        else:
            outs = [StepOutput(rid, [per_stream[i][k]], None, *_rows(per_stream[i][k], top_logprobs))
                    for i, rid in enumerate(rids)]
        frames.append(enc.encode(EngineStep(k, outs)))
    frames.append(enc.encode(EngineStep(steps, [StepOutput(rid, [], "length") for rid in rids])))
    return rids, frames


def _submits(rids: list[str], mode: str, work: Workload,
             top_logprobs: int | None = None) -> list[bytes]:
    enc = msgspec.msgpack.Encoder()
    on = mode != "plain"
    out = []
    for rid in rids:
        er = enc.encode(EngineRequest(rid, pack_ids([1, 2, 3]), 1 << 30, logprobs=top_logprobs))
        out.append(enc.encode(Submit(
            rid, CLIENT_ID, 3, 1 << 30, er,
            output=OutputOptions(stop=work.stops if on else [], logprobs=top_logprobs),
            parse=ParseOptions(reasoning=True, tools=True) if on else None)))
    return out


def run_process(dp: DetokProcess, work: Workload, streams: int, steps: int, mode: str,
                tag: str, top_logprobs: int | None = None) -> dict[str, Any]:
    rids, frames = _case_frames(work, streams, steps, tag, top_logprobs)
    entry_bytes: list[bytes] = []  # stream 0's logprob entries, joined: its text in plain mode
    for data in _submits(rids, mode, work, top_logprobs):
        dp.submit.send(data)
    # wait until every request reached the engine side (registered in the detokenizer)
    got = 0
    deadline = time.monotonic() + 60
    while got < streams and time.monotonic() < deadline:
        if dp.engine_in.poll(200):
            got += dp.drain_engine_in()
    if got < streams:
        raise RuntimeError(f"only {got}/{streams} requests reached engine-in")
    dp.start_profile(f"{mode}-{streams}")
    progress = Progress(f"{mode} {streams} streams")
    finished = 0
    frames_in = 0
    text0: list[str] = []
    reasons: collections.Counter[str] = collections.Counter()
    decode = dp.front_dec.decode
    send = dp.engine_out.send
    recv = dp.front.recv
    cpu0 = cpu_seconds(dp.pid)
    t0 = time.perf_counter()
    i = 0
    n = len(frames)
    while finished < streams:
        if i < n:
            for _ in range(min(16, n - i)):
                send(frames[i], copy=False)
                i += 1
        elif not dp.front.poll(60_000):
            raise RuntimeError(f"{finished}/{streams} streams finished; no output for 60 s")
        while True:
            try:
                data = recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            frames_in += 1
            frame = decode(data)
            if isinstance(frame, Outputs):
                for item in frame.items:
                    if item.request_id == rids[0]:
                        for d in item.deltas:
                            text0.append(d.get("content", "") + d.get("reasoning_content", ""))
                        entry_bytes.extend(e[1] for e in item.logprobs or ())
                    if item.finish_reason is not None:
                        finished += 1
                        reasons[item.finish_reason] += 1
        progress(f"steps sent {i}/{n}, finished {finished}/{streams}")
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(dp.pid) - cpu0
    profile = dp.stop_profile()
    dp.drain_engine_in()
    tokens = streams * steps
    # Submit.skip_special_tokens is on (the default); <think> / </think> are not special in Qwen
    ref = work.hf.decode(work.ids(0, 0, steps), skip_special_tokens=True)
    if mode != "plain":
        ref = ref.replace("<think>", "", 1).replace("</think>", "", 1)
    text = "".join(text0)
    # the parser drops the whitespace around the think tags: compare without whitespace there
    same = text == ref if mode == "plain" else "".join(text.split()) == "".join(ref.split())
    if top_logprobs is not None and mode == "plain":  # every token's bytes, joined: the text
        same = same and b"".join(entry_bytes) == text.encode()
    return {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
            "detok_cpu_s": cpu, "tokens_per_cpu_s": tokens / cpu if cpu > 0 else None,
            "outputs_frames": frames_in, "finish_reasons": dict(reasons), "stream0_text_ok": same,
            "profile": str(profile) if profile else None}


def run_core(model: Path, work: Workload, streams: int, steps: int, mode: str,
             top_logprobs: int | None = None) -> float:
    """The RequestTable core in this process: decode step frame, on_step, encode Outputs."""
    from textproc.service.request_table import RequestTable
    from textproc.protocol import EngineOutFrame
    from textproc.core.tokenizer import Tokenizer
    from textproc.transport import encoder

    tok = _core_tokenizer(model)
    core = RequestTable(tok, ServiceConfig(model_dir=str(model), n_workers=1))
    rids, frames = _case_frames(work, streams, steps, "core", top_logprobs)
    sub_dec = msgspec.msgpack.Decoder(Submit)
    for data in _submits(rids, mode, work, top_logprobs):
        core.on_submit(sub_dec.decode(data))
    dec = msgspec.msgpack.Decoder(EngineOutFrame)
    enc = encoder().encode
    # like the detokenizer process: the vocabulary's objects out of every GC pass
    gc.collect()
    gc.freeze()
    t0 = time.process_time()
    for data in frames:
        frame = dec.decode(data)
        assert not isinstance(frame, EngineHello)
        core.on_step(frame)
        outbox, core.outbox = core.outbox, {}
        for items in outbox.values():
            enc(Outputs(items))
        core.engine_aborts = []
    cpu = time.process_time() - t0
    gc.unfreeze()
    del Tokenizer
    return streams * steps / cpu


_TOKENIZERS: dict[str, Any] = {}


def _core_tokenizer(model: Path) -> Any:
    from textproc.core.tokenizer import Tokenizer

    if str(model) not in _TOKENIZERS:
        _TOKENIZERS[str(model)] = Tokenizer.from_dir(model)
    return _TOKENIZERS[str(model)]


def run_decodestream(work: Workload, streams: int, steps: int, mode: str) -> float:
    from tokenizers.decoders import DecodeStream

    from textproc.core.stops import StopChecker

    hf = work.hf
    per_stream = [work.ids(i, 0, steps) for i in range(streams)]
    dss = [DecodeStream(skip_special_tokens=True) for _ in range(streams)]
    checkers = [StopChecker(work.stops) for _ in range(streams)] if mode != "plain" else None
    t0 = time.process_time()
    for k in range(steps):
        for i in range(streams):
            chunk = dss[i].step(hf, per_stream[i][k])
            if chunk and checkers is not None:
                checkers[i].feed(chunk)
    cpu = time.process_time() - t0
    return streams * steps / cpu


def run_floor(model: Path, work: Workload, streams: int, steps: int) -> dict[str, Any]:
    """The least per-token Python a detokenizer step can do, in this process (CPU): decode the
    step frame, look each token's text up in a table, build the outputs, encode one frame.
    ``floor``: ``RequestOutput(rid, [{"content": text}])`` items as today; ``floor-text``: the
    same with ``(rid, text)`` tuples (a text-only output shape). No stops, no parser, no state."""
    from textproc.core.detokenizer import IncrementalDetokenizer
    from textproc.protocol import EngineOutFrame, RequestOutput

    tt = IncrementalDetokenizer(_core_tokenizer(model)).text_table
    table = tt() if callable(tt) else tt  # a method or a property, depending on the version
    if table is None:
        raise RuntimeError("IncrementalDetokenizer.text_table() gave no table")
    _, frames = _case_frames(work, streams, steps, "floor")
    frames = frames[:-1]
    dec = msgspec.msgpack.Decoder(EngineOutFrame)
    enc = msgspec.msgpack.Encoder().encode
    out: dict[str, Any] = {}
    gc.collect()
    gc.freeze()
    for shape in ("floor", "floor-text"):
        c0 = time.process_time()
        for data in frames:
            step = dec.decode(data)
            assert isinstance(step, EngineStep)
            if shape == "floor":
                items: list[Any] = []
                for o in step.outputs:
                    text = table[o.token_ids[0]]
                    if text:
                        items.append(RequestOutput(o.request_id, [{"content": text}]))
                enc(Outputs(items))
            else:
                pairs = []
                for o in step.outputs:
                    text = table[o.token_ids[0]]
                    if text:
                        pairs.append((o.request_id, text))
                enc(("OutputsText", pairs))
        out[shape] = streams * steps / (time.process_time() - c0)
    gc.unfreeze()
    return out


def _main_send_costs(args: argparse.Namespace) -> int:
    info = machine()
    print(f"detokenize --send-costs: {describe(info)}", flush=True)
    send_rows = send_costs()
    print_table(send_rows, [("way", "way", ""), ("bytes", "bytes", "d"), ("us wall", "us_wall", ".2f"),
                       ("us CPU", "us_cpu", ".2f"), ("load", "load_avg_1m", ".1f")])
    write_json(args.json, send_rows, info)
    return 0


def _main_floor(args: argparse.Namespace, model: Path, streams_list: list[int]) -> int:
    info = machine()
    print(f"detokenize --floor: {describe(info)}", flush=True)
    work = Workload(model, 60_000)
    total = args.tokens or (20_000 if args.quick else 300_000)
    floor_rows = []
    for streams in streams_list:
        steps = max(10, min(args.max_steps or 10_000, total // streams))
        f = run_floor(model, work, streams, steps)
        floor_rows.append({"bench": "detokenize-floor", "streams": streams, "steps": steps,
                           "floor_tokens_per_cpu_s": f["floor"],
                           "floor_text_tokens_per_cpu_s": f["floor-text"],
                           "load_avg_1m": os.getloadavg()[0]})
    print_table(floor_rows, [("streams", "streams", "d"), ("steps", "steps", "d"),
                             ("floor tok/CPU-s", "floor_tokens_per_cpu_s", ",.0f"),
                             ("floor-text tok/CPU-s", "floor_text_tokens_per_cpu_s", ",.0f"),
                             ("load", "load_avg_1m", ".1f")])
    write_json(args.json, floor_rows, info)
    return 0


def _report(rows: list[dict[str, Any]], profiles: dict[str, list[tuple[str, float, float]]]) -> None:
    print()
    print_table(rows, [("streams", "streams", "d"), ("mode", "mode", ""),
                       ("top_logprobs", "top_logprobs", ""), ("steps", "steps", "d"),
                       ("tokens", "tokens", "d"), ("textproc tok/s", "tokens_per_s", ",.0f"),
                       ("CPU tok/s", "tokens_per_cpu_s", ",.0f"),
                       ("core CPU tok/s", "core_tokens_per_s", ",.0f"),
                       ("DecodeStream CPU tok/s", "decodestream_tokens_per_s", ",.0f"),
                       ("vs DS", "vs_decodestream", ".2f"), ("text ok", "stream0_text_ok", ""),
                       ("load", "load_avg_1m", ".1f")])
    print("(target: 500,000 tok/s at 1,024 streams, stops+parse)")
    for tag, top in profiles.items():
        print(f"\npy-spy, detokenizer process, {tag}: % of samples, own / inclusive")
        for name, share, inclusive in top:
            print(f"  {share:5.1f}% {inclusive:5.1f}%  {name}")
    for r in rows:
        if r.get("profile"):
            r["profile_top"] = profiles.get(f"{r['mode']}-{r['streams']}")


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="fewer tokens per case (< 1 min)",
                     json_help="append one JSON line per result here")
    p.add_argument("--streams", help="comma list (default 1,64,1024,4096)")
    p.add_argument("--modes", default="plain,stops+parse")
    p.add_argument("--tokens", type=int, help="tokens per case (default 20,000 quick / 300,000)")
    p.add_argument("--max-steps", type=int, help="cap on steps per case (default 2,000 / 10,000)")
    p.add_argument("--no-reference", action="store_true", help="skip the core and DecodeStream columns")
    p.add_argument("--profile", type=Path, help="py-spy the detokenizer process, raw stacks here")
    p.add_argument("--floor", action="store_true",
                   help="only the least per-token Python a step can do (see run_floor), per stream count")
    p.add_argument("--send-costs", action="store_true",
                   help="only the cost of one Outputs send (send_multipart vs 2 sends, copy on/off)")
    p.add_argument("--top-logprobs", type=int, metavar="K",
                   help="every request asks for logprobs with K alternatives (0..20); the steps "
                        "carry the engine's rows")
    args = p.parse_args(argv)
    if args.send_costs:
        return _main_send_costs(args)
    model = model_dir_arg(p, args.model_dir)
    streams_list = [int(x) for x in (args.streams or "1,64,1024,4096").split(",")]
    if args.floor:
        return _main_floor(args, model, streams_list)
    modes = args.modes.split(",")
    total = args.tokens or (20_000 if args.quick else 300_000)
    max_steps = args.max_steps or (2_000 if args.quick else 10_000)
    info = machine()
    print(f"detokenize: {describe(info)}", flush=True)
    work = Workload(model, 60_000)
    dp = DetokProcess(model, args.profile)
    rows: list[dict[str, Any]] = []
    profiles: dict[str, list[tuple[str, float, float]]] = {}
    try:
        for streams in streams_list:
            steps = max(10, min(max_steps, total // streams))
            for mode in modes:
                tag = f"{mode}-{streams}"
                r = run_process(dp, work, streams, steps, mode, tag, args.top_logprobs)
                row: dict[str, Any] = {"bench": "detokenize", "streams": streams, "mode": mode,
                                       "steps": steps, "top_logprobs": args.top_logprobs, **r,
                                       "load_avg_1m": os.getloadavg()[0]}
                if not args.no_reference:
                    row["core_tokens_per_s"] = run_core(model, work, streams, steps, mode,
                                                        args.top_logprobs)
                    row["decodestream_tokens_per_s"] = run_decodestream(work, streams, steps, mode)
                    row["vs_decodestream"] = (r["tokens_per_cpu_s"] or 0) / row["decodestream_tokens_per_s"]
                rows.append(row)
                print(f"  {streams:>5} streams {mode:<12} {r['tokens_per_s']:>10,.0f} tok/s "
                      f"(CPU {row['tokens_per_cpu_s'] or 0:,.0f}), text ok={r['stream0_text_ok']}",
                      flush=True)
                if r["profile"]:
                    profiles[tag] = summarize_profile(Path(r["profile"]))
    finally:
        dp.close()
    _report(rows, profiles)
    write_json(args.json, rows, info)
    return 0 if all(r["stream0_text_ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
