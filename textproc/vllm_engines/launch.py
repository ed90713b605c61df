"""vLLM's own headless engine command (``vllm serve MODEL --headless ...``) with textproc's
extension flags: what ``textproc engine`` runs, and what the front runs for each local rank.

One command per rank (``--data-parallel-size-local 1``): vLLM's headless launcher stops every
engine it started when one of them dies, so a rank launched alone dies alone, and the front
restarts it alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["CPU_WORKER", "headless_command"]

# vLLM's CPU worker with textproc's mask kernel and CPU-generator seeding (engine_vllm.worker)
CPU_WORKER = "engine_vllm.worker.TextprocCPUWorker"


def headless_command(python: str, model_dir: str, *, size: int, rank: int, address: str,
                     rpc_port: int, local: int = 1, args: Sequence[str] = ()) -> list[str]:
    """``vllm serve MODEL --headless`` for ``local`` ranks from ``rank`` of a deployment of
    ``size``, dialling the front's handshake socket at ``address:rpc_port``; ``args`` are more
    ``vllm serve`` flags (the user's engine settings; vLLM's defaults otherwise)."""
    vllm = str(Path(python).parent / "vllm")
    command = [vllm, "serve", model_dir, "--headless",
               "--data-parallel-size", str(size), "--data-parallel-size-local", str(local),
               "--data-parallel-start-rank", str(rank), "--data-parallel-address", address,
               "--data-parallel-rpc-port", str(rpc_port)]
    if "--worker-cls" not in args:
        command += ["--worker-cls", CPU_WORKER]
    return command + list(args)
