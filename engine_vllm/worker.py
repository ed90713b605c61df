"""vLLM's CPU worker with seeded requests that survive chunked prefill.

vLLM's model runner samples a token for every request in a step, also for a request whose
prompt is only partly prefilled (the token is then discarded), and undoes what that draw took
from a seeded request's generator with ``gen.set_offset(gen.get_offset() - 4)``: an offset only
CUDA's Philox generators have. A CPU generator (Mersenne Twister) raises "CPU Generator does
not use offset", the exception leaves ``execute_model`` and vLLM's engine core dies, with every
request in flight. On the CPU build that happens to the first request with a ``seed`` whose
prompt is longer than one step's token budget (2,048 tokens by default).

:class:`SeedSafeCPUModelRunner` undoes the draw the CPU way: before sampling it keeps the state
of each seeded generator whose token the step will discard, and after vLLM's bookkeeping it
puts that state back (vLLM's own rewind does not see those generators). The seeded stream is
then what it would be without chunking, as on CUDA. The engine process selects
:class:`SeedSafeCPUWorker` with vLLM's ``worker_cls`` setting; the worker process imports this
module (nothing here runs in the engine process).
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.cpu_worker import CPUWorker

__all__ = ["WORKER_CLS", "SeedSafeCPUModelRunner", "SeedSafeCPUWorker"]

WORKER_CLS = f"{__name__}.SeedSafeCPUWorker"


class SeedSafeCPUModelRunner(CPUModelRunner):  # type: ignore[misc]
    """vLLM's CPU model runner (v1) with a CPU-generator rewind of discarded draws."""

    _seed_rewind: dict[int, torch.Tensor]

    def _sample(self, logits: Any, spec_decode_metadata: Any) -> Any:
        batch = self.input_batch
        rewind: dict[int, torch.Tensor] = {}
        if batch.generators:
            discard = self.discard_request_mask.np[:batch.num_reqs]
            for index, generator in batch.generators.items():
                if index < len(discard) and discard[index]:
                    rewind[index] = generator.get_state()
        self._seed_rewind = rewind
        return super()._sample(logits, spec_decode_metadata)

    def _bookkeeping_sync(self, *args: Any, **kwargs: Any) -> Any:
        rewind = getattr(self, "_seed_rewind", None) or {}
        self._seed_rewind = {}
        generators = self.input_batch.generators
        held = {index: generators.pop(index) for index in rewind if index in generators}
        try:
            return super()._bookkeeping_sync(*args, **kwargs)
        finally:
            for index, generator in held.items():
                generator.set_state(rewind[index])
                generators[index] = generator


class SeedSafeCPUWorker(CPUWorker):  # type: ignore[misc]
    """vLLM's CPU worker whose (v1) model runner is :class:`SeedSafeCPUModelRunner`."""

    def init_device(self) -> None:
        super().init_device()
        runner = getattr(self, "model_runner", None)
        if type(runner) is CPUModelRunner:  # the v2 runner (opt-in) is left as it is
            runner.__class__ = SeedSafeCPUModelRunner
