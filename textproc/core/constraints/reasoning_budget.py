"""Reasoning budgets over a compiled constraint: which index states are inside the reasoning
block, and the ids that close it.

A token budget is a count, which a regular index cannot hold cheaply; so the count lives in the
:class:`~textproc.core.constraints.guide.Guide` (``limit_reasoning``), and this module gives it
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
:func:`~textproc.core.constraints.strict_calls.free_reasoning_pattern` writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textproc.core.constraints.index import TokenIndex

__all__ = ["reasoning_states"]

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
