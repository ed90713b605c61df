"""Forced tool calls: JSON Schema -> regular expression, and the whole forced call output.

Owns ``json_schema_to_regex`` and ``tool_call_pattern`` (the schema walk); the regex pieces
(string characters, integer ranges, ``pattern`` translation) are in
:mod:`textproc.core.constraints.regex_parts`. The regex is what a constrained decoder (in the engine, not
here) enforces; this module only builds text.

Serialisation the regex allows: exactly what ``json.dumps(value, ensure_ascii=False)`` writes,
i.e. what Qwen/Hermes templates show the model through ``tojson``: separators ``", "`` and
``": "``, no other whitespace, object keys in the order the schema lists them. Strings may use
any JSON escape except surrogate ``\\u`` escapes (so their length is exact); only strings
with a ``pattern`` are restricted to the canonical escapes of ``json.dumps``.

Invariant (tested): every string the regex matches parses as JSON and validates against the
schema (the regex language is a subset of the schema's), and every instance that follows the
rules above (keys in schema order, no extra properties) matches when serialised that way.
Where the schema allows more than a regex can say, the regex allows less:

- ``additionalProperties``: an object schema that lists ``properties`` (even ``{}``, as tools
  without parameters do) never gets extra keys, whatever ``additionalProperties`` says; one
  without ``properties`` allows any keys unless it is ``false``, with values of the
  ``additionalProperties`` schema (any value when absent or ``true``).
- Values with no type constraint are any JSON value nested at most ``any_depth`` deep.
- ``oneOf`` is treated as ``anyOf``: its branches must not overlap for the output to validate.
- ``$ref`` (to ``#``, ``#/$defs/...``, ``#/definitions/...``) recurses at most
  ``max_recursion`` times per reference; deeper, a branch that needs it is dropped.
- ``pattern`` (a plain regex: literals, classes, ``.``, ``\\d \\w \\s \\S``, groups,
  alternation, greedy or lazy quantifiers, ``^`` / ``$`` at the ends) is unanchored like JSON
  Schema's; it cannot be combined with ``minLength`` / ``maxLength``.
- ``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum`` only for integers.
- ``format`` only ``date``, ``time``, ``date-time``, ``uuid``, ``email``, ``uri`` (email and uri
  as a common subset of their RFCs).

Anything else is an ``InvalidInput`` naming the keyword and its JSON path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from textproc.core.constraints.budget import MAX_REGEX_CHARS, regex_too_long
from textproc.core.constraints.regex_parts import CHAR as _CHAR
from textproc.core.constraints.regex_parts import MAX_COUNT, int_range, translate_pattern
from textproc.core.constraints.regex_parts import group as _group
from textproc.core.constraints.regex_parts import lit as _lit
from textproc.core.constraints.regex_parts import repeat as _repeat
from textproc.core.constraints.forced_calls import forced_calls_pattern
from textproc.core.parsing.formats import DEFAULT_TOOL_FORMAT, TOOL_FORMATS
from textproc.errors import InvalidInput, short

__all__ = ["json_schema_to_regex", "tool_call_pattern", "MAX_COUNT", "MAX_BOUND"]

MAX_BOUND = 10**308  # largest |minimum| / |maximum| (JSON numbers beyond are not portable)
_INTEGER = r"-?(?:0|[1-9][0-9]*)"
_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_SCALARS = {
    "string": f'"{_CHAR}*"',
    "integer": _INTEGER,
    "number": _NUMBER,
    "boolean": "(?:true|false)",
    "null": "null",
}
# a valid calendar date; February 29 is left out (leap years are not worth their regex), so the
# language stays a subset of what the format allows; years 0001-9999 (a year 0000 is not a date
# to jsonschema's "date" check, Python's date.fromisoformat)
_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
_DATE = (_YEAR + r"-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
         r"|02-(?:0[1-9]|1[0-9]|2[0-8]))")
_FORMATS = {
    "date": _DATE,
    "time": r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])",
    "date-time": _DATE + r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]"
    r":[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    # a common subset of RFC 5321 addresses and RFC 3986 URIs, written without JSON escapes
    "email": r"[a-zA-Z0-9._%+\-]+@[a-zA-Z0-9\-]+(?:\.[a-zA-Z0-9\-]+)*\.[a-zA-Z]{2,}",
    "uri": r"[a-zA-Z][a-zA-Z0-9+.\-]*://[a-zA-Z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+",
}
_ANNOTATIONS = frozenset(
    ["title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
     "readOnly", "writeOnly", "$defs", "definitions"]
)
_KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "enum", "const", "minLength", "maxLength", "pattern", "format", "anyOf", "oneOf", "allOf",
    "$ref", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
}  # fmt: skip
_TYPE_OF_KEYWORD = {
    "properties": "object", "required": "object", "additionalProperties": "object",
    "items": "array", "minItems": "array", "maxItems": "array",
    "minLength": "string", "maxLength": "string", "pattern": "string", "format": "string",
    "minimum": "integer", "maximum": "integer", "exclusiveMinimum": "integer",
    "exclusiveMaximum": "integer",
}  # fmt: skip

def json_schema_to_regex(
    schema: Mapping[str, Any] | bool, *, max_recursion: int = 3, any_depth: int = 2,
    max_chars: int = MAX_REGEX_CHARS,
) -> str:
    """A regex whose matches are JSON texts (``json.dumps`` style) valid against ``schema``.

    See the module docstring for the serialisation and for what is supported. A schema whose
    regex would pass ``max_chars`` characters is an ``InvalidInput`` as soon as a part of it
    does (optional properties make an object's regex quadratic in them, nesting multiplies).

    >>> json_schema_to_regex({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    '\\\\{"n": -?(?:0|[1-9][0-9]*)\\\\}'
    """
    if not isinstance(schema, (Mapping, bool)):
        raise InvalidInput(f"JSON schema {short(schema)} at $ must be an object or a boolean")
    result = _Compiler(schema, max_recursion=max_recursion, any_depth=any_depth,
                       max_chars=max_chars).compile(schema, "$")
    if result is None:
        raise InvalidInput(
            f"JSON schema at $ accepts no value within {max_recursion} levels of $ref recursion "
            f"(or is false); give recursive references a non-recursive alternative"
        )
    return result


def tool_call_pattern(
    tools: Sequence[Mapping[str, Any]],
    name: str | None = None,
    *,
    parallel: bool = True,
    tool_tags: tuple[str, str] | None = None,
    prefix: str = "",
    tool_format: str = DEFAULT_TOOL_FORMAT,
) -> str:
    """The regex of a forced tool-call output in the Hermes/Qwen format (or ``tool_format``).

    Each call is ``<tool_call>\\n{"name": "<name>", "arguments": <arguments>}\\n</tool_call>``
    as literal text, the arguments following the tool's ``parameters`` schema (no
    ``parameters``: ``{}``). With ``name`` (tool_choice naming a function) the output is one
    call of that tool; without it (tool_choice="required") one call of any tool, or with
    ``parallel`` one or more calls separated by ``"\\n"`` as Qwen's template writes them.
    ``tools`` are OpenAI tools ``{"type": "function", "function": {"name", "parameters"}}``
    (a bare ``{"name", "parameters"}`` is accepted too).

    ``prefix`` is literal text forced before the calls. When the prompt ends inside an open
    reasoning block (``ReasoningFormat.prompt_leaves_open``), pass the reasoning format's
    ``close_text`` (``"</think>\n\n"``): otherwise the forced calls would be parsed as reasoning.

    ``tool_format``: the format's own spelling of calls, from its declaration
    (:mod:`textproc.core.constraints.forced_calls`); ``tool_tags``: the format with custom
    (open, close) tags.
    """
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)) or not tools:
        raise InvalidInput(f"tools {short(tools)} must be a non-empty list of OpenAI tool objects")
    by_name: dict[str, Mapping[str, Any] | bool] = {}
    for i, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise InvalidInput(
                f"tool {short(tool)} at tools[{i}] must be {{'type': 'function', 'function': "
                f"{{'name': str, 'parameters': schema}}}}"
            )
        if isinstance(tool, Mapping) and "type" in tool and tool["type"] != "function":
            raise InvalidInput(f"tool type {short(tool['type'])} at tools[{i}].type; supported: 'function'")
        params = function.get("parameters")
        by_name[function["name"]] = {"type": "object", "properties": {}} if params is None else params
    if name is not None and name not in by_name:
        raise InvalidInput(f"tool_choice names unknown tool {short(name)}; known tools: {sorted(by_name)}")
    fmt = TOOL_FORMATS.get(tool_format)
    if fmt is None:
        raise InvalidInput(f"tool_format={short(tool_format)}; forced calls support {', '.join(TOOL_FORMATS)}")
    if tool_tags is not None:
        fmt = fmt.with_tags(*tool_tags)
    return _lit(prefix) + forced_calls_pattern(fmt, by_name, name, parallel=parallel, to_regex=json_schema_to_regex)


class _Compiler:
    def __init__(self, root: Mapping[str, Any] | bool, *, max_recursion: int, any_depth: int,
                 max_chars: int = MAX_REGEX_CHARS) -> None:
        self.root = root
        self.max_recursion = max_recursion
        self.any_depth = any_depth
        self.max_chars = max_chars
        self.active: dict[str, int] = {}  # $ref -> expansions on the current path

    def compile(self, schema: Any, path: str) -> str | None:
        """Regex for ``schema`` at ``path``, or None when no value fits (false, recursion)."""
        return self.sized(self.compile_unsized(schema, path), path)

    def sized(self, regex: str | None, path: str) -> str | None:
        """``regex``, or ``InvalidInput`` when it passes ``max_chars`` (the regex size budget)."""
        if regex is not None and len(regex) > self.max_chars:
            raise InvalidInput(regex_too_long(
                f"the JSON schema at {path} expands to a regex of over {len(regex):,} characters", self.max_chars))
        return regex

    def compile_unsized(self, schema: Any, path: str) -> str | None:
        if schema is True:
            return self.any_value(self.any_depth)
        if schema is False:
            return None
        if not isinstance(schema, Mapping):
            raise InvalidInput(f"schema {short(schema)} at {path} must be an object or a boolean")
        for key in schema:
            if key not in _KEYWORDS and key not in _ANNOTATIONS:
                raise InvalidInput(
                    f"unsupported JSON Schema keyword {key!r} at {path}; supported: "
                    f"{', '.join(sorted(_KEYWORDS))} (annotations are ignored)"
                )
        constraints = [k for k in schema if k in _KEYWORDS]
        for combinator in ("$ref", "anyOf", "oneOf", "allOf"):
            if combinator in schema:
                others = [k for k in constraints if k != combinator]
                if others:
                    raise InvalidInput(
                        f"{combinator!r} together with {others} at {path} is not supported; "
                        f"move the other keywords into the referenced/combined schemas"
                    )
                return self.combinator(combinator, schema[combinator], path)
        if "const" in schema or "enum" in schema:
            return self.enum(schema, path)
        types = schema.get("type")
        if types is None:
            implied = {_TYPE_OF_KEYWORD[k] for k in constraints if k in _TYPE_OF_KEYWORD}
            if len(implied) > 1:
                raise InvalidInput(f"keywords {constraints} at {path} imply several types {sorted(implied)}; add 'type'")
            if not implied:
                return self.any_value(self.any_depth)
            types = implied.pop()
        type_list = [types] if isinstance(types, str) else types
        if not isinstance(type_list, list) or not type_list:
            raise InvalidInput(f"type {short(types)} at {path}.type must be a type name or a list of them")
        alternatives = []
        for t in type_list:
            regex = self.typed(t, schema, path)
            if regex is not None:
                alternatives.append(regex)
        return _group(alternatives) if alternatives else None

    def typed(self, t: Any, schema: Mapping[str, Any], path: str) -> str | None:
        for key in schema:
            owner = _TYPE_OF_KEYWORD.get(key)
            if owner is not None and owner != t and not (owner == "integer" and t == "number"):
                if isinstance(schema.get("type"), list):
                    continue  # applies to another listed type
                raise InvalidInput(f"keyword {key!r} at {path}.{key} does not apply to type {t!r}")
        if t == "object":
            return self.object(schema, path)
        if t == "array":
            return self.array(schema, path)
        if t == "string":
            return self.string(schema, path)
        if t == "integer":
            return self.integer(schema, path)
        if t == "number":
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                if key in schema:
                    raise InvalidInput(f"keyword {key!r} at {path}.{key} is supported only for type 'integer'")
            return _NUMBER
        if t in ("boolean", "null"):
            return _SCALARS[t]
        raise InvalidInput(
            f"type {short(t)} at {path}.type; supported: object, array, string, integer, number, boolean, null"
        )

    def combinator(self, keyword: str, value: Any, path: str) -> str | None:
        if keyword == "$ref":
            return self.ref(value, path)
        if not isinstance(value, list) or not value:
            raise InvalidInput(f"{keyword} {short(value)} at {path}.{keyword} must be a non-empty list of schemas")
        if keyword == "allOf":
            if len(value) != 1:
                raise InvalidInput(
                    f"allOf with {len(value)} schemas at {path}.allOf is not supported; only a single schema"
                )
            return self.compile(value[0], f"{path}.allOf[0]")
        branches = [self.compile(s, f"{path}.{keyword}[{i}]") for i, s in enumerate(value)]
        kept = [b for b in branches if b is not None]
        return _group(kept) if kept else None

    def ref(self, ref: Any, path: str) -> str | None:
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise InvalidInput(f"$ref {short(ref)} at {path}.$ref; only local references ('#', '#/$defs/...')")
        target: Any = self.root
        for raw in ref[2:].split("/") if ref != "#" else []:
            part = raw.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise InvalidInput(f"$ref {ref!r} at {path}.$ref points to nothing in the schema")
            target = target[part]
        count = self.active.get(ref, 0)
        if count >= self.max_recursion:
            return None
        self.active[ref] = count + 1
        try:
            return self.compile(target, f"{path}.$ref({ref})")
        finally:
            self.active[ref] = count

    def enum(self, schema: Mapping[str, Any], path: str) -> str | None:
        if "const" in schema and "enum" in schema:
            raise InvalidInput(f"both 'const' and 'enum' at {path}; use one")
        if "const" in schema:
            values = [schema["const"]]
        else:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise InvalidInput(f"enum {short(values)} at {path}.enum must be a non-empty list")
        others = [k for k in schema if k in _KEYWORDS and k not in ("const", "enum", "type")]
        if others:
            raise InvalidInput(f"keywords {others} next to const/enum at {path} are not supported")
        types = schema.get("type")
        wanted = [types] if isinstance(types, str) else types
        texts = []
        for value in values:
            if wanted is not None and not any(_is_type(value, t) for t in wanted):
                continue
            texts.append(_lit(json.dumps(value, ensure_ascii=False)))
        return _group(texts) if texts else None

    def object(self, schema: Mapping[str, Any], path: str) -> str | None:
        props = schema.get("properties", {})
        if not isinstance(props, Mapping):
            raise InvalidInput(f"properties {short(props)} at {path}.properties must be an object")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise InvalidInput(f"required {short(required)} at {path}.required must be a list of names")
        missing = [r for r in required if r not in props]
        if missing:
            raise InvalidInput(
                f"required properties {missing} at {path}.required are not in properties; "
                f"list them under properties (extra keys are not generated)"
            )
        extra = schema.get("additionalProperties", True)
        if "properties" not in schema:
            if extra is False:
                return r"\{\}"
            value = self.compile(extra, f"{path}.additionalProperties")
            if value is None:
                return r"\{\}"
            member = f'"{_CHAR}*": {value}'
            return rf"\{{(?:{member}(?:, {member})*)?\}}"
        members: list[tuple[str, bool]] = []  # (regex of '"key": value', required)
        for key, sub in props.items():
            value = self.compile(sub, f"{path}.properties.{key}")
            if value is None:
                if key in required:
                    return None
                continue
            members.append((_lit(json.dumps(key, ensure_ascii=False)) + ": " + value, key in required))
        if not members:
            return r"\{\}"
        # after[i][has_prev]: regex of members i.. given whether a member was already written
        tail_prev, tail_first = "", ""
        for member, is_required in reversed(members):
            if is_required:
                tail_prev, tail_first = ", " + member + tail_prev, member + tail_prev
            else:
                first = f"{member}{tail_prev}"
                tail_first = f"(?:{first}|{tail_first})" if tail_first else f"(?:{first})?"
                tail_prev = f"(?:, {member})?{tail_prev}"
            self.sized(tail_first, path)  # grows quadratically with optional members
        return rf"\{{{tail_first}\}}"

    def array(self, schema: Mapping[str, Any], path: str) -> str | None:
        lo = _count(schema, "minItems", path) or 0
        hi = _count(schema, "maxItems", path)
        if hi is not None and hi < lo:
            return None
        item = self.compile(schema.get("items", True), f"{path}.items")
        if hi == 0 or item is None:
            return r"\[\]" if lo == 0 else None
        more_hi = None if hi is None else hi - 1  # items after the first
        body = item if more_hi == 0 else f"{item}(?:, {item}){_repeat(max(lo - 1, 0), more_hi)}"
        return rf"\[{body}\]" if lo > 0 else rf"\[(?:{body})?\]"

    def string(self, schema: Mapping[str, Any], path: str) -> str | None:
        lo = _count(schema, "minLength", path) or 0
        hi = _count(schema, "maxLength", path)
        if hi is not None and hi < lo:
            return None
        if "pattern" in schema or "format" in schema:
            if "minLength" in schema or "maxLength" in schema:
                raise InvalidInput(f"minLength/maxLength together with pattern/format at {path} is not supported")
            if "pattern" in schema and "format" in schema:
                raise InvalidInput(f"pattern together with format at {path} is not supported")
        if "format" in schema:
            fmt = schema["format"]
            if not isinstance(fmt, str) or fmt not in _FORMATS:
                raise InvalidInput(f"format {short(fmt)} at {path}.format; supported: {', '.join(_FORMATS)}")
            return f'"{_FORMATS[fmt]}"'
        if "pattern" in schema:
            pattern = schema["pattern"]
            if not isinstance(pattern, str):
                raise InvalidInput(f"pattern {short(pattern)} at {path}.pattern must be a string")
            return '"' + translate_pattern(pattern, f"{path}.pattern") + '"'
        return f'"{_CHAR}{_repeat(lo, hi)}"'

    def integer(self, schema: Mapping[str, Any], path: str) -> str | None:
        lo: int | None = None
        hi: int | None = None
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            if key not in schema:
                continue
            bound = schema[key]
            if (
                isinstance(bound, bool)
                or not isinstance(bound, (int, float))
                or (isinstance(bound, float) and not math.isfinite(bound))
                or abs(bound) > MAX_BOUND
            ):
                raise InvalidInput(
                    f"{key} {short(bound)} at {path}.{key} must be a finite number within +-1e308"
                )
            if key.endswith("inimum"):
                value = math.floor(bound) + 1 if key.startswith("exclusive") else math.ceil(bound)
                lo = value if lo is None else max(lo, value)
            else:
                value = math.ceil(bound) - 1 if key.startswith("exclusive") else math.floor(bound)
                hi = value if hi is None else min(hi, value)
        if lo is None and hi is None:
            return _INTEGER
        if lo is not None and hi is not None and lo > hi:
            return None
        return _group(int_range(lo, hi))

    def any_value(self, depth: int) -> str:
        scalars = [_SCALARS[t] for t in ("string", "number", "boolean", "null")]
        if depth <= 0:
            return _group(scalars)
        inner = self.any_value(depth - 1)
        array = rf"\[(?:{inner}(?:, {inner})*)?\]"
        member = f'"{_CHAR}*": {inner}'
        obj = rf"\{{(?:{member}(?:, {member})*)?\}}"
        return _group(scalars + [array, obj])


def _count(schema: Mapping[str, Any], key: str, path: str) -> int | None:
    if key not in schema:
        return None
    value = schema[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > MAX_COUNT:
        raise InvalidInput(
            f"{key} {short(value)} at {path}.{key} must be an integer from 0 to {MAX_COUNT}"
        )
    return value


def _is_type(value: Any, t: Any) -> bool:
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "string":
        return isinstance(value, str)
    if t == "array":
        return isinstance(value, list)
    if t == "object":
        return isinstance(value, dict)
    return False
