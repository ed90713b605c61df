"""Typing raw-text argument values by the tool's JSON Schema (the formats with ``raw_values``).

Owns one rule, the inverse of how those templates render a value: strings are written as they
are, everything else as JSON (``tojson``). So a value whose property is declared ``string``
(or only ``string`` among its types) stays text; any other declared type is parsed as JSON, then
as a Python literal (``ast.literal_eval``, never ``eval``: some models write ``True`` or
``{'a': 1}``) and kept as text when neither parses. A property the schema does not declare is
parsed as JSON when that gives an object, array, number, boolean or null, else kept as text.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["typed_value_json", "typed_json", "python_literal_json", "python_value_json", "string_only",
           "property_schema", "schema_types"]


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def schema_types(schema: Any) -> set[str] | None:
    """The JSON type names a value of ``schema`` may have (``type``, ``anyOf`` / ``oneOf``, a
    string-only enum), or None when the schema does not say."""
    if not isinstance(schema, Mapping):
        return None
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list) and all(isinstance(x, str) for x in t):
        return set(t)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            found: set[str] = set()
            for option in options:
                found |= schema_types(option) or set()
            return found or None
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"] or [None]):
        return {"string"}
    return None


def property_schema(parameters: Any, key: str) -> Any:
    """The schema of argument ``key`` in a tool's ``parameters`` (None when not declared)."""
    props = parameters.get("properties") if isinstance(parameters, Mapping) else None
    return props.get(key) if isinstance(props, Mapping) else None


def string_only(schema: Any) -> bool:
    """True when a value of ``schema`` is text as the raw formats write it (declared
    ``string``, or a string-only enum): what :func:`typed_value_json` keeps as text."""
    types = schema_types(schema)
    return types is not None and types <= {"string"}


def typed_value_json(text: str, parameters: Any, key: str) -> str:
    """The JSON text of raw value ``text`` of argument ``key`` under ``parameters`` (the tool's
    parameters schema, or None).

    >>> typed_value_json("3", {"properties": {"n": {"type": "integer"}}}, "n")
    '3'
    >>> typed_value_json("3", {"properties": {"n": {"type": "string"}}}, "n")
    '"3"'
    """
    return typed_json(text, property_schema(parameters, key))


def typed_json(text: str, schema: Any) -> str:
    """The JSON text of raw value ``text`` of a value whose schema is ``schema`` (None: not
    declared), by the rule above.

    >>> typed_json("true", {"type": "boolean"}), typed_json("true", {"type": "string"})
    ('true', '"true"')
    """
    types = schema_types(schema)
    if types is not None and types <= {"string"}:
        return json.dumps(text, ensure_ascii=False)
    stripped = text.strip()
    try:
        value = json.loads(stripped)
    except ValueError:
        if types is not None:
            literal = python_literal_json(stripped)
            if literal is not None:
                return literal
        return json.dumps(text, ensure_ascii=False)
    if isinstance(value, str) or (types is None and value is None and stripped != "null"):
        return json.dumps(text, ensure_ascii=False)
    if isinstance(value, float) and not math.isfinite(value):
        # a JSON number too large for a float stays the number it is; NaN / Infinity are text
        return stripped if _JSON_NUMBER.fullmatch(stripped) else json.dumps(text, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


def python_literal_json(text: str) -> str | None:
    """JSON text of a Python literal (``ast.literal_eval``: never evaluates code), or None when
    ``text`` is not one or has no JSON form (bytes, complex, non-string dict keys, nan)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return python_value_json(value)


def python_value_json(value: Any) -> str | None:
    """JSON text of a value ``ast.literal_eval`` returned, or None when it has no JSON form."""
    converted = _to_json(value)
    if converted is _BAD:
        return None
    return json.dumps(converted, ensure_ascii=False)


_BAD = object()


def _to_json(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _BAD
    if isinstance(value, (list, tuple)):
        out = [_to_json(v) for v in value]
        return _BAD if any(v is _BAD for v in out) else out
    if isinstance(value, dict):
        items = {}
        for k, v in value.items():
            if not isinstance(k, str):
                return _BAD
            items[k] = _to_json(v)
            if items[k] is _BAD:
                return _BAD
        return items
    return _BAD
