#!/usr/bin/env python3
"""Engine interference: does text work slow the engine loop down?

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
advance 128 concurrent output streams by one token each through ``textproc.core.pipeline.
OutputPipeline`` (incremental detokenizer -> stop strings -> reasoning/tool parser), restarting a
stream when its 400 tokens are used up. Each "text unit" runs this loop as fast as it can
(a heavy, saturating load); there are ``--units`` of them (default 2).

The b and c set-ups alternate blocks of 50 loaded steps with 50 quiet steps (the text units
paused, blocked on an event) and report both, so ``paired +%`` compares the engine with and
without the load under the same machine conditions (on a shared VM the speed of a core drifts
by tens of percent between runs; the ``+%`` column against the separate ``a-none`` run
includes that drift). c-service is not paired (its load cannot pause mid-request).

Set-ups, in one run:

- ``a-none``: no text load;
- ``b-inproc``: the text units are threads in the engine's process (a server without textproc);
- ``b-inproc-hf``: the same with HF ``tokenizers`` (Rust encode, ``DecodeStream`` per stream)
  and textproc's ``StopChecker`` (another in-process baseline);
- ``c-textproc``: the text units are separate processes (what textproc's workers and
  detokenizer do), the engine only talks to its EngineLink;
- ``c-service`` (``--service``, on by default in full runs): the real thing. ``textproc serve
  --engine external --workers N`` runs the tokenizer workers and the detokenizer, a load
  generator process keeps 256 chat streams open through ``TextClient`` (the long mixed-text
  prompts as user messages, stop strings, reasoning/tool parsing on, max_tokens 200), and the
  engine loop serves them: per step it takes new requests and aborts from its EngineLink, does
  the same fixed work, and emits one pre-tokenized mixed-text token per running request (finish
  "length" at max_tokens), so the detokenizer has real text to stream. Its engine streams vary
  with the load (reported as ``streams``). With ``--constrained F`` that fraction of the
  streams asks for JSON output: the workers compile the schema, the index reaches the engine
  once, and the engine reads each such request's mask and advances its guide every step.

``pinned``: the engine thread is pinned to CPU 0 and every text unit (thread or process), the
sink and the service's processes to the other CPUs, so only the interpreter lock can slow the
engine (docs/architecture.md, "What fast means"); with ``--rt`` (default; needs CAP_SYS_NICE) the engine
thread also runs SCHED_FIFO while it steps, so on a machine shared with other jobs CPU 0 is
really its own (the kernel's RT throttling still leaves others 5%). ``unpinned``: no affinity,
normal scheduling, CPU contention included. The vocabulary is Qwen3 from
``.cache/models/qwen3`` (``scripts/fetch_fixtures.py``), or the toy test model if missing.
The text load and the processes: ``bench/_interference_parts.py``.
"""

from __future__ import annotations


import argparse
import multiprocessing as mp
import os
import queue
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _common import write_json  # noqa: E402  (after the thread settings above)
from _interference_parts import (  # noqa: E402
    ENGINE_STREAMS,
    RT,
    SERVICE_STREAMS,
    Service,
    TextWork,
    engine_run,
    engine_thread,
    engine_thread_done,
    load_generator,
    pin,
    service_run,
    sink,
    text_loop,
    worker,
)

from engine_stub.stub import busy_work, calibrate_busy  # noqa: E402
from textproc.engine import EngineLink  # noqa: E402
from textproc.testing.bench_cli import bench_parser, model_dir_arg  # noqa: E402
from textproc.testing.engine import StepEngine  # noqa: E402
from textproc.testing.machine import machine  # noqa: E402

__all__ = ["main", "text_loop"]

def _parser() -> argparse.ArgumentParser:
    parser = bench_parser(__doc__, quick="pinned only, fewer steps (< 1 min)",
                          json_help="write one JSON line per set-up here")
    parser.add_argument("--steps", type=int, help="engine steps per set-up")
    parser.add_argument("--step-ms", type=float, default=5.0, help="GIL-holding work per step")
    parser.add_argument("--units", type=int, default=2, help="text threads / processes")
    parser.add_argument("--no-unpinned", action="store_true")
    parser.add_argument("--no-pinned", action="store_true")
    parser.add_argument("--no-hf", action="store_true", help="skip the HF tokenizers baseline")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every set-up this many times, interleaved; summary = medians")
    parser.add_argument("--rt", action=argparse.BooleanOptionalAction, default=True,
                        help="pinned: run the engine thread SCHED_FIFO so CPU 0 is its own on a "
                             "shared machine (needs CAP_SYS_NICE; skipped if not allowed)")
    parser.add_argument("--service", action=argparse.BooleanOptionalAction, default=None,
                        help="also drive the real service (c-service); default: on unless --quick")
    parser.add_argument("--constrained", type=float, default=0.0, metavar="F",
                        help="c-service: this fraction of the streams asks for JSON output, "
                             "enforced through the engine's guides (target: 0.5)")
    return parser


class Rig:
    """Everything one run drives: the engine's link to the sink, the text-unit processes, and
    with c-service the real service, its engine and a load generator per set-up."""

    def __init__(self, args: argparse.Namespace, model_dir: Any, setups: list[str],
                 text_cpus: set[int], pinned_any: bool) -> None:
        self.args = args
        self.text_cpus = text_cpus
        self.ctx = mp.get_context("spawn")
        tmp = tempfile.mkdtemp(prefix="tp-interf-")
        engine_in, engine_out = f"ipc://{tmp}/engine-in", f"ipc://{tmp}/engine-out"
        ctx = self.ctx
        self.stop_all = ctx.Event()
        self.sink = ctx.Process(target=sink, args=(engine_in, engine_out, self.stop_all,
                                                   text_cpus if pinned_any else None), daemon=True)
        self.sink.start()
        self.commands = [ctx.Queue() for _ in range(args.units)]
        self.results: Any = ctx.Queue()
        self.worker_stop = ctx.Event()
        self.worker_go = ctx.Event()
        self.worker_go.set()
        self.worker_acks = [ctx.Event() for _ in range(args.units)]
        self.workers = [ctx.Process(target=worker, args=(
            str(model_dir), "textproc", u, self.commands[u], self.results, self.worker_stop,
            self.worker_go, self.worker_acks[u]), daemon=True) for u in range(args.units)]
        for w in self.workers:
            w.start()
        self.link = EngineLink.connect(engine_in, engine_out)
        self.service: Service | None = None
        self.service_link: Any = None
        self.service_engine: StepEngine | None = None
        if "c-service" in setups:
            print("starting textproc serve --engine external ...", flush=True)
            self.service = Service(model_dir, args.units)
            self.service_link = EngineLink.connect(self.service.engine_in, self.service.engine_out)
        print("loading text work in this process and in the workers ...", flush=True)
        self.works = {"textproc": TextWork(model_dir, "textproc")}
        if "b-inproc-hf" in setups:
            self.works["hf"] = TextWork(model_dir, "hf")
        for _ in self.workers:
            kind, _unit = self.results.get(timeout=120)
            assert kind == "ready", kind

    def prompt_tokens(self) -> float:
        work = self.works["textproc"]
        return statistics.fmean(len(work.encode(p)) for p in work.prompts)

    def run_inproc(self, impl: str, units: int, steps: int, engine_cpus: set[int] | None,
                   pinned: bool) -> tuple[dict[str, Any], dict[str, int]]:
        """b-: the text units are threads of this process."""
        n = self.args.units
        work = self.works[impl]
        stop, go = threading.Event(), threading.Event()
        go.set()
        acks = [threading.Event() for _ in range(n)]
        started = threading.Barrier(n + 1)
        per_thread: list[dict[str, int]] = [{} for _ in range(n)]

        def body(u: int) -> None:
            pin(self.text_cpus if pinned else None)
            started.wait()
            text_loop(work, stop, per_thread[u], u, go, acks[u])

        threads = [threading.Thread(target=body, args=(u,), daemon=True) for u in range(n)]
        for t in threads:
            t.start()
        started.wait()
        time.sleep(0.1)
        row = engine_run(self.link, units, steps, engine_cpus, go, acks)
        stop.set()
        go.set()
        for t in threads:
            t.join(timeout=60)
        counts: dict[str, int] = {}
        for c in per_thread:
            for k, v in c.items():
                counts[k] = counts.get(k, 0) + v
        return row, counts

    def run_processes(self, units: int, steps: int, engine_cpus: set[int] | None,
                      pinned: bool) -> tuple[dict[str, Any], dict[str, int]]:
        """c-textproc: the text units are the worker processes."""
        self.worker_stop.clear()
        for q in self.commands:
            q.put(("run", self.text_cpus if pinned else None))
        for _ in self.workers:
            kind, _unit = self.results.get(timeout=60)
            assert kind == "started", kind
        time.sleep(0.1)
        row = engine_run(self.link, units, steps, engine_cpus, self.worker_go, self.worker_acks)
        self.worker_stop.set()
        self.worker_go.set()
        counts: dict[str, int] = {}
        for _ in self.workers:
            kind, c = self.results.get(timeout=60)
            assert kind == "counts", kind
            for k, v in c.items():
                counts[k] = counts.get(k, 0) + v
        return row, counts

    def run_service(self, units: int, steps: int, engine_cpus: set[int] | None,
                    pinned: bool) -> tuple[dict[str, Any], dict[str, int]]:
        """c-service: a load generator's chats through the real service, served by the engine."""
        assert self.service is not None
        if self.service_engine is None:
            # request k starts at output position k * 613: the streams do not all say the same
            self.service_engine = StepEngine(self.service_link, self.works["textproc"].output_ids,
                                             stride=613)
        engine = self.service_engine
        self.service.pin(self.text_cpus if pinned else set(range(os.cpu_count() or 1)))
        gen_stop = self.ctx.Event()
        gen_results: Any = self.ctx.Queue()
        gen = self.ctx.Process(target=load_generator, args=(
            str(self.service.runtime_dir), self.works["textproc"].prompts, SERVICE_STREAMS,
            gen_stop, gen_results, self.args.constrained), daemon=True)
        gen.start()
        if pinned and gen.pid:
            os.sched_setaffinity(gen.pid, self.text_cpus)
        kind, _unit = gen_results.get(timeout=120)
        engine.work = lambda: busy_work(units)
        row = service_run(engine, steps, engine_cpus, int(SERVICE_STREAMS * 0.8))
        gen_stop.set()
        # keep serving (unmeasured, no fixed work) so the generator's streams can end
        engine.work = None
        end = time.monotonic() + 30
        got: Any = None
        while time.monotonic() < end and got is None:
            engine.take()
            if not engine.step():
                engine.link.wait(0.01)
            try:
                got = gen_results.get_nowait()
            except queue.Empty:
                pass
        gen.join(timeout=10)
        if gen.is_alive():
            gen.kill()
        gen_results.close()
        counts = dict(got[1]) if got is not None else {}
        life = float(counts.get("seconds", 0)) or row["seconds"]
        # over the load generator's life: prompts the workers encoded for completed requests;
        # every engine token went through the detokenizer
        row["client_counts"] = counts
        row["client_requests_per_s"] = counts.get("requests", 0) / life
        row["encode_tokens_per_s"] = counts.get("requests", 0) * self.prompt_tokens() / life
        row["detok_tokens_per_s"] = row["engine_tokens_per_s"]
        return row, counts

    def close(self) -> None:
        self.link.close()
        if self.service_link is not None:
            self.service_link.close()
        if self.service is not None:
            self.service.close()
        for q in self.commands:
            q.put(("exit",))
        self.worker_stop.set()
        self.worker_go.set()
        self.stop_all.set()
        for p in [*self.workers, self.sink]:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        for q in [*self.commands, self.results]:
            q.close()
            q.join_thread()


def _print_row(setup: str, mode: str, r: dict[str, Any], mean: str) -> None:
    print(f"{setup:<13} {mode:<9} {r['step_ms_p50']:>7.2f} {r['step_ms_p99']:>7.2f} "
          f"{mean:>7} {r['engine_tokens_per_s']:>8.0f} "
          f"{r['p50_vs_none_pct']:>+7.1f} {r['p99_vs_none_pct']:>+7.1f} "
          f"{r['encode_tokens_per_s']:>10.0f} {r['detok_tokens_per_s']:>11.0f} "
          + (f"{r['quiet_ms_p50']:>6.2f}/{r['quiet_ms_p99']:<7.2f} "
             f"{r['p50_vs_quiet_pct']:>+6.1f}/{r['p99_vs_quiet_pct']:<+7.1f}"
             if "quiet_ms_p50" in r else ""), flush=True)


def _summary(rows: list[dict[str, Any]], modes: list[str], setups: list[str]) -> list[dict[str, Any]]:
    """Per set-up and cpus mode, the median of each number over the runs."""
    out = []
    for mode in modes:
        for setup in setups:
            mine = [r for r in rows if r["setup"] == setup and r["cpus"] == mode]
            if not mine:
                continue
            keys = ["step_ms_p50", "step_ms_p99", "engine_tokens_per_s", "p50_vs_none_pct",
                    "p99_vs_none_pct", "encode_tokens_per_s", "detok_tokens_per_s"]
            if all("quiet_ms_p50" in r for r in mine):
                keys += ["quiet_ms_p50", "quiet_ms_p99", "p50_vs_quiet_pct", "p99_vs_quiet_pct"]
            med = {k: statistics.median(r[k] for r in mine) for k in keys}
            out.append({"bench": "interference-summary", "setup": setup, "cpus": mode,
                        "runs": len(mine), **med})
            _print_row(setup, mode, med, "")
    return out


def _rt_allowed() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return True
    except (OSError, AttributeError):
        print("(--rt not allowed here: pinned runs share CPU 0 with other processes)")
        return False


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    use_service = args.service if args.service is not None else not args.quick
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
    if use_service:
        setups.append("c-service")
    # the toy model (only built when there is no Qwen3) stays for the spawned text units
    model_dir = model_dir_arg(parser, args.model_dir,
                              toy_dir=Path(tempfile.gettempdir()) / f"tp-bench-toy-{os.getpid()}")
    engine_cpus = {0}
    text_cpus = set(range(1, n_cpu)) or {0}
    RT["enabled"] = args.rt and "pinned" in modes and _rt_allowed()
    info = machine(versions=True)
    print(f"engine interference: {steps} steps/set-up, {args.step_ms} ms GIL work/step, "
          f"{args.units} text units, {ENGINE_STREAMS} engine streams; model {model_dir.name}; "
          f"{n_cpu} cpus, load {info['load_avg'][0]:.1f}", flush=True)
    rows: list[dict[str, Any]] = []
    rig = Rig(args, model_dir, setups, text_cpus, "pinned" in modes)
    try:
        before = engine_thread(engine_cpus if "pinned" in modes else None)
        units = calibrate_busy(args.step_ms)
        engine_thread_done(before)
        print(f"busy units per step: {units}", flush=True)
        print(f"{'set-up':<13} {'cpus':<9} {'p50 ms':>7} {'p99 ms':>7} {'mean':>7} {'tok/s':>8} "
              f"{'p50 +%':>7} {'p99 +%':>7} {'enc tok/s':>10} {'detok tok/s':>11} "
              f"{'quiet p50/p99':>14} {'paired +%':>15}", flush=True)
        for rep in range(args.repeat):
            for mode in modes:
                pinned = mode == "pinned"
                cpus = engine_cpus if pinned else None
                base: dict[str, Any] | None = None
                for setup in setups:
                    counts: dict[str, int] = {}
                    if setup == "a-none":
                        row = engine_run(rig.link, units, steps, cpus)
                    elif setup.startswith("b-"):
                        row, counts = rig.run_inproc("hf" if setup.endswith("hf") else "textproc",
                                                     units, steps, cpus, pinned)
                    elif setup == "c-service":
                        row, counts = rig.run_service(units, steps, cpus, pinned)
                    else:
                        row, counts = rig.run_processes(units, steps, cpus, pinned)
                    secs = row["seconds"]
                    row.setdefault("encode_tokens_per_s", counts.get("encoded", 0) / secs)
                    row.setdefault("detok_tokens_per_s", counts.get("detokenized", 0) / secs)
                    row.update({"bench": "interference", "setup": setup, "cpus": mode, "rep": rep,
                                "steps": steps, "step_work_ms": args.step_ms, "busy_units": units,
                                "text_units": args.units, "model": model_dir.name,
                                "engine_sched_fifo": pinned and RT["enabled"]})
                    base = base or row
                    row["p50_vs_none_pct"] = (row["step_ms_p50"] / base["step_ms_p50"] - 1) * 100
                    row["p99_vs_none_pct"] = (row["step_ms_p99"] / base["step_ms_p99"] - 1) * 100
                    rows.append(row)
                    _print_row(setup, mode, row, f"{row['step_ms_mean']:.2f}")
    finally:
        rig.close()
    if args.repeat > 1:
        print(f"median over {args.repeat} runs:")
        rows += _summary(rows, modes, setups)
    print("(+% = step time vs a-none in the same cpus mode and run; paired +% = loaded blocks vs "
          "quiet blocks (text units paused) interleaved in the same run, every 50 steps; target "
          "for c-textproc: p50 +1%, p99 +5%)")
    write_json(args.json, rows, info, stamp=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
