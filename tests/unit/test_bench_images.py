"""Smoke test of bench/images.py: --quick runs both sides and reports every case with equal
grids (slow: the reference side imports vLLM, ~10 s of CPU; tests/parity/test_images.py runs
the same reference in the default run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.models import REPO_ROOT
from tests.helpers.real_engine import SETUP_HINT, VLLM_PYTHON


@pytest.mark.slow
def test_bench_images_quick(tmp_path: Path) -> None:
    if not VLLM_PYTHON.is_file():
        pytest.skip(f"no engine environment: {SETUP_HINT}")
    out = tmp_path / "images.jsonl"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "images.py"), "--quick",
                           "--json", str(out)], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["case"] for r in results] == ["qwen2.5-vl 320x240.png", "qwen3-vl 320x240.png"]
    for r in results:
        assert r["same_grid"] is True and r["tokens"] > 0, r
        assert r["textproc_cpu_ms"] > 0 and r["reference_cpu_ms"] > 0, r
