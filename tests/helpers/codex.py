"""Running the real Codex CLI against a textproc URL in a test (``textproc.testing.codex``),
skipping the test when it is not installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from textproc.testing.codex import codex_installed, run_codex_exec


def run_codex(url: str, model: str, tmp_path: Path, *args: str,
              timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    """``codex exec --skip-git-repo-check ARGS`` in a fresh home and work dir under
    ``tmp_path`` (skips the test when Codex or node is not installed)."""
    if not codex_installed():
        pytest.skip("Codex CLI is not installed: run `bash scripts/fetch_agents.sh` (needs npm)")
    return run_codex_exec(url, model, tmp_path, *args, timeout_s=timeout_s)
