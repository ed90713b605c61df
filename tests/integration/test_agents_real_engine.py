"""Claude Code and Codex CLI each complete a turn against textproc in front of a real engine:
vLLM's engine core on a copy of the seeded tiny Qwen3 model (random weights, its full
40,960-token context) whose weights end its turns by itself (``tests/helpers/turn_model.py``:
``<|im_end|>`` with probability 0.2 after every token that shows text, so almost never at once,
at temperature 1).

Each agent is configured as its docs say for a gateway (a base URL, a model name) and sends its
real requests: Claude Code's ~19k Qwen3 tokens of system prompt and tools with adaptive thinking,
effort and ``max_tokens: 32000`` (more than the context leaves: the server gives it what is
left); Codex's namespace and hosted tools, reasoning and ``store: false``, with no output cap (the
copy's ``generation_config.json`` names ``max_new_tokens``, as ``vllm serve`` takes it, which an
answer reaches with probability ~1e-6). The model ends its answer, the agent prints it and exits
0, with the whole prompt counted.
Behind ``-m slow``: one more engine start (15-80 s) and a few seconds of prefill per agent.
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
from textproc.launchers.vllm_reference import engine_arg_flags
from tests.helpers.turn_model import write_turn_ending_copy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]

MODEL = TINY_MODEL.name
CONTEXT = 40960  # the model's max_position_embeddings
MAX_NEW = 64  # the copy's max_new_tokens: what a request that sets no max_tokens gets
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
    model = write_turn_ending_copy(TINY_MODEL, tmp_path_factory.mktemp("models") / MODEL,
                                   max_new_tokens=MAX_NEW)
    service = Service(tmp_path_factory.mktemp("agents-vllm"), model, workers=1, engine="vllm",
                      args=["--http", "127.0.0.1:0", "--max-model-len", str(CONTEXT),
                            *engine_arg_flags()])
    service.env = {**os.environ, **ENGINE_ENV}
    service.start(timeout_s=600)
    try:
        yield wait_http(service.runtime_dir / "http.json", None, service.log_path, 60)
    finally:
        service.stop(timeout_s=60)


def test_claude_code_completes_a_turn(url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE_", "HTTP_PROXY", "HTTPS_PROXY"))}
    env.update(QUIET, HOME=str(tmp_path), ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="placeholder",
               ANTHROPIC_MODEL=MODEL, ANTHROPIC_SMALL_FAST_MODEL=MODEL, ANTHROPIC_DEFAULT_HAIKU_MODEL=MODEL)
    done = subprocess.run([str(_agent("claude")), "-p", "Say hello.", "--output-format", "json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    result = json.loads(done.stdout)
    assert done.returncode == 0 and not result["is_error"], done.stderr[-3000:] + done.stdout[-3000:]
    assert result["api_error_status"] is None and result["stop_reason"] == "end_turn", result
    assert isinstance(result["result"], str) and result["result"].strip(), result  # the answer
    usage = result["usage"]
    assert 0 < usage["output_tokens"] < MAX_NEW, usage  # the model ended it (P(>= 64) ~ 1e-6)
    assert usage["input_tokens"] > 15000, usage  # its whole prompt reached the model


def test_codex_completes_a_turn(url: str, tmp_path: Path) -> None:
    """``codex exec`` with a custom provider (``wire_api = "responses"``): its real requests
    (namespace and hosted tools, reasoning, ``store: false``) reach the engine, the model ends
    its answer, and Codex prints it and completes the turn."""
    done = run_codex(url, MODEL, tmp_path, "--json", "Say hello.", timeout_s=300)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    kinds = [e.get("type") for e in events]
    assert done.returncode == 0 and "turn.completed" in kinds, done.stderr[-3000:] + done.stdout[-3000:]
    assert not {"turn.failed", "error"} & set(kinds), events
    answers = [e["item"]["text"] for e in events if e.get("type") == "item.completed"
               and e["item"].get("type") == "agent_message"]
    assert len(answers) == 1 and answers[0].strip(), events  # the engine's text, as Codex's answer
    usage = next(e["usage"] for e in events if e.get("type") == "turn.completed")
    assert usage["input_tokens"] > 5000 and 0 < usage["output_tokens"] < MAX_NEW, usage
