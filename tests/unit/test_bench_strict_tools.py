"""Smoke test of bench/strict_tools.py: --quick on the toy tokenizer compiles each small set as
strict calls and as forced calls and reports CPU, states and index size per set and mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.models import REPO_ROOT
from tests.helpers.service import build_toy_model


def test_bench_strict_tools_quick(tmp_path: Path) -> None:
    model = build_toy_model(tmp_path / "toy")
    out = tmp_path / "strict.jsonl"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "strict_tools.py"), "--quick",
                           "--model-dir", str(model), "--json", str(out)],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "load average" in proc.stdout
    header, *rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert header["bench"] == "strict_tools" and len(header["machine"]["load_avg"]) == 3
    compiled = [r for r in rows if "mode" in r]
    assert [(r["set"], r["mode"]) for r in compiled] == [
        ("coding-agent-4", "strict"), ("coding-agent-4", "forced"), ("synthetic-3", "strict"), ("synthetic-3", "forced")]
    for r in compiled:
        assert r["format"] == "hermes" and "error" not in r, r
        assert 0 < r["first_s"] and r["p50_s"] <= r["p95_s"] and r["states"] > 1 and r["mb"] > 0
