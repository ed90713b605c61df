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

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from textproc.launchers import curve_flags
from textproc.errors import InvalidInput

if TYPE_CHECKING:
    from textproc.config import ServeConfig

__all__ = ["ADAPTER", "check_dense_ranks", "default_python", "experts"]

ENV_DIR = ".venv-vllm"  # made by scripts/setup_vllm.sh beside the checkout


def default_python() -> str:
    """``.venv-vllm/bin/python`` beside this checkout when it exists, else this interpreter."""
    beside = Path(__file__).resolve().parents[2] / ENV_DIR / "bin" / "python"
    return str(beside) if beside.is_file() else sys.executable


# where a model's config.json gives its experts, as vLLM's ModelArchConfigConvertor reads them
EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")


def experts(model_dir: str | Path) -> int:
    """How many experts the model in ``model_dir`` routes among (0: a dense model), from its
    ``config.json`` (its ``text_config`` for a model with vision), as vLLM counts them."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return 0
    if not isinstance(config, dict):
        return 0
    text = config.get("text_config")
    for part in (text, config) if isinstance(text, dict) else (config,):
        for key in EXPERT_KEYS:
            value = part.get(key)
            if isinstance(value, list) and value:
                value = value[0]
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return 0


def check_dense_ranks(model_dir: str | Path, size: int) -> None:
    """InvalidInput when ``size`` > 1 data-parallel ranks would run a mixture of experts:
    vLLM runs such ranks in lockstep waves through its DP coordinator (an all-gather per
    expert layer in every step), which textproc's front does not run; each rank of a dense
    model is an independent engine."""
    n = experts(model_dir)
    if size > 1 and n:
        raise InvalidInput(
            f"{model_dir} is a mixture of experts ({n} experts in its config.json): its "
            f"data-parallel ranks step in lockstep through vLLM's DP coordinator, which "
            f"textproc's front does not run; serve it with one engine (--data-parallel-size 1, "
            f"tensor parallelism through --engine-arg) or with vllm serve"
        )


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
        """textproc's front of vLLM's own engine processes (``python -m textproc.vllm_front``,
        textproc's interpreter: it imports nothing of vLLM); ``--engine-arg`` flags go to ``vllm
        serve``, after the model length the service checks prompts against."""
        dp = config.data_parallel
        command = [sys.executable, "-m", "textproc.vllm_front"]
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
