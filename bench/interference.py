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
engine (design.md "What fast means"); with ``--rt`` (default; needs CAP_SYS_NICE) the engine
thread also runs SCHED_FIFO while it steps, so on a machine shared with other jobs CPU 0 is
really its own (the kernel's RT throttling still leaves others 5%). ``unpinned``: no affinity,
normal scheduling, CPU contention included. The vocabulary is Qwen3 from
``.cache/models/qwen3`` (``scripts/fetch_fixtures.py``), or the toy test model if missing.
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Serve, write_json  # noqa: E402

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
    from tests.helpers.service import build_toy_model

    return build_toy_model(Path(tempfile.mkdtemp(prefix="tp-bench-toy-")))


def _texts() -> tuple[list[str], str]:
    from tests.helpers.corpus import fast_items

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

            from textproc.core.stops import StopChecker

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
            from textproc.core.pipeline import OutputPipeline
            from textproc.core.tokenizer import Tokenizer

            tok = Tokenizer.from_dir(model_dir)
            self.encode = tok.encode

            def make() -> Any:
                return OutputPipeline(tok, stop=STOPS, reasoning=True, tools=True)

            self.make_stream = make
        self.output_ids = self.encode(output_text)


def text_loop(work: TextWork, stop: Any, counts: dict[str, int], unit: int,
              go: Any = None, ack: Any = None) -> None:
    """Encode prompts and feed 128 output streams one token each, until ``stop`` is set.

    While ``go`` is clear the unit blocks on it (``ack`` set; no wake-ups, no interpreter lock
    taken), so the engine can time quiet blocks between loaded ones under the same machine
    conditions.
    """
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
        if go is not None and not go.is_set():
            ack.set()
            go.wait()
            ack.clear()
            continue
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


RT = {"enabled": False}  # main() turns it on for pinned runs when --rt is allowed here


def _engine_thread(cpus: set[int] | None) -> set[int]:
    """Pin the calling (engine) thread; pinned + --rt: SCHED_FIFO, i.e. the core is its own."""
    before = os.sched_getaffinity(0)
    _pin(cpus)
    if cpus is not None and RT["enabled"]:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    return before


def _engine_thread_done(before: set[int]) -> None:
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    os.sched_setaffinity(0, before)


def _worker(model_dir: str, impl: str, unit: int, commands: Any, results: Any, stop: Any,
            go: Any, ack: Any) -> None:
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
        text_loop(work, stop, counts, unit, go, ack)
        ack.clear()
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


# --- the real service (c-service) ------------------------------------------------------------

SERVICE_STREAMS = 256
SERVICE_MAX_TOKENS = 200


# --constrained: the JSON schema those streams' answers must follow (a small tool's arguments)
CONSTRAINED_SCHEMA = {"type": "object", "properties": {"location": {"type": "string"},
                                                      "unit": {"enum": ["celsius", "fahrenheit"]}},
                      "required": ["location", "unit"]}


def _load_generator(runtime_dir: str, prompts: list[str], streams: int, stop: Any,
                    results: Any, constrained: float = 0.0) -> None:
    """Keep ``streams`` chats open against the service until ``stop``; report counts. The
    fraction ``constrained`` of the streams asks for JSON output (``structured``)."""
    import asyncio

    import uvloop

    from textproc.client import TextClient

    async def run() -> dict[str, int]:
        counts = {"requests": 0, "chars": 0, "errors": 0}
        async with await TextClient.connect(runtime_dir, timeout_s=60) as client:

            async def one(k: int) -> None:
                i = k
                structured = ({"json": CONSTRAINED_SCHEMA}
                              if constrained and int(k * constrained) != int((k + 1) * constrained) else None)
                while not stop.is_set():
                    msg = [{"role": "user", "content": prompts[i % len(prompts)]}]
                    i += streams
                    try:
                        async for event in client.chat(msg, stop=STOPS, structured=structured,
                                                       max_tokens=SERVICE_MAX_TOKENS):
                            counts["chars"] += len(event.text)
                            if stop.is_set():
                                break
                        counts["requests"] += 1
                    except Exception as exc:  # noqa: BLE001 - count and keep the load going
                        counts["errors"] += 1
                        key = f"error {type(exc).__name__}: {str(exc)[:60]}"
                        counts[key] = counts.get(key, 0) + 1
                        await asyncio.sleep(0.05)

            results.put(("started", -1))
            t0 = time.monotonic()
            await asyncio.gather(*(one(k) for k in range(streams)))
            counts["seconds"] = time.monotonic() - t0  # type: ignore[assignment]
        return counts

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        counts = runner.run(run())
    results.put(("counts", counts))


class Service:
    """``textproc serve --engine external`` (``bench/_common.Serve``, the one launcher) plus its
    pids, for pinning."""

    def __init__(self, model_dir: Path, workers: int) -> None:
        self.serve = Serve(model_dir, workers=workers, engine="external", max_model_len=32768)
        self.runtime_dir = self.serve.runtime_dir
        self.engine_in = self.serve.engine_in
        self.engine_out = self.serve.engine_out

    def pids(self) -> list[int]:
        return [pid for pid in self.serve.pids().values() if pid]

    def pin(self, cpus: set[int]) -> None:
        for pid in self.pids():
            try:
                os.sched_setaffinity(pid, cpus)
            except OSError:
                pass

    def close(self) -> None:
        self.serve.close()


class ServiceEngine:
    """The engine serving real requests: one pre-tokenized token per running request per step.

    A constrained request (``req.guide``) reads its allowed mask every step, takes the
    pre-tokenized token when the mask allows it and else the index's completion token (the
    work a real engine's sampler adds: one mask read and one ``advance``), and ends with
    "stop" when the guide is finished.

    Its running set persists across runs, so requests started in one set-up still finish (or
    are aborted by the clients closing) while it keeps stepping.
    """

    def __init__(self, link: Any, output_ids: list[int]) -> None:
        self.link = link
        self.output_ids = output_ids
        self.running: dict[str, list[int]] = {}  # request_id -> [position, tokens left]
        self.guides: dict[str, Any] = {}  # request_id -> Guide, for constrained requests
        self.counter = 0
        self.constrained_steps = 0

    def step(self, units: int) -> int:
        from engine_stub.stub import busy_work

        link = self.link
        running = self.running
        n_ids = len(self.output_ids)
        guides = self.guides
        for req in link.poll_requests():
            self.counter += 1
            running[req.request_id] = [(self.counter * 613) % n_ids, req.max_tokens]
            if req.guide is not None:
                guides[req.request_id] = req.guide
        for rid in link.poll_aborts():
            running.pop(rid, None)
            guides.pop(rid, None)
        if not running:
            link.wait(0.01)
            return 0
        busy_work(units)
        outputs: list[tuple[str, list[int], str | None]] = []
        done = []
        for rid, st in running.items():
            token = self.output_ids[st[0] % n_ids]
            st[0] += 1
            st[1] -= 1
            guide = guides.get(rid)
            if guide is not None:
                self.constrained_steps += 1
                mask = guide.allowed_mask()
                if not mask[token >> 3] >> (token & 7) & 1:
                    token = guide.completion_token()
                    if token < 0:
                        token = guide.index.end_ids[0]
                guide.advance(token)
                if guide.is_finished or st[1] <= 0:
                    outputs.append((rid, [token], "stop" if guide.is_finished else "length"))
                    done.append(rid)
                    continue
            if st[1] <= 0:
                outputs.append((rid, [token], "length"))
                done.append(rid)
            else:
                outputs.append((rid, [token], None))
        for rid in done:
            del running[rid]
            guides.pop(rid, None)
        link.send_outputs(outputs)
        return len(outputs)

    def run(self, units: int, n_steps: int, cpus: set[int] | None,
            warm_streams: int) -> dict[str, Any]:
        all_cpus = _engine_thread(cpus)
        warm_deadline = time.monotonic() + 30
        while len(self.running) < warm_streams and time.monotonic() < warm_deadline:
            self.step(units)
        perf = time.perf_counter
        times: list[float] = []
        streams: list[int] = []
        t_start = perf()
        while len(times) < n_steps:
            t0 = perf()
            n = self.step(units)
            if n:
                times.append(perf() - t0)
                streams.append(n)
        elapsed = perf() - t_start
        _engine_thread_done(all_cpus)
        times.sort()
        return {
            "step_ms_p50": statistics.median(times) * 1e3,
            "step_ms_p99": times[min(len(times) - 1, round(0.99 * (len(times) - 1)))] * 1e3,
            "step_ms_mean": statistics.fmean(times) * 1e3,
            "engine_tokens_per_s": sum(streams) / elapsed,
            "streams": statistics.median(streams),
            "seconds": elapsed,
        }


# --- the engine ------------------------------------------------------------------------------


def _wait_acks(acks: list[Any], want: bool, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(a.is_set() != want for a in acks):
        if time.monotonic() > deadline:
            raise RuntimeError(f"text units did not {'pause' if want else 'resume'} in {timeout_s} s")
        time.sleep(0.001)


def _stats(times: list[float]) -> tuple[float, float, float]:
    times = sorted(times)
    p99 = times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
    return statistics.median(times) * 1e3, p99 * 1e3, statistics.fmean(times) * 1e3


def engine_run(link: Any, units: int, n_steps: int, cpus: set[int] | None,
               go: Any = None, acks: list[Any] | None = None, block: int = 50) -> dict[str, Any]:
    """``n_steps`` timed steps; with ``go``: alternate blocks of quiet and loaded steps.

    Leaves ``go`` set (units running) when it returns.
    """
    from engine_stub.stub import busy_work

    all_cpus = _engine_thread(cpus)
    rids = [f"stream-{i}" for i in range(ENGINE_STREAMS)]
    perf = time.perf_counter
    loaded: list[float] = []
    quiet: list[float] = []
    counter = [0]

    def run_block(n: int, into: list[float]) -> float:
        t_block = perf()
        for _ in range(n):
            t0 = perf()
            link.poll_requests()
            link.poll_aborts()
            busy_work(units)
            counter[0] += 1
            token = 1000 + counter[0] % 5000
            link.send_outputs([(rid, [token], None) for rid in rids])
            into.append(perf() - t0)
        return perf() - t_block

    elapsed = 0.0
    quiet_elapsed = 0.0
    if go is None:
        elapsed = run_block(n_steps, loaded)
    else:
        assert acks is not None
        while len(loaded) < n_steps:
            n = min(block, n_steps - len(loaded))
            go.clear()
            _wait_acks(acks, True)
            quiet_elapsed += run_block(n, quiet)
            go.set()
            _wait_acks(acks, False)
            time.sleep(0.005)  # let the load ramp up again
            elapsed += run_block(n, loaded)
    _engine_thread_done(all_cpus)
    p50, p99, mean = _stats(loaded)
    row: dict[str, Any] = {
        "step_ms_p50": p50, "step_ms_p99": p99, "step_ms_mean": mean,
        "engine_tokens_per_s": ENGINE_STREAMS * len(loaded) / elapsed,
        "seconds": elapsed,
    }
    if quiet:
        q50, q99, qmean = _stats(quiet)
        row.update({"quiet_ms_p50": q50, "quiet_ms_p99": q99, "quiet_ms_mean": qmean,
                    "quiet_tokens_per_s": ENGINE_STREAMS * len(quiet) / quiet_elapsed,
                    "p50_vs_quiet_pct": (p50 / q50 - 1) * 100,
                    "p99_vs_quiet_pct": (p99 / q99 - 1) * 100})
    return row


def prompt_tokens(works: dict[str, TextWork]) -> float:
    work = works["textproc"]
    return statistics.fmean(len(work.encode(p)) for p in work.prompts)


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
    model_dir = _model_dir(args.model_dir)
    if not (model_dir / "tokenizer.json").is_file():
        parser.error(f"--model-dir {str(model_dir)!r} has no tokenizer.json")
    engine_cpus = {0}
    text_cpus = set(range(1, n_cpu)) or {0}
    if args.rt and "pinned" in modes:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            RT["enabled"] = True
        except (OSError, AttributeError):
            print("(--rt not allowed here: pinned runs share CPU 0 with other processes)")
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
    worker_go = ctx.Event()
    worker_go.set()
    worker_acks = [ctx.Event() for _ in range(args.units)]
    workers = [ctx.Process(target=_worker, args=(str(model_dir), "textproc", u, commands[u],
                                                 results, worker_stop, worker_go,
                                                 worker_acks[u]), daemon=True)
               for u in range(args.units)]
    for w in workers:
        w.start()
    rows: list[dict[str, Any]] = []
    link = EngineLink.connect(engine_in, engine_out)
    service: Service | None = None
    service_link: Any = None
    service_engine: ServiceEngine | None = None
    try:
        if use_service:
            print("starting textproc serve --engine external ...", flush=True)
            service = Service(model_dir, args.units)
            service_link = EngineLink.connect(service.engine_in, service.engine_out)
        print("loading text work in this process and in the workers ...", flush=True)
        works = {"textproc": TextWork(model_dir, "textproc")}
        if "b-inproc-hf" in setups:
            works["hf"] = TextWork(model_dir, "hf")
        if service_link is not None:
            service_engine = ServiceEngine(service_link, works["textproc"].output_ids)
        for _ in workers:
            kind, _unit = results.get(timeout=120)
            assert kind == "ready", kind
        from engine_stub.stub import calibrate_busy

        before = _engine_thread(engine_cpus if "pinned" in modes else None)
        units = calibrate_busy(args.step_ms)
        _engine_thread_done(before)
        print(f"busy units per step: {units}", flush=True)
        print(f"{'set-up':<13} {'cpus':<9} {'p50 ms':>7} {'p99 ms':>7} {'mean':>7} {'tok/s':>8} "
              f"{'p50 +%':>7} {'p99 +%':>7} {'enc tok/s':>10} {'detok tok/s':>11} "
              f"{'quiet p50/p99':>14} {'paired +%':>15}", flush=True)
        for rep in range(args.repeat):
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
                        go = threading.Event()
                        go.set()
                        acks = [threading.Event() for _ in range(args.units)]
                        started = threading.Barrier(args.units + 1)
                        per_thread: list[dict[str, int]] = [{} for _ in range(args.units)]

                        def body(u: int, work: TextWork = work, stop: threading.Event = stop,
                                 started: threading.Barrier = started,
                                 per_thread: list[dict[str, int]] = per_thread,
                                 go: threading.Event = go,
                                 acks: list[threading.Event] = acks) -> None:
                            _pin(text_cpus if pinned else None)
                            started.wait()
                            text_loop(work, stop, per_thread[u], u, go, acks[u])

                        threads = [threading.Thread(target=body, args=(u,), daemon=True)
                                   for u in range(args.units)]
                        for t in threads:
                            t.start()
                        started.wait()
                        time.sleep(0.1)
                        row = engine_run(link, units, steps, engine_cpus if pinned else None,
                                         go, acks)
                        stop.set()
                        go.set()
                        for t in threads:
                            t.join(timeout=60)
                        for c in per_thread:
                            for k, v in c.items():
                                counts[k] = counts.get(k, 0) + v
                    elif setup == "c-service":
                        assert service is not None
                        service.pin(text_cpus if pinned else set(range(os.cpu_count() or 1)))
                        gen_stop = ctx.Event()
                        gen_results: Any = ctx.Queue()
                        gen = ctx.Process(target=_load_generator, args=(
                            str(service.runtime_dir), works["textproc"].prompts, SERVICE_STREAMS,
                            gen_stop, gen_results, args.constrained), daemon=True)
                        gen.start()
                        if pinned and gen.pid:
                            os.sched_setaffinity(gen.pid, text_cpus)
                        kind, _unit = gen_results.get(timeout=120)
                        assert service_engine is not None
                        row = service_engine.run(units, steps, engine_cpus if pinned else None,
                                                 int(SERVICE_STREAMS * 0.8))
                        gen_stop.set()
                        # keep serving (unmeasured) so the generator's streams can end
                        end = time.monotonic() + 30
                        got: Any = None
                        while time.monotonic() < end and got is None:
                            service_engine.step(0)
                            try:
                                got = gen_results.get_nowait()
                            except queue.Empty:
                                pass
                        gen.join(timeout=10)
                        if gen.is_alive():
                            gen.kill()
                        if got is not None:
                            counts = dict(got[1])
                        gen_results.close()
                    else:
                        worker_stop.clear()
                        for q in commands:
                            q.put(("run", text_cpus if pinned else None))
                        for _ in workers:
                            kind, _unit = results.get(timeout=60)
                            assert kind == "started", kind
                        time.sleep(0.1)
                        row = engine_run(link, units, steps, engine_cpus if pinned else None,
                                         worker_go, worker_acks)
                        worker_stop.set()
                        worker_go.set()
                        for _ in workers:
                            kind, c = results.get(timeout=60)
                            assert kind == "counts", kind
                            for k, v in c.items():
                                counts[k] = counts.get(k, 0) + v
                    secs = row["seconds"]
                    row.update({"bench": "interference", "setup": setup, "cpus": mode, "rep": rep,
                                "steps": steps, "step_work_ms": args.step_ms, "busy_units": units,
                                "text_units": args.units, "model": model_dir.name,
                                "engine_sched_fifo": pinned and RT["enabled"],
                                "encode_tokens_per_s": counts.get("encoded", 0) / secs,
                                "detok_tokens_per_s": counts.get("detokenized", 0) / secs})
                    if setup == "c-service":
                        # over the load generator's life: prompts the workers encoded for completed
                        # requests; every engine token went through the detokenizer
                        life = float(counts.get("seconds", 0)) or secs
                        row["client_counts"] = counts
                        row["client_requests_per_s"] = counts.get("requests", 0) / life
                        row["encode_tokens_per_s"] = counts.get("requests", 0) * prompt_tokens(works) / life
                        row["detok_tokens_per_s"] = row["engine_tokens_per_s"]
                    if base is None:
                        base = row
                    row["p50_vs_none_pct"] = (row["step_ms_p50"] / base["step_ms_p50"] - 1) * 100
                    row["p99_vs_none_pct"] = (row["step_ms_p99"] / base["step_ms_p99"] - 1) * 100
                    rows.append(row)
                    print(f"{setup:<13} {mode:<9} {row['step_ms_p50']:>7.2f} {row['step_ms_p99']:>7.2f} "
                          f"{row['step_ms_mean']:>7.2f} {row['engine_tokens_per_s']:>8.0f} "
                          f"{row['p50_vs_none_pct']:>+7.1f} {row['p99_vs_none_pct']:>+7.1f} "
                          f"{row['encode_tokens_per_s']:>10.0f} {row['detok_tokens_per_s']:>11.0f} "
                          + (f"{row['quiet_ms_p50']:>6.2f}/{row['quiet_ms_p99']:<7.2f} "
                             f"{row['p50_vs_quiet_pct']:>+6.1f}/{row['p99_vs_quiet_pct']:<+7.1f}"
                             if "quiet_ms_p50" in row else ""),
                          flush=True)
    finally:
        link.close()
        if service_link is not None:
            service_link.close()
        if service is not None:
            service.close()
        for q in commands:
            q.put(("exit",))
        worker_stop.set()
        worker_go.set()
        stop_all.set()
        for p in [*workers, sink]:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        for q in [*commands, results]:
            q.close()
            q.join_thread()
    if args.repeat > 1:
        print(f"median over {args.repeat} runs:")
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
                rows.append({"bench": "interference-summary", "setup": setup, "cpus": mode,
                             "runs": len(mine), **med})
                print(f"{setup:<13} {mode:<9} {med['step_ms_p50']:>7.2f} {med['step_ms_p99']:>7.2f} "
                      f"{'':>7} {med['engine_tokens_per_s']:>8.0f} {med['p50_vs_none_pct']:>+7.1f} "
                      f"{med['p99_vs_none_pct']:>+7.1f} {med['encode_tokens_per_s']:>10.0f} "
                      f"{med['detok_tokens_per_s']:>11.0f} "
                      + (f"{med['quiet_ms_p50']:>6.2f}/{med['quiet_ms_p99']:<7.2f} "
                         f"{med['p50_vs_quiet_pct']:>+6.1f}/{med['p99_vs_quiet_pct']:<+7.1f}"
                         if "quiet_ms_p50" in med else ""))
    print("(+% = step time vs a-none in the same cpus mode and run; paired +% = loaded blocks vs "
          "quiet blocks (text units paused) interleaved in the same run, every 50 steps; target "
          "for c-textproc: p50 +1%, p99 +5%)")
    write_json(args.json, rows, info, stamp=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
