"""Smoke tests of the service benchmarks (bench/tokenize_pool, detokenize, e2e, long_prompt, follow_up, chat_cost).

Each runs its ``--quick`` mode on tiny settings against the real Qwen vocabulary (skipped when it
is missing) and checks the JSON it writes: the service's results match the references (same ids
as ``tokenizers``, same text as ``tokenizers``' decode), every request completed, timings are
positive. Also: no script in ``bench/`` is named like a standard-library module (it would
shadow that module for every script run from there).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.service import REPO
from tests.helpers.models import model_dir

pytestmark = pytest.mark.timeout(120)


def _run(script: str, tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    qwen = model_dir("qwen3")
    out_json = tmp_path / f"{script}.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--quick", "--model-dir", str(qwen),
         "--json", str(out_json), *args],
        cwd=REPO, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in out_json.read_text().splitlines()]
    assert rows and all(r["machine"]["nproc"] >= 1 and "load_avg" in r["machine"] for r in rows)
    return rows


def test_tokenize_bench(tmp_path: Path) -> None:
    rows = _run("tokenize_pool.py", tmp_path, "--workers", "1", "--long", "2", "--short", "20",
                "--long-tokens", "400")
    hf = [r for r in rows if r["impl"] == "tokenizers encode_batch"]
    tp = [r for r in rows if r["impl"].startswith("textproc")]
    assert [r["case"] for r in hf] == ["long", "short"]
    assert len(tp) == 4 and all(r["identical"] is True for r in tp)
    for r in rows:
        assert r["tokens_per_s"] > 0 and r["requests_per_s"] > 0
    long_tokens = hf[0]["tokens"]
    assert 2 * 390 <= long_tokens <= 2 * 410  # prompts of --long-tokens each


def test_detokenize_bench(tmp_path: Path) -> None:
    rows = _run("detokenize.py", tmp_path, "--streams", "1,16", "--tokens", "480",
                "--max-steps", "60")
    assert [(r["streams"], r["mode"]) for r in rows] == [
        (1, "plain"), (1, "stops+parse"), (16, "plain"), (16, "stops+parse")]
    for r in rows:
        assert r["stream0_text_ok"] is True, r
        assert r["finish_reasons"] == {"length": r["streams"]}  # stops never match
        assert r["tokens"] == r["streams"] * r["steps"]
        assert r["tokens_per_s"] > 0 and r["decodestream_tokens_per_s"] > 0
        assert r["core_tokens_per_s"] > 0


def test_detokenize_bench_with_logprobs(tmp_path: Path) -> None:
    # stream0_text_ok in plain mode also checks that the entries' bytes join to the text
    rows = _run("detokenize.py", tmp_path, "--streams", "16", "--tokens", "320",
                "--max-steps", "20", "--top-logprobs", "5", "--no-reference")
    assert [(r["mode"], r["top_logprobs"]) for r in rows] == [("plain", 5), ("stops+parse", 5)]
    assert all(r["stream0_text_ok"] is True and r["tokens_per_s"] > 0 for r in rows)


# two detokenizer shards: the split path (one shard is what every other service test runs)
@pytest.mark.parametrize("detokenizers", [2])
def test_e2e_bench(tmp_path: Path, detokenizers: int) -> None:
    rows = _run("e2e.py", tmp_path, "--rates", "20", "--duration", "1.5", "--max-tokens", "4",
                "--workers", "1", "--step-ms", "5", "--detokenizers", str(detokenizers), "--probe")
    assert [r["bench"] for r in rows] == ["e2e", "e2e-hop-floor"]
    r, floor = rows
    for f in (floor, r["floor_beside"]):  # idle, and beside the level
        assert f["round_trips"] > 0 and f["zmq_transport"] == "ipc"
        assert 0 < f["zmq_ms_p50"] <= f["zmq_ms_p99"] <= f["zmq_ms_max"]
        assert 0 < f["unix_ms_p50"] <= f["unix_ms_p99"] <= f["unix_ms_max"]
    assert r["endpoints"] == "ipc" and r["errors"] == 0 and r["detokenizers"] == detokenizers
    assert r["completed"] == r["requests"] > 5
    # the client can only see a token after the engine sent it
    assert 0 < r["delay_ms_p50"] <= r["delay_ms_p99"]
    assert r["ttft_ms_p50"] >= r["engine_ttft_ms_p50"] > 0
    assert r["ttft_added_ms_p50"] > 0


def test_long_prompt_bench(tmp_path: Path) -> None:
    rows = _run("long_prompt.py", tmp_path, "--sizes", "2000", "--reps", "1", "--workers", "1")
    assert len(rows) == 1
    r = rows[0]
    assert 1980 <= r["prompt_tokens"] <= 2020
    assert r["ttft_ms"] > 0 and r["hf_wall_ms"] > 0 and r["textproc_encode_cpu_ms"] > 0
    assert 0 < r["textproc_ms"] <= r["ttft_ms"] + 1e-6


def test_no_bench_script_shadows_the_stdlib() -> None:
    # a script's folder is first on sys.path: bench/tokenize.py would be every import of tokenize
    names = {p.stem for p in (REPO / "bench").glob("*.py")}
    assert names and not names & set(sys.stdlib_module_names), names & set(sys.stdlib_module_names)


@pytest.mark.parametrize("name", ["tokenize-pool", "detokenize", "e2e", "long-prompt", "long_prompt"])
def test_textproc_bench_runs_each(name: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "textproc.cli", "bench", name, "--help"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout and "--json" in proc.stdout


def test_detokenize_send_costs(tmp_path: Path) -> None:
    out_json = tmp_path / "send.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "detokenize.py"), "--send-costs",
                           "--json", str(out_json)], cwd=REPO, capture_output=True, text=True,
                          timeout=110)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out_json.read_text().splitlines()]
    assert len(rows) == 8 and {r["bytes"] for r in rows} == {300, 200_000}
    assert all(r["us_cpu"] > 0 and r["us_wall"] > 0 for r in rows)


def test_follow_up_bench(tmp_path: Path) -> None:
    rows = _run("follow_up.py", tmp_path, "--tokens", "2000", "--reps", "2")
    (row,) = rows
    assert row["identical"] is True
    assert row["segment_hits"] > 0 and row["first_ms"] > 0 and row["follow_up_ms"] > 0


def test_chat_cost_bench(tmp_path: Path) -> None:
    rows = _run("chat_cost.py", tmp_path, "--requests", "60", "--concurrency", "4")
    assert [r["stream"] for r in rows] == [False, True]
    for row in rows:
        assert row["errors"] == 0 and row["rps"] > 0
        cpu = row["cpu_ms_per_request"]
        assert {"http", "detokenizer", "worker-0"} <= set(cpu) and cpu["http"] > 0
