"""A hotel booking schema: counted strings (``maxLength``) and a bounded array of them
(``maxItems``), all required, no extra keys. The kind of schema a user sends first; its index
is costly to build (each position of a counted string is several automaton states), so the
real-engine tests and ``textproc bench vllm`` (its ``booking`` and ``fresh`` mixes) load with
it."""

from __future__ import annotations

from typing import Any

__all__ = ["BOOKING"]

BOOKING: dict[str, Any] = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40},
    "nights": {"type": "integer", "minimum": 1},
    "breakfast": {"type": "boolean"},
    "guests": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3}},
    "required": ["city", "nights", "breakfast", "guests"], "additionalProperties": False}
