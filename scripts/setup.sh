#!/usr/bin/env bash
# One-command setup on a fresh machine: a virtualenv in .venv with textproc and its
# test/bench extras, then the real vocabularies built into .cache/models (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test,bench]'
.venv/bin/python scripts/fetch_fixtures.py
.venv/bin/python scripts/fetch_schemas.py
bash scripts/fetch_agents.sh
# the real engine's own environment (.venv-vllm) and a small model; TEXTPROC_SKIP_VLLM=1 skips
if [ "${TEXTPROC_SKIP_VLLM:-0}" != "1" ]; then
    bash scripts/setup_vllm.sh
fi
