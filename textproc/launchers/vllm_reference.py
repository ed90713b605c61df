"""vLLM's own OpenAI server (``vllm serve``) on a model, started from the engine's environment:
the reference textproc is compared with (the real-engine tests, ``textproc bench vllm``).

Starts a process and waits on HTTP; imports nothing of vLLM (its console script runs in its own
environment, ``textproc.launchers.vllm.default_python``'s).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from textproc.launchers.vllm import default_python
from textproc.errors import StartupTimeout, WorkerDied

__all__ = ["COMPARED_ENGINE_FLAGS", "ReferenceServer", "engine_arg_flags"]

START_TIMEOUT_S = 600.0
# the engine settings a comparison gives both sides (``vllm serve``'s flags, and textproc's
# engine the same through ``--engine-arg``, :func:`engine_arg_flags`) besides the same
# --max-model-len: float32 (greedy ids then do not depend on rounding; "auto" would run the
# model's dtype), no compile step, vLLM's memory share of a small box. Neither side's defaults.
COMPARED_ENGINE_FLAGS = ("--dtype=float32", "--enforce-eager", "--gpu-memory-utilization=0.1")


def engine_arg_flags(flags: Sequence[str] = COMPARED_ENGINE_FLAGS) -> list[str]:
    """``vllm serve`` engine flags as ``textproc serve --engine vllm`` passes them on."""
    return [f"--engine-arg={flag}" for flag in flags]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ReferenceServer:
    """``vllm serve`` (vLLM's own OpenAI server) on ``model_dir``, on a free loopback port, served
    as the directory's name, with ``engine_flags`` (default :data:`COMPARED_ENGINE_FLAGS`);
    ``args`` are more ``vllm serve`` flags, ``env`` more environment."""

    def __init__(self, root: Path, model_dir: Path, *, max_model_len: int,
                 args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 python: str | None = None,
                 engine_flags: Sequence[str] = COMPARED_ENGINE_FLAGS) -> None:
        self.root = root
        self.model_dir = model_dir
        self.max_model_len = max_model_len
        self.args = list(args)
        self.engine_flags = list(engine_flags)
        self.env = dict(env or {})
        self.python = python or default_python()
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "vllm-serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ReferenceServer:
        """Start it (returns at once; :meth:`wait` waits until it serves)."""
        vllm = Path(self.python).parent / "vllm"
        command = [str(vllm), "serve", str(self.model_dir), "--host", "127.0.0.1",
                   "--port", str(self.port), "--served-model-name", self.model_dir.name,
                   "--max-model-len", str(self.max_model_len), *self.engine_flags, *self.args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         env={**os.environ, "VLLM_NO_USAGE_STATS": "1",
                                              "DO_NOT_TRACK": "1", **self.env})
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Wait until it answers ``GET /v1/models``; its base URL."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise WorkerDied(f"vllm serve exited with {self.proc.returncode}:\n"
                                   f"{self.log_path.read_text(errors='replace')[-4000:]}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as resp:
                    if resp.status == 200:
                        return self.url
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        raise StartupTimeout(f"vllm serve not serving after {timeout_s} s:\n"
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


