"""One constrained request's walk through a :class:`TokenIndex` (what an engine holds per request).

Owns :class:`Guide`. Every call is a table lookup into the index (no compile, no regex, no
vocabulary): ``allowed_mask()`` returns the state's precomputed mask, ``advance()`` is one
bit test and one dict get.
"""

from __future__ import annotations

from textproc.core.constraints.index import TokenIndex
from textproc.errors import InvalidInput

__all__ = ["Guide"]


class Guide:
    """The state of one request in its constraint.

    ``is_finished`` once an end id was accepted, or when the output is complete and nothing
    but an end id may follow. ``advance`` of a disallowed id raises ``InvalidInput`` and
    leaves the state unchanged.

    >>> from textproc.core.constraints.vocab import TokenVocabulary
    >>> from textproc.core.constraints.compile import compile_constraint
    >>> guide = Guide(compile_constraint(TokenVocabulary([b"a", b"b", b""], end_ids=[2]), regex="ab"))
    >>> guide.allowed_ids(); guide.advance(0); guide.advance(1); guide.is_finished
    [0]
    True
    """

    __slots__ = ("index", "state", "ended", "end_set")

    def __init__(self, index: TokenIndex) -> None:
        self.index = index
        self.state = index.initial_state
        self.ended = False
        self.end_set = frozenset(index.end_ids)

    def allowed_mask(self) -> bytes:
        """``ceil(V / 32)`` little-endian int32 words; bit ``i`` set iff id ``i`` is allowed."""
        return self.index.allowed_mask(self.state)

    def allowed_ids(self) -> list[int]:
        """Sorted allowed ids (cost ~ their number; engines want :meth:`allowed_mask`)."""
        return self.index.allowed_ids(self.state)

    def advance(self, token_id: int) -> None:
        """Take ``token_id``; ``InvalidInput`` if the constraint does not allow it here."""
        nxt = self.index.next_state(self.state, token_id)
        if nxt < 0 or self.ended:
            raise InvalidInput(
                f"token id {token_id!r} is not allowed by the constraint in state {self.state}"
                + (" (the output already ended)" if self.ended else "")
            )
        if token_id in self.end_set:
            self.ended = True
        self.state = nxt

    def completion_token(self) -> int:
        """An allowed id on a shortest way to a complete output (-1 when complete)."""
        return self.index.completion_token(self.state)

    @property
    def is_accepting(self) -> bool:
        """The output so far is complete (an end id is allowed now)."""
        return self.index.is_accepting(self.state)

    @property
    def is_finished(self) -> bool:
        if self.ended:
            return True
        index = self.index
        return index.is_accepting(self.state) and len(index.end_ids) == index.allowed_count(self.state)
