"""A real engine for integration tests: ``textproc serve --engine vllm`` and vLLM's own server
(``vllm serve``) on the same small model (``scripts/setup_vllm.sh`` makes both: the engine's
environment ``.venv-vllm`` and the seeded tiny Qwen3 model ``.cache/models/qwen3-tiny``).

Both start at once (each takes 15-80 s on 2 cores: model load, KV cache, warm-up) and are shared
by one test module. Where the engine is not installed the tests skip, naming the setup command.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.helpers.models import REPO_ROOT
from tests.helpers.service import Service, wait_http

__all__ = ["MAX_MODEL_LEN", "SETUP_HINT", "TINY_MODEL", "VLLM_PYTHON", "ReferenceServer",
           "missing", "serve_vllm_textproc"]

VLLM_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
TINY_MODEL = REPO_ROOT / ".cache" / "models" / "qwen3-tiny"
SETUP_HINT = "bash scripts/setup_vllm.sh (run by scripts/setup.sh)"
MAX_MODEL_LEN = 4096
START_TIMEOUT_S = 600.0
# the same engine settings on both sides: float32 (greedy ids then do not depend on rounding),
# a 1 GiB KV cache
_ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def missing() -> str | None:
    """Why the real-engine tests cannot run here, or None."""
    if not VLLM_PYTHON.is_file():
        return f"no vLLM environment at {VLLM_PYTHON}: {SETUP_HINT}"
    if not (TINY_MODEL / "config.json").is_file():
        return f"no model at {TINY_MODEL}: {SETUP_HINT}"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ReferenceServer:
    """``vllm serve`` (vLLM's own OpenAI server) on the tiny model, on a free loopback port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "vllm-serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ReferenceServer:
        """Start it (returns at once; :meth:`wait` waits until it serves)."""
        vllm = VLLM_PYTHON.parent / "vllm"
        command = [str(vllm), "serve", str(TINY_MODEL), "--host", "127.0.0.1",
                   "--port", str(self.port), "--served-model-name", TINY_MODEL.name,
                   "--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32",
                   "--gpu-memory-utilization", "0.1", "--enforce-eager",
                   "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         env={**os.environ, **_ENGINE_ENV})
        return self

    def wait(self, timeout_s: float = START_TIMEOUT_S) -> str:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.proc.returncode}:\n"
                                   f"{self.log_path.read_text(errors='replace')[-4000:]}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"vllm serve not serving after {timeout_s} s:\n"
                           f"{self.log_path.read_text(errors='replace')[-4000:]}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def serve_vllm_textproc(root: Path, *args: str) -> tuple[Service, str]:
    """``textproc serve --engine vllm`` of the tiny model with the HTTP frontend on a free
    port; the service and its base URL once it serves (the engine included)."""
    service = Service(root, TINY_MODEL, workers=1, engine="vllm",
                      args=["--http", "127.0.0.1:0", "--max-model-len", str(MAX_MODEL_LEN),
                            "--engine-arg=--stats-interval-s=0.1", *args])
    service.env = {**os.environ, **_ENGINE_ENV}
    service.start(timeout_s=START_TIMEOUT_S)
    return service, wait_http(service.runtime_dir / "http.json", None, service.log_path, 60)


def engine_stats(service: Service) -> dict[str, Any]:
    """The engine's stats file (engine_vllm: vLLM's scheduler state and per-request counts)."""
    import json

    return dict(json.loads(service.stats_file.read_text()))
