"""Claude Code (npm ``@anthropic-ai/claude-code``) against textproc's Messages API, configured as
its docs say for a gateway: ``ANTHROPIC_BASE_URL``, a model name, an API key placeholder.

The service is the toy model with the stub engine in echo mode (it answers with the last user
turn). Claude Code turns adaptive thinking on, and the toy ChatML template then opens
``<think>``: the prompts below close it, so the echo has a visible answer. What Claude Code sends
is real: its ~24 tools, its system prompt as cached text blocks, a ``system`` entry inside
``messages``, ``max_tokens: 32000`` (more than this context leaves after its prompt), its beta
headers and fields. Nothing may leave the machine: the env switches off its telemetry, error
reporting, update checks and other non-essential traffic, and where ``strace`` works every
socket it connects is checked to be loopback.

Installed by ``bash scripts/fetch_agents.sh`` (``scripts/setup.sh`` runs it; it needs npm); the
tests skip without it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers.models import model_dir
from tests.helpers.service import REPO, Service, serve_toy_http, wait_http

pytestmark = pytest.mark.timeout(120)

CLAUDE = REPO / ".cache" / "npm" / "node_modules" / ".bin" / "claude"
MODEL = "toy"
# Claude Code's first request renders to ~60k toy tokens (a 600-token vocabulary): a context of
# 80k leaves it less than the 32,000 max_tokens it sends, so the room-left rule is exercised
MAX_MODEL_LEN = 81920
QUIET = {  # what its docs list to turn off everything but the model's own requests
    "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1", "DISABLE_COST_WARNINGS": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
}

if not CLAUDE.exists():
    pytest.skip("Claude Code is not installed; run: bash scripts/fetch_agents.sh "
                "@anthropic-ai/claude-code@2.1.197 (needs npm)", allow_module_level=True)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    service: Service
    service, url = serve_toy_http(tmp_path_factory.mktemp("claude"), "--stub-arg=--step-ms=1",
                                  "--max-model-len", str(MAX_MODEL_LEN))
    try:
        yield url
    finally:
        service.stop()


@pytest.fixture(scope="module")
def qwen_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real Qwen3 tokenizer and chat template (skips when not built), at the default
    context of 32,768 tokens: Claude Code's ~19k-token prompt leaves less than its 32,000."""
    root = tmp_path_factory.mktemp("claude-qwen")
    service = Service(root, model_dir("qwen3"), workers=1,
                      args=["--http", "127.0.0.1:0", "--stub-arg=--step-ms=1"]).start(
                          timeout_s=90)
    try:
        yield wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
    finally:
        service.stop()


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    probe = subprocess.run(["strace", "-f", "-o", os.devnull, "true"], capture_output=True,
                           timeout=10)
    return probe.returncode == 0


def _claude(url: str, home: Path, prompt: str, *args: str,
            model: str = MODEL) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``claude -p prompt`` in ``home`` (its HOME and working directory); the result and
    the addresses of the internet sockets it connected (empty when strace cannot run here)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE_", "HTTP_PROXY", "HTTPS_PROXY"))}
    env.update(QUIET, HOME=str(home), ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="placeholder",
               ANTHROPIC_MODEL=model, ANTHROPIC_SMALL_FAST_MODEL=model,
               ANTHROPIC_DEFAULT_HAIKU_MODEL=model)
    command = [str(CLAUDE), "-p", prompt, *args]
    trace = home / "connect.trace"
    traced = _strace_works()
    if traced:
        command = ["strace", "-f", "-e", "trace=connect", "-o", str(trace), *command]
    done = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True,
                          timeout=100, stdin=subprocess.DEVNULL)
    addresses = []
    if traced:
        text = trace.read_text()
        addresses = re.findall(r'inet_addr\("([^"]+)"\)', text)
        addresses += re.findall(r'inet_pton\(AF_INET6, "([^"]+)"', text)
        assert addresses, "strace saw no internet connect at all (not even to the server)"
    return done, addresses


def _only_loopback(addresses: list[str]) -> None:
    outside = [a for a in addresses if a not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")]
    assert not outside, f"Claude Code connected to {outside}"


def test_one_turn(url: str, tmp_path: Path) -> None:
    done, addresses = _claude(url, tmp_path, "Thinking it over.</think>The answer is 42.")
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.strip() == "The answer is 42."
    _only_loopback(addresses)


def test_tool_loop(url: str, tmp_path: Path) -> None:
    """Two turns: the model calls Claude Code's Read tool, Claude Code runs it and sends the
    result back, and the answer (the echo of that result) is printed."""
    notes = tmp_path / "notes.txt"
    notes.write_text("Done reading.</think>The file says 7 apples.")
    call = {"name": "Read", "arguments": {"file_path": str(notes)}}
    done, addresses = _claude(url, tmp_path, f"Reading.</think><tool_call>{json.dumps(call)}"
                              "</tool_call>", "--output-format", "json")
    assert done.returncode == 0, done.stderr + done.stdout
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["num_turns"] == 2, result
    assert result["result"].startswith("The file says 7 apples.")
    _only_loopback(addresses)


def test_tool_loop_on_qwen3(qwen_url: str, tmp_path: Path) -> None:
    """The same loop through Qwen3's own template (its tool-call and tool-response spelling,
    thinking on: the prompt does not open <think>, so the echo is the answer)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("The file says 7 apples.")
    call = {"name": "Read", "arguments": {"file_path": str(notes)}}
    done, addresses = _claude(qwen_url, tmp_path, f"<tool_call>{json.dumps(call)}</tool_call>",
                              "--output-format", "json", model="qwen3")
    assert done.returncode == 0, done.stderr + done.stdout
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["num_turns"] == 2, result
    assert result["result"].startswith("<tool_response>")
    assert "The file says 7 apples." in result["result"]
    _only_loopback(addresses)
