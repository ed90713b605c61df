"""The limits of one constraint compile: :class:`Budget` (regex size, states, index bytes, seconds).

Every phase of a compile (schema -> regex, regex parse, NFA, determinising, minimising,
indexing, mask packing, shortest completions) checks the budget often enough that a compile
ends within a few milliseconds of its deadline; past a limit it raises ``InvalidInput`` naming
the limit, the constraint being compiled (``what``) and the phase, so a caller answers 400 and
the worker is free again at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from textproc.errors import InvalidInput

__all__ = ["Budget", "MAX_REGEX_CHARS"]

# the longest regex a constraint may become: parsing and building its NFA take ~1 s per MiB
# here, and a regex this long already needs more automaton states than the state budget
MAX_REGEX_CHARS = 1 << 20


@dataclass
class Budget:
    """Limits on one compile: regex characters, automaton states, index bytes, wall seconds.

    ``what`` names the constraint in the errors (``compile_constraint`` sets it); the clock
    starts when the budget is made.
    """

    max_states: int = 20_000
    max_bytes: int = 256 << 20
    max_seconds: float = 10.0
    max_regex_chars: int = MAX_REGEX_CHARS
    what: str = "the constraint"
    started: float = field(default_factory=time.monotonic)

    def check_time(self, phase: str) -> None:
        """``InvalidInput`` once the compile has run past ``max_seconds``."""
        if time.monotonic() - self.started > self.max_seconds:
            raise InvalidInput(
                f"compiling {self.what} took over {self.max_seconds:g} s, the compile time budget "
                f"(stopped while {phase}); simplify the schema or regex (fewer optional properties, "
                f"smaller counted repetitions such as maxLength)"
            )

    def check_states(self, n: int, what: str) -> None:
        """``InvalidInput`` when ``n`` (of ``what``) passes ``max_states``."""
        if n > self.max_states:
            raise InvalidInput(
                f"{self.what} needs over {self.max_states} {what}, the state budget; simplify the "
                f"schema or regex (smaller maxLength / maxItems / {{m,n}} counts, fewer optional properties)"
            )

    def check_regex_chars(self, n: int) -> None:
        """``InvalidInput`` when a regex of ``n`` characters passes ``max_regex_chars``."""
        if n > self.max_regex_chars:
            raise InvalidInput(regex_too_long(f"{self.what} is a regex of {n:,} characters", self.max_regex_chars))


def regex_too_long(subject: str, limit: int) -> str:
    """The message for a regex over the size budget; ``subject`` says what and how long."""
    return (f"{subject}, over the {limit:,} character budget for a constraint's regex; simplify it "
            f"(fewer optional properties with free-form values, shallower nesting)")
