#!/usr/bin/env python3
"""Fast-forward on the real engine: engine steps, TPOT and engine CPU per structured answer,
``textproc serve --engine vllm`` with ``--fast-forward K`` against without (and ``vllm serve``).

    .venv/bin/textproc bench fast-forward-vllm [--quick] [--json PATH] [--model-dir DIR]
        [--answers N] [--concurrency 1,4] [--tokens K] [--no-vllm]

Each server in turn (started, measured, stopped: one at a time on a small machine) answers the
same greedy streamed chats, ``--answers`` x C of them C at a time for each ``--concurrency``
C: plain ones (no constraint, 64 tokens) and ones under a structured output with fixed keys, a
JSON schema (``response_format``) and a regex (``structured_outputs``).
Reported per server and constraint: completion tokens and engine steps per answer (textproc:
the steps that gave the request ids, from the engine's stats; ``vllm serve`` runs one step per
token without speculative decoding), TPOT (first to last streamed token over tokens - 1),
wall time and CPU seconds of the engine process tree per answer, and whether every greedy
answer is the same as the first server's. ``uptime`` in the header (a shared machine).
Default model: the tiny seeded Qwen3 of the real-engine tests (``scripts/setup_vllm.sh``).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from _common import write_json

from textproc.launchers.vllm import default_python
from textproc.launchers.vllm_reference import ReferenceServer, engine_arg_flags
from textproc.placement import process_tree
from textproc.service.launcher import ServeProcess
from textproc.testing.bench_cli import bench_parser
from textproc.testing.machine import cpu_seconds
from textproc.testing.models import REPO_ROOT

MAX_MODEL_LEN = 4096
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "city": {"enum": ["Paris", "Rome", "Oslo"]},
    "member_since": {"type": "integer", "minimum": 1900, "maximum": 2030},
    "verified": {"type": "boolean"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
    "required": ["name", "age", "city", "member_since", "verified", "tags"],
    "additionalProperties": False}
REGEX = (r'\{"name": "[a-z]{1,10}", "age": [1-9][0-9]?, "city": "(Paris|Rome|Oslo)", '
         r'"member_since": [0-9]{4}, "verified": (true|false)\}')
CONSTRAINTS: dict[str, dict[str, Any]] = {  # "plain": no constraint (fast-forward must leave it as it is)
    "plain": {"max_tokens": 64},
    "json_schema": {"response_format": {"type": "json_schema",
                                        "json_schema": {"name": "person", "schema": PERSON}}},
    "regex": {"structured_outputs": {"regex": REGEX}},
}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _engine_cpu(root_pid: int, marker: str) -> float:
    """CPU seconds so far of the processes under ``root_pid`` whose command line holds
    ``marker``, with everything below them (the engine and its model worker)."""
    pids: set[int] = set()
    for pid in process_tree(root_pid):
        if marker in _cmdline(pid):
            pids.update(process_tree(pid))
    return sum(cpu_seconds(p) for p in pids)


def _stream(url: str, model: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed greedy chat: its text, completion tokens, id and token times."""
    text, first, last, tokens, rid = "", None, None, 0, ""
    with httpx.stream("POST", url + "/v1/chat/completions", timeout=300, json={
            "model": model, "stream": True, "stream_options": {"include_usage": True}, **body}) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            rid = chunk.get("id", rid)
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {}).get("content") or ""
                if delta:
                    now = time.perf_counter()
                    first = first if first is not None else now
                    last = now
                    text += delta
    tpot = (last - first) / (tokens - 1) if first is not None and last is not None and tokens > 1 else 0.0
    return {"id": rid, "text": text, "tokens": tokens, "tpot_s": tpot}


def _run_side(name: str, url: str, model: str, answers: int, concurrency: list[int], cpu: Any,
              steps_of: Any) -> list[dict[str, Any]]:
    rows = []
    for constraint, extra in CONSTRAINTS.items():
        _stream(url, model, {"messages": [{"role": "user", "content": "warm up"}], "temperature": 0,
                             "max_tokens": 200, **extra})
        for c in concurrency:
            bodies = [{"messages": [{"role": "user", "content": f"Person {i}"}], "temperature": 0,
                       "max_tokens": 200, **extra} for i in range(answers * c)]
            cpu0, t0 = cpu(), time.perf_counter()
            with ThreadPoolExecutor(c) as pool:
                results = list(pool.map(lambda body: _stream(url, model, body), bodies))
            wall, used = time.perf_counter() - t0, cpu() - cpu0
            n = len(results)
            steps = [steps_of(r["id"], r["tokens"]) for r in results]
            tokens = sum(r["tokens"] for r in results)
            rows.append({"server": name, "constraint": constraint, "concurrency": c, "answers": n,
                         "tokens_per_answer": round(tokens / n, 1),
                         "steps_per_answer": round(sum(steps) / n, 1),
                         "tokens_per_step": round(tokens / max(1, sum(steps)), 2),
                         "tpot_ms": round(statistics.mean(r["tpot_s"] for r in results) * 1e3, 2),
                         "wall_ms_per_answer": round(wall / n * 1e3, 1),
                         "engine_cpu_ms_per_answer": round(used / n * 1e3, 1),
                         "texts": [r["text"] for r in results]})
    return rows


def _textproc(tmp: Path, model: Path, python: str, answers: int, concurrency: list[int],
              fast_forward: int) -> list[dict[str, Any]]:
    own = [f"--engine-arg=--fast-forward={fast_forward}"] if fast_forward else []
    serve = ServeProcess(tmp / f"tp-ff{fast_forward}", model, workers=1, engine="vllm",
                         args=["--http", "127.0.0.1:0", "--max-model-len", str(MAX_MODEL_LEN),
                               "--engine-python", python, *engine_arg_flags(),
                               "--engine-arg=--stats-interval-s=0.1", *own],
                         env={**os.environ, **ENGINE_ENV})
    serve.start(timeout_s=900)
    try:
        deadline = time.monotonic() + 60
        while not (serve.runtime_dir / "http.json").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        info = json.loads((serve.runtime_dir / "http.json").read_text())
        assert serve.proc is not None
        root = serve.proc.pid

        def steps_of(rid: str, tokens: int) -> int:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                entry = json.loads(serve.stats_file.read_text()).get("requests", {}).get(rid, {})
                if entry.get("finish_reason") is not None:
                    return int(entry["steps"])
                time.sleep(0.05)
            raise AssertionError(f"request {rid} not in the engine's stats")

        name = f"textproc ff={fast_forward}" if fast_forward else "textproc"
        return _run_side(name, f"http://{info['host']}:{info['port']}", model.name, answers,
                         concurrency, lambda: _engine_cpu(root, "engine_vllm"), steps_of)
    finally:
        serve.stop(timeout_s=60)


def _vllm_serve(tmp: Path, model: Path, python: str, answers: int,
                concurrency: list[int]) -> list[dict[str, Any]]:
    server = ReferenceServer(tmp / "vllm", model, max_model_len=MAX_MODEL_LEN, env=ENGINE_ENV,
                             python=python)
    (tmp / "vllm").mkdir()
    server.start()
    try:
        url = server.wait()
        root = server.pid
        return _run_side("vllm serve", url, model.name, answers, concurrency,
                         lambda: _engine_cpu(root, "serve"),  # API server, EngineCore, worker
                         lambda rid, tokens: tokens)
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="3 answers per constraint", model=None)
    p.add_argument("--model-dir", type=Path, default=REPO_ROOT / ".cache" / "models" / "qwen3-tiny")
    p.add_argument("--answers", type=int, default=10,
                   help="answers per server, constraint and concurrency, times the concurrency")
    p.add_argument("--concurrency", default="1,4", help="streams at once, comma-separated")
    p.add_argument("--tokens", type=int, default=4, help="--fast-forward K (forced ids per step)")
    p.add_argument("--no-vllm", action="store_true", help="leave out vllm serve")
    args = p.parse_args(argv)
    answers = 2 if args.quick else args.answers
    concurrency = [1] if args.quick else [int(c) for c in args.concurrency.split(",")]
    python = default_python()
    header = {"bench": "fast_forward_vllm", "model_dir": args.model_dir.name, "k": args.tokens,
              "load": os.getloadavg(), "time": time.time()}
    print(json.dumps(header), flush=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ffbench-") as tmp_name:
        tmp = Path(tmp_name)
        rows += _textproc(tmp, args.model_dir, python, answers, concurrency, args.tokens)
        rows += _textproc(tmp, args.model_dir, python, answers, concurrency, 0)
        if not args.no_vllm:
            rows += _vllm_serve(tmp, args.model_dir, python, answers, concurrency)
    first: dict[tuple[str, int], Any] = {}
    for row in rows:
        texts = row.pop("texts")
        row["same_answers_as_first"] = first.setdefault((row["constraint"], row["concurrency"]), texts) == texts
    rows.append({"load_after": os.getloadavg()})
    for row in rows:
        print(json.dumps(row))
    if args.json:
        write_json(args.json, rows, header)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
