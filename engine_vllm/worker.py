"""vLLM's CPU worker with two changes: seeded requests survive chunked prefill, and
structured-output masks are applied by a cheaper kernel.

Seeds. vLLM's model runner samples a token for every request in a step, also for a request
whose prompt is only partly prefilled (the token is then discarded), and undoes what that draw
took from a seeded request's generator with ``gen.set_offset(gen.get_offset() - 4)``: an offset
only CUDA's Philox generators have. A CPU generator (Mersenne Twister) raises "CPU Generator
does not use offset", the exception leaves ``execute_model`` and vLLM's engine core dies, with
every request in flight. On the CPU build that happens to the first request with a ``seed``
whose prompt is longer than one step's token budget (2,048 tokens by default).
:class:`TextprocCPUModelRunner` undoes the draw the CPU way: before sampling it keeps the state
of each seeded generator whose token the step will discard, and after vLLM's bookkeeping it
puts that state back (vLLM's own rewind does not see those generators). The seeded stream is
then what it would be without chunking, as on CUDA.

Masks. vLLM's scheduler sends the step's bitmask rows (one per constrained request) with the
batch, and the runner applies them with xgrammar's CPU kernel: ~600 us per row of a
152k-token vocabulary when few tokens are allowed, which is most states of a JSON schema. The
runner here applies the same rows to the same logits with :func:`engine_vllm.bitmask.apply_row`
(~25 us for such a row, exact) and hands vLLM's sampler a step with no grammar left to apply.
Logits of a bfloat16 or float16 model are taken to float32 first, as vLLM's sampler takes them.
A step with speculative draft tokens has one logits row and one mask row per draft position
of a request before its next token's, and gets the same rows applied. Logits off the CPU go to
vLLM's own path.

The engine process selects :class:`TextprocCPUWorker` with vLLM's ``worker_cls`` setting; the
worker process imports this module (nothing here runs in the engine process).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.cpu_worker import CPUWorker

from engine_vllm.bitmask import apply_row
from engine_vllm.fast_forward import NoDrafts

__all__ = ["WORKER_CLS", "TextprocCPUModelRunner", "TextprocCPUWorker"]

WORKER_CLS = f"{__name__}.TextprocCPUWorker"

_log = logging.getLogger("engine_vllm")


class TextprocCPUModelRunner(CPUModelRunner):  # type: ignore[misc]
    """vLLM's CPU model runner (v1) with a CPU-generator rewind of discarded draws and the
    structured-output masks applied by :func:`engine_vllm.bitmask.apply_row`."""

    _seed_rewind: dict[int, torch.Tensor]
    _fallback_logged = False

    def sample_tokens(self, grammar_output: Any) -> Any:
        if grammar_output is not None and self.execute_model_state is not None:
            if self._apply_masks(grammar_output):
                grammar_output = None  # applied: vLLM's sampler sees plain logits
        return super().sample_tokens(grammar_output)

    def _apply_masks(self, grammar_output: Any) -> bool:
        """Apply the step's mask rows to its logits in place; False leaves them to vLLM."""
        scheduler_output, logits = self.execute_model_state[:2]
        if logits.dtype in (torch.bfloat16, torch.float16) and logits.is_cpu:
            # a bfloat16 model (vLLM's dtype "auto"): its sampler takes the logits to float32
            # first thing (log_softmax in float32 for logprobs), so they go there here and the
            # mask applies to float32 values; the sampled ids and logprobs are the same
            logits = logits.float()
            self.execute_model_state = self.execute_model_state._replace(logits=logits)
        if (logits.dtype != torch.float32 or not logits.is_cpu or not logits.is_contiguous()
                or grammar_output.grammar_bitmask.shape[1] * 32 < logits.shape[1]):
            if not self._fallback_logged:
                type(self)._fallback_logged = True
                _log.warning("structured-output masks go through vLLM's own kernel (logits %s %s)",
                             logits.dtype, tuple(logits.shape))
            return False
        # a request's logits rows: one per draft token it has this step, then the next token's
        # (vLLM's apply_grammar_bitmask lays them out the same way); its mask rows likewise
        spec = scheduler_output.scheduled_spec_decode_tokens
        rows: dict[str, int] = {}
        offset = 0
        for i, request_id in enumerate(self.input_batch.req_ids):
            rows[request_id] = i + offset
            offset += len(spec.get(request_id, ()))
        values = logits.numpy()
        masks = grammar_output.grammar_bitmask
        k = 0
        for request_id in grammar_output.structured_output_request_ids:
            n = 1 + len(spec.get(request_id, ()))
            i = rows.get(request_id)
            if i is not None:
                for j in range(n):
                    apply_row(values[i + j], masks[k + j])
            k += n
        return True

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


class TextprocCPUWorker(CPUWorker):  # type: ignore[misc]
    """vLLM's CPU worker whose (v1) model runner is :class:`TextprocCPUModelRunner`."""

    def init_device(self) -> None:
        super().init_device()
        runner = getattr(self, "model_runner", None)
        if type(runner) is CPUModelRunner:  # the v2 runner (opt-in) is left as it is
            runner.__class__ = TextprocCPUModelRunner
            if isinstance(getattr(runner, "drafter", None), NoDrafts):
                _keep_logits_processors(runner)


def _keep_logits_processors(runner: Any) -> None:
    """Give the runner vLLM's built-in logits processors back (min_tokens, logit_bias, min_p).

    With any speculative decoding vLLM keeps only min_tokens (its warning: "min_p and
    logit_bias parameters won't work with speculative decoding"), for every request. Under
    fast-forward a request samples as without it: a step with no draft for it goes through
    vLLM's sampler, which applies the processors; one with drafts samples its token after the
    drafts the same way (vLLM's bonus token), and each draft position has one allowed id, which
    no bias or min_p changes."""
    from vllm.utils.platform_utils import is_pin_memory_available
    from vllm.v1.sample.logits_processor import BUILTIN_LOGITS_PROCESSORS, LogitsProcessors

    pin = is_pin_memory_available()
    runner.input_batch.logitsprocs = LogitsProcessors(
        ctor(runner.vllm_config, runner.device, pin) for ctor in BUILTIN_LOGITS_PROCESSORS)
