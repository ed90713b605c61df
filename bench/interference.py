#!/usr/bin/env python3
"""Engine interference (issue 6, item 1): does text work slow the engine loop down?

    .venv/bin/python bench/interference.py [--quick] [--json PATH] [--steps N] [--step-ms X]
        [--units N] [--model-dir DIR] [--no-unpinned] [--no-pinned]

The engine: a stub-like step loop in this process doing a FIXED amount of GIL-holding Python
work per step (``engine_stub.stub.busy_work``, calibrated once on the idle machine to take
``--step-ms``), then building one new token for each of 256 running streams and sending the step
through a real ``textproc.engine.EngineLink`` (``poll_requests`` + ``poll_aborts`` +
``send_outputs``) to a sink process. Measured per set-up: engine step time p50/p99 and engine
tokens/s (256 x steps / wall time), plus the text work done meanwhile.

The text load (the same function everywhere, ``text_loop``): over and over, encode one long
prompt (~6,000 characters of the repository's mixed corpus: prose, code, CJK, emoji ...) and
advance 128 concurrent output streams by one token each through ``textproc.pipeline.
OutputPipeline`` (incremental detokenizer -> stop strings -> reasoning/tool parser), restarting a
stream when its 400 tokens are used up. Each "text unit" runs this loop as fast as it can
(a heavy, saturating load); there are ``--units`` of them (default 2).

Set-ups, in one run:

- ``a-none``: no text load;
- ``b-inproc``: the text units are threads in the engine's process (a server without textproc);
- ``b-inproc-hf``: the same with HF ``tokenizers`` (Rust encode, ``DecodeStream`` per stream)
  and textproc's ``StopChecker`` (another in-process baseline);
- ``c-textproc``: the text units are separate processes (what textproc's workers and
  detokenizer do), the engine only talks to its EngineLink.

``pinned``: the engine thread is pinned to CPU 0 and every text unit (thread or process) and the
sink to the other CPUs, so only the interpreter lock can slow the engine (design.md "What fast
means"); ``unpinned``: no affinity, CPU contention included. The vocabulary is Qwen3 from
``.cache/models/qwen3`` (``scripts/fetch_fixtures.py``), or the toy test model if missing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__all__ = ["main", "text_loop"]

ENGINE_STREAMS = 256
STREAMS_PER_UNIT = 128
STREAM_TOKENS = 400
PROMPT_CHARS = 6000
CORPUS_BYTES = 150_000
STOPS = ["<|STOP|>", "\n\n\n\n", "END OF ANSWER"]


# --- the text load ---------------------------------------------------------------------------


def _model_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    qwen = REPO_ROOT / ".cache" / "models" / "qwen3"
    if (qwen / "tokenizer.json").is_file():
        return qwen
    from tests.integration.service import build_toy_model

    return build_toy_model(Path(tempfile.mkdtemp(prefix="tp-bench-toy-")))


def _texts() -> tuple[list[str], str]:
    from tests.corpus import fast_items

    # the generated mixed documents (prose, code, scripts, CJK, emoji ...), not the edge cases
    docs = [text for label, text in fast_items(CORPUS_BYTES, seed=3) if not label.startswith("edge")]
    joined = "\n\n".join(docs)
    prompts = [joined[i : i + PROMPT_CHARS] for i in range(0, len(joined) - PROMPT_CHARS, PROMPT_CHARS)]
    return prompts[:16], joined[-20_000:]


class TextWork:
    """What one text unit needs: an encoder, a stream factory and pre-tokenized outputs."""

    def __init__(self, model_dir: Path, impl: str) -> None:
        prompts, output_text = _texts()
        self.prompts = prompts
        self.impl = impl
        if impl == "hf":
            from tokenizers import Tokenizer as HFTokenizer
            from tokenizers.decoders import DecodeStream

            from textproc.stops import StopChecker

            hf = HFTokenizer.from_file(str(model_dir / "tokenizer.json"))

            def encode(text: str) -> list[int]:
                return hf.encode(text, add_special_tokens=False).ids

            class HFStream:
                def __init__(self) -> None:
                    self.ds = DecodeStream(skip_special_tokens=True)
                    self.stops = StopChecker(STOPS)

                def feed(self, ids: list[int]) -> Any:
                    out = []
                    for i in ids:
                        chunk = self.ds.step(hf, i)
                        if chunk:
                            out.append(self.stops.feed(chunk))
                    return out

            self.encode: Callable[[str], list[int]] = encode
            self.make_stream: Callable[[], Any] = HFStream
        else:
            from textproc.pipeline import OutputPipeline
            from textproc.tokenizer import Tokenizer

            tok = Tokenizer.from_dir(model_dir)
            self.encode = tok.encode

            def make() -> Any:
                return OutputPipeline(tok, stops=STOPS, reasoning=True, tools=True)

            self.make_stream = make
        self.output_ids = self.encode(output_text)


def text_loop(work: TextWork, stop: Any, counts: dict[str, int], unit: int) -> None:
    """Encode prompts and feed 128 output streams one token each, until ``stop`` is set."""
    ids = work.output_ids
    n_ids = len(ids) - STREAM_TOKENS
    streams = []
    for s in range(STREAMS_PER_UNIT):
        start = (unit * 7919 + s * 613) % n_ids
        streams.append([work.make_stream(), start, start + STREAM_TOKENS])
    encoded = fed = 0
    i = unit
    encode = work.encode
    prompts = work.prompts
    while not stop.is_set():
        encoded += len(encode(prompts[i % len(prompts)]))
        i += 1
        for st in streams:
            pos = st[1]
            st[0].feed(ids[pos : pos + 1])
            pos += 1
            if pos >= st[2]:
                pos -= STREAM_TOKENS
                st[0] = work.make_stream()
            st[1] = pos
            fed += 1
    counts["encoded"] = counts.get("encoded", 0) + encoded
    counts["detokenized"] = counts.get("detokenized", 0) + fed


def _pin(cpus: set[int] | None) -> None:
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def _worker(model_dir: str, impl: str, unit: int, commands: Any, results: Any, stop: Any) -> None:
    """A text unit as a process (set-up c): waits for ("run", cpus) / ("exit",)."""
    work = TextWork(Path(model_dir), impl)
    results.put(("ready", unit))
    while True:
        cmd = commands.get()
        if cmd[0] == "exit":
            return
        _pin(cmd[1])
        counts: dict[str, int] = {}
        results.put(("started", unit))
        text_loop(work, stop, counts, unit)
        _pin(set(range(os.cpu_count() or 1)))
        results.put(("counts", counts))


def _sink(engine_in: str, engine_out: str, stop: Any, cpus: set[int] | None) -> None:
    """textproc's side of the engine sockets: drain every step frame."""
    import zmq

    _pin(cpus)
    ctx: Any = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.bind(engine_in)
    pull = ctx.socket(zmq.PULL)
    pull.bind(engine_out)
    while not stop.is_set():
        if pull.poll(100):
            while True:
                try:
                    pull.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
    push.close(0)
    pull.close(0)
    ctx.term()


# --- the engine ------------------------------------------------------------------------------


def engine_run(link: Any, units: int, n_steps: int, cpus: set[int] | None) -> dict[str, Any]:
    from engine_stub.stub import busy_work

    all_cpus = os.sched_getaffinity(0)
    _pin(cpus)
    rids = [f"stream-{i}" for i in range(ENGINE_STREAMS)]
    perf = time.perf_counter
    times = []
    t_start = perf()
    for step in range(n_steps):
        t0 = perf()
        link.poll_requests()
        link.poll_aborts()
        busy_work(units)
        token = 1000 + step % 5000
        link.send_outputs([(rid, [token], None) for rid in rids])
        times.append(perf() - t0)
    elapsed = perf() - t_start
    os.sched_setaffinity(0, all_cpus)
    times.sort()
    return {
        "step_ms_p50": statistics.median(times) * 1e3,
        "step_ms_p99": times[min(len(times) - 1, round(0.99 * (len(times) - 1)))] * 1e3,
        "step_ms_mean": statistics.fmean(times) * 1e3,
        "engine_tokens_per_s": ENGINE_STREAMS * n_steps / elapsed,
        "seconds": elapsed,
    }


def machine() -> dict[str, Any]:
    import zmq

    return {"python": platform.python_version(), "cpus": os.cpu_count(),
            "platform": platform.platform(), "zmq": zmq.zmq_version(),
            "load_avg_1m": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="pinned only, fewer steps (< 1 min)")
    parser.add_argument("--json", type=Path, help="write one JSON line per set-up here")
    parser.add_argument("--steps", type=int, help="engine steps per set-up")
    parser.add_argument("--step-ms", type=float, default=5.0, help="GIL-holding work per step")
    parser.add_argument("--units", type=int, default=2, help="text threads / processes")
    parser.add_argument("--model-dir", help="tokenizer directory (default: Qwen3 fixture)")
    parser.add_argument("--no-unpinned", action="store_true")
    parser.add_argument("--no-pinned", action="store_true")
    parser.add_argument("--no-hf", action="store_true", help="skip the HF tokenizers baseline")
    args = parser.parse_args(argv)
    steps = args.steps or (120 if args.quick else 1000)
    n_cpu = len(os.sched_getaffinity(0))
    modes = []
    if not args.no_pinned and n_cpu >= 2:
        modes.append("pinned")
    if not args.quick and not args.no_unpinned or not modes:
        modes.append("unpinned")
    setups = ["a-none", "b-inproc", "c-textproc"]
    if not args.no_hf and not args.quick:
        setups.insert(2, "b-inproc-hf")
    model_dir = _model_dir(args.model_dir)
    engine_cpus = {0}
    text_cpus = set(range(1, n_cpu)) or {0}
    info = machine()
    print(f"engine interference: {steps} steps/set-up, {args.step_ms} ms GIL work/step, "
          f"{args.units} text units, {ENGINE_STREAMS} engine streams; model {model_dir.name}; "
          f"{n_cpu} cpus, load {info['load_avg_1m']:.1f}", flush=True)

    from textproc.engine import EngineLink

    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="tp-interf-")
    engine_in, engine_out = f"ipc://{tmp}/engine-in", f"ipc://{tmp}/engine-out"
    stop_all = ctx.Event()
    sink = ctx.Process(target=_sink, args=(engine_in, engine_out, stop_all,
                                           text_cpus if "pinned" in modes else None), daemon=True)
    sink.start()
    commands = [ctx.Queue() for _ in range(args.units)]
    results: Any = ctx.Queue()
    worker_stop = ctx.Event()
    workers = [ctx.Process(target=_worker, args=(str(model_dir), "textproc", u, commands[u],
                                                 results, worker_stop), daemon=True)
               for u in range(args.units)]
    for w in workers:
        w.start()
    rows: list[dict[str, Any]] = []
    link = EngineLink.connect(engine_in, engine_out)
    try:
        print("loading text work in this process and in the workers ...", flush=True)
        works = {"textproc": TextWork(model_dir, "textproc")}
        if "b-inproc-hf" in setups:
            works["hf"] = TextWork(model_dir, "hf")
        for _ in workers:
            kind, _unit = results.get(timeout=120)
            assert kind == "ready", kind
        from engine_stub.stub import calibrate_busy

        _pin(engine_cpus if "pinned" in modes else None)
        units = calibrate_busy(args.step_ms)
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        print(f"busy units per step: {units}", flush=True)
        print(f"{'set-up':<13} {'cpus':<9} {'p50 ms':>7} {'p99 ms':>7} {'mean':>7} {'tok/s':>8} "
              f"{'p50 +%':>7} {'p99 +%':>7} {'enc tok/s':>10} {'detok tok/s':>11}", flush=True)
        for mode in modes:
            pinned = mode == "pinned"
            base: dict[str, Any] | None = None
            for setup in setups:
                counts: dict[str, int] = {}
                row: dict[str, Any]
                if setup == "a-none":
                    row = engine_run(link, units, steps, engine_cpus if pinned else None)
                elif setup.startswith("b-"):
                    work = works["hf" if setup.endswith("hf") else "textproc"]
                    stop = threading.Event()
                    started = threading.Barrier(args.units + 1)
                    per_thread: list[dict[str, int]] = [{} for _ in range(args.units)]

                    def body(u: int, work: TextWork = work, stop: threading.Event = stop,
                             started: threading.Barrier = started,
                             per_thread: list[dict[str, int]] = per_thread) -> None:
                        _pin(text_cpus if pinned else None)
                        started.wait()
                        text_loop(work, stop, per_thread[u], u)

                    threads = [threading.Thread(target=body, args=(u,), daemon=True)
                               for u in range(args.units)]
                    for t in threads:
                        t.start()
                    started.wait()
                    time.sleep(0.1)
                    row = engine_run(link, units, steps, engine_cpus if pinned else None)
                    stop.set()
                    for t in threads:
                        t.join(timeout=60)
                    for c in per_thread:
                        for k, v in c.items():
                            counts[k] = counts.get(k, 0) + v
                else:
                    worker_stop.clear()
                    for q in commands:
                        q.put(("run", text_cpus if pinned else None))
                    for _ in workers:
                        kind, _unit = results.get(timeout=60)
                        assert kind == "started", kind
                    time.sleep(0.1)
                    row = engine_run(link, units, steps, engine_cpus if pinned else None)
                    worker_stop.set()
                    for _ in workers:
                        kind, c = results.get(timeout=60)
                        assert kind == "counts", kind
                        for k, v in c.items():
                            counts[k] = counts.get(k, 0) + v
                secs = row["seconds"]
                row.update({"bench": "interference", "setup": setup, "cpus": mode,
                            "steps": steps, "step_work_ms": args.step_ms, "busy_units": units,
                            "text_units": args.units, "model": model_dir.name,
                            "encode_tokens_per_s": counts.get("encoded", 0) / secs,
                            "detok_tokens_per_s": counts.get("detokenized", 0) / secs})
                if base is None:
                    base = row
                row["p50_vs_none_pct"] = (row["step_ms_p50"] / base["step_ms_p50"] - 1) * 100
                row["p99_vs_none_pct"] = (row["step_ms_p99"] / base["step_ms_p99"] - 1) * 100
                rows.append(row)
                print(f"{setup:<13} {mode:<9} {row['step_ms_p50']:>7.2f} {row['step_ms_p99']:>7.2f} "
                      f"{row['step_ms_mean']:>7.2f} {row['engine_tokens_per_s']:>8.0f} "
                      f"{row['p50_vs_none_pct']:>+7.1f} {row['p99_vs_none_pct']:>+7.1f} "
                      f"{row['encode_tokens_per_s']:>10.0f} {row['detok_tokens_per_s']:>11.0f}",
                      flush=True)
    finally:
        link.close()
        for q in commands:
            q.put(("exit",))
        worker_stop.set()
        stop_all.set()
        for p in [*workers, sink]:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        for q in [*commands, results]:
            q.close()
            q.join_thread()
    print("(+% = step time vs a-none in the same cpus mode; target for c-textproc: p50 +1%, "
          "p99 +5%)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps({**r, "machine": info, "when": time.time()}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
