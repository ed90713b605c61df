#!/usr/bin/env python3
"""textproc + vLLM's engine core against vLLM's own server: one run, same model, same load.

    .venv/bin/textproc bench vllm [--quick] [--json PATH] [--concurrency 4,16,64]
        [--mixes short,long,schema,tools] [--rounds 3] [--engine-cores CPUS] [--model-dir DIR]
        [--text-cpus SETTING ...] [--wire]

Starts ``vllm serve DIR`` and ``textproc serve --engine vllm --model-dir DIR --http`` (both from
the engine's environment, ``.venv-vllm``), warms each up, then drives each with vLLM's own load
client (``vllm bench serve --backend openai-chat``, random dataset), so neither side picks its
own yardstick. Per mix and concurrency the two servers alternate, ``--rounds`` times; the
medians are compared and the spread (min-max over rounds) printed.

Mixes: ``short`` (128 tokens in, 64 out, ``--ignore-eos``), ``long`` (8,192 in, 32 out),
``schema`` (a JSON-schema ``response_format`` on every request: vLLM compiles it with xgrammar
in its engine process, textproc in its workers; no ``--ignore-eos``: the schema ends the
answer), ``tools`` (a named tool call forced on every request, its parameters' schema enforced),
``grow`` (conversations that grow: each of ``concurrency`` conversations starts with ~16k
characters of mixed text and is resent ``GROW_TURNS`` times, each time with the previous
answer and one more short user turn, 16 tokens out; vLLM's load client sends one user message
per request, so this mix is driven by a small client of this script's, the same for both),
``booking`` (512 tokens in, 64 out, streamed, 3 x concurrency requests with a hotel-booking
schema of counted strings: ``maxLength``, ``maxItems``; each round a variant new to both
servers, so its first requests wait for its compile), ``fresh`` (2 x concurrency requests,
each with a booking schema of its own: time to first token when every request waits for its
own compile; a client of this script's).
Reported per side: requests/s, output tokens/s, TTFT p50/p99, TPOT mean, ITL p99, and the CPU
seconds per request of the engine process (with its model worker) and of everything else
(textproc's workers, detokenizer and HTTP frontend; vLLM's API server), from /proc, and the
same per process (``ROLES``: engine, model worker, detokenizer, tokenizer workers, HTTP
frontend, supervisor; vLLM's API server, EngineCore and model worker).

``--text-cpus`` is textproc serve's (default ``none``: its text processes float; ``auto``: on
the CPUs vLLM's model worker leaves); repeated, one textproc side runs per setting, all alternating with vLLM's
server (``--text-cpus auto --text-cpus none``: the pinning's own effect in the same run).
``--engine-cores`` pins both engines (engine_vllm and vLLM's EngineCore, with their model
workers) to those CPUs and everything else to the others, so the comparison can be made with the
text work off the engine's cores. Results, machine and date go to bench/README.md.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _common import write_json

from textproc.launchers.vllm import default_python
from textproc.launchers.vllm_reference import ReferenceServer, engine_arg_flags
from textproc.placement import pin, process_tree
from textproc.service.launcher import ServeProcess
from textproc.testing.bench_cli import bench_parser
from textproc.testing.booking import BOOKING
from textproc.testing.corpus import mixed_text
from textproc.testing.machine import cpu_seconds, describe, machine
from textproc.testing.models import MODELS_DIR

if TYPE_CHECKING:
    import httpx

ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2"}
# a user record: a pattern, a bounded integer, a free string, an enum array (string maxLength
# bounds are left out: with two of them textproc's compile takes 2.7 s of CPU, 0.6 s without)
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "email": {"type": "string"},
    "tags": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}, "maxItems": 3}},
    "required": ["name", "age", "email", "tags"], "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "create_user", "parameters": SCHEMA}}
# the ``booking`` mix sends a variant of BOOKING new to both servers each round


def booking(variant: int) -> dict[str, Any]:
    """The booking schema; ``variant`` > 0 makes another one of the same shape (``nights`` at
    least that many more), which no server has compiled before."""
    return {**BOOKING, "properties": {**BOOKING["properties"],
                                      "nights": {"type": "integer", "minimum": 1 + variant}}}


def booking_format(variant: int) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {
        "name": "booking", "schema": booking(variant)}}}


MIXES: dict[str, dict[str, Any]] = {
    "short": {"input": 128, "output": 64, "ignore_eos": True, "extra": None},
    "long": {"input": 8192, "output": 32, "ignore_eos": True, "extra": None},
    "schema": {"input": 128, "output": 160, "ignore_eos": False, "extra": {
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "user", "schema": SCHEMA}}}},
    "tools": {"input": 128, "output": 160, "ignore_eos": False, "extra": {
        "tools": [TOOL], "tool_choice": {"type": "function",
                                         "function": {"name": "create_user"}}}},
    "grow": {"input": 4096, "output": 16, "ignore_eos": False, "extra": None},
    # streamed, 512-token prompts, the booking schema new to both servers each round
    "booking": {"input": 512, "output": 64, "ignore_eos": False, "extra": booking_format(0)},
    # every request its own booking schema, new to the server: time to first token when
    # each request waits for its own compile (textproc's workers, xgrammar in vLLM's engine)
    "fresh": {"input": 128, "output": 32, "ignore_eos": False, "extra": None},
}
GROW_TURNS = 6
METRICS = [("request_throughput", "req/s"), ("output_throughput", "out tok/s"),
           ("median_ttft_ms", "TTFT p50 ms"), ("p99_ttft_ms", "TTFT p99 ms"),
           ("mean_tpot_ms", "TPOT ms"), ("p99_itl_ms", "ITL p99 ms")]


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Side:
    """One server under test: its base URL, model name and process groups."""

    def __init__(self, name: str, url: str, model: str, root_pid: int, engine_marker: str) -> None:
        self.name, self.url, self.model = name, url, model
        self.root_pid = root_pid
        self.engine_marker = engine_marker  # a command-line part of the engine process

    def groups(self) -> dict[str, list[int]]:
        """"engine": the engine process and its descendants; "text": every other process."""
        pids = process_tree(self.root_pid)
        engine_roots = [p for p in pids if self.engine_marker in cmdline(p)]
        engine = set()
        for p in engine_roots:
            engine.update(process_tree(p))
        return {"engine": sorted(engine), "text": [p for p in pids if p not in engine]}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of the "engine" and "text" groups, and of each process role
        (``role:engine``, ``role:model worker``, ``role:detokenizer``, ...; see ROLES)."""
        out: dict[str, float] = {}
        for group, pids in self.groups().items():
            for pid in pids:
                seconds = cpu_seconds(pid)
                out[group] = out.get(group, 0.0) + seconds
                key = "role:" + role(pid)
                out[key] = out.get(key, 0.0) + seconds
        return out


# process roles by a part of the command line, first match wins: textproc's and vLLM's processes
ROLES = [("VLLM::Worker", "model worker"), ("engine_vllm", "engine"), ("EngineCore", "engine"),
         ("_child detokenizer", "detokenizer"), ("_child worker", "tokenizer workers"),
         ("textproc.http", "http frontend"), ("textproc.cli serve", "supervisor"),
         ("textproc.vllm_front", "front"), ("smg", "smg"),
         ("vllm serve", "api server")]


def role(pid: int) -> str:
    line = cmdline(pid)
    return next((name for part, name in ROLES if part in line), "other")


def run_load(side: Side, mix: str, concurrency: int, prompts: int, out_dir: Path,
             python: str, tokenizer: Path, round_index: int = -1) -> dict[str, Any]:
    # new prompts each round (the same for both sides): no round reads the caches (vLLM's
    # prefix cache, textproc's encoded segments) that an earlier one filled
    seed = 1000 + 100 * round_index + concurrency
    if mix == "grow":
        return run_grow(side, concurrency, seed=seed)
    if mix == "fresh":
        return run_fresh(side, concurrency, prompts, seed=seed)
    spec = MIXES[mix]
    extra = spec["extra"]
    if mix == "booking":  # a variant neither server has seen before this run
        extra = booking_format(seed)
    result_file = f"{side.name}-{mix}-{concurrency}-{time.monotonic_ns()}.json"
    command = [str(Path(python).parent / "vllm"), "bench", "serve", "--backend", "openai-chat",
               "--endpoint", "/v1/chat/completions", "--base-url", side.url,
               "--model", side.model, "--tokenizer", str(tokenizer),
               "--dataset-name", "random", "--random-input-len", str(spec["input"]),
               "--random-output-len", str(spec["output"]), "--num-prompts", str(prompts),
               "--max-concurrency", str(concurrency), "--seed", str(seed),
               "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
               "--save-result", "--result-dir", str(out_dir), "--result-filename", result_file,
               "--disable-tqdm"]
    if spec["ignore_eos"]:
        command.append("--ignore-eos")
    if extra is not None:
        command += ["--extra-body", json.dumps(extra)]
    before = side.cpu()
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    after = side.cpu()
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed against {side.name}:\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    result = json.loads((out_dir / result_file).read_text())
    completed = max(1, int(result.get("completed", prompts)))
    row = {key: float(result.get(key) or 0.0) for key, _ in METRICS}
    row["completed"] = completed
    row["failed"] = int(result.get("failed", 0) or 0)
    if row["failed"]:
        errors = [e for e in result.get("errors") or [] if e][:1]
        print(f"# {side.name} {mix} c={concurrency}: {row['failed']} of {prompts} failed: "
              f"{str(errors)[:300]}", flush=True)
    row.update(cpu_per_request(before, after, completed))
    return row


def cpu_per_request(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, Any]:
    """CPU milliseconds per request between two ``Side.cpu()`` readings: ``cpu_engine_ms``,
    ``cpu_text_ms`` and ``cpu_roles`` (role -> ms; roles seen in both readings)."""
    ms = {key: (after[key] - before.get(key, 0.0)) / max(1, n) * 1000 for key in after}
    return {"cpu_engine_ms": ms.get("engine", 0.0), "cpu_text_ms": ms.get("text", 0.0),
            "cpu_roles": {key[5:]: value for key, value in ms.items() if key.startswith("role:")}}


@dataclass
class ChatAnswer:
    """One streamed chat completion as a client saw it."""

    status: int
    error: bytes  # the body of an answer that is not 200; empty otherwise
    text: str  # the content deltas joined
    ttft_s: float  # to the first content delta; the whole answer's time when none came
    elapsed_s: float  # to the end of the stream
    completion_tokens: int  # from the usage chunk (0 without one)


async def stream_chat(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> ChatAnswer:
    """POST ``body`` (``"stream": True``) to ``url``'s ``/v1/chat/completions`` and read its
    server-sent events to the end; times count from just before the request is sent."""
    t0 = time.perf_counter()
    first = None
    text = ""
    tokens = 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            error = await resp.aread()
            elapsed = time.perf_counter() - t0
            return ChatAnswer(resp.status_code, error, "", elapsed, elapsed, 0)
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                piece = choice["delta"].get("content") or ""
                if piece and first is None:
                    first = time.perf_counter() - t0
                text += piece
            if chunk.get("usage"):
                tokens += int(chunk["usage"]["completion_tokens"])
    elapsed = time.perf_counter() - t0
    return ChatAnswer(200, b"", text, first if first is not None else elapsed, elapsed, tokens)


@dataclass
class Tally:
    """What a client of this script's counts over its streamed answers."""

    ttfts: list[float] = field(default_factory=list)  # seconds, one per answer counted
    failed: list[str] = field(default_factory=list)  # status and body start, one per failure
    tokens: int = 0  # completion tokens of the answers counted

    def add(self, answer: ChatAnswer) -> bool:
        """Count ``answer``; False when it failed (not 200)."""
        if answer.status != 200:
            self.failed.append(f"{answer.status} {answer.error[:200]!r}")
            return False
        self.tokens += answer.completion_tokens
        self.ttfts.append(answer.ttft_s)
        return True


def run_grow(side: Side, concurrency: int, seed: int, *, chars: int = 16_000,
             turns: int = GROW_TURNS) -> dict[str, Any]:
    """``concurrency`` growing conversations at once, each starting with ``chars`` characters
    and resent ``turns`` times."""
    import asyncio

    import httpx

    corpus = mixed_text(chars * concurrency + 1000, seed=seed)
    ttfts: list[float] = []
    latencies: list[float] = []
    tokens = 0

    async def conversation(i: int, client: httpx.AsyncClient) -> None:
        nonlocal tokens
        messages: list[dict[str, str]] = [
            {"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": corpus[i * chars:(i + 1) * chars]}]
        for turn in range(turns):
            # no seed: vLLM 0.32's CPU model runner fails a seeded request whose prompt is
            # prefilled in chunks ("CPU Generator does not use offset"), which takes `vllm
            # serve`'s engine down (textproc's engine runs engine_vllm.worker, which does not)
            body = {"model": side.model, "messages": messages, "max_tokens": 16, "stream": True,
                    "temperature": 1.0, "stream_options": {"include_usage": True}}
            answer = await stream_chat(client, side.url, body)
            if answer.status != 200:
                raise SystemExit(f"{side.name} answered {answer.status} on turn {turn}: "
                                 f"{answer.error[:400]!r}")
            tokens += answer.completion_tokens
            latencies.append(answer.elapsed_s)
            ttfts.append(answer.ttft_s)
            messages += [{"role": "assistant", "content": answer.text},
                         {"role": "user", "content": f"Go on ({turn}): {corpus[turn * 97:turn * 97 + 200]}"}]

    async def run_all() -> float:
        async with httpx.AsyncClient(timeout=600) as client:
            t0 = time.perf_counter()
            await asyncio.gather(*(conversation(i, client) for i in range(concurrency)))
            return time.perf_counter() - t0

    before = side.cpu()
    wall = asyncio.run(run_all())
    after = side.cpu()
    n = len(latencies)
    ordered = sorted(ttfts)
    row: dict[str, Any] = {
        "request_throughput": n / wall, "output_throughput": tokens / wall,
        "median_ttft_ms": statistics.median(ttfts) * 1000,
        "p99_ttft_ms": ordered[min(n - 1, int(0.99 * (n - 1)))] * 1000,
        "mean_tpot_ms": 0.0, "p99_itl_ms": 0.0, "completed": n, "failed": 0}
    row.update(cpu_per_request(before, after, n))
    return row


def run_fresh(side: Side, concurrency: int, prompts: int, seed: int) -> dict[str, Any]:
    """``prompts`` streamed requests, ``concurrency`` at once, each with a booking schema of its
    own (new to the server: ``seed`` picks variants no other run uses)."""
    import asyncio

    import httpx

    corpus = mixed_text(600 * prompts + 1000, seed=seed)
    tally = Tally()

    async def one(i: int, client: httpx.AsyncClient, gate: asyncio.Semaphore) -> None:
        body = {"model": side.model, "stream": True, "max_tokens": 32, "temperature": 1.0,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": corpus[i * 600:(i + 1) * 600]}],
                **booking_format(seed * 1000 + i)}
        async with gate:
            tally.add(await stream_chat(client, side.url, body))

    async def run_all() -> float:
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=900) as client:
            t0 = time.perf_counter()
            await asyncio.gather(*(one(i, client, gate) for i in range(prompts)))
            return time.perf_counter() - t0

    before = side.cpu()
    wall = asyncio.run(run_all())
    after = side.cpu()
    ttfts, tokens, failed = tally.ttfts, tally.tokens, tally.failed
    if failed:
        print(f"# {side.name} fresh c={concurrency}: {len(failed)} of {prompts} failed: "
              f"{failed[0]}", flush=True)
    n = max(1, len(ttfts))
    ordered = sorted(ttfts) or [0.0]
    row: dict[str, Any] = {
        "request_throughput": len(ttfts) / wall, "output_throughput": tokens / wall,
        "median_ttft_ms": statistics.median(ordered) * 1000,
        "p99_ttft_ms": ordered[min(n - 1, int(0.99 * (n - 1)))] * 1000,
        "mean_tpot_ms": 0.0, "p99_itl_ms": 0.0, "completed": len(ttfts), "failed": len(failed)}
    row.update(cpu_per_request(before, after, n))
    return row


def start_sides(model: Path, tmp: Path, max_model_len: int, python: str,
                text_cpus: list[str], wire: bool = False) -> tuple[Any, list[Any], list[Side], Side]:
    """vLLM's server and one ``textproc serve`` per ``--text-cpus`` setting (and with ``wire``
    one more over vLLM's wire, ``textproc-wire``), all up."""
    reference = ReferenceServer(tmp / "ref", model, max_model_len=max_model_len, env=ENGINE_ENV,
                                python=python, args=["--enable-auto-tool-choice",
                                                     "--tool-call-parser", "hermes"])
    (tmp / "ref").mkdir()
    reference.start()
    serves, ours = [], []
    variants = [(setting, False) for setting in text_cpus] + ([("none", True)] if wire else [])
    for k, (setting, over_wire) in enumerate(variants):
        # over vLLM's wire, --engine-arg flags go to `vllm serve` (its KV cache: ENGINE_ENV)
        own = (["--vllm-wire"] if over_wire else
               ["--engine-arg=--kv-cache-gib=2", "--engine-arg=--stats-interval-s=5"])
        serve = ServeProcess(tmp / f"tp{k}", model, workers=2, engine="vllm",
                             args=["--http", "127.0.0.1:0", "--max-model-len", str(max_model_len),
                                   "--engine-python", python, *engine_arg_flags(), *own,
                                   "--text-cpus", setting],
                             env={**os.environ, **ENGINE_ENV})
        serve.start(timeout_s=900)
        serves.append(serve)
        deadline = time.monotonic() + 60
        while not (serve.runtime_dir / "http.json").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        info = json.loads((serve.runtime_dir / "http.json").read_text())
        assert serve.proc is not None
        name = "textproc" if len(text_cpus) == 1 else f"textproc[{setting}]"
        if over_wire:
            name = "textproc-wire"
        ours.append(Side(name, f"http://{info['host']}:{info['port']}", model.name,
                         serve.proc.pid, "--headless" if over_wire else "engine_vllm"))
    ref_url = reference.wait()
    theirs = Side("vllm", ref_url, model.name, reference.pid, "EngineCore")
    return reference, serves, ours, theirs


def pin_engines(sides: list[Side], engine_cpus: set[int]) -> None:
    others = set(range(os.cpu_count() or 1)) - engine_cpus or engine_cpus
    for side in sides:
        groups = side.groups()
        for pid in groups["engine"]:
            pin(pid, frozenset(engine_cpus))
        for pid in groups["text"]:
            pin(pid, frozenset(others))


def summarise(rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """Per mix and concurrency: each side's medians and ranges, and each textproc side's
    ratios to vLLM's (``ratio_<name>_<metric>``)."""
    out = []
    keys = sorted({(r["mix"], r["concurrency"]) for r in rows},
                  key=lambda k: (list(MIXES).index(k[0]), k[1]))
    for mix, conc in keys:
        line: dict[str, Any] = {"mix": mix, "concurrency": conc}
        for side in [*names, "vllm"]:
            mine = [r for r in rows if r["mix"] == mix and r["concurrency"] == conc
                    and r["side"] == side]
            for key, _ in METRICS + [("cpu_engine_ms", ""), ("cpu_text_ms", "")]:
                values = [r[key] for r in mine]
                line[f"{side}_{key}"] = statistics.median(values) if values else 0.0
                line[f"{side}_{key}_range"] = (min(values), max(values)) if values else (0, 0)
            roles = sorted({name for r in mine for name in r.get("cpu_roles", {})})
            line[f"{side}_cpu_roles"] = {
                name: statistics.median(r.get("cpu_roles", {}).get(name, 0.0) for r in mine)
                for name in roles}
        for side in names:
            for key, _ in METRICS:
                theirs = line[f"vllm_{key}"]
                line[f"ratio_{side}_{key}"] = line[f"{side}_{key}"] / theirs if theirs else float("nan")
        out.append(line)
    return out


def print_summary(summary: list[dict[str, Any]], names: list[str]) -> None:
    for line in summary:
        print(f"\n{line['mix']} @ concurrency {line['concurrency']}:")
        print(f"  {'metric':<14}" + "".join(f"{n:>24}{'ratio':>8}" for n in names)
              + f"{'vllm serve':>24}")
        for key, label in METRICS:
            if not any(line[f"{side}_{key}"] for side in [*names, "vllm"]):
                print(f"  {label:<14}" + "".join(f"{'-':>24}{'':8}" for _ in names)
                      + f"{'-':>24}")  # not measured in this mix (grow: TTFT only)
                continue
            cells = ""
            for side in names:
                a, ra = line[f"{side}_{key}"], line[f"{side}_{key}_range"]
                cells += (f"{a:9.1f} ({ra[0]:.1f}-{ra[1]:.1f})".rjust(24)
                          + f"{line[f'ratio_{side}_{key}']:7.2f}x")
            b, rb = line[f"vllm_{key}"], line[f"vllm_{key}_range"]
            print(f"  {label:<14}{cells}" + f"{b:9.1f} ({rb[0]:.1f}-{rb[1]:.1f})".rjust(24))
        for group in ("engine", "text"):
            key = f"cpu_{group}_ms"
            cells = "".join(f"{line[side + '_' + key]:24.1f}{'':8}" for side in names)
            print(f"  {'CPU ' + group + ' ms/req':<14}{cells}{line['vllm_' + key]:24.1f}")
        for side in [*names, "vllm"]:
            roles = line.get(f"{side}_cpu_roles") or {}
            print(f"    {side} CPU ms/req by process: "
                  + ", ".join(f"{name} {ms:.1f}" for name, ms in
                              sorted(roles.items(), key=lambda kv: -kv[1]) if ms >= 0.05))


def main() -> int:
    p = bench_parser(__doc__, quick="concurrency 4 only, one round, short + schema", model=None)
    p.add_argument("--concurrency", default="4,16,64")
    p.add_argument("--mixes", default=",".join(MIXES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--engine-cores", help="CPU list for both engines, e.g. 1 (the rest: text work)")
    p.add_argument("--model-dir", type=Path, default=MODELS_DIR / "qwen3-tiny")
    p.add_argument("--engine-python", default=None)
    p.add_argument("--wire", action="store_true",
                   help="one more textproc side, textproc-wire: vLLM's own engine process over "
                        "vLLM's wire (serve --vllm-wire) instead of engine_vllm")
    p.add_argument("--text-cpus", action="append", metavar="SETTING",
                   help="textproc serve --text-cpus of the textproc side; repeated, one textproc "
                        "side per setting (e.g. --text-cpus auto --text-cpus none; default none)")
    a = p.parse_args()
    text_cpus = a.text_cpus or ["none"]
    python = a.engine_python or default_python()
    if not (a.model_dir / "config.json").is_file() or not Path(python).parent.joinpath("vllm").is_file():
        print(f"bench vllm: needs the engine environment and model: bash scripts/setup_vllm.sh "
              f"(model {a.model_dir}, python {python})", file=sys.stderr)
        return 2
    concurrencies = [4] if a.quick else [int(c) for c in a.concurrency.split(",")]
    mixes = ["short", "schema"] if a.quick else a.mixes.split(",")
    rounds = 1 if a.quick else a.rounds
    max_model_len = 16384 if "long" in mixes or "grow" in mixes else 4096
    info = machine()
    print(f"# bench vllm: {describe(info)}", flush=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as tmp_name:  # logs: --keep
        tmp = Path(tmp_name)
        t0 = time.monotonic()
        reference, serves, ours, theirs = start_sides(a.model_dir, tmp, max_model_len, python,
                                                      text_cpus, wire=a.wire)
        print(f"# both servers up in {time.monotonic() - t0:.0f} s", flush=True)
        try:
            if a.engine_cores:
                pin_engines([*ours, theirs], {int(c) for c in a.engine_cores.split(",")})
            out_dir = tmp / "results"
            out_dir.mkdir()
            for side in (*ours, theirs):  # warm-up: first requests, first schema compile
                for mix in mixes:
                    run_load(side, mix, 4, 4, out_dir, python, a.model_dir)
            for round_index in range(rounds):
                for mix in mixes:
                    for conc in concurrencies:
                        # enough requests that one slow one does not make the median
                        prompts = max(32, 2 * conc) if MIXES[mix]["input"] < 4096 else max(8, conc)
                        if mix == "booking":
                            prompts = 3 * conc  # the load run: 48 at concurrency 16
                        elif mix == "fresh":
                            prompts = 2 * conc  # each a compile of its own
                        sides = [*ours, theirs]  # rotated: each side goes first in turn
                        turn = (round_index + conc) % len(sides)
                        order = sides[turn:] + sides[:turn]
                        for side in order:
                            row = run_load(side, mix, conc, prompts, out_dir, python,
                                           a.model_dir, round_index)
                            row.update(side=side.name, mix=mix, concurrency=conc,
                                       round=round_index, load_avg=os.getloadavg()[0])
                            rows.append(row)
                            print(f"# round {round_index} {mix} c={conc} {side.name}: "
                                  f"{row['request_throughput']:.2f} req/s, TTFT p99 "
                                  f"{row['p99_ttft_ms']:.0f} ms, load {row['load_avg']:.1f}",
                                  flush=True)
            for side, serve in zip(ours, serves):
                fill = json.loads(serve.stats_file.read_text()).get("bitmask_fill_us", {})
                print(f"# {side.name}'s engine: bitmask fill per constrained request per step "
                      f"{fill} (microseconds)", flush=True)
        finally:
            for serve in serves:
                serve.stop(timeout_s=60)
            reference.stop()
    names = [side.name for side in ours]
    summary = summarise(rows, names)
    print_summary(summary, names)
    info_end = machine()
    print(f"\n# end: {describe(info_end)}")
    write_json(a.json, rows + [{"summary": s} for s in summary], info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
