"""Running the real Codex CLI (npm ``@openai/codex``, installed into ``.cache/npm`` by
``bash scripts/fetch_agents.sh``) against a textproc URL, configured only the way its docs say:
a custom model provider with ``wire_api = "responses"`` in a fresh ``CODEX_HOME``. Update
checks, analytics and the features that reach other hosts at startup are off, and every
connection not to loopback goes to a dead proxy."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.service import REPO

CODEX = REPO / ".cache" / "npm" / "node_modules" / ".bin" / "codex"
CONFIG = """\
model = "{model}"
model_provider = "textproc"
check_for_update_on_startup = false

[model_providers.textproc]
name = "textproc"
base_url = "{url}/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[features]
# each of these reaches a host of its own at startup (a plugin marketplace, connectors)
plugins = false
remote_plugin = false
plugin_sharing = false
apps = false
tool_suggest = false
shell_snapshot = false
"""
DEAD_PROXY = "http://127.0.0.1:9"  # anything not sent to localhost goes nowhere


def run_codex(url: str, model: str, tmp_path: Path, *args: str,
              timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    """``codex exec --skip-git-repo-check ARGS`` in a fresh home and work dir under
    ``tmp_path`` (skips the test when Codex or node is not installed)."""
    if not CODEX.exists() or shutil.which("node") is None:
        pytest.skip("Codex CLI is not installed: run `bash scripts/fetch_agents.sh` (needs npm)")
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(CONFIG.format(model=model, url=url))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(CODEX_HOME=str(home), HTTPS_PROXY=DEAD_PROXY, HTTP_PROXY=DEAD_PROXY,
               ALL_PROXY=DEAD_PROXY, NO_PROXY="127.0.0.1,localhost")
    return subprocess.run([str(CODEX), "exec", "--skip-git-repo-check", *args], cwd=work,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout_s)
