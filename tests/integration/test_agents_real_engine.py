"""Claude Code against textproc in front of a real engine (vLLM's engine core on the seeded tiny
Qwen3 model, random weights, its full 40,960-token context).

Claude Code, configured as its docs say for a gateway (a base URL, a model name), sends its real
requests (~19k Qwen3 tokens of system prompt and tools, adaptive thinking, effort) and the real
engine answers them. A random-weight model never ends a turn by itself, so the output is capped
the documented way (``CLAUDE_CODE_MAX_OUTPUT_TOKENS``: else the 32,000 it asks for would be ~21k
tokens of noise, minutes on two cores), every answer stops at the cap, and Claude Code reports
that as its own "exceeded the output token maximum" error (exit 1): the check is that this, and
not an API or connection error, is what ends the run, with the prompts counted in full. Codex
has no setting that caps its output, so the model is served from a copy whose
``generation_config.json`` names ``max_new_tokens`` (the default ``max_tokens`` of a request
that sets none, as ``vllm serve`` takes it): Codex's turn ends at that cap, and the check is the
same: what ends the run is the answer or Codex's own word on it, never an API error.
Behind ``-m slow``: one more engine start (15-80 s) and ~20 s of prefill.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.codex import run_codex
from tests.helpers.real_engine import ENGINE_ENV, TINY_MODEL, missing
from tests.helpers.service import REPO, Service, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]

MODEL = TINY_MODEL.name
CONTEXT = 40960  # the model's max_position_embeddings
MAX_NEW = 48  # the served copy's max_new_tokens: what a request that sets no max_tokens gets
BIN = REPO / ".cache" / "npm" / "node_modules" / ".bin"
QUIET = {"DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
         "DISABLE_BUG_COMMAND": "1", "DISABLE_COST_WARNINGS": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1"}


def _agent(name: str) -> Path:
    path = BIN / name
    if not path.exists() or shutil.which("node") is None:
        pytest.skip(f"{name} is not installed: run `bash scripts/fetch_agents.sh` (needs npm)")
    return path


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[str]:
    if "slow" not in (request.config.getoption("-m") or ""):
        pytest.skip("an engine start and Claude Code's ~19k-token prompts: run with -m slow")
    # the tiny model with a default output cap: its files, and a generation_config.json of its own
    model = tmp_path_factory.mktemp("models") / MODEL
    model.mkdir()
    for path in TINY_MODEL.iterdir():
        if path.name != "generation_config.json":
            (model / path.name).symlink_to(path.resolve())
    config = json.loads((TINY_MODEL / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**config, "max_new_tokens": MAX_NEW}))
    service = Service(tmp_path_factory.mktemp("agents-vllm"), model, workers=1, engine="vllm",
                      args=["--http", "127.0.0.1:0", "--max-model-len", str(CONTEXT)])
    service.env = {**os.environ, **ENGINE_ENV}
    service.start(timeout_s=600)
    try:
        yield wait_http(service.runtime_dir / "http.json", None, service.log_path, 60)
    finally:
        service.stop(timeout_s=60)


def test_claude_code_requests_are_answered(url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE_", "HTTP_PROXY", "HTTPS_PROXY"))}
    env.update(QUIET, HOME=str(tmp_path), ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="placeholder",
               ANTHROPIC_MODEL=MODEL, ANTHROPIC_SMALL_FAST_MODEL=MODEL, ANTHROPIC_DEFAULT_HAIKU_MODEL=MODEL,
               CLAUDE_CODE_MAX_OUTPUT_TOKENS="32")
    done = subprocess.run([str(_agent("claude")), "-p", "Say hello.", "--output-format", "json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    result = json.loads(done.stdout)
    assert result["api_error_status"] is None, done.stderr[-3000:] + done.stdout[-3000:]
    if result["is_error"]:  # (nearly always: the noise reached the cap)
        assert done.returncode == 1 and "exceeded the 32 output token maximum" in result["result"], result
    else:  # the model happened to end its turn: the answer is printed
        assert done.returncode == 0 and isinstance(result["result"], str), result
    usage = result["usage"]
    assert usage["output_tokens"] > 0, usage
    assert usage["input_tokens"] > 15000, usage  # its whole prompt reached the model


def test_codex_turn_is_answered(url: str, tmp_path: Path) -> None:
    """``codex exec`` with a custom provider (``wire_api = "responses"``): its real requests
    (namespace and hosted tools, reasoning, ``store: false``) reach the engine, the answer
    comes back, and what ends the run is the answer or Codex's own word on a capped one."""
    done = run_codex(url, MODEL, tmp_path, "--json", "Say hello.", timeout_s=300)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    kinds = [e.get("type") for e in events]
    assert "turn.started" in kinds, done.stderr[-3000:] + done.stdout[-3000:]
    answers = [e["item"]["text"] for e in events if e.get("type") == "item.completed"
               and e["item"].get("type") == "agent_message"]
    assert answers and answers[0], events  # the engine's text reached Codex as its answer
    failed = [e for e in events if e.get("type") in ("turn.failed", "error")]
    for event in failed:  # the only failure allowed: the capped answer, in Codex's words
        assert "incomplete" in json.dumps(event).lower() or "max_output_tokens" in json.dumps(event), event
    if not failed:
        assert done.returncode == 0 and "turn.completed" in kinds, done.stdout[-3000:]
        usage = next(e["usage"] for e in events if e.get("type") == "turn.completed")
        assert usage["input_tokens"] > 5000 and 0 < usage["output_tokens"] <= MAX_NEW, usage
