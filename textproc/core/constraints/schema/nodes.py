"""The values a JSON Schema is flattened into: :class:`Node` (a sub-schema with its base URI,
JSON path and ``$ref`` expansions so far), :class:`Flat` (one conjunction of assertions with
every ``$ref`` / ``allOf`` merged into it and no combinator left at its top) and
:class:`ObjPart`, plus the two value rules every step shares (JSON Schema equality, numbers as
exact decimals).

Made by :mod:`~textproc.core.constraints.schema.flat`, merged by
:mod:`~textproc.core.constraints.schema.merge`, read by
:mod:`~textproc.core.constraints.schema.emit`; imports none of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from textproc.errors import InvalidInput, short

__all__ = ["Flat", "Node", "ObjPart", "TYPES", "decimal", "describe", "json_equal"]

# type atoms: "number" is {"integer", "fraction"} (numbers with and without an integral value)
TYPES = ("object", "array", "string", "integer", "fraction", "boolean", "null")


def json_equal(a: Any, b: Any) -> bool:
    """JSON Schema equality: numbers by value (1 == 1.0), booleans apart from numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class Node:
    """A sub-schema in context: base URI for ``$ref``, JSON path, ``$ref`` targets expanded."""

    schema: Any
    base: str
    path: str
    refs: tuple[str, ...] = ()

    def child(self, schema: Any, step: str) -> Node:
        return Node(schema, self.base, self.path + step, self.refs)


@dataclass
class ObjPart:
    """One object schema's own view of keys: declared, by pattern, and the rest."""

    props: dict[str, Node]
    patterns: list[tuple[str, Node]]
    additional: Node | None  # None: extra keys allowed with any value


@dataclass
class Flat:
    """A conjunction of assertions on one value (no combinator left at the top)."""

    path: str
    types: set[str] = field(default_factory=lambda: set(TYPES))
    enum: list[Any] | None = None
    parts: list[ObjPart] = field(default_factory=list)
    required: list[str] = field(default_factory=list)
    item_parts: list[tuple[list[Node], Node | None]] = field(default_factory=list)  # (prefix, rest)
    contains: list[tuple[Node, int]] = field(default_factory=list)
    min_items: int = 0
    max_items: int | None = None
    min_len: int = 0
    max_len: int | None = None
    patterns: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    lo: tuple[Decimal, bool] | None = None  # (bound, exclusive)
    hi: tuple[Decimal, bool] | None = None
    multiple_of: list[Decimal] = field(default_factory=list)
    min_props: int = 0
    unique: bool = False  # uniqueItems
    empty: bool = False  # a contradiction was found: no value fits


def decimal(value: Any, key: str, path: str) -> Decimal:
    """A JSON number keyword value as an exact Decimal."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{key} {short(value)} at {path}.{key} must be a number")
    try:
        d = Decimal(json.dumps(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError):
        raise InvalidInput(f"{key} {short(value)} at {path}.{key} must be a finite number") from None
    if not d.is_finite() or abs(d) > Decimal(10) ** 308:
        raise InvalidInput(f"{key} {short(value)} at {path}.{key} must be a finite number within +-1e308")
    return d


def describe(flat: Flat) -> str:
    """``flat``'s types and bounds in the schema's words (an error message names them).

    >>> describe(Flat("$", types={"integer"}, lo=(Decimal(5), False), hi=(Decimal(2), False)))
    'integer, minimum 5, maximum 2'
    """
    names = {"number" if t in ("integer", "fraction") and "fraction" in flat.types else t
             for t in flat.types}
    parts = ["/".join(sorted(names) or ["no type"])]
    if flat.lo is not None:
        parts.append(f"{'exclusiveMinimum' if flat.lo[1] else 'minimum'} {flat.lo[0]}")
    if flat.hi is not None:
        parts.append(f"{'exclusiveMaximum' if flat.hi[1] else 'maximum'} {flat.hi[0]}")
    for name, value in (("minLength", flat.min_len), ("maxLength", flat.max_len),
                        ("minItems", flat.min_items), ("maxItems", flat.max_items)):
        if value:  # 0 and None bound nothing
            parts.append(f"{name} {value}")
    if flat.enum is not None:
        parts.append(f"enum of {len(flat.enum)}")
    return ", ".join(parts)
