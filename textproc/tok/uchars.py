"""Character classes shared by components, matching the reference's Rust definitions.

Rust's ``char::is_whitespace`` and the ``regex`` crate's ``\\s`` are the Unicode White_Space
property (a fixed list, stable across Unicode versions); Python's ``str.isspace`` differs
(it includes U+001C..U+001F), so components use these sets instead.
"""

from __future__ import annotations

import regex

__all__ = ["WHITESPACE", "WS_CLASS", "is_whitespace", "WORD_CHAR", "is_numeric", "is_punctuation"]

# Unicode White_Space
WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)
WS_CLASS = "".join(f"\\U{ord(c):08x}" for c in sorted(WHITESPACE))


def is_whitespace(c: str) -> bool:
    return c in WHITESPACE


# the regex crate's \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control
WORD_CHAR = regex.compile(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]")

_NUMERIC = regex.compile(r"[\p{Nd}\p{Nl}\p{No}]")
# tokenizers' is_punc: ASCII punctuation or Unicode P*
_PUNCT = regex.compile(r"[\p{P}!-/:-@\[-`{-~]")


def is_numeric(c: str) -> bool:
    """Rust ``char::is_numeric``: general category Nd, Nl or No."""
    return _NUMERIC.match(c) is not None


def is_punctuation(c: str) -> bool:
    return _PUNCT.match(c) is not None
