#!/usr/bin/env python3
"""What the HTTP frontend's request path costs with tracing off, against another tree.

Runs N streamed chat requests through the frontend's app (``textproc.http.server.build_app``)
over a scripted in-process backend (the acceptance output with its stage timings, then
``--steps`` outputs of one token, then the finish), in a fresh process per run, and reports the
CPU time of the N requests (``time.process_time``). Runs alternate between ``--before`` (a tree
without the change, e.g. a ``git worktree`` of the previous commit) and ``--after`` (default:
this tree), so a load change on the machine hits both alike; ``--multiprocess`` keeps the
metrics in prometheus_client's files, as ``serve`` runs its frontends. One JSON line per run with
``--json``; the summary prints both medians, their ratio and ``uptime``'s load average.

    python bench/tracing_off.py --before /tmp/tree-before --rounds 6 --requests 400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, AsyncIterator, Mapping, Sequence

HERE = Path(__file__).resolve().parent.parent


def _child(n_requests: int, steps: int) -> dict[str, float]:
    """In a process whose textproc is the tree under test: the CPU time of n requests."""
    import httpx

    from textproc.http.backend import Output
    from textproc.http.server import build_app

    class Backend:  # the textproc.http.backend.Backend protocol, scripted
        served_models: Sequence[str] = ("m",)
        max_model_len: int | None = 4096
        lora_modules: Mapping[str, str] = {}  # (read only)

        async def _run(self) -> AsyncIterator[Output]:
            yield Output([], timings_s={"template": 1e-4, "tokenize": 1e-4, "queue": 1e-4})
            for _ in range(steps):
                yield Output([{"content": "x"}])
            yield Output([{"content": "."}], finish_reason="stop", prompt_tokens=9,
                         completion_tokens=steps + 1)

        def chat(self, params: Any, *, request_id: str) -> AsyncIterator[Output]:
            return self._run()

        def complete(self, params: Any, *, request_id: str) -> AsyncIterator[Output]:
            return self._run()

        def queue_depths(self) -> Mapping[str, int]:
            return {}

        def worker_requests(self) -> Sequence[int]:
            return []

        async def process_counters(self) -> Sequence[tuple[str, int, Mapping[str, int]]]:
            return []

        def engine_stats(self) -> Mapping[str, Any]:
            return {}

        def health(self) -> tuple[bool, str]:
            return True, ""

    app = build_app(Backend())  # type: ignore[arg-type]
    body = json.dumps({"model": "m", "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()

    async def go(n: int) -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for _ in range(n):
                resp = await client.post("/v1/chat/completions", content=body)
                assert resp.status_code == 200 and resp.text.endswith("[DONE]\n\n"), resp.text

    asyncio.run(go(max(20, n_requests // 10)))  # warm-up: imports, caches, first families
    start = time.process_time()
    asyncio.run(go(n_requests))
    return {"cpu_s": time.process_time() - start}


def _run(tree: Path, n_requests: int, steps: int, multiprocess: bool) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with tempfile.TemporaryDirectory() as metrics_dir:
        if multiprocess:  # as the supervisor runs the frontends: prometheus_client's files
            env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        return _run_in(tree, env, n_requests, steps)


def _run_in(tree: Path, env: dict[str, str], n_requests: int, steps: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", "--requests", str(n_requests),
                          "--steps", str(steps)], env=env, capture_output=True, text=True,
                         cwd=tree, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"run in {tree} failed:\n{out.stderr[-3000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["cpu_s"])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, help="the tree to compare with (required unless --child)")
    p.add_argument("--after", type=Path, default=HERE, help="the tree under test (default: this one)")
    p.add_argument("--rounds", type=int, default=6, help="runs of each tree, alternating")
    p.add_argument("--requests", type=int, default=400, help="requests per run")
    p.add_argument("--steps", type=int, default=16, help="one-token outputs per request")
    p.add_argument("--json", type=Path, default=None, help="append one JSON line per run")
    p.add_argument("--multiprocess", action="store_true", help="run the frontends' metrics in "
                   "prometheus_client's multi-process mode, as serve does")
    p.add_argument("--quick", action="store_true", help="the smoke test's size (1 round of 20 "
                   "requests; --before defaults to this tree)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.requests, a.steps)))
        return 0
    if a.quick:
        a.rounds, a.requests, a.steps = 1, 20, 2
        a.before = a.before or a.after
    if a.before is None:
        p.error("--before TREE is required")
    from textproc.testing.machine import machine
    info = machine()
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    rows = []
    for i in range(a.rounds):
        for side, tree in (("before", a.before), ("after", a.after))[:: 1 if i % 2 == 0 else -1]:
            seconds = _run(tree, a.requests, a.steps, a.multiprocess)
            cpu[side].append(seconds)
            row = {"round": i, "side": side, "tree": str(tree), "requests": a.requests,
                   "steps": a.steps, "multiprocess": a.multiprocess, "cpu_s": round(seconds, 4),
                   "cpu_us_per_request": round(seconds / a.requests * 1e6, 1), "machine": info}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.json is not None:
        with a.json.open("a") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")
    before, after = statistics.median(cpu["before"]), statistics.median(cpu["after"])
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"CPU per request, median of {a.rounds} alternating runs of {a.requests}: "
          f"before {before / a.requests * 1e6:.1f} us, after {after / a.requests * 1e6:.1f} us, "
          f"after/before {after / before:.3f}")
    print(f"uptime: {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
