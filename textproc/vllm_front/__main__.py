"""``python -m textproc.vllm_front``: the front of a vLLM deployment until SIGTERM/SIGINT."""

from __future__ import annotations

from textproc.vllm_front.front import main

if __name__ == "__main__":
    raise SystemExit(main())
