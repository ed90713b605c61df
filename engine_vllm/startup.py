"""The engine process's settings and the start of vLLM's engine core: its settings as ``vllm
serve`` gets them (vLLM's own flag parser and defaults: the model's dtype and context length
unless a flag says otherwise), textproc's CPU worker (:mod:`engine_vllm.worker`), and a warm-up
before serving.

Imports nothing of the loop (:mod:`engine_vllm.loop` runs what this builds); vLLM only inside
the functions that start it, so the flags parse without it.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CPU_WORKER", "VllmSettings", "build_core", "engine_args", "parse_args", "warm_up"]

CPU_WORKER = "engine_vllm.worker.TextprocCPUWorker"  # imported by vLLM's worker process


@dataclass(frozen=True)
class VllmSettings:
    """The engine process's settings: textproc's sockets and files, and vLLM's own engine
    flags as given (every one ``vllm serve`` takes; vLLM's defaults for the rest)."""

    engine_in: tuple[str, ...]
    engine_out: tuple[str, ...]
    model_dir: str
    vllm_args: tuple[str, ...] = ()  # e.g. ("--max-model-len", "4096", "--dtype=float32")
    kv_cache_gib: int = 1
    stats_file: str | None = None
    stats_interval_s: float = 0.5
    stats_brief: bool = False  # the stats file without the per-request records
    curve_client_key: str | None = None
    curve_server_key: str | None = None
    fast_forward_tokens: int = 0  # forced ids per step as vLLM draft tokens (0: off)
    # LoRA adapters by name: (name, path) pairs, vLLM's --lora-modules (a request's
    # EngineRequest.lora names one)
    lora_modules: tuple[tuple[str, str], ...] = ()


def parse_args(argv: Sequence[str] | None = None) -> VllmSettings:
    """textproc's flags; every other flag is kept for vLLM's own parser (:func:`engine_args`)."""
    p = argparse.ArgumentParser(
        prog="python -m engine_vllm", allow_abbrev=False,
        description="vLLM's v1 engine core on textproc's EngineLink.",
        epilog="Any other flag is one of vLLM's engine flags, as `vllm serve` takes it "
               "(--max-model-len, --dtype, --max-num-seqs, --enforce-eager, ...), with vLLM's "
               "defaults for those not given.")
    p.add_argument("--engine-in", required=True, action="append",
                   help="textproc's engine-in address; once per detokenizer shard, in order")
    p.add_argument("--engine-out", required=True, action="append")
    p.add_argument("--model-dir", required=True, help="a Hugging Face model directory")
    p.add_argument("--kv-cache-gib", type=int, default=1,
                   help="KV cache size (VLLM_CPU_KVCACHE_SPACE) unless that is set")
    p.add_argument("--stats-file")
    p.add_argument("--stats-interval-s", type=float, default=0.5)
    p.add_argument("--stats-brief", action="store_true",
                   help="write the stats file without the per-request records (the gauges "
                        "/metrics relays: a write of a few KB instead of up to ~0.5 MB)")
    p.add_argument("--curve-client-key", metavar="FILE")
    p.add_argument("--curve-server-key", metavar="FILE")
    p.add_argument("--fast-forward", type=int, default=0, metavar="K", dest="fast_forward_tokens",
                   help="verify up to K forced tokens of a constrained request (its guide's only "
                        "continuation) in one step, as vLLM speculative draft tokens "
                        "(engine_vllm.fast_forward); 0 (default): off")
    p.add_argument("--lora-modules", nargs="+", action="extend", default=[],
                   metavar="NAME=PATH", help="LoRA adapters a request may name (vLLM's "
                   "flag): each a peft adapter directory; turns vLLM's --enable-lora on, with "
                   "--max-lora-rank the largest adapter's rank unless given")
    a, vllm_args = p.parse_known_args(argv)
    loras = []
    for item in a.lora_modules:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            p.error(f"--lora-modules takes NAME=PATH, got {item!r}")
        loras.append((name, path))
    if len(a.engine_in) != len(a.engine_out):
        p.error("give one --engine-in and one --engine-out per detokenizer shard")
    return VllmSettings(
        engine_in=tuple(a.engine_in), engine_out=tuple(a.engine_out), model_dir=a.model_dir,
        vllm_args=tuple(vllm_args), kv_cache_gib=a.kv_cache_gib, stats_file=a.stats_file,
        stats_interval_s=a.stats_interval_s, stats_brief=a.stats_brief,
        curve_client_key=a.curve_client_key,
        curve_server_key=a.curve_server_key, fast_forward_tokens=a.fast_forward_tokens,
        lora_modules=tuple(loras))


def engine_args(settings: VllmSettings) -> Any:
    """vLLM's ``EngineArgs`` from its own command-line parser: the model, the flags given and
    vLLM's defaults for every other (a flag vLLM does not know exits with its usage, code 2).
    On the CPU the worker is textproc's (:mod:`engine_vllm.worker`) unless one is given."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_gib))  # whole GiB
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")  # no usage report leaves this machine
    os.environ.setdefault("DO_NOT_TRACK", "1")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser(
        prog="python -m engine_vllm", description="vLLM's engine flags"))
    args = EngineArgs.from_cli_args(parser.parse_args(["--model", settings.model_dir,
                                                       *settings.vllm_args]))
    if args.worker_cls == "auto" and current_platform.is_cpu():
        # seeded requests survive chunked prefill, cheaper mask apply
        args.worker_cls = CPU_WORKER
    if settings.fast_forward_tokens > 0:
        if args.speculative_config is not None:
            raise SystemExit("--fast-forward takes vLLM's speculative decoding for itself: "
                             "drop --speculative-config")
        from engine_vllm.fast_forward import speculative_config

        args.speculative_config = speculative_config(settings.fast_forward_tokens)
    if settings.lora_modules:
        args.enable_lora = True
        ranks = [_lora_rank(path) for _, path in settings.lora_modules]
        if "--max-lora-rank" not in " ".join(settings.vllm_args):
            args.max_lora_rank = max(ranks)
        args.max_loras = max(args.max_loras, len(ranks))
    return args


def _lora_rank(path: str) -> int:
    """An adapter's rank, from its adapter_config.json (``r``)."""
    import json

    try:
        with open(os.path.join(path, "adapter_config.json"), encoding="utf-8") as f:
            return int(json.load(f)["r"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--lora-modules: {path!r} is not a LoRA adapter directory "
                         f"(adapter_config.json with its rank r): {exc}") from exc


def build_core(args: Any) -> Any:
    """vLLM's EngineCore on the model with ``args`` (:func:`engine_args`): the slow part,
    model load, KV cache and warm-up."""
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.executor import Executor

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
