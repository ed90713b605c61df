"""Running the real Codex CLI (npm ``@openai/codex``, installed into ``.cache/npm`` by
``bash scripts/fetch_agents.sh``) against a Responses server at a URL, configured only the way
its docs say: a custom model provider with ``wire_api = "responses"`` in a fresh ``CODEX_HOME``.
Update checks, analytics and the features that reach other hosts at startup are off, and every
connection not to loopback goes to a dead proxy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from textproc.testing.models import REPO_ROOT

__all__ = ["codex_installed", "run_codex_exec"]

_CODEX = REPO_ROOT / ".cache" / "npm" / "node_modules" / ".bin" / "codex"
_CONFIG = """\
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
_DEAD_PROXY = "http://127.0.0.1:9"  # anything not sent to localhost goes nowhere


def codex_installed() -> bool:
    """Whether the Codex CLI and node are there to run it."""
    return _CODEX.exists() and shutil.which("node") is not None


def run_codex_exec(url: str, model: str, root: Path, *args: str,
                   timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    """``codex exec --skip-git-repo-check ARGS`` against the server at ``url`` (its ``/v1``),
    asking for ``model``, with a fresh home (``root/codex-home``) and work dir (``root/work``);
    output captured as text. Raises ``subprocess.TimeoutExpired`` after ``timeout_s``."""
    home, work = root / "codex-home", root / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(_CONFIG.format(model=model, url=url))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update(CODEX_HOME=str(home), HTTPS_PROXY=_DEAD_PROXY, HTTP_PROXY=_DEAD_PROXY,
               ALL_PROXY=_DEAD_PROXY, NO_PROXY="127.0.0.1,localhost")
    return subprocess.run([str(_CODEX), "exec", "--skip-git-repo-check", *args], cwd=work,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout_s)
