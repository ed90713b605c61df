"""Forced tool calls: JSON Schema -> regular expression, and the whole forced call output.

Owns ``json_schema_to_regex`` and ``tool_call_pattern``. The regex is what a constrained
decoder (in the engine, not here) enforces; this module only builds text.

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
- ``format`` only ``date``, ``time``, ``date-time``, ``uuid``.

Anything else is an ``InvalidInput`` naming the keyword and its JSON path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from textproc.errors import InvalidInput, short

__all__ = ["json_schema_to_regex", "tool_call_pattern", "MAX_COUNT", "MAX_BOUND"]

MAX_COUNT = 1 << 20  # largest minLength/maxLength/minItems/maxItems and pattern {n,m} count
MAX_BOUND = 10**308  # largest |minimum| / |maximum| (JSON numbers beyond are not portable)

# one character inside a JSON string: unescaped, a short escape or a non-surrogate \\u escape
_CHAR = (
    r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]'
    r"|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))"
)
_INTEGER = r"-?(?:0|[1-9][0-9]*)"
_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_SCALARS = {
    "string": f'"{_CHAR}*"',
    "integer": _INTEGER,
    "number": _NUMBER,
    "boolean": "(?:true|false)",
    "null": "null",
}
_FORMATS = {
    "date": r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])",
    "time": r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])",
    "date-time": r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T(?:[01][0-9]|2[0-3]):[0-5][0-9]"
    r":[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])",
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
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
_META = set(".^$*+?{}[]\\|()")


def _lit(text: str) -> str:
    """Regex for literal text (escapes only regex metacharacters, so it stays readable)."""
    return "".join("\\" + c if c in _META else ("\\n" if c == "\n" else c) for c in text)


def _group(alternatives: Sequence[str]) -> str:
    if len(alternatives) == 1:
        return alternatives[0]
    return "(?:" + "|".join(alternatives) + ")"


def _repeat(lo: int, hi: int | None) -> str:
    if hi is None:
        return "*" if lo == 0 else ("+" if lo == 1 else f"{{{lo},}}")
    if lo == hi:
        return "" if lo == 1 else f"{{{lo}}}"
    return "?" if (lo, hi) == (0, 1) else f"{{{lo},{hi}}}"


def json_schema_to_regex(
    schema: Mapping[str, Any] | bool, *, max_recursion: int = 3, any_depth: int = 2
) -> str:
    """A regex whose matches are JSON texts (``json.dumps`` style) valid against ``schema``.

    See the module docstring for the serialisation and for what is supported.

    >>> json_schema_to_regex({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    '\\\\{"n": -?(?:0|[1-9][0-9]*)\\\\}'
    """
    if not isinstance(schema, (Mapping, bool)):
        raise InvalidInput(f"JSON schema {short(schema)} at $ must be an object or a boolean")
    result = _Compiler(schema, max_recursion=max_recursion, any_depth=any_depth).compile(schema, "$")
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
    tool_tags: tuple[str, str] = ("<tool_call>", "</tool_call>"),
    prefix: str = "",
) -> str:
    """The regex of a forced tool-call output in the Hermes/Qwen format.

    Each call is ``<tool_call>\\n{"name": "<name>", "arguments": <arguments>}\\n</tool_call>``
    as literal text, the arguments following the tool's ``parameters`` schema (no
    ``parameters``: ``{}``). With ``name`` (tool_choice naming a function) the output is one
    call of that tool; without it (tool_choice="required") one call of any tool, or with
    ``parallel`` one or more calls separated by ``"\\n"`` as Qwen's template writes them.
    ``tools`` are OpenAI tools ``{"type": "function", "function": {"name", "parameters"}}``
    (a bare ``{"name", "parameters"}`` is accepted too).

    ``prefix`` is literal text forced before the calls. When the prompt ends inside an open
    think block (``prompt_starts_in_reasoning``), pass ``prefix="</think>\n\n"``: otherwise
    the forced calls would be parsed as reasoning.
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
    open_tag, close_tag = tool_tags
    calls = []
    for tool_name, params in by_name.items():
        if name is not None and tool_name != name:
            continue
        try:
            args = json_schema_to_regex(params)
        except InvalidInput as e:
            raise InvalidInput(f"tool {tool_name!r} parameters: {e}") from e
        head = _lit(f"{open_tag}\n{{\"name\": {json.dumps(tool_name, ensure_ascii=False)}, \"arguments\": ")
        calls.append(head + args + _lit(f"}}\n{close_tag}"))
    one = _group(calls)
    if name is not None or not parallel:
        return _lit(prefix) + one
    return f"{_lit(prefix)}{one}(?:\\n{one})*"


class _Compiler:
    def __init__(self, root: Mapping[str, Any] | bool, *, max_recursion: int, any_depth: int) -> None:
        self.root = root
        self.max_recursion = max_recursion
        self.any_depth = any_depth
        self.active: dict[str, int] = {}  # $ref -> expansions on the current path

    def compile(self, schema: Any, path: str) -> str | None:
        """Regex for ``schema`` at ``path``, or None when no value fits (false, recursion)."""
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
            return '"' + _PatternTranslator(pattern, f"{path}.pattern").translate() + '"'
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
        return _group(_int_range(lo, hi))

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


# -- integer ranges ------------------------------------------------------------------------


def _int_range(lo: int | None, hi: int | None) -> list[str]:
    """Alternatives matching exactly the canonical integers in [lo, hi] (None: unbounded)."""
    out: list[str] = []
    if lo is None or lo < 0:  # negative part: "-" and a magnitude in [max(1, -hi), -lo]
        mag_lo = 1 if hi is None or hi >= 0 else -hi
        out.append("-" + _group(_nonneg_range(mag_lo, None if lo is None else -lo)))
    if hi is None or hi >= 0:
        out.extend(_nonneg_range(max(lo or 0, 0), hi))
    return out


def _nonneg_range(lo: int, hi: int | None) -> list[str]:
    if hi is None:
        digits = len(str(lo))
        return _nonneg_range(lo, 10**digits - 1) + [f"[1-9][0-9]{{{digits},}}"]
    out: list[str] = []
    while lo <= hi:
        top = min(hi, 10 ** len(str(lo)) - 1)  # same number of digits
        out.extend(_same_length(str(lo), str(top)))
        lo = top + 1
    return out


def _digit(a: str, b: str) -> str:
    return a if a == b else f"[{a}-{b}]"


def _same_length(a: str, b: str) -> list[str]:
    """Alternatives for the numbers a..b, strings of the same length, a <= b."""
    n = len(a)
    if n == 1:
        return [_digit(a, b)]
    if a[0] == b[0]:
        return [a[0] + _group(_same_length(a[1:], b[1:]))]
    out = []
    first = int(a[0])
    if a[1:] != "0" * (n - 1):
        out.append(a[0] + _group(_same_length(a[1:], "9" * (n - 1))))
        first += 1
    last = int(b[0])
    tail = None
    if b[1:] != "9" * (n - 1):
        tail = b[0] + _group(_same_length("0" * (n - 1), b[1:]))
        last -= 1
    if first <= last:
        out.append(_digit(str(first), str(last)) + f"[0-9]{_repeat(n - 1, n - 1)}")
    if tail is not None:
        out.append(tail)
    return out


# -- string patterns -----------------------------------------------------------------------

# whitespace for \s: in both ECMA-262 and Python's str regex (jsonschema checks with Python re)
_SPACE_BOTH = [(9, 13), (32, 32), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
               (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]  # fmt: skip
# whitespace in either (complement is \S in both)
_SPACE_ANY = _SPACE_BOTH + [(0x1C, 0x1F), (0x85, 0x85), (0xFEFF, 0xFEFF)]
_DOT_EXCLUDED = [(10, 10), (13, 13), (0x2028, 0x2029)]
_CLASS_ESCAPES = {"d": [(48, 57)], "w": [(48, 57), (65, 90), (95, 95), (97, 122)], "s": _SPACE_BOTH}
_CHAR_ESCAPES = {"t": 9, "n": 10, "r": 13, "f": 12, "v": 11, "0": 0}


class _PatternTranslator:
    """A plain regex over decoded text -> a regex over its JSON-serialised form (no quotes)."""

    def __init__(self, pattern: str, path: str) -> None:
        self.src = pattern
        self.path = path
        self.pos = 0

    def fail(self, what: str) -> InvalidInput:
        return InvalidInput(
            f"pattern {short(self.src)} at {self.path}: {what} at offset {self.pos} is not supported "
            f"(plain regexes only: literals, classes, ., \\d \\w \\s \\S, groups, |, quantifiers)"
        )

    def translate(self) -> str:
        src = self.src
        start = src.startswith("^")
        end = src.endswith("$") and not src.endswith("\\$")
        self.pos = 1 if start else 0
        stop = len(src) - 1 if end else len(src)
        body = self.alternation(stop)
        if self.pos != stop:
            raise self.fail(f"unexpected {src[self.pos]!r}")
        prefix = "" if start else f"{_CHAR}*"
        suffix = "" if end else f"{_CHAR}*"
        return f"{prefix}(?:{body}){suffix}"

    def alternation(self, stop: int) -> str:
        branches = [self.sequence(stop)]
        while self.pos < stop and self.src[self.pos] == "|":
            self.pos += 1
            branches.append(self.sequence(stop))
        return "|".join(branches)

    def sequence(self, stop: int) -> str:
        items = []
        src = self.src
        while self.pos < stop and src[self.pos] not in "|)":
            atom = self.atom(stop)
            quantifier = self.quantifier(stop)
            # an atom can be several regex units (an escape like \\" is two): group it
            items.append(f"(?:{atom}){quantifier}" if quantifier and len(atom) > 1 else atom + quantifier)
        return "".join(items)

    def quantifier(self, stop: int) -> str:
        src = self.src
        if self.pos >= stop:
            return ""
        c = src[self.pos]
        if c in "*+?":
            self.pos += 1
            q = c
        elif c == "{":
            close = src.find("}", self.pos)
            inner = src[self.pos + 1 : close] if close != -1 and close < stop else ""
            parts = inner.split(",")
            if not (1 <= len(parts) <= 2 and parts[0].isdigit() and all(p.isdigit() for p in parts[1:] if p)):
                raise self.fail("'{' that is not a {n}, {n,} or {n,m} quantifier")
            counts = [int(p) for p in parts if p]
            if max(counts) > MAX_COUNT or (len(counts) == 2 and counts[0] > counts[1]):
                raise self.fail(f"a quantifier {{{inner}}} with min > max or a count above {MAX_COUNT}")
            self.pos = close + 1
            q = "{" + inner + "}"
        else:
            return ""
        if self.pos < stop and src[self.pos] == "?":
            self.pos += 1  # lazy: same language
        elif self.pos < stop and src[self.pos] in "*+?{":
            raise self.fail("a quantifier after a quantifier")
        return q

    def atom(self, stop: int) -> str:
        src = self.src
        c = src[self.pos]
        if c == "(":
            if src.startswith("(?:", self.pos):
                self.pos += 3
            elif src.startswith("(?", self.pos):
                raise self.fail("a group with '(?' (lookaround, named group or flags)")
            else:
                self.pos += 1
            inner = self.alternation(stop)
            if self.pos >= stop or src[self.pos] != ")":
                raise self.fail("an unclosed group")
            self.pos += 1
            return f"(?:{inner})"
        if c == "[":
            ranges, negated = self.char_class(stop)
            return _emit_set(ranges, negated)
        if c == ".":
            self.pos += 1
            return _emit_set(_DOT_EXCLUDED, True)
        if c in "*+?{":
            raise self.fail(f"a quantifier {c!r} with nothing to repeat")
        if c in "^$":
            raise self.fail(f"an anchor {c!r} inside the pattern")
        if c == "\\":
            ranges, negated = self.escape(in_class=False)
            return _emit_set(ranges, negated)
        self.pos += 1
        return _emit_set([(ord(c), ord(c))], False)

    def escape(self, *, in_class: bool) -> tuple[list[tuple[int, int]], bool]:
        src = self.src
        if self.pos + 1 >= len(src):
            raise self.fail("a trailing backslash")
        c = src[self.pos + 1]
        self.pos += 2
        if c in _CLASS_ESCAPES:
            return list(_CLASS_ESCAPES[c]), False
        if c == "S":
            return list(_SPACE_ANY), True
        if c in _CHAR_ESCAPES:
            code = _CHAR_ESCAPES[c]
            return [(code, code)], False
        if c in "xu":
            width = 2 if c == "x" else 4
            digits = src[self.pos : self.pos + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.fail(f"a malformed \\{c} escape")
            self.pos += width
            code = int(digits, 16)
            return [(code, code)], False
        if c.isalnum():
            self.pos -= 2
            raise self.fail(f"the escape \\{c}")
        return [(ord(c), ord(c))], False

    def char_class(self, stop: int) -> tuple[list[tuple[int, int]], bool]:
        src = self.src
        self.pos += 1
        negated = src.startswith("^", self.pos)
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if self.pos >= stop:
                raise self.fail("an unclosed '['")
            c = src[self.pos]
            if c == "]" and not first:
                self.pos += 1
                return ranges, negated
            first = False
            if c == "\\":
                got, neg = self.escape(in_class=True)
                if neg or len(got) != 1 or got[0][0] != got[0][1]:
                    if neg:
                        raise self.fail("\\S inside a character class")
                    ranges.extend(got)
                    continue
                lo = got[0][0]
            elif c == "[":
                raise self.fail("a nested '[' (set operations)")
            else:
                lo = ord(c)
                self.pos += 1
            if src.startswith("-", self.pos) and self.pos + 1 < stop and src[self.pos + 1] != "]":
                self.pos += 1
                if src[self.pos] == "\\":
                    got, neg = self.escape(in_class=True)
                    if neg or len(got) != 1 or got[0][0] != got[0][1]:
                        raise self.fail("a class escape as a range end")
                    hi = got[0][0]
                else:
                    hi = ord(src[self.pos])
                    self.pos += 1
                if hi < lo:
                    raise self.fail("a range out of order")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))


def _normalise(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _contains(ranges: list[tuple[int, int]], code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in ranges)


_NEEDS_ESCAPE = [(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]  # what json.dumps escapes


def _class_char(code: int) -> str:
    c = chr(code)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return f"\\x{code:02x}"
    if not c.isprintable():
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return "\\" + c if c in "\\]^-[" else c


def _emit_set(ranges: list[tuple[int, int]], negated: bool) -> str:
    """Regex over JSON-serialised text for one decoded character in the set (or its complement),
    each character written as json.dumps(ensure_ascii=False) writes it."""
    ranges = _normalise(ranges)
    escapes = [c for c in [*range(0x20), 0x22, 0x5C] if _contains(ranges, c) != negated]
    alternatives = []
    if negated:
        excluded = _normalise(ranges + _NEEDS_ESCAPE)
        body = "".join(
            _class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in excluded
        )
        alternatives.append(f"[^{body}]")
    else:
        safe: list[tuple[int, int]] = []
        for lo, hi in ranges:  # ranges minus the characters json.dumps escapes
            for bad_lo, bad_hi in _NEEDS_ESCAPE:
                if bad_hi < lo or bad_lo > hi:
                    continue
                if lo < bad_lo:
                    safe.append((lo, bad_lo - 1))
                lo = max(lo, bad_hi + 1)
                if lo > hi:
                    break
            if lo <= hi:
                safe.append((lo, hi))
        if len(safe) == 1 and safe[0][0] == safe[0][1]:
            alternatives.append(_lit(chr(safe[0][0])))
        elif safe:
            body = "".join(_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in safe)
            alternatives.append(f"[{body}]")
    alternatives.extend(_lit(json.dumps(chr(c))[1:-1]) for c in escapes)
    if not alternatives:
        raise InvalidInput(f"a character set {ranges!r} that no JSON string character fits")
    return _group(alternatives)
