"""PROTOCOL_VERSION: the one number every frame change bumps, and what each bump changed.

``Hello``, ``Welcome``, ``EngineHello`` and ``Ready`` carry it as their default, the receiving
side compares it, and the supervisor writes it into endpoints.json. Bump it here, and only here,
on any field or frame change, and add a line saying what changed.
"""

from __future__ import annotations

__all__ = ["PROTOCOL_VERSION"]

# 2: EngineStepPacked; 3: stage timings on Accepted and Outputs; 4: EngineRequest.logit_bias,
# ChatRequest.documents, Failure.param; 5: tool formats (ChatRequest.stream_calls /
# parallel_tool_calls, Submit.tool_format / reasoning_format / tool_schemas / stream_calls / max_calls);
# 6: constraint indexes (EngineIndex, EngineRequest.index_key, Submit.index, ChatRequest/
# CompletionRequest.structured); 7: ChatRequest.n / CompletionRequest.n (one prompt, n choices);
# 8: logprobs (EngineRequest / ChatRequest / CompletionRequest / Submit.logprobs, StepOutput and
# EngineStepPacked .logprobs / .top_ids, RequestOutput.logprobs)
# 9: EncodePart / EncodedPart (a worker's share of another worker's long prompt);
# 10: detokenizer shards (no frame changed: endpoints.json lists every shard in
# endpoints.detokenizers, the index of the detokenizer's Ready / Ready(role="engine") / Stats /
# ProcessDied is its shard, requests are routed by textproc.sharding.shard_of)
# 11: request options as values (ChatRequest / CompletionRequest .sampling / .output,
# Submit .output / .parse: textproc.options), Submit.max_calls gone (output.parallel_tool_calls);
# those values travel as maps by field name: a new field with a default there needs no bump
# 12: IndexTable.char_count / by_chars_of / by_chars_next (counted repetitions: the next state
# by the token's character count instead of one exception entry per token)
# 13: IndexTable.n_known (a partial index: the first states of a progressive compile, the whole
# index following under the same key: IndexDone on detok-in, EngineIndex again on engine-in;
# Submit.compiler, the worker whose IndexDone is to come)
# 14: EngineRequest.eos_token_ids (the model's EOS ids, masked until min_tokens even with
# ignore_eos, as vLLM masks them)
#     and endpoints.json spells a shard's four addresses only in endpoints.detokenizers (the flat
# detok_in / detok_front / engine_in / engine_out copies of shard 0 are gone; no frame changed)
# 15: EngineStep.cached_tokens / EngineStepPacked.cached_tokens (prompt tokens the engine found
# in its prefix cache, per request, in the step of its first output) and
# RequestOutput.cached_tokens (with the usage on a request's last output)
# 16: ChatRequest.images / ChatRequest.image_params (image bytes for the worker to decode),
# EngineRequest.images (EngineImage: the pixel patches, grid and placeholder span of each)
# 17: RequestOutput.token_ids (the engine's ids, with OutputOptions.return_token_ids);
# RenderRequest / Rendered (a chat or completion request built as for generation, not submitted)
# 18: EngineRequest.priority (the request's scheduling order, vLLM's priority); EngineCall /
# EngineCallResult (an operator's call of an engine method: detok-front, engine-in, engine-out)
# 19: RequestOutput.id_logprobs / id_top_ids (the logprob rows of RequestOutput.token_ids)
# 20: DerenderRequest / Derendered (ids -> a chat request's parsed output, in a worker)
# 21: EngineRequest.lora (the LoRA adapter a request is served with, by name)
# 22: DerenderRequest.skip (a streamed chunk's deltas: the earlier chunks' ids replayed)
# 23: RequestOutput.ids (GeneratedIds) in place of its token_ids / id_logprobs / id_top_ids
PROTOCOL_VERSION = 23
