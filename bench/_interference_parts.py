"""The parts of ``bench/interference.py``: the text load (``text_loop``, run by text units that
are threads or processes), the engine's timed step loops (``engine_run`` on a sink,
``service_run`` on the real service) and the engine thread's pinning, and for c-service the
real service with a load generator keeping chat streams open.

See ``bench/interference.py`` for what is measured and why.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from engine_stub.stub import busy_work

from _common import Serve

from textproc.testing.corpus import fast_items
from textproc.testing.engine import EnginePeer, StepEngine

__all__ = ["ENGINE_STREAMS", "SERVICE_STREAMS", "RT", "TextWork", "text_loop", "pin", "engine_thread",
           "engine_thread_done", "worker", "sink", "load_generator", "Service", "engine_run",
           "service_run"]

ENGINE_STREAMS = 256
STREAMS_PER_UNIT = 128
STREAM_TOKENS = 400
PROMPT_CHARS = 6000
CORPUS_BYTES = 150_000
STOPS = ["<|STOP|>", "\n\n\n\n", "END OF ANSWER"]


def _texts() -> tuple[list[str], str]:
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


def pin(cpus: set[int] | None) -> None:
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


RT = {"enabled": False}  # main() turns it on for pinned runs when --rt is allowed here


def engine_thread(cpus: set[int] | None) -> set[int]:
    """Pin the calling (engine) thread; pinned + --rt: SCHED_FIFO, i.e. the core is its own."""
    before = os.sched_getaffinity(0)
    pin(cpus)
    if cpus is not None and RT["enabled"]:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    return before


def engine_thread_done(before: set[int]) -> None:
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    os.sched_setaffinity(0, before)


def worker(model_dir: str, impl: str, unit: int, commands: Any, results: Any, stop: Any,
            go: Any, ack: Any) -> None:
    """A text unit as a process (set-up c): waits for ("run", cpus) / ("exit",)."""
    work = TextWork(Path(model_dir), impl)
    results.put(("ready", unit))
    while True:
        cmd = commands.get()
        if cmd[0] == "exit":
            return
        pin(cmd[1])
        counts: dict[str, int] = {}
        results.put(("started", unit))
        text_loop(work, stop, counts, unit, go, ack)
        ack.clear()
        pin(set(range(os.cpu_count() or 1)))
        results.put(("counts", counts))


def sink(engine_in: str, engine_out: str, stop: Any, cpus: set[int] | None) -> None:
    """textproc's side of the engine sockets (``EnginePeer``, bound at the two addresses' dir):
    drain every step frame until ``stop``."""
    pin(cpus)
    peer = EnginePeer(Path(engine_in[len("ipc://"):]).parent)
    assert (peer.engine_in, peer.engine_out) == (engine_in, engine_out), (engine_in, engine_out)
    try:
        while not stop.is_set():
            if peer.pull.poll(100):
                peer.drain()
    finally:
        peer.close()


SERVICE_STREAMS = 256
SERVICE_MAX_TOKENS = 200


# --constrained: the JSON schema those streams' answers must follow (a small tool's arguments)
CONSTRAINED_SCHEMA = {"type": "object", "properties": {"location": {"type": "string"},
                                                      "unit": {"enum": ["celsius", "fahrenheit"]}},
                      "required": ["location", "unit"]}


def load_generator(runtime_dir: str, prompts: list[str], streams: int, stop: Any,
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
    all_cpus = engine_thread(cpus)
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
    engine_thread_done(all_cpus)
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


def service_run(engine: StepEngine, n_steps: int, cpus: set[int] | None,
                warm_streams: int) -> dict[str, Any]:
    """The engine serving the service's real requests (c-service): ``n_steps`` timed steps
    that had requests, once ``warm_streams`` of them run. Its running set persists across
    set-ups, so requests started in one still finish (or are aborted by their clients)."""

    def step() -> int:
        engine.take()
        n = engine.step()
        if not n:
            engine.link.wait(0.01)
        return n

    all_cpus = engine_thread(cpus)
    warm_deadline = time.monotonic() + 30
    while len(engine.running) < warm_streams and time.monotonic() < warm_deadline:
        step()
    perf = time.perf_counter
    times: list[float] = []
    streams: list[int] = []
    t_start = perf()
    while len(times) < n_steps:
        t0 = perf()
        n = step()
        if n:
            times.append(perf() - t0)
            streams.append(n)
    elapsed = perf() - t_start
    engine_thread_done(all_cpus)
    p50, p99, mean = _stats(times)
    return {"step_ms_p50": p50, "step_ms_p99": p99, "step_ms_mean": mean,
            "engine_tokens_per_s": sum(streams) / elapsed, "streams": statistics.median(streams),
            "seconds": elapsed}
