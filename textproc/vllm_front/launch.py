"""vLLM's own headless engine command (``vllm serve MODEL --headless ...``) with textproc's
extension flags: what ``textproc engine`` runs, and what the front runs for each local rank.

One command per rank (``--data-parallel-size-local 1``): vLLM's headless launcher stops every
engine it started when one of them dies, so a rank launched alone dies alone, and the front
restarts it alone.

``--fast-forward K`` (or ``--fast-forward=K``) among the flags becomes vLLM's
``--speculative-config`` with textproc's drafter that proposes nothing
(``engine_vllm.fast_forward``): a constrained request's forced tokens then go to the engine as
draft tokens, verified in one step, as ``serve --engine vllm --engine-arg=--fast-forward=K``
does in process.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from textproc.errors import InvalidInput

__all__ = ["CPU_WORKER", "NO_DRAFTS", "headless_command", "engine_flags", "rank_cpu_binding"]

# vLLM's CPU worker with textproc's mask kernel and CPU-generator seeding (engine_vllm.worker)
CPU_WORKER = "engine_vllm.worker.TextprocCPUWorker"
NO_DRAFTS = "engine_vllm.fast_forward.NoDrafts"  # the drafter of --fast-forward


def engine_flags(args: Sequence[str]) -> list[str]:
    """``args`` for ``vllm serve`` with textproc's ``--fast-forward K`` made vLLM's
    ``--speculative-config`` (InvalidInput for a bad K, or beside a speculative config of the
    user's own: fast-forward takes vLLM's speculative decoding for itself)."""
    out: list[str] = []
    tokens = 0
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--fast-forward" or arg.startswith("--fast-forward="):
            value = arg.partition("=")[2] if "=" in arg else (rest.pop(0) if rest else "")
            if not value.isdigit() or int(value) < 1:
                raise InvalidInput(f"--fast-forward takes a positive number of tokens, not {value!r}")
            tokens = int(value)
        else:
            out.append(arg)
    if not tokens:
        return out
    if any(a == "--speculative-config" or a.startswith(("--speculative-config=", "--speculative_config"))
           for a in out):
        raise InvalidInput("--fast-forward takes vLLM's speculative decoding for itself: "
                           "drop --speculative-config or --fast-forward")
    config = {"method": "custom_class", "model": NO_DRAFTS, "num_speculative_tokens": tokens}
    return [*out, "--speculative-config", json.dumps(config)]


def headless_command(python: str, model_dir: str, *, size: int, rank: int, address: str,
                     rpc_port: int, local: int = 1, args: Sequence[str] = ()) -> list[str]:
    """``vllm serve MODEL --headless`` for ``local`` ranks from ``rank`` of a deployment of
    ``size``, dialling the front's handshake socket at ``address:rpc_port``; ``args`` are more
    ``vllm serve`` flags (the user's engine settings; vLLM's defaults otherwise)."""
    flags = engine_flags(args)
    vllm = str(Path(python).parent / "vllm")
    command = [vllm, "serve", model_dir, "--headless",
               "--data-parallel-size", str(size), "--data-parallel-size-local", str(local),
               "--data-parallel-start-rank", str(rank), "--data-parallel-address", address,
               "--data-parallel-rpc-port", str(rpc_port)]
    if "--worker-cls" not in flags:
        command += ["--worker-cls", CPU_WORKER]
    return command + flags


def rank_cpu_binding(value: str, local_rank: int, local_ranks: int) -> str:
    """This local rank's part of vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` for a deployment: vLLM's
    own ``--data-parallel-size N`` takes the ``|``-separated CPU lists in rank order (``0|1``:
    rank 0's worker on CPU 0, rank 1's on CPU 1), as many per rank as it has workers; a rank
    launched alone would read the first part only, so each one is given its own. A value
    without one part per local rank (``auto``, ``nobind``, one list) is left to every rank as
    it is."""
    parts = value.split("|")
    if local_ranks < 1 or len(parts) < local_ranks or len(parts) % local_ranks:
        return value
    per_rank = len(parts) // local_ranks
    return "|".join(parts[local_rank * per_rank:(local_rank + 1) * per_rank])
