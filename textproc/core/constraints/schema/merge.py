"""Merging one combinator-free schema object into a :class:`Flat` (the ``allOf`` of its parts).

Owns :func:`add_assertions` (type sets intersected, enums intersected, bounds tightened, object
and array parts kept side by side so each keeps its own ``additionalProperties`` /
``items`` meaning) and the table of string ``format`` s: the ones enforced, the ones refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textproc.core.constraints.regex.parts import MAX_COUNT
from textproc.core.constraints.schema.formats import FORMATS
from textproc.core.constraints.schema.nodes import TYPES, Flat, Node, ObjPart, decimal, json_equal
from textproc.errors import InvalidInput, short

__all__ = ["add_assertions", "types_of", "type_atoms", "REFUSED_FORMATS"]

# formats the JSON Schema spec defines that no regex here enforces (others are enforced, see
# formats.FORMATS, or are annotations: unknown formats assert nothing)
REFUSED_FORMATS: dict[str, str] = {}
_TYPE_ATOMS = {
    "object": {"object"}, "array": {"array"}, "string": {"string"}, "number": {"integer", "fraction"},
    "integer": {"integer"}, "boolean": {"boolean"}, "null": {"null"},
}  # fmt: skip


def type_atoms(value: Any, path: str) -> set[str]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise InvalidInput(f"type {short(value)} at {path}.type must be a type name or a list of them")
    atoms: set[str] = set()
    for name in names:
        if name == "any":
            return set(TYPES)  # draft-03
        if name not in _TYPE_ATOMS:
            raise InvalidInput(
                f"type {short(name)} at {path}.type; known: object, array, string, integer, number, boolean, null"
            )
        atoms |= _TYPE_ATOMS[name]
    return atoms


def types_of(flat: Flat) -> set[str]:
    """The type atoms values of ``flat`` can have (an enum narrows them)."""
    if flat.enum is None:
        return set(flat.types)
    return {_atom(v) for v in flat.enum} & flat.types


def _atom(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "fraction"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _count(schema: Mapping[str, Any], key: str, path: str) -> int | None:
    if key not in schema:
        return None
    value = schema[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{key} {short(value)} at {path}.{key} must be a non-negative integer")
    if key.startswith("min") and value > MAX_COUNT:
        # a lower bound is kept exact (a looser one lets a value end early); an upper bound of
        # any size is taken (over MAX_EXACT_COUNT it is not enforced: regex.parts.upper_bound)
        raise InvalidInput(f"{key} {short(value)} at {path}.{key} is enforced exactly, one automaton state "
                           f"or more per repetition: at most {MAX_COUNT}")
    return value


def add_assertions(flat: Flat, node: Node, legacy: bool, strict: bool) -> None:
    """Merge ``node``'s own assertions into ``flat``; ``strict``: an object schema that lists
    ``properties`` and says nothing of ``additionalProperties`` is closed."""
    schema = node.schema
    if schema is True or not isinstance(schema, Mapping):
        return
    path = node.path
    if "type" in schema:
        flat.types &= type_atoms(schema["type"], path)
    for key in ("const", "enum"):
        if key not in schema:
            continue
        values = [schema["const"]] if key == "const" else schema["enum"]
        if not isinstance(values, list):
            raise InvalidInput(f"enum {short(values)} at {path}.enum must be a list")
        if flat.enum is None:
            flat.enum = list(values)
        else:
            flat.enum = [v for v in flat.enum if any(json_equal(v, w) for w in values)]
        if not flat.enum:
            flat.empty = True
    _add_object(flat, node, schema, path, strict)
    _add_array(flat, node, schema, path, legacy)
    _add_string(flat, schema, path)
    _add_number(flat, schema, path, legacy)


def _add_object(flat: Flat, node: Node, schema: Mapping[str, Any], path: str, strict: bool) -> None:
    required = schema.get("required", [])
    if isinstance(required, bool):  # draft-03's per-property form: nothing at this level
        required = []
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise InvalidInput(f"required {short(required)} at {path}.required must be a list of names")
    flat.required.extend(r for r in required if r not in flat.required)
    least = _count(schema, "minProperties", path)
    if least is not None:
        flat.min_props = max(flat.min_props, least)
    if not any(k in schema for k in ("properties", "patternProperties", "additionalProperties")):
        return
    props = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    for key, value in (("properties", props), ("patternProperties", patterns)):
        if not isinstance(value, Mapping):
            raise InvalidInput(f"{key} {short(value)} at {path}.{key} must be an object")
    extra = schema.get("additionalProperties", False if strict and "properties" in schema else True)
    flat.parts.append(ObjPart(
        {k: node.child(v, f".properties.{k}") for k, v in props.items()},
        [(p, node.child(v, f".patternProperties.{p}")) for p, v in patterns.items()],
        None if extra is True else node.child(extra, ".additionalProperties"),
    ))


def _add_array(flat: Flat, node: Node, schema: Mapping[str, Any], path: str, legacy: bool) -> None:
    lo = _count(schema, "minItems", path)
    hi = _count(schema, "maxItems", path)
    if lo is not None:
        flat.min_items = max(flat.min_items, lo)
    if hi is not None:
        flat.max_items = hi if flat.max_items is None else min(flat.max_items, hi)
    if schema.get("uniqueItems") is True:
        flat.unique = True
    items = schema.get("items")
    prefix_key, rest_key = ("items", "additionalItems") if isinstance(items, list) else ("prefixItems", "items")
    if isinstance(items, list) and not legacy:
        raise InvalidInput(f"items at {path}.items is a list (the draft-07 tuple form); use prefixItems, "
                           f"or declare $schema draft-07")
    if not legacy and rest_key == "additionalItems":
        rest_key = "items"
    prefix = schema.get(prefix_key, []) if (prefix_key != "prefixItems" or not legacy) else []
    if not isinstance(prefix, list):
        raise InvalidInput(f"{prefix_key} {short(prefix)} at {path}.{prefix_key} must be a list of schemas")
    rest = schema.get(rest_key) if (rest_key != "additionalItems" or prefix) else None
    if rest_key == "items" and isinstance(rest, list):
        rest = None
    if prefix or rest is not None:
        flat.item_parts.append((
            [node.child(s, f".{prefix_key}[{i}]") for i, s in enumerate(prefix)],
            None if rest is None or rest is True else node.child(rest, f".{rest_key}"),
        ))
    if "contains" in schema:
        least = _count(schema, "minContains", path) if not legacy else None
        least = 1 if least is None else least
        if least > 0:
            flat.contains.append((node.child(schema["contains"], ".contains"), least))


def _add_string(flat: Flat, schema: Mapping[str, Any], path: str) -> None:
    lo = _count(schema, "minLength", path)
    hi = _count(schema, "maxLength", path)
    if lo is not None:
        flat.min_len = max(flat.min_len, lo)
    if hi is not None:
        flat.max_len = hi if flat.max_len is None else min(flat.max_len, hi)
    if "pattern" in schema:
        if not isinstance(schema["pattern"], str):
            raise InvalidInput(f"pattern {short(schema['pattern'])} at {path}.pattern must be a string")
        if schema["pattern"] not in flat.patterns:
            flat.patterns.append(schema["pattern"])
    fmt = schema.get("format")
    if fmt is not None and not isinstance(fmt, str):
        raise InvalidInput(f"format {short(fmt)} at {path}.format must be a string")
    if isinstance(fmt, str):
        if fmt in REFUSED_FORMATS:
            raise InvalidInput(f"format {fmt!r} at {path}.format cannot be enforced ({REFUSED_FORMATS[fmt]})")
        if fmt in FORMATS and fmt not in flat.formats:
            flat.formats.append(fmt)


def _add_number(flat: Flat, schema: Mapping[str, Any], path: str, legacy: bool) -> None:
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key not in schema or isinstance(schema[key], bool):
            continue
        bound = decimal(schema[key], key, path)
        lower = key.endswith("inimum")
        exclusive = key.startswith("exclusive") or (
            legacy and schema.get("exclusiveM" + key[1:]) is True)  # draft-04: a boolean modifier
        if lower:
            if flat.lo is None or bound > flat.lo[0] or (bound == flat.lo[0] and exclusive):
                flat.lo = (bound, exclusive)
        elif flat.hi is None or bound < flat.hi[0] or (bound == flat.hi[0] and exclusive):
            flat.hi = (bound, exclusive)
    if "multipleOf" in schema:
        step = decimal(schema["multipleOf"], "multipleOf", path)
        if step <= 0:
            raise InvalidInput(f"multipleOf {short(schema['multipleOf'])} at {path}.multipleOf must be positive")
        if step not in flat.multiple_of:
            flat.multiple_of.append(step)
