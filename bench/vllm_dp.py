#!/usr/bin/env python3
"""Two engines behind one endpoint: textproc's front (prefix-aware routing, and round robin)
against ``vllm serve --data-parallel-size 2`` (its own load balancer), same model, same load.

    .venv/bin/textproc bench vllm-dp [--users 8] [--turns 4] [--concurrency 8] [--rounds 2]
        [--sides textproc,textproc-rr,vllm] [--model-dir DIR] [--json PATH]

The load is a multi-turn chat mix as users send it: ``--users`` conversations, each opening
with one of two long shared system prompts (an agent's instructions, ~1,500 tokens) and a
question of its own, then growing by its answer and a new question for ``--turns`` turns;
``--concurrency`` conversations at once, each conversation's turns in order. Streamed, 24
tokens out, temperature 1. Every side serves the same requests (new text each round, so no
round reads what an earlier one cached).

Sides run one at a time (two engines each on this box's cores), in turn, ``--rounds`` times:
``textproc`` (``serve --engine vllm --data-parallel-size 2``, ``--routing prefix``),
``textproc-rr`` (the same with ``--routing round_robin``), ``vllm`` (``vllm serve
--data-parallel-size 2``) and ``smg`` (SMG's ``cache_aware`` policy over ZeroMQ in front of two
headless engines; PyPI ``smg``, a bench dependency); all with float32, eager, the same
max-model-len and KV cache, and each engine's model worker on a CPU of its own
(``VLLM_CPU_OMP_THREADS_BIND=0|1``, vLLM's per-rank lists; textproc's front hands each local
rank its part). Logs stay under ``--run-dir``; a side that fails prints why and their tails.
Reported per side (medians over rounds): output tokens/s, TTFT p50/p99, the engines' prefix
cache hit rate (prompt tokens vLLM found cached / prompt tokens: from vLLM's own
``vllm:prefix_cache_hits_total`` / ``queries`` on its server, from each engine's per-request
prefill stats behind textproc; not known for SMG's engines) and the CPU milliseconds per request of the text processes
(textproc's workers, detokenizer, front and HTTP; vLLM's API server) and of the engines.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from _common import write_json
from vllm import ENGINE_ENV, Side, Tally, cpu_per_request, stream_chat

from textproc.launchers.vllm import default_python
from textproc.errors import StartupTimeout
from textproc.launchers.vllm_reference import COMPARED_ENGINE_FLAGS, ReferenceServer
from textproc.service.launcher import ServeProcess
from textproc.testing.bench_cli import bench_parser
from textproc.testing.corpus import mixed_text
from textproc.testing.machine import describe, machine
from textproc.testing.models import MODELS_DIR

MAX_MODEL_LEN = 4096
# each engine's model worker on a CPU of its own, for every side (vLLM's own syntax, one list
# per data-parallel rank): with vLLM's "auto" every rank launched alone, and each of vLLM's
# own ranks on a one-NUMA-node machine, binds to CPU 0, and the two engines time-share it
CPU_BIND = "0|1"
DP_ENGINE_ENV = {**ENGINE_ENV, "VLLM_CPU_OMP_THREADS_BIND": CPU_BIND}
VLLM_FLAGS = list(COMPARED_ENGINE_FLAGS)
SIDES = ("textproc", "textproc-rr", "vllm", "smg")


def system_prompts(seed: int) -> list[str]:
    text = mixed_text(20_000, seed=seed)
    return [f"You are agent {k}. Follow these instructions exactly.\n" + text[k * 6000:(k + 1) * 6000]
            for k in range(2)]


class Group:
    """Processes started under one shell (SMG and its two headless engines), stopped together."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)


def start_smg(model: Path, tmp: Path, python: str) -> tuple[Group, Side]:
    """SMG (``smg launch --backend vllm --policy cache_aware``, ZeroMQ straight to the engines)
    in front of two of vLLM's headless engines (vLLM's own worker: no textproc in them but the
    plugin's harmless hooks), each dialling the port SMG derives from its ipc address, as
    SMG's own launcher does. Logs: ``tmp/smg.log``, ``tmp/engine-K.log``."""
    import shlex

    from smg.serve import _zmq_handshake_port

    urls = [f"ipc://{tmp}/engine-{k}" for k in range(2)]
    for url in urls:  # SMG binds it; taken (another run, another program): SMG cannot serve
        handshake = _zmq_handshake_port(url)
        if not _port_free(handshake):
            raise SideFailed(f"smg: the handshake port {handshake} SMG derives from {url} is "
                             "taken; run again (another run directory, another port)")
    port = _free_port()
    vllm = shlex.quote(str(Path(python).parent / "vllm"))
    lines = []
    for k, url in enumerate(urls):
        lines.append(f"VLLM_CPU_OMP_THREADS_BIND={CPU_BIND.split('|')[k]} "
                     f"{vllm} serve {shlex.quote(str(model))} --headless --data-parallel-size 1 "
                     f"--data-parallel-size-local 1 --data-parallel-address 127.0.0.1 "
                     f"--data-parallel-rpc-port {_zmq_handshake_port(url)} --max-model-len "
                     f"{MAX_MODEL_LEN} {' '.join(VLLM_FLAGS)} > {tmp}/engine-{url[-1]}.log 2>&1 &")
    smg = shlex.quote(str(Path(sys.executable).parent / "smg"))
    lines.append(f"{smg} launch --backend vllm --worker-urls {' '.join(urls)} --model-path "
                 f"{shlex.quote(str(model))} --host 127.0.0.1 --port {port} --policy cache_aware "
                 f"> {tmp}/smg.log 2>&1 &")
    lines.append("wait")
    script = tmp / "start.sh"  # a file: the shell's own command line then names no engine
    script.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen(["bash", str(script)], env={**os.environ, **DP_ENGINE_ENV, "NO_COLOR": "1"},
                            start_new_session=True)
    group = Group(proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900
    body = json.dumps({"model": str(model), "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 1}).encode()
    last = ""
    while time.monotonic() < deadline:  # both engines answer: each takes one of two requests
        if proc.poll() is not None:
            group.stop()
            raise SideFailed(f"smg: its processes exited ({proc.returncode})\n" + log_tails(tmp))
        try:
            for _ in range(2):
                req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                             headers={"content-type": "application/json"})
                urllib.request.urlopen(req, timeout=30).read()
            break
        except urllib.error.HTTPError as exc:
            last = f"{exc.code} {exc.read()[:300]!r}"
            time.sleep(2)
        except OSError as exc:
            last = str(exc)
            time.sleep(2)
    else:
        group.stop()
        raise SideFailed(f"smg not serving after 900 s (last answer: {last})\n" + log_tails(tmp))
    return group, Side("smg", url, str(model), proc.pid, "--headless")


class SideFailed(Exception):
    """A side could not start; the message says why (with its logs' tails)."""


def log_tails(root: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of every log under ``root`` (ANSI colours taken out)."""
    import re

    out = []
    for path in sorted(root.rglob("*.log")):
        text = re.sub(r"\x1b\[[0-9;]*m", "", path.read_text(errors="replace"))
        tail = text.splitlines()[-lines:]
        out.append(f"--- {path} (last {len(tail)} lines)\n" + "\n".join(line[:400] for line in tail))
    return "\n".join(out) or f"(no logs under {root})"


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(name: str, model: Path, tmp: Path, python: str) -> tuple[Any, Side]:
    env = {**os.environ, **DP_ENGINE_ENV}
    if name == "smg":
        return start_smg(model, tmp, python)
    if name == "vllm":
        server = ReferenceServer(tmp, model, max_model_len=MAX_MODEL_LEN, env=DP_ENGINE_ENV,
                                 python=python, args=["--data-parallel-size", "2"])
        server.start()
        url = server.wait(900)
        return server, Side(name, url, model.name, server.pid, "EngineCore")
    routing = "round_robin" if name == "textproc-rr" else "prefix"
    serve = ServeProcess(tmp, model, workers=2, engine="vllm",
                         args=["--http", "127.0.0.1:0", "--max-model-len", str(MAX_MODEL_LEN),
                               "--engine-python", python, "--data-parallel-size", "2",
                               "--routing", routing, "--startup-timeout", "900",
                               *[f"--engine-arg={flag}" for flag in VLLM_FLAGS]],
                         env=env)
    serve.start(timeout_s=900)
    deadline = time.monotonic() + 60
    while not (serve.runtime_dir / "http.json").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    info = json.loads((serve.runtime_dir / "http.json").read_text())
    assert serve.proc is not None
    side = Side(name, f"http://{info['host']}:{info['port']}", model.name, serve.proc.pid, "--headless")
    side.stats_file = serve.stats_file  # type: ignore[attr-defined]
    wait_engines(side, 900)
    return serve, side


def wait_engines(side: Side, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            stats = json.loads(Path(side.stats_file).read_text())  # type: ignore[attr-defined]
            if all(e["state"] == "ready" for e in stats["engines"]):
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(1)
    raise SideFailed(f"{side.name}: engines not ready after {timeout_s} s")


def cache_counts(side: Side) -> tuple[float, float]:
    """(prompt tokens, of them found in the engines' prefix caches) so far; SMG's engines
    report to SMG only: NaN."""
    if side.name == "smg":
        return float("nan"), float("nan")
    if side.name == "vllm":
        text = urllib.request.urlopen(side.url + "/metrics", timeout=10).read().decode()
        values: dict[str, float] = {}
        for line in text.splitlines():
            for metric in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
                if line.startswith(metric):
                    values[metric] = values.get(metric, 0.0) + float(line.rsplit(" ", 1)[1])
        return values.get("vllm:prefix_cache_queries_total", 0.0), values.get("vllm:prefix_cache_hits_total", 0.0)
    time.sleep(1.0)  # the front writes its stats every 0.5 s
    stats = json.loads(Path(side.stats_file).read_text())  # type: ignore[attr-defined]
    return (float(sum(e["prompt_tokens"] for e in stats["engines"])),
            float(sum(e["cached_tokens"] for e in stats["engines"])))


def run_mix(side: Side, users: int, turns: int, concurrency: int, seed: int) -> dict[str, Any]:
    import httpx

    systems = system_prompts(seed)
    questions = mixed_text(400 * users * (turns + 1) + 1000, seed=seed + 1)
    tally = Tally()
    turns_seen: list[tuple[float, int, int, float]] = []  # (TTFT s, user, turn, sent at s)
    t0 = time.perf_counter()

    async def conversation(i: int, client: httpx.AsyncClient, gate: asyncio.Semaphore) -> None:
        messages: list[dict[str, str]] = [{"role": "system", "content": systems[i % 2]}]
        async with gate:
            for turn in range(turns):
                at = 400 * (i * (turns + 1) + turn)
                messages.append({"role": "user", "content": questions[at:at + 400]})
                body = {"model": side.model, "messages": messages, "max_tokens": 24, "stream": True,
                        "temperature": 1.0, "stream_options": {"include_usage": True}}
                sent = time.perf_counter() - t0
                answer = await stream_chat(client, side.url, body)
                if not tally.add(answer):
                    return
                turns_seen.append((answer.ttft_s, i, turn, sent))
                messages.append({"role": "assistant", "content": answer.text})

    async def run_all() -> float:
        gate = asyncio.Semaphore(concurrency)
        nonlocal t0
        async with httpx.AsyncClient(timeout=900) as client:
            t0 = time.perf_counter()
            await asyncio.gather(*(conversation(i, client, gate) for i in range(users)))
            return time.perf_counter() - t0

    queried0, hits0 = cache_counts(side)
    before = side.cpu()
    wall = asyncio.run(run_all())
    after = side.cpu()
    queried1, hits1 = cache_counts(side)
    ttfts, tokens, failed = tally.ttfts, tally.tokens, tally.failed
    n = max(1, len(ttfts))
    ordered = sorted(ttfts) or [0.0]
    row: dict[str, Any] = {
        "output_throughput": tokens / wall, "median_ttft_ms": statistics.median(ordered) * 1000,
        "p99_ttft_ms": ordered[min(n - 1, int(0.99 * (n - 1)))] * 1000,
        "prefix_hit_rate": (hits1 - hits0) / max(1.0, queried1 - queried0),
        "completed": len(ttfts), "failed": len(failed),
        # the slowest first tokens: which user's turn, sent when (s from the start)
        "slowest": [{"ttft_ms": round(ttft * 1000), "user": user, "turn": turn,
                     "sent_at_s": round(sent, 2)}
                    for ttft, user, turn, sent in sorted(turns_seen, reverse=True)[:4]]}
    if failed:
        print(f"# {side.name}: {len(failed)} failed: {failed[0]}", flush=True)
    row.update(cpu_per_request(before, after, n))
    return row


def main() -> int:
    p = bench_parser(__doc__, quick="4 users, 2 turns, one round", model=None)
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sides", default=",".join(SIDES))
    p.add_argument("--model-dir", type=Path, default=MODELS_DIR / "qwen3-tiny")
    p.add_argument("--engine-python", default=None)
    p.add_argument("--run-dir", type=Path, default=None,
                   help="each side's logs and runtime directories go here (default: a new "
                        "temporary directory, kept and named at the start)")
    args = p.parse_args()
    if args.quick:
        args.users, args.turns, args.rounds = 4, 2, 1
    python = args.engine_python or default_python()
    names = [s for s in args.sides.split(",") if s]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    print(f"# {describe(machine())}; load {os.getloadavg()}", flush=True)
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="bench-vllm-dp-"))
    print(f"# logs under {run_dir}", flush=True)
    for r in range(args.rounds):
        for name in names:
            root = run_dir / f"{name}-{r}"
            root.mkdir(parents=True)
            try:
                server, side = start(name, args.model_dir, root, python)
            except (SideFailed, StartupTimeout, TimeoutError) as exc:
                print(f"# {name}: did not start: {exc}\n{log_tails(root)}", flush=True)
                continue
            try:
                run_mix(side, 2, 1, 2, seed=7)  # first forward passes
                row = run_mix(side, args.users, args.turns, args.concurrency, seed=100 * r + 11)
                if hasattr(side, "stats_file"):  # textproc's front: its slowest first outputs
                    row["front_slowest"] = json.loads(Path(side.stats_file).read_text()).get(
                        "slowest_first_outputs", [])
            finally:
                server.stop()
            if row["failed"]:
                print(f"# {name}: {row['failed']} of {row['failed'] + row['completed']} failed; "
                      f"its logs:\n{log_tails(root)}", flush=True)
            row["load"] = os.getloadavg()[0]
            rows[name].append(row)
            print(json.dumps({"round": r, "side": name, **row}), flush=True)
    summary = []
    print(f"{'side':12} {'out tok/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} {'prefix hit':>10} "
          f"{'text ms/req':>11} {'engine ms/req':>13}")
    for name in names:
        if not rows[name]:
            print(f"{name:12} failed (above: why)")
            continue
        med = {key: statistics.median(row[key] for row in rows[name])
               for key in ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "prefix_hit_rate",
                           "cpu_text_ms", "cpu_engine_ms")}
        summary.append({"side": name, **med})
        print(f"{name:12} {med['output_throughput']:9.1f} {med['median_ttft_ms']:9.0f} "
              f"{med['p99_ttft_ms']:9.0f} {med['prefix_hit_rate']:10.2%} {med['cpu_text_ms']:11.1f} "
              f"{med['cpu_engine_ms']:13.1f}")
    write_json(args.json, [{"side": name, **row} for name in names for row in rows[name]], machine())
    return 0


if __name__ == "__main__":
    sys.exit(main())
