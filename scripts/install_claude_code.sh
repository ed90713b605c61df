#!/usr/bin/env bash
# Claude Code (npm @anthropic-ai/claude-code), for the agent integration test
# (tests/integration/test_claude_code.py), installed into .cache/npm (git-ignored).
# Skipped without npm: the test then skips and names this script.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
    echo "npm not found: Claude Code not installed (its integration test will skip)" >&2
    exit 0
fi
npm install --prefix .cache/npm --no-fund --no-audit --loglevel=error @anthropic-ai/claude-code
