"""Smoke test of bench/encode.py: --quick on tiny input runs, reports every case, ids agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.models import REPO_ROOT, model_dir


def test_bench_encode_quick(tmp_path: Path) -> None:
    model_dir("qwen3")  # skips with the fetch hint when missing
    out = tmp_path / "encode.jsonl"
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "encode.py"), "--quick", "--size-bytes",
         "20000", "--reps", "1", "--json", str(out)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [json.loads(line) for line in out.read_text().splitlines()]
    cases = [r["case"] for r in results]
    assert cases == ["mixed-first", "mixed-warm", "repetitive", "unique-words", "long-word", "load"]
    for r in results[:-1]:
        assert r["identical_ids"] is True, r
        assert r["n_tokens"] > 0
        for name in ("textproc", "tokenizers", "tiktoken"):
            assert r[f"{name}_tok_s"] > 0, (name, r)
        assert r["vs_tokenizers"] > 0 and r["vs_tiktoken"] > 0
    load = results[-1]
    for name in ("textproc", "tokenizers", "tiktoken"):
        assert load[f"{name}_s"] is not None and load[f"{name}_s"] > 0, load
    assert "identical_ids=True" in proc.stdout
