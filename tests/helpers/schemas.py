"""JSON Schemas the constraint tests share, and hypothesis strategies for their valid instances."""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from tests.helpers.regex_sampler import sample

SCHEMAS: dict[str, dict[str, Any]] = {
    "weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1, "maxLength": 12, "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
    "nested": {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "age": {"type": "integer", "minimum": 0},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1, "maxItems": 3},
                },
                "required": ["name", "tags"],
            },
            "active": {"type": "boolean"},
            "score": {"type": "number"},
            "note": {"type": ["string", "null"], "maxLength": 5},
        },
        "required": ["user", "active"],
    },
    "all_optional": {
        "type": "object",
        "properties": {k: {"type": "integer", "maximum": 99} for k in "abcde"},
    },
    "any_of": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer"}, {"type": "null"}]},
    "one_of_tagged": {
        "oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"]},
            {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]},
        ]
    },
    "tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
                },
                "required": ["value"],
                "additionalProperties": False,  # open nodes multiply the automaton per level
            }
        },
        "$ref": "#/$defs/node",
    },
    "patterns": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
            "word": {"type": "string", "pattern": "ab+c"},
            "quoted": {"type": "string", "pattern": '^(?:[a-c"\\\\\\n]|\\t)*$'},
            "not_digits": {"type": "string", "pattern": "^[^0-9]{0,4}$"},
            "spaced": {"type": "string", "pattern": "^\\S+\\s\\S+$"},
        },
        "required": ["code", "word", "quoted", "not_digits", "spaced"],
    },
    "enum_values": {"enum": [1, "two", None, True, {"a": [1, 2]}, 'é"\n', 2.5]},
    "int_range": {"type": "integer", "minimum": -37, "exclusiveMaximum": 1205},
    "no_params": {"type": "object", "properties": {}},
    "any_object": {"type": "object", "additionalProperties": {"type": "integer"}},
    "free_object": {"type": "object"},
    "free_array": {"type": "array", "maxItems": 2},
    "formats": {
        "type": "object",
        "properties": {"day": {"type": "string", "format": "date"}, "id": {"type": "string", "format": "uuid"}},
        "required": ["day", "id"],
    },
    "bool_schemas": {
        "type": "object",
        "properties": {"anything": True, "never": False, "n": {"type": "null"}},
    },
}


def resolve(schema: Any, root: dict[str, Any]) -> Any:
    while isinstance(schema, dict) and "$ref" in schema:
        target: Any = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        schema = target
    return schema


DISPUTED = set("\x1c\x1d\x1e\x1f\x85\ufeff\r\u2028\u2029")
FEW = min(settings.default.max_examples, 30)  # per schema; there are many schemas
JSON_TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=6)


def any_json(depth: int) -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | JSON_TEXT
    if depth == 0:
        return scalars
    inner = any_json(depth - 1)
    return scalars | st.lists(inner, max_size=3) | st.dictionaries(JSON_TEXT, inner, max_size=3)


def instances(schema: Any, root: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Valid instances of the supported subset, keys in schema order, no extra keys."""
    schema = resolve(schema, root)
    if schema is True:
        return any_json(2)
    if "anyOf" in schema or "oneOf" in schema:
        return st.one_of([instances(s, root, depth) for s in schema.get("anyOf") or schema["oneOf"]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    types = schema.get("type")
    if isinstance(types, list):
        return st.one_of([instances({**schema, "type": t}, root, depth) for t in types])
    if types == "object":
        props = {k: v for k, v in schema.get("properties", {}).items() if v is not False}
        if not props:
            if "properties" in schema:
                return st.just({})
            if schema.get("additionalProperties") is not None:
                return st.dictionaries(JSON_TEXT, instances(schema["additionalProperties"], root), max_size=3)
            return st.dictionaries(JSON_TEXT, any_json(1), max_size=3) if "properties" not in schema else st.just({})
        required = schema.get("required", [])
        if depth > 2:  # stop recursion through optional members
            props = {k: v for k, v in props.items() if k in required}
        fixed = st.fixed_dictionaries(
            {k: instances(v, root, depth + 1) for k, v in props.items() if k in required},
            optional={k: instances(v, root, depth + 1) for k, v in props.items() if k not in required},
        )
        return fixed.map(lambda d: {k: d[k] for k in props if k in d})
    if types == "array":
        max_items = schema.get("maxItems", 3)
        if depth > 2:
            max_items = min(max_items, schema.get("minItems", 0))
        return st.lists(instances(schema.get("items", True), root, depth + 1), min_size=schema.get("minItems", 0), max_size=max_items)
    if types == "string":
        if schema.get("format") == "date":
            # the date regex leaves out February 29 (see schema._DATE)
            return st.dates().filter(lambda d: (d.month, d.day) != (2, 29)).map(datetime.date.isoformat)
        if schema.get("format") == "uuid":
            return st.uuids().map(str)
        if "pattern" in schema:
            pattern = schema["pattern"]
            # Python's "$" also matches before a final newline, and Python and ECMA disagree on
            # some whitespace; the regex allows only what both accept
            return st.randoms(use_true_random=False).map(lambda r: sample(pattern, r)).filter(
                lambda s: (not s.endswith("\n") or "\\n" in pattern) and not DISPUTED.intersection(s)
            )
        return st.text(
            st.characters(blacklist_categories=["Cs"]),
            min_size=schema.get("minLength", 0),
            max_size=schema.get("maxLength", 8),
        )
    if types == "integer":
        lo = schema.get("minimum")
        hi = schema.get("maximum", schema.get("exclusiveMaximum", 0) - 1 if "exclusiveMaximum" in schema else None)
        return st.integers(lo, hi)
    if types == "number":
        return st.floats(allow_nan=False, allow_infinity=False) | st.integers()
    if types == "boolean":
        return st.booleans()
    if types == "null":
        return st.none()
    return any_json(2)
