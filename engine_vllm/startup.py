"""Starting vLLM's engine core for the engine process: its settings as ``vllm serve`` gets
them, textproc's CPU worker (:mod:`engine_vllm.worker`), and a warm-up before serving.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine_vllm.loop import VllmSettings

__all__ = ["CPU_WORKER", "build_core", "warm_up"]

CPU_WORKER = "engine_vllm.worker.TextprocCPUWorker"  # imported by vLLM's worker process


def build_core(settings: VllmSettings) -> Any:
    """vLLM's EngineCore on the model (the slow part: model load, KV cache, warm-up)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_gib))  # whole GiB
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")  # no usage report leaves this machine
    os.environ.setdefault("DO_NOT_TRACK", "1")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.executor import Executor

    args = EngineArgs(model=settings.model_dir, max_model_len=settings.max_model_len,
                      max_num_seqs=settings.max_num_seqs or None, dtype=settings.dtype,
                      enforce_eager=True, gpu_memory_utilization=0.1,
                      # CPU: seeded requests survive chunked prefill, cheaper mask apply
                      worker_cls=CPU_WORKER if current_platform.is_cpu() else "auto")
    # the defaults `vllm serve` gets (batch sizes differ by usage context)
    config = args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    core = EngineCore(config, Executor.get_class(config), log_stats=False)
    warm_up(core)
    return core


def warm_up(core: Any) -> None:
    """Run two short requests to the end before serving: the first forward passes of a fresh
    engine cost seconds (kernels, allocations), which a first real request would wait for."""
    from vllm import SamplingParams
    from vllm.v1.engine import EngineCoreRequest

    for i, params in enumerate((SamplingParams(max_tokens=4, temperature=0.0),
                                SamplingParams(max_tokens=4, temperature=1.0, seed=0, logprobs=5))):
        request = EngineCoreRequest(
            request_id=f"warm-up-{i}", prompt_token_ids=list(range(100, 100 + 16 * (i + 1))),
            mm_features=None, sampling_params=params, pooling_params=None,
            arrival_time=time.time(), lora_request=None, cache_salt=None, data_parallel_rank=None)
        core.add_request(*core.preprocess_add_request(request))
    deadline = time.monotonic() + 300
    while core.scheduler.has_requests() and time.monotonic() < deadline:
        core.step()
