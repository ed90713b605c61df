"""Smoke test of bench/fast_forward.py: --quick on the toy tokenizer reports, per constraint,
tokens and forced tokens per output, forced never more than all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.models import REPO_ROOT
from tests.helpers.service import build_toy_model


def test_bench_fast_forward_quick(tmp_path: Path) -> None:
    model = build_toy_model(tmp_path / "toy")
    out = tmp_path / "ff.jsonl"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "fast_forward.py"), "--quick",
                           "--model-dir", str(model), "--json", str(out)],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["bench"] == "fast_forward" and len(rows[0]["load"]) == 3
    assert [r["constraint"] for r in rows[1:]] == ["json_schema", "forced_call", "strict_auto"]
    for r in rows[1:]:
        assert 0 <= r["tokenizer_forced"] <= r["tokenizer_tokens"] > 0
        assert 0 <= r["random_forced_per_output"] <= r["random_tokens_per_output"]
