"""One constrained request's walk through a :class:`TokenIndex` (what an engine holds per request).

Owns :class:`Guide`. Every call is a table lookup into the index (no compile, no regex, no
vocabulary): ``allowed_mask()`` returns the state's precomputed mask, ``advance()`` is one
bit test and one dict get.

Two engine aids ride on the walk:

* fast-forward: ``forced_ids()`` is the longest run of ids that are each the only allowed id
  (a marker spelled by one id, a closing bracket where the vocabulary has one way to write
  it); an engine may append them without sampling (``advance`` each).
* a reasoning budget (``limit_reasoning``): the guide counts the tokens taken in the reasoning
  states (:func:`textproc.core.constraints.plans.reasoning_budget.reasoning_states`); once the count reaches
  the budget and the walk is still inside reasoning, the mask allows only the next id of the
  close text (the engine needs no change: it applies the mask as always), and ``forced_ids()``
  returns the rest of it. When the close text's next id is not allowed in the current state
  (a character half written in bytes), the state's own mask applies for that step and the
  close starts at the next one.
"""

from __future__ import annotations

from collections.abc import Sequence

from textproc.core.constraints.index.table import TokenIndex
from textproc.errors import InvalidInput

__all__ = ["Guide"]


class Guide:
    """The state of one request in its constraint.

    ``is_finished`` once an end id was accepted, or when the output is complete and nothing
    but an end id may follow. ``advance`` of a disallowed id raises ``InvalidInput`` and
    leaves the state unchanged.

    >>> from textproc.core.constraints.index.vocab import TokenVocabulary
    >>> from textproc.core.constraints.compile import compile_constraint
    >>> guide = Guide(compile_constraint(TokenVocabulary([b"a", b"b", b""], end_ids=[2]), regex="ab"))
    >>> guide.allowed_ids(); guide.advance(0); guide.advance(1); guide.is_finished
    [0]
    True
    """

    __slots__ = ("index", "state", "ended", "end_set", "reasoning_left", "reasoning_states", "close_ids",
                 "reasoning_tokens", "_closing", "_masks", "_budget", "taken")

    def __init__(self, index: TokenIndex) -> None:
        self.index = index
        self.state = index.initial_state
        self.ended = False
        self.end_set = frozenset(index.end_ids)
        self.reasoning_left = -1  # tokens of reasoning left (-1: no budget)
        self.reasoning_states: frozenset[int] = frozenset()
        self.close_ids: tuple[int, ...] = ()
        self.reasoning_tokens = 0  # taken inside reasoning so far
        self._closing = -1  # position in close_ids while the close is forced (-1: not forcing)
        self._masks: dict[int, bytes] = {}  # id -> a mask of only that id
        self._budget = -1  # the budget given to limit_reasoning (for reset)
        # on a partial index: the ids taken so far (replayed on the whole index when it comes)
        self.taken: list[int] | None = [] if index.partial else None

    def limit_reasoning(self, max_tokens: int, *, states: frozenset[int], close_ids: Sequence[int]) -> None:
        """At most ``max_tokens`` tokens in ``states`` (the reasoning block), then ``close_ids``
        (the close text) are the only allowed ids until the block is closed."""
        self.reasoning_left = self._budget = max(0, max_tokens)
        self.reasoning_states = states
        self.close_ids = tuple(close_ids)

    @property
    def ready(self) -> bool:
        """Whether this state's mask is known. Always on a whole index; on a partial one (a
        progressive compile's first states) False once the walk reaches a state not built
        yet: the engine holds the request (no mask, no sampling) until the whole index
        arrives (``index.successor``), and the walk moves onto it here."""
        index = self.index
        if self.taken is None:
            return True
        if index.successor is not None:
            self._move_to(index.successor)
            return True
        return self.state < index.n_states

    def _move_to(self, whole: TokenIndex) -> None:
        """Replay the ids taken on the partial index onto ``whole`` (the same constraint)."""
        state = whole.initial_state
        for token_id in self.taken or ():
            if token_id not in self.end_set:
                state = whole.next_state(state, token_id)
            if state < 0:
                raise InvalidInput(f"index {whole.key!r} does not allow what its partial index allowed")
        self.index, self.state, self.taken = whole, state, None

    def _require_ready(self) -> None:
        if not self.ready:
            raise InvalidInput(f"state {self.state} of partial index {self.index.key!r} is not built "
                               f"yet; hold the request until the whole index arrives (Guide.ready)")

    def reset(self) -> None:
        """Back to the initial state, the reasoning budget unspent (an engine's rollback replays
        the tokens it keeps)."""
        if self.taken is not None:
            self.taken.clear()
        self.state = self.index.initial_state
        self.ended = False
        self.reasoning_left = self._budget
        self.reasoning_tokens = 0
        self._closing = -1

    def checkpoint(self) -> tuple[TokenIndex, int, bool, int, int, int, int]:
        """The walk's position now, for :meth:`restore` (an engine's rollback of the ids
        taken after it, without replaying the ids before)."""
        taken = -1 if self.taken is None else len(self.taken)
        return (self.index, self.state, self.ended, self.reasoning_left, self.reasoning_tokens,
                self._closing, taken)

    def restore(self, checkpoint: tuple[TokenIndex, int, bool, int, int, int, int]) -> bool:
        """Back to ``checkpoint`` (from :meth:`checkpoint` on this guide); False, changing
        nothing, when the walk has moved onto another index since (replay instead)."""
        index, state, ended, left, tokens, closing, taken = checkpoint
        if index is not self.index or (taken == -1) != (self.taken is None):
            return False
        self.state, self.ended = state, ended
        self.reasoning_left, self.reasoning_tokens, self._closing = left, tokens, closing
        if self.taken is not None:
            del self.taken[taken:]
        return True

    def _forced_close(self) -> int:
        """The close text's next id when the budget forces it now, else -1."""
        if self.reasoning_left != 0 or self.state not in self.reasoning_states or not self.close_ids:
            return -1
        pos = max(self._closing, 0)
        if pos >= len(self.close_ids):
            return -1
        token_id = self.close_ids[pos]
        return token_id if self.index.next_state(self.state, token_id) >= 0 else -1

    def allowed_mask(self) -> bytes:
        """``ceil(V / 32)`` little-endian int32 words; bit ``i`` set iff id ``i`` is allowed."""
        if self.taken is not None:
            self._require_ready()
        if self.reasoning_left == 0:
            token_id = self._forced_close()
            if token_id >= 0:
                mask = self._masks.get(token_id)
                if mask is None:
                    words = bytearray(len(self.index.allowed_mask(self.state)))
                    words[token_id >> 3] |= 1 << (token_id & 7)
                    mask = self._masks[token_id] = bytes(words)
                return mask
        return self.index.allowed_mask(self.state)

    def allowed_ids(self) -> list[int]:
        """Sorted allowed ids (cost ~ their number; engines want :meth:`allowed_mask`)."""
        if self.taken is not None:
            self._require_ready()
        if self.reasoning_left == 0:
            token_id = self._forced_close()
            if token_id >= 0:
                return [token_id]
        return self.index.allowed_ids(self.state)

    def forced_ids(self, limit: int = 64) -> list[int]:
        """The longest run (at most ``limit``) of ids that are each the only allowed choice from
        here: the engine may append them without sampling. Empty when the next step is free
        (or, on a partial index, not built yet)."""
        if not self.ready:
            return []
        index, state = self.index, self.state
        out: list[int] = []
        closing = max(self._closing, 0)
        while len(out) < limit and not self.ended:
            if self.reasoning_left == 0 and state in self.reasoning_states and closing < len(self.close_ids):
                token_id = self.close_ids[closing]
                closing += 1
            elif state < index.n_states and index.allowed_count(state) == 1:
                token_id = index.allowed_ids(state)[0]
                if token_id in self.end_set:
                    break
            else:
                break
            nxt = index.next_state(state, token_id)
            if nxt < 0:
                break
            out.append(token_id)
            state = nxt
        return out

    def advance(self, token_id: int) -> None:
        """Take ``token_id``; ``InvalidInput`` if the constraint does not allow it here."""
        if self.taken is not None:
            self._require_ready()
            if self.taken is not None:
                self.taken.append(token_id)
        nxt = self.index.next_state(self.state, token_id)
        if nxt < 0 or self.ended:
            raise InvalidInput(
                f"token id {token_id!r} is not allowed by the constraint in state {self.state}"
                + (" (the output already ended)" if self.ended else "")
            )
        if token_id in self.end_set:
            self.ended = True
        if self.reasoning_left >= 0 and self.state in self.reasoning_states:
            self.reasoning_tokens += 1
            if self.reasoning_left > 0:
                self.reasoning_left -= 1
            elif self.close_ids and token_id == self.close_ids[max(self._closing, 0)]:
                self._closing = max(self._closing, 0) + 1
        self.state = nxt

    def completion_token(self) -> int:
        """An allowed id on a shortest way to a complete output (-1 when complete, or not
        known yet on a partial index)."""
        if not self.ready or self.taken is not None:
            return -1
        return self.index.completion_token(self.state)

    @property
    def is_accepting(self) -> bool:
        """The output so far is complete (an end id is allowed now)."""
        return self.ready and self.index.is_accepting(self.state)

    @property
    def is_finished(self) -> bool:
        if self.ended:
            return True
        if not self.ready:
            return False
        index = self.index
        return index.is_accepting(self.state) and len(index.end_ids) == index.allowed_count(self.state)
