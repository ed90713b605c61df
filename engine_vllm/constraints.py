"""textproc's compiled constraints as a vLLM structured-output backend.

vLLM's scheduler asks its structured-output manager for one bitmask row per constrained request
each step and its sampler applies it (int32 words, bit i of word i // 32 = token i allowed: the
layout of textproc's masks). This backend compiles nothing: the engine loop registers each
request's :class:`textproc.core.constraints.Guide` (tables textproc compiled in its workers and
sent once) under a key before adding the request, and the "grammar" vLLM asks for is a view of
that guide. Per step: one dict lookup and a copy of the state's mask row (its tensor cached per
distinct mask), and one table lookup per accepted token; a rollback of the last few ids (vLLM's
walk through a request's draft tokens and back) restores a checkpoint of the guide.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import torch
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

__all__ = ["GUIDE_PREFIX", "MaskViolations", "TextprocBackend", "TextprocGrammar", "pause_unready"]

_log = logging.getLogger("engine_vllm")

_CHECKPOINTS = 64  # ids a rollback undoes without a replay (vLLM's: at most its draft length)
GUIDE_PREFIX = "textproc-guide:"  # StructuredOutputsParams(regex=GUIDE_PREFIX + request_id)


class TextprocGrammar(StructuredOutputGrammar):
    """One request's walk through its textproc index, as vLLM's grammar interface."""

    def __init__(self, guide: Any, masks: dict[int, tuple[bytes, torch.Tensor]],
                 fill_times: deque[float], violations: MaskViolations) -> None:
        self.guide = guide
        self.masks = masks  # id(mask bytes) -> (the bytes, kept alive; its int32 tensor)
        self.fill_times = fill_times  # seconds per fill_bitmask, most recent (engine stats)
        self.violations = violations
        self.history: list[int] = []  # accepted ids, for rollback
        # the guide's checkpoint before each of the last accepted ids: a rollback of those
        # (vLLM walks the guide through a request's draft tokens and back each step) restores
        # one instead of replaying the whole history
        self.checkpoints: deque[Any] = deque(maxlen=_CHECKPOINTS)

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance the guide; False (vLLM then ends the request with an error) for an id its
        mask did not allow, counted in ``violations``. Ids after the output ended (an end id
        taken) are ignored, as vLLM's own backends do: vLLM stops masking a terminated grammar,
        and a request that does not stop at its end id (``ignore_eos``, a ``min_tokens`` past
        the end) goes on unconstrained."""
        guide = self.guide
        for token_id in tokens:
            if guide.ended:
                return True
            checkpoint = guide.checkpoint()
            try:
                guide.advance(token_id)
            except ValueError:  # textproc's InvalidInput: not allowed here
                self.violations.record(request_id, token_id, guide.state)
                return False
            self.history.append(token_id)
            self.checkpoints.append(checkpoint)
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        index, state = self.guide.index, self.guide.state
        accepted: list[int] = []
        for token_id in tokens:
            state = index.next_state(state, token_id)
            if state < 0:
                break
            accepted.append(token_id)
        return accepted

    def rollback(self, num_tokens: int) -> None:
        if num_tokens <= 0:
            return
        num_tokens = min(num_tokens, len(self.history))
        checkpoints = self.checkpoints
        if num_tokens <= len(checkpoints) and self.guide.restore(checkpoints[-num_tokens]):
            del self.history[len(self.history) - num_tokens:]
            for _ in range(num_tokens):
                checkpoints.pop()
            return
        kept = self.history[:len(self.history) - num_tokens]
        self.reset()
        self.accept_tokens("", kept)

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        t0 = time.perf_counter()
        mask = self.guide.allowed_mask()
        entry = self.masks.get(id(mask))
        if entry is None or entry[0] is not mask:
            entry = (mask, torch.frombuffer(bytearray(mask), dtype=torch.int32))
            self.masks[id(mask)] = entry
        row = bitmask[batch_index]
        words = entry[1]
        row[: words.numel()].copy_(words)
        if row.numel() > words.numel():  # the model's padding rows past the tokenizer's ids
            row[words.numel():].zero_()
        self.fill_times.append(time.perf_counter() - t0)

    def is_terminated(self) -> bool:
        return bool(self.guide.ended)

    def reset(self) -> None:
        self.guide.reset()  # the state, and a reasoning budget unspent
        self.history = []
        self.checkpoints.clear()


class MaskViolations:
    """Sampled ids the request's mask did not allow: a bug wherever it happens (the mask not
    applied to that row, a row applied to another request), never silent. The engine's stats
    report the count and the last few."""

    def __init__(self) -> None:
        self.count = 0
        self.last: deque[dict[str, Any]] = deque(maxlen=16)

    def record(self, request_id: str, token_id: int, state: int) -> None:
        self.count += 1
        self.last.append({"request_id": request_id, "token_id": token_id, "state": state})
        _log.error("request %r sampled token %d, which its constraint's mask does not allow in "
                   "state %d (%d such tokens so far)", request_id, token_id, state, self.count)


class TextprocBackend(StructuredOutputBackend):
    """Hands vLLM the guides the engine loop registered; never compiles."""

    def __init__(self, vllm_config: Any, tokenizer: Any, vocab_size: int) -> None:
        super().__init__(vllm_config, tokenizer, vocab_size)
        self.guides: dict[str, Any] = {}  # request_id -> Guide, until vLLM asks for it
        self.masks: dict[int, tuple[bytes, torch.Tensor]] = {}
        self.fill_times: deque[float] = deque(maxlen=4096)  # sorted for each stats write
        self.violations = MaskViolations()

    def compile_grammar(self, request_type: StructuredOutputOptions, grammar_spec: str,
                        stop_token_ids: set[int] | None = None) -> StructuredOutputGrammar:
        if request_type != StructuredOutputOptions.REGEX or not grammar_spec.startswith(GUIDE_PREFIX):
            raise ValueError(f"engine_vllm applies only textproc's compiled constraints, got "
                             f"{request_type.name} {grammar_spec[:80]!r}")
        guide = self.guides.pop(grammar_spec[len(GUIDE_PREFIX):])
        if len(self.masks) > 65536:  # distinct masks of indexes long gone: start over
            self.masks.clear()
        return TextprocGrammar(guide, self.masks, self.fill_times, self.violations)

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        return torch.full((max_num_seqs, (self.vocab_size + 31) // 32), -1, dtype=torch.int32)

    def destroy(self) -> None:
        self.guides.clear()
        self.masks.clear()


def _unready(request: Any) -> bool:
    """A request whose guide stands in a state its (partial) index has no tables for yet."""
    structured = request.structured_output_request
    if structured is None:
        return False
    grammar = structured.grammar  # None while vLLM's thread makes it (WAITING_FOR_FSM)
    return isinstance(grammar, TextprocGrammar) and not grammar.guide.ready


def pause_unready(scheduler: Any, counters: dict[str, int]) -> None:
    """Make ``scheduler.schedule`` leave out the requests whose next mask is not built yet.

    A request starts on the first states of a partial index (a progressive compile's; the
    whole index follows); when its walk reaches a state with no tables, vLLM could not mask
    its next token. Such a request keeps its place (its KV blocks, its position in the
    running list) and is left out of each step's schedule until the whole index arrives
    (``Guide.ready`` then moves it onto it): vLLM's model runner treats it as a running
    request the token budget left out. ``counters["paused"]`` counts request-steps left out."""
    schedule = scheduler.schedule
    counters.setdefault("paused", 0)

    def schedule_ready(*args: Any, **kwargs: Any) -> Any:
        running = scheduler.running
        paused = [r for r in running if _unready(r)]
        waiting = [r for r in scheduler.waiting if _unready(r)]  # preempted ones
        if not paused and not waiting:
            return schedule(*args, **kwargs)
        counters["paused"] += len(paused) + len(waiting)
        if paused:
            left = {id(r) for r in paused}
            scheduler.running = [r for r in running if id(r) not in left]
        if waiting:
            scheduler.waiting.remove_requests(waiting)
        try:
            return schedule(*args, **kwargs)
        finally:
            if paused:  # in front: the last of the running list is the first preempted
                scheduler.running = paused + scheduler.running
            if waiting:
                scheduler.waiting.prepend_requests(waiting)

    scheduler.schedule = schedule_ready  # this instance only
