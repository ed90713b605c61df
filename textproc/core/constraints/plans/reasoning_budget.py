"""Reasoning budgets over a compiled constraint: which index states are inside the reasoning
block, and the ids that close it.

A token budget is a count, which a regular index cannot hold cheaply; so the count lives in the
:class:`~textproc.core.constraints.index.guide.Guide` (``limit_reasoning``), and this module gives it
the two facts it needs, computed once per (index, close text) by whoever holds the vocabulary
(an engine has its tokenizer):

* ``reasoning_states``: the states whose text is inside the reasoning block. Found by a walk
  from the initial state that keeps one text per state (the residual language of a state says
  whether its texts are inside the block, so one text decides) and follows every distinct next
  state once: a few states, each costing its exception map plus one scan of its mask.
* ``close_ids``: the close text as token ids (the tokenizer's encoding, special tokens as one
  id), which the guide forces when the budget is spent.

The constraint must put the reasoning block first: the prompt left it open (``starts_inside``:
the text is reasoning until the close tag) or it opens after leading whitespace only, as
:func:`~textproc.core.constraints.plans.strict_calls.free_reasoning_pattern` writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from textproc.core.constraints.index.guide import Guide
from textproc.core.constraints.index.table import TokenIndex

__all__ = ["reasoning_states", "ReasoningBudgets"]

_SPACE = b" \t\r\n"


def _inside(text: bytes, close: bytes, opens: Sequence[bytes], starts_inside: bool) -> bool | None:
    """True: inside the block; False: past it; None: before it (whitespace, may still open)."""
    if starts_inside:
        return close not in text
    for tag in opens:
        at = text.find(tag)
        if at >= 0 and not text[:at].strip(_SPACE):
            return close not in text[at + len(tag):]
    return None if not text.strip(_SPACE) or any(t.startswith(text.lstrip(_SPACE)) for t in opens) else False


def reasoning_states(index: TokenIndex, token_bytes: Callable[[int], bytes], *, close: str,
                     starts_inside: bool, open_tags: Sequence[str] = ()) -> frozenset[int]:
    """The states of ``index`` inside the reasoning block closed by ``close`` (see the module
    docstring); ``token_bytes(id)``: the bytes an id writes (a special marker: its text)."""
    close_b = close.encode()
    opens = [t.encode() for t in open_tags]
    start = index.initial_state
    text_of = {start: b""}
    order = [start]
    inside: set[int] = set()
    ends = set(index.end_ids)
    i = 0
    while i < len(order):
        state = order[i]
        i += 1
        text = text_of[state]
        where = _inside(text, close_b, opens, starts_inside)
        if where is False:
            continue
        if where:
            inside.add(state)
        default, exceptions = index.transitions(state)
        targets: dict[int, int] = {}  # next state -> one id leading there
        for token_id, nxt in exceptions.items():
            targets.setdefault(nxt, token_id)
        if default >= 0 and default not in targets:
            for token_id in index.allowed_ids(state):
                if token_id not in exceptions and token_id not in ends:
                    targets[default] = token_id
                    break
        for nxt, token_id in targets.items():
            if nxt not in text_of:
                text_of[nxt] = text + token_bytes(token_id)
                order.append(nxt)
    return frozenset(inside)


class ReasoningBudgets:
    """An engine's side of reasoning budgets: ``apply(guide, sampling)`` limits the guide when
    the request carries one (``sampling``: ``max_reasoning_tokens``, and the reasoning markup
    the worker put there: ``reasoning_close`` (the text forced to end the block),
    ``reasoning_close_tag``, ``reasoning_open``, ``reasoning_starts_inside``). The states are
    cached per (index, markup), the close ids per close text.

    ``token_bytes(id)``: the bytes an id writes; ``encode(text)``: ids of a text, special
    tokens as their ids (as a prompt is encoded)."""

    def __init__(self, token_bytes: Callable[[int], bytes], encode: Callable[[str], list[int]], *,
                 max_entries: int = 256) -> None:
        self.token_bytes = token_bytes
        self.encode = encode
        self.max_entries = max_entries
        self._states: dict[tuple[str, str, bool, tuple[str, ...]], frozenset[int]] = {}
        self._close: dict[str, list[int]] = {}

    def apply(self, guide: Guide, sampling: Mapping[str, Any]) -> bool:
        """Limit ``guide`` by the request's budget; False when it has none."""
        budget = sampling.get("max_reasoning_tokens")
        close = sampling.get("reasoning_close")
        tag = sampling.get("reasoning_close_tag") or close
        if not isinstance(budget, int) or not isinstance(close, str) or not isinstance(tag, str) or not close:
            return False
        inside = bool(sampling.get("reasoning_starts_inside"))
        opens = tuple(t for t in sampling.get("reasoning_open") or () if isinstance(t, str))
        key = (guide.index.key or str(id(guide.index)), tag, inside, opens)
        states = self._states.get(key)
        if states is None:
            if len(self._states) >= self.max_entries:
                self._states.clear()
            states = self._states[key] = reasoning_states(guide.index, self.token_bytes, close=tag,
                                                          starts_inside=inside, open_tags=opens)
        ids = self._close.get(close)
        if ids is None:
            if len(self._close) >= self.max_entries:
                self._close.clear()
            ids = self._close[close] = list(self.encode(close))
        guide.limit_reasoning(budget, states=states, close_ids=ids)
        return True
