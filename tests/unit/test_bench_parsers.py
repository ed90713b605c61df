"""Smoke test of bench/parsers.py: --quick on small outputs runs every format it is given and
reports per-token costs, with the calls found."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.models import REPO_ROOT


def test_bench_parsers_quick(tmp_path: Path) -> None:
    out = tmp_path / "parsers.jsonl"
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "parsers.py"), "--quick", "--sizes", "800,1600",
         "--repeat", "1", "--formats", "hermes,pythonic", "--json", str(out)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["format"], r["chars"] >= 800) for r in rows] == [
        ("hermes", True), ("hermes", True), ("pythonic", True), ("pythonic", True)]
    for r in rows:
        assert r["calls"] > 0 and r["stream_us_per_token"] > 0 and r["one_shot_us_per_token"] > 0, r
        assert r["reparse_us_per_token"] > 0
