"""Smoke tests of bench/enginelink.py and bench/interference.py: they run and write their JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.service import REPO

pytestmark = pytest.mark.timeout(120)


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "bench" / script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=110)


def test_enginelink_bench_quick(tmp_path: Path) -> None:
    out = _run("enginelink.py", "--quick", "--steps", "40", "--actives", "1,256",
               "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    assert "ratio" in out.stdout
    rows = [json.loads(line) for line in (tmp_path / "r.json").read_text().splitlines()]
    steps = [r for r in rows if r["bench"] == "enginelink"]
    assert [r["active"] for r in steps] == [1, 256]
    for r in steps:
        assert r["link_us_p50"] > 0 and r["raw_us_p50"] > 0 and r["ratio_p50"] > 0
        assert r["step_bytes"] > 40 * r["active"]
    assert steps[1]["frames_in"]["link"] == steps[1]["frames_in"]["raw"] > 0
    unpack = [r for r in rows if r["bench"] == "enginelink-unpack"]
    assert unpack and unpack[0]["array_us"] < unpack[0]["list_us"]


def test_interference_bench_quick(tmp_path: Path, toy_model: Path) -> None:
    out = _run("interference.py", "--quick", "--steps", "20", "--units", "1", "--step-ms", "2",
               "--repeat", "2", "--model-dir", str(toy_model), "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    lines = (tmp_path / "r.json").read_text().splitlines()
    rows = [r for r in map(json.loads, lines) if r["bench"] == "interference"]
    assert [r["setup"] for r in rows] == ["a-none", "b-inproc", "c-textproc"] * 2
    summary = [r for r in map(json.loads, lines) if r["bench"] == "interference-summary"]
    assert [r["runs"] for r in summary] == [2, 2, 2]
    for r in rows:
        assert r["step_ms_p50"] > 0 and r["engine_tokens_per_s"] > 0
    assert rows[0]["encode_tokens_per_s"] == 0
    assert rows[1]["encode_tokens_per_s"] > 0 and rows[2]["detok_tokens_per_s"] > 0


def test_interference_bench_bad_model_dir(tmp_path: Path) -> None:
    out = _run("interference.py", "--quick", "--model-dir", str(tmp_path))
    assert out.returncode == 2 and "has no tokenizer.json" in out.stderr
