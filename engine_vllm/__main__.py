"""``python -m engine_vllm``: run vLLM's engine core on EngineLink until SIGTERM/SIGINT."""

from __future__ import annotations

from engine_vllm.loop import main

if __name__ == "__main__":
    raise SystemExit(main())
