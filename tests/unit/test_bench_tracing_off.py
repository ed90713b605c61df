"""Smoke test of bench/tracing_off.py: a tiny run of this tree against itself prints one row
per run, both medians, their ratio and the load average."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.models import REPO_ROOT


def test_bench_tracing_off_against_itself() -> None:
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "tracing_off.py"),
                           "--quick", "--multiprocess"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["side"] for r in rows] == ["before", "after"]
    assert all(r["cpu_s"] > 0 and r["multiprocess"] for r in rows), rows
    assert "after/before" in proc.stdout and "load average" in proc.stdout
