"""Fast-forward on vLLM's engine core: a constrained request's forced tokens (the run its guide
allows as the only continuation, ``Guide.forced_ids``) go to the model as speculative draft
tokens, so one forward pass verifies the whole run instead of one step per token.

vLLM's speculative decoding does the work, unmodified. With ``--fast-forward K`` the engine
runs vLLM with ``speculative_config = {"method": "custom_class", "model": NO_DRAFTS, K}``:
the model runner's drafter (:class:`NoDrafts`, in the worker) proposes nothing, so a request
without a forced run is scheduled exactly as without speculative decoding (one token, no draft
position, no rejection sampling). In the engine process, after each step, vLLM hands the
drafts to ``Scheduler.update_draft_token_ids`` (``EngineCore.post_step``);
:func:`supply_forced_drafts` puts each constrained request's forced run there first (at most
K ids, and no more than its ``max_tokens`` can take). vLLM then schedules them as that
request's draft tokens, fills one bitmask row per draft position from the guide (walking it
through the drafts and back), and the rejection sampler compares each draft with the masked
target distribution: the mask allows only the draft id there, so greedy picks it and a
sampled request accepts it with probability 1. The run and the token after it (the bonus
token, sampled under the mask of the state after the run) come out of one step.

Not covered: vLLM's async scheduling is off with a custom drafter (vLLM's rule), so the engine
schedules a step only after the last one ended; a seeded sampled request draws its random
numbers at other points than without fast-forward (the distribution is the same, the stream
of a given seed is not).
"""

from __future__ import annotations

from typing import Any

__all__ = ["COUNTS", "NO_DRAFTS", "NoDrafts", "forced_drafts", "speculative_config",
           "supply_forced_drafts", "supply_forced_drafts_everywhere"]

NO_DRAFTS = f"{__name__}.NoDrafts"  # imported by vLLM's model runner (the worker process)


class NoDrafts:
    """vLLM's custom-class drafter that proposes no draft token for any request (drafts come
    from the guides, in the engine process: :func:`supply_forced_drafts`)."""

    def __init__(self, vllm_config: Any) -> None:
        self.vllm_config = vllm_config

    def load_model(self, model: Any) -> None:
        pass  # no model of its own

    def propose(self, sampled_token_ids: list[list[int]], *args: Any, **kwargs: Any) -> list[list[int]]:
        return [[] for _ in sampled_token_ids]


def speculative_config(num_tokens: int) -> dict[str, Any]:
    """vLLM's ``--speculative-config`` for fast-forward runs of up to ``num_tokens`` ids."""
    return {"method": "custom_class", "model": NO_DRAFTS, "num_speculative_tokens": num_tokens}


def _guide(request: Any) -> Any:
    """The request's textproc guide, or None (no constraint, vLLM's own grammar, not built)."""
    from engine_vllm.constraints import TextprocGrammar

    structured = request.structured_output_request
    grammar = None if structured is None else structured.grammar
    return grammar.guide if isinstance(grammar, TextprocGrammar) else None


def forced_drafts(scheduler: Any, draft_token_ids: Any, counts: dict[str, int]) -> Any:
    """``draft_token_ids`` (vLLM's ``DraftTokenIds``) with each constrained request's forced
    run as its drafts (up to vLLM's ``num_speculative_tokens``); other requests keep the
    drafter's. ``counts["forced_drafts"]`` counts the forced ids handed to vLLM as drafts,
    ``counts["forced_runs"]`` the request-steps that had one."""
    limit = scheduler.num_spec_tokens
    drafts = None
    for i, request_id in enumerate(draft_token_ids.req_ids):
        request = scheduler.requests.get(request_id)
        if request is None or request.is_finished() or request.is_prefill_chunk:
            continue
        guide = _guide(request)
        # (a guide on a partial index may walk its run into a state not built yet, whose mask
        # vLLM would then ask for: it takes no drafts until the whole index is there)
        if guide is None or guide.ended or not guide.ready or guide.index.partial:
            continue
        # the step verifying d drafts also samples the token after them: d + 1 ids
        room = min(limit, request.max_tokens - request.num_output_tokens - 1)
        run = guide.forced_ids(room) if room > 0 else []
        if run:
            if drafts is None:
                drafts = [list(d) for d in draft_token_ids.draft_token_ids]
            drafts[i] = run
            counts["forced_drafts"] = counts.get("forced_drafts", 0) + len(run)
            counts["forced_runs"] = counts.get("forced_runs", 0) + 1
    if drafts is None:
        return draft_token_ids
    return type(draft_token_ids)(draft_token_ids.req_ids, drafts)


def supply_forced_drafts(scheduler: Any, counts: dict[str, int]) -> None:
    """Make ``scheduler.update_draft_token_ids`` take the forced runs (:func:`forced_drafts`)
    first: on this scheduler instance only (engine_vllm's own loop)."""
    update = scheduler.update_draft_token_ids

    def update_with_forced(draft_token_ids: Any) -> None:
        update(forced_drafts(scheduler, draft_token_ids, counts))

    scheduler.update_draft_token_ids = update_with_forced


COUNTS: dict[str, int] = {}  # the process's counts under supply_forced_drafts_everywhere


def supply_forced_drafts_everywhere() -> None:
    """The same for every vLLM scheduler of this process (``vllm serve --headless`` with
    textproc's plugin: vLLM makes the scheduler); counts in :data:`COUNTS`. Without
    speculative decoding vLLM never calls the method: nothing changes."""
    from vllm.v1.core.sched.scheduler import Scheduler

    update = Scheduler.update_draft_token_ids

    def update_with_forced(self: Any, draft_token_ids: Any) -> None:
        update(self, forced_drafts(self, draft_token_ids, COUNTS))

    Scheduler.update_draft_token_ids = update_with_forced  # type: ignore[method-assign]
