#!/usr/bin/env bash
# The coding agents the integration tests drive end to end, installed from the npm registry
# into .cache/npm (git-ignored): `bash scripts/fetch_agents.sh [PACKAGE...]`, by default every
# agent below. Without npm it says so and exits 0: those tests then skip, naming this command.
set -euo pipefail
cd "$(dirname "$0")/.."
# Pinned: each version's requests are what the tests were written against; bump deliberately
# and rerun tests/integration/test_http_responses_codex.py / test_claude_code.py.
AGENTS=(
    "@openai/codex@0.171.0"  # Codex CLI: the Responses API through a custom model provider
    "@anthropic-ai/claude-code@2.1.197"  # Claude Code: the Messages API (ANTHROPIC_BASE_URL)
)
if [ "$#" -gt 0 ]; then
    AGENTS=("$@")
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "fetch_agents: npm not found; skipping ${AGENTS[*]} (their end-to-end tests skip)" >&2
    exit 0
fi
mkdir -p .cache/npm
npm install --prefix .cache/npm --save-exact --no-audit --no-fund --loglevel=error "${AGENTS[@]}"
