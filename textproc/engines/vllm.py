"""``--engine vllm``: vLLM's v1 engine core on the model in ``--model-dir``, run by
``engine_vllm`` in the engine's own Python environment (textproc never imports vLLM).

The engine process runs vLLM's ``EngineCore`` and ``EngineLink`` in one loop (no hop between
them): requests in, aborts in, each step's new ids, finish reasons and logprobs out; textproc's
compiled constraints are applied through vLLM's structured-output bitmask. Its Python is
``--engine-python``, else the ``.venv-vllm`` that ``scripts/setup.sh`` makes beside this
checkout, else this interpreter. Flags after ``--engine-arg`` go to ``python -m engine_vllm``:
its own (``--kv-cache-gib``, ``--stats-file``, ...) or any of vLLM's engine flags as ``vllm
serve`` takes them (``--dtype``, ``--max-num-seqs``, ``--enforce-eager``, ...); vLLM's defaults
for the rest, as ``vllm serve`` has them (the model's dtype, ``"auto"``). The engine is always
given ``--max-model-len``: the service's, the model's own context length unless ``serve
--max-model-len`` says otherwise, so textproc's prompt checks and vLLM agree.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from textproc.engines import curve_flags

if TYPE_CHECKING:
    from textproc.config import ServeConfig

__all__ = ["ADAPTER", "default_python"]

ENV_DIR = ".venv-vllm"  # made by scripts/setup_vllm.sh beside the checkout


def default_python() -> str:
    """``.venv-vllm/bin/python`` beside this checkout when it exists, else this interpreter."""
    beside = Path(__file__).resolve().parents[2] / ENV_DIR / "bin" / "python"
    return str(beside) if beside.is_file() else sys.executable


@dataclass(frozen=True)
class VllmAdapter:
    name: str = "vllm"
    summary: str = "vLLM's v1 engine core on --model-dir, in its own environment (--engine-python)"
    # model load, KV cache and warm-up: ~15 s idle, 40 s and more on a busy 2-core host
    startup_timeout_s: float = 600.0
    # vLLM's executor gives its model worker VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS (5) to exit,
    # then SIGTERM and 4 s more; a graceful exit takes 4-5 s here, past the service's 5 s
    stop_timeout_s: float = 15.0
    takes_curve_keys: bool = True

    def command(self, config: ServeConfig, engine_in: list[str], engine_out: list[str]) -> list[str]:
        if config.data_parallel.engaged:
            return self._front(config, engine_in, engine_out)
        command = [config.engine_python or default_python(), "-m", "engine_vllm"]
        for address_in, address_out in zip(engine_in, engine_out):
            command += ["--engine-in", address_in, "--engine-out", address_out]
        command += ["--model-dir", config.service.model_dir,
                    "--max-model-len", str(config.service.max_model_len)]
        if config.stub_stats_file:
            command += ["--stats-file", config.stub_stats_file]
            if config.engine_stats_brief:
                command.append("--stats-brief")
        return command + curve_flags(config) + list(config.engine_args)


    def _front(self, config: ServeConfig, engine_in: list[str], engine_out: list[str]) -> list[str]:
        """textproc's front of vLLM's own engine processes (``python -m textproc.vllm_engines``,
        textproc's interpreter: it imports nothing of vLLM); ``--engine-arg`` flags go to ``vllm
        serve``, after the model length the service checks prompts against."""
        dp = config.data_parallel
        command = [sys.executable, "-m", "textproc.vllm_engines"]
        for address_in, address_out in zip(engine_in, engine_out):
            command += ["--engine-in", address_in, "--engine-out", address_out]
        command += ["--model-dir", config.service.model_dir,
                    "--engine-python", config.engine_python or default_python(),
                    "--data-parallel-size", str(dp.size),
                    "--data-parallel-size-local", str(dp.size_local),
                    "--data-parallel-address", dp.address,
                    "--data-parallel-rpc-port", str(dp.rpc_port),
                    "--routing", dp.routing]
        if config.stub_stats_file:
            command += ["--stats-file", config.stub_stats_file]
        vllm_args = ["--max-model-len", str(config.service.max_model_len), *config.engine_args]
        command += [f"--vllm-arg={arg}" for arg in vllm_args]
        return command + curve_flags(config)


ADAPTER = VllmAdapter()
