"""A real engine for integration tests: ``textproc serve --engine vllm`` and vLLM's own server
(``vllm serve``) on the same small model (``scripts/setup_vllm.sh`` makes both: the engine's
environment ``.venv-vllm`` and the seeded tiny Qwen3 model ``.cache/models/qwen3-tiny``).

Both start at once (each takes 15-80 s on 2 cores: model load, KV cache, warm-up) and are shared
by one test module. Where the engine is not installed the tests skip, naming the setup command.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.helpers.models import REPO_ROOT
from tests.helpers.service import Service, wait_http
from textproc.launchers.vllm_reference import ReferenceServer, engine_arg_flags

__all__ = ["ENGINE_ENV", "MAX_MODEL_LEN", "SETUP_HINT", "TINY_MODEL", "VLLM_PYTHON",
           "engine_stats", "missing", "reference_server", "serve_vllm_textproc"]

VLLM_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
TINY_MODEL = REPO_ROOT / ".cache" / "models" / "qwen3-tiny"
SETUP_HINT = "bash scripts/setup_vllm.sh (run by scripts/setup.sh)"
MAX_MODEL_LEN = 4096
START_TIMEOUT_S = 600.0  # 15-80 s seen on 2 busy cores
# the same engine settings on both sides: vllm_reference.COMPARED_ENGINE_FLAGS (float32, ...),
# the same --max-model-len, a 1 GiB KV cache
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def missing() -> str | None:
    """Why the real-engine tests cannot run here, or None."""
    if not VLLM_PYTHON.is_file():
        return f"no vLLM environment at {VLLM_PYTHON}: {SETUP_HINT}"
    if not (TINY_MODEL / "config.json").is_file():
        return f"no model at {TINY_MODEL}: {SETUP_HINT}"
    return None


def reference_server(root: Path, model: Path = TINY_MODEL) -> ReferenceServer:
    """``vllm serve`` of the tiny model (or a copy of it) with the same engine settings (not
    started)."""
    return ReferenceServer(root, model, max_model_len=MAX_MODEL_LEN, env=ENGINE_ENV,
                           python=str(VLLM_PYTHON),
                           args=["--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                                 # usage.prompt_tokens_details.cached_tokens, as textproc's
                                 "--enable-prompt-tokens-details",
                                 # the render / generate routes textproc serves by default
                                 "--enable-scale-out"])


def serve_vllm_textproc(root: Path, *args: str, model: Path = TINY_MODEL) -> tuple[Service, str]:
    """``textproc serve --engine vllm`` of the tiny model (or a copy of it) with the HTTP
    frontend on a free port; the service and its base URL once it serves (the engine
    included)."""
    service = Service(root, model, workers=1, engine="vllm",
                      args=["--http", "127.0.0.1:0", "--max-model-len", str(MAX_MODEL_LEN),
                            *engine_arg_flags(), "--engine-arg=--stats-interval-s=0.1",
                            # (not the default: exercises the placement on the real engine)
                            "--text-cpus", "auto", *args])
    service.env = {**os.environ, **ENGINE_ENV}
    service.start(timeout_s=START_TIMEOUT_S)
    return service, wait_http(service.runtime_dir / "http.json", None, service.log_path, 60)


def engine_stats(service: Service) -> dict[str, Any]:
    """The engine's stats file (engine_vllm: vLLM's scheduler state and per-request counts)."""
    return dict(service.stub_stats())
