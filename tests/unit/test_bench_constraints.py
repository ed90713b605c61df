"""Smoke test of bench/constraints.py: --quick runs every compiler on two schemas and reports
compile time, size and per-step cost for each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.models import REPO_ROOT, model_dir


def test_bench_constraints_quick(tmp_path: Path) -> None:
    model_dir("qwen3")  # skips with the fetch hint when missing
    pytest.importorskip("outlines_core")
    pytest.importorskip("llguidance")
    out = tmp_path / "constraints.jsonl"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "constraints.py"), "--quick",
                           "--json", str(out)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["case"] for r in rows] == ["small-tool", "enums"]
    for r in rows:
        for name in ("textproc", "outlines", "llguidance"):
            assert r[f"{name}_compile_s"] > 0 and r[f"{name}_step_us"] > 0, (name, r)
        assert r["textproc_mb"] > 0 and r["outlines_transitions"] > 0 and r["steps"] > 0
        assert r["textproc_first_mask_ms"] > 0 and r["llguidance_first_mask_ms"] > 0 and r["textproc_repeat_ms"] > 0
    first_mask = rows[0]["machine"]["first_mask"]
    assert set(first_mask["textproc_first_mask_ms"]) == {"p50", "p75"}, first_mask
    assert "load average" in proc.stdout and "time to first mask (ms)" in proc.stdout
