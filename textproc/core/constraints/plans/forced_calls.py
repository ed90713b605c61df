"""Forced tool calls for every tool-call format: the regex of the family's own spelling.

Owns ``tool_call_pattern`` (a request's tools and ``tool_choice`` -> the whole forced output).

Compiles a format's declared call spelling (:class:`~textproc.core.parsing.declaration.CallSpelling`:
literal markers, the name, slots, the arguments' layout) into a regex, so ``tool_choice``
required / named works for every family through the regex -> token automaton compiler. Each
pattern accepts the call as the family's chat template renders it (checked against the real
templates in the tests) and the format's parser reads back what the pattern accepts to the same
name and arguments (round-trip tested).

Arguments by layout:

* ``JsonArgs``: JSON (``json_schema_to_regex``);
* ``RawArgs`` (qwen3_coder, glm, DSML, MiniMax, Seed-OSS, ...): a ``string`` property is any
  text without ``<`` (so it cannot end its tag early), other types their JSON; properties in
  schema order, required ones present; where the template nests objects and lists as elements
  (MiniMax M3, ``RawArgs.item``), objects with named properties and arrays with given items are
  spelled so, recursively;
* ``PythonArgs`` (pythonic): strings in single quotes without backslashes or control
  characters, integers and numbers as JSON writes them, ``True`` / ``False``, ``None``; other
  property types are refused (InvalidInput);
* ``DelimitedArgs`` (Gemma 4): strings raw between the format's delimiters (no ``<``),
  integers and numbers as JSON writes them, ``true`` / ``false``, in sorted key order; other
  property types are refused (InvalidInput).

Special-token markup (``[TOOL_CALLS]``, ``<｜tool▁sep｜>``, ...) is matched as text: a
constrained decoder spells it with ordinary tokens, and the detokenizer hands the parser the
same text either way. Only the regex subset ``json_schema_to_regex`` emits is used (no
lookarounds, no backreferences).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from textproc.core.constraints.regex.parts import Shared
from textproc.core.constraints.regex.parts import group as _group
from textproc.core.constraints.regex.parts import lit as _lit
from textproc.core.constraints.regex.parts import repeat as _repeat
from textproc.core.constraints.schema.to_regex import closing_regex
from textproc.core.parsing.declaration import (
    CallSpelling, DelimitedArgs, JsonArgs, Lit, Name, PythonArgs, RawArgs, Slot, ToolFormat,
)
from textproc.core.parsing.formats import TOOL_FORMATS
from textproc.core.parsing.raw_values import string_only
from textproc.errors import InvalidInput, short

__all__ = ["FORCED_FORMATS", "tool_call_pattern", "forced_calls_pattern", "spelling_pattern", "plain_or_shared", "PLAIN_MAX_CHARS"]

# a calls pattern up to this long is plain ``re`` syntax; a longer one writes what recurs in it
# (the union of the tools: one call, then more after a separator; a strict pattern's sections)
# once and calls it (``Shared``), as ``json_schema_to_regex`` does past the same length. Parsing
# costs ~2.4 us a character: 10 BFCL tools with open objects as strict calls are 543 K
# characters plain (1.3 s to parse), 136 K shared (0.3 s)
PLAIN_MAX_CHARS = 1 << 16
_SHARE_FROM_CHARS = 256  # what recurs is written once past this, in a shared pattern

_NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}
_RAW_TEXT = "[^<]*"
_PY_STRING = "'[^'\\\\\\x00-\\x1f]*'"

ToRegex = Callable[[Any], str]


def _properties(params: Mapping[str, Any] | bool) -> list[tuple[str, Any, bool]]:
    # (key, schema, required) in schema order
    if not isinstance(params, Mapping):
        return []
    props = params.get("properties") or {}
    required = set(params.get("required") or ())
    return [(k, v, k in required) for k, v in props.items()] if isinstance(props, Mapping) else []


def _raw_string(schema: Any, key: str) -> str:
    # a string-typed raw value: the enum's values, or text without "<" of the allowed length
    values = schema.get("enum") if isinstance(schema, Mapping) else None
    if "const" in schema:
        values = [schema["const"]]
    if isinstance(values, list):
        if not all(isinstance(v, str) and "<" not in v for v in values):
            raise InvalidInput(f"raw-text values of {key!r} must not contain '<': {short(values)}")
        return _group([_lit(v) for v in values])
    bad = sorted(set(schema) & {"pattern", "format"})
    if bad:
        raise InvalidInput(
            f"{bad[0]!r} of string parameter {key!r} cannot be forced in a raw-text format; "
            "use a format with JSON arguments or drop it")
    lo, hi = schema.get("minLength", 0), schema.get("maxLength")
    if (lo, hi) == (0, None):
        return _RAW_TEXT
    return "[^<]" + _repeat(int(lo), None if hi is None else int(hi))


_JSON_TYPE_NAMES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean",
                    "null": "null", "object": "object", "array": "array"}


def _type_names(schema: Any, is_string: bool) -> str:
    # the regex of the JSON type name(s) a value of schema is tagged with
    if is_string:
        return "string"
    t = schema.get("type") if isinstance(schema, Mapping) else None
    listed = [t] if isinstance(t, str) else t if isinstance(t, list) else []
    # (a JSON value tagged "string" would be read back as raw text, quotes and all)
    names = sorted({_JSON_TYPE_NAMES[x] for x in listed if x in _JSON_TYPE_NAMES} - {"string"})
    if not names:
        names = sorted(set(_JSON_TYPE_NAMES.values()) - {"string"})
    return _group(names)


def _element_value(layout: RawArgs, to_regex: ToRegex, schema: Any, key: str) -> str:
    # a non-string value of a layout that nests objects and lists as elements (``item``): an
    # object whose properties are named and an array whose items are given are elements;
    # anything else JSON text (an element's close tag names its key, which a regex cannot repeat
    # for keys it does not know), which the parser reads as the element's text
    t = schema.get("type") if isinstance(schema, Mapping) else None
    if t == "object" and isinstance(schema.get("properties"), Mapping) and schema["properties"] \
            and "$ref" not in schema:
        return _raw_params(layout, to_regex, schema)
    if t == "array" and isinstance(schema.get("items"), Mapping) and "$ref" not in schema:
        items, lo, hi = schema["items"], schema.get("minItems", 0), schema.get("maxItems")
        inner = _raw_string(items, key) if string_only(items) else _element_value(layout, to_regex, items, key)
        one = _lit(layout.key_open + layout.item + layout.key_close) + inner + _lit(layout.value_close_for(layout.item))
        return f"(?:{one})" + _repeat(int(lo), None if hi is None else int(hi))
    return to_regex(schema)


def _raw_params(layout: RawArgs, to_regex: ToRegex, params: Mapping[str, Any] | bool) -> str:
    parts = []
    for key, schema, required in _properties(params):
        is_string = string_only(schema)
        value = (_raw_string(schema, key) if is_string else
                 _element_value(layout, to_regex, schema, key) if layout.item else to_regex(schema))
        head, has_type, tail = layout.key_close_for(is_string).partition("{type}")
        type_name = _type_names(schema, is_string) if has_type else ""
        one = _lit(layout.key_open + key + head) + type_name + _lit(tail) + value + _lit(layout.value_close_for(key))
        parts.append(one if required else f"(?:{one})?")
    if layout.empty and not any(required for _, _, required in _properties(params)):
        return f"(?:{''.join(parts)}|{_lit(layout.empty)})"
    return "".join(parts)


def _py_value(schema: Any, where: str, to_regex: ToRegex) -> str:
    if isinstance(schema, Mapping) and isinstance(schema.get("enum"), list) and all(
            isinstance(v, str) and "'" not in v and "\\" not in v for v in schema["enum"]):
        return _group([_lit(repr(v)) for v in schema["enum"]])
    t = schema.get("type") if isinstance(schema, Mapping) else None
    if t == "string" and not (set(schema) - {"type", "description", "title"}):
        return _PY_STRING
    if t in ("integer", "number"):
        return to_regex(schema)
    if t == "boolean":
        return "(?:True|False)"
    if t == "null":
        return "None"
    raise InvalidInput(
        f"pythonic forced calls support string, integer, number, boolean and null arguments; "
        f"{where} is {short(schema)}"
    )


def _keyword_params(items: list[tuple[str, bool]], sep: str) -> str:
    # "key=value" items joined by sep, each (regex, required): the first present item has no
    # sep before it, so one alternative per possible first item
    options = []
    for first in range(len(items)):
        if any(req for _, req in items[:first]):
            break
        rest = "".join(_lit(sep) + r if req else f"(?:{_lit(sep)}{r})?" for r, req in items[first + 1:])
        options.append(items[first][0] + rest)
    if not options:
        return ""
    if all(not req for _, req in items):
        return "(?:" + "|".join(options) + ")?"
    return _group(options)


def _python_params(name: str, params: Mapping[str, Any] | bool, to_regex: ToRegex) -> str:
    items = [(_lit(key + "=") + _py_value(schema, f"parameter {key!r} of {name!r}", to_regex), required)
             for key, schema, required in _properties(params)]
    return _keyword_params(items, ", ")


_BARE_KEY = "[A-Za-z_][A-Za-z0-9_]*"
_ANY_DEPTH = 2  # nesting of values allowed where the schema says any


def _delimited_any(layout: DelimitedArgs, to_regex: ToRegex, depth: int) -> str:
    # any value of the dialect, nested at most depth levels
    scalars = [_lit(layout.string_open) + _RAW_TEXT + _lit(layout.string_close),
               to_regex({"type": "number"}), "(?:true|false)"]
    if depth > 0:
        inner = _delimited_any(layout, to_regex, depth - 1)
        sep = _lit(layout.item_sep)
        scalars.append(f"\\[(?:{inner}(?:{sep}{inner})*)?\\]")
        item = _BARE_KEY + _lit(layout.key_sep) + inner
        scalars.append(f"\\{{(?:{item}(?:{sep}{item})*)?\\}}")
    return _group(scalars)


def _delimited_value(layout: DelimitedArgs, schema: Any, where: str, to_regex: ToRegex) -> str:
    if schema is True or schema == {}:
        return _delimited_any(layout, to_regex, _ANY_DEPTH)
    if isinstance(schema, Mapping) and string_only(schema):
        return _lit(layout.string_open) + _raw_string(schema, where) + _lit(layout.string_close)
    t = schema.get("type") if isinstance(schema, Mapping) else None
    extra = set(schema) - {"type", "description", "title", "properties", "required", "items",
                           "additionalProperties"} if isinstance(schema, Mapping) else set()
    if t in ("integer", "number"):
        return to_regex(schema)
    if t == "boolean":
        return "(?:true|false)"
    if t == "object" and not extra and not schema.get("properties"):
        return _delimited_object_any(layout, to_regex)
    if t == "object" and not extra:
        return "\\{" + _delimited_params(layout, where, schema, to_regex) + "\\}"
    if t == "array" and not extra:
        items = schema.get("items")
        inner = (_delimited_value(layout, items, f"items of {where}", to_regex) if items is not None
                 else _delimited_any(layout, to_regex, _ANY_DEPTH - 1))
        sep = _lit(layout.item_sep)
        return f"\\[(?:{inner}(?:{sep}{inner})*)?\\]"
    raise InvalidInput(
        f"forced calls in this format support strings, numbers, booleans, and objects and arrays "
        f"without further constraints; {where} is {short(schema)}")


def _delimited_object_any(layout: DelimitedArgs, to_regex: ToRegex) -> str:
    inner = _delimited_any(layout, to_regex, _ANY_DEPTH - 1)
    item = _BARE_KEY + _lit(layout.key_sep) + inner
    sep = _lit(layout.item_sep)
    return f"\\{{(?:{item}(?:{sep}{item})*)?\\}}"


def _delimited_params(layout: DelimitedArgs, name: str, params: Mapping[str, Any] | bool,
                      to_regex: ToRegex) -> str:
    props = _properties(params)
    if layout.sort_keys:
        props.sort(key=lambda p: p[0])
    items = [(_lit(key + layout.key_sep)
              + _delimited_value(layout, schema, f"parameter {key!r} of {name!r}", to_regex), required)
             for key, schema, required in props]
    return _keyword_params(items, layout.item_sep)


def _call_pattern(spelling: CallSpelling, name: str, params: Mapping[str, Any] | bool, to_regex: ToRegex) -> str:
    out = []
    for part in spelling.call:
        if isinstance(part, Lit):
            out.append(_lit(part.text))
        elif isinstance(part, Name):
            out.append(_lit(json.dumps(name, ensure_ascii=False) if part.quoted else name))
        elif isinstance(part, Slot):
            out.append(part.pattern)
        elif isinstance(part, JsonArgs):
            out.append(to_regex(params))
        elif isinstance(part, RawArgs):
            out.append(_raw_params(part, to_regex, params))
        elif isinstance(part, DelimitedArgs):
            out.append(_delimited_params(part, name, params, to_regex))
        else:
            assert isinstance(part, PythonArgs)
            out.append(_python_params(name, params, to_regex))
    return "".join(out)


def spelling_pattern(spelling: CallSpelling, by_name: Mapping[str, Mapping[str, Any] | bool], name: str | None,
                     *, parallel: bool, to_regex: ToRegex, shared: Shared | None = None) -> str:
    """The regex of calls spelled ``spelling`` (and its alternatives): one call of ``name`` (or
    of any tool), or with ``parallel`` one or more calls. With ``shared``, a long call regex
    that recurs is a call of its definition there (the caller writes ``shared.block()`` first)."""
    forms = []
    for form in (spelling, *spelling.alternatives):
        calls = []
        for tool_name, params in by_name.items():
            if name is not None and tool_name != name:
                continue
            try:
                calls.append(_call_pattern(form, tool_name, params, to_regex))
            except InvalidInput as e:
                raise InvalidInput(f"tool {tool_name!r} parameters: {e}") from e
        one = _group(calls)
        many = name is None and parallel and form.parallel
        if many and shared is not None:
            one = shared.call(one)
        body = f"{one}(?:{_lit(form.sep)}{one})*" if many else one
        forms.append(_lit(form.begin) + body + _lit(form.end))
    return forms[0] if len(forms) == 1 else "(?:" + "|".join(forms) + ")"


def plain_or_shared(pattern: Callable[[Shared, ToRegex], str], to_regex: ToRegex, *,
                    plain_max: int | None = None) -> str:
    """``pattern(Shared(None), to_regex)`` (plain ``re`` syntax) when it is at most
    ``plain_max`` long (default ``PLAIN_MAX_CHARS``), else the same language with what recurs
    written once (``Shared``: a ``(?(DEFINE)...)`` block ahead, calls ``(?&name)`` where it
    recurs). ``to_regex`` is asked once per schema object either way."""
    regexes: dict[int, tuple[Any, str]] = {}  # id(schema) -> (schema, its regex)

    def schema_regex(schema: Any) -> str:
        got = regexes.get(id(schema))
        if got is None:
            got = regexes[id(schema)] = (schema, to_regex(schema))  # (the schema kept alive)
        return got[1]

    plain = pattern(Shared(None), schema_regex)
    if len(plain) <= (PLAIN_MAX_CHARS if plain_max is None else plain_max):
        return plain
    shared = Shared(_SHARE_FROM_CHARS)
    body = pattern(shared, schema_regex)
    return shared.block() + body


def __getattr__(name: str) -> frozenset[str]:
    """``FORCED_FORMATS``: the tool formats a call can be forced in (every registered one), read
    from the registry when asked for, so importing this module loads no parser family."""
    if name == "FORCED_FORMATS":
        return frozenset(TOOL_FORMATS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def forced_calls_pattern(tool_format: str | ToolFormat, by_name: Mapping[str, Mapping[str, Any] | bool],
                         name: str | None, *, parallel: bool, to_regex: ToRegex) -> str:
    """The regex of a forced output in ``tool_format`` (a registered name or a declaration):
    one call of ``name`` (or of any tool), or with ``parallel`` one or more calls, as the
    family's template writes them; past ``PLAIN_MAX_CHARS`` the union of the tools is written
    once (:func:`plain_or_shared`)."""
    if isinstance(tool_format, str):
        fmt = TOOL_FORMATS.get(tool_format)
        if fmt is None:
            raise InvalidInput(f"tool_format={short(tool_format)}; forced calls support {', '.join(TOOL_FORMATS)}")
    else:
        fmt = tool_format

    def pattern(shared: Shared, schema_regex: ToRegex) -> str:
        return spelling_pattern(fmt.calls, by_name, name, parallel=parallel, to_regex=schema_regex, shared=shared)

    return plain_or_shared(pattern, to_regex)


def tool_call_pattern(
    tools: Sequence[Mapping[str, Any]],
    name: str | None = None,
    *,
    parallel: bool = True,
    tool_tags: tuple[str, str] | None = None,
    prefix: str = "",
    tool_format: str = "",
) -> str:
    """The regex of a forced tool-call output in the Hermes/Qwen format (or ``tool_format``).

    Each call is ``<tool_call>\\n{"name": "<name>", "arguments": <arguments>}\\n</tool_call>``
    as literal text, the arguments following the tool's ``parameters`` schema (no
    ``parameters``: ``{}``). With ``name`` (tool_choice naming a function) the output is one
    call of that tool; without it (tool_choice="required") one call of any tool, or with
    ``parallel`` one or more calls separated by ``"\\n"`` as Qwen's template writes them.
    ``tools`` are OpenAI tools ``{"type": "function", "function": {"name", "parameters"}}``
    (a bare ``{"name", "parameters"}`` is accepted too); a function with ``strict: true`` has
    its objects closed as ``json_schema_to_regex(strict=True)`` does.

    ``prefix`` is literal text forced before the calls. When the prompt ends inside an open
    reasoning block (``ReasoningFormat.prompt_leaves_open``), pass the reasoning format's
    ``close_text`` (``"</think>\n\n"``): otherwise the forced calls would be parsed as reasoning.

    ``tool_format``: the format's own spelling of calls (``""``: the default format), from its
    declaration (:func:`forced_calls_pattern`); ``tool_tags``: the format with
    custom (open, close) tags.
    """
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)) or not tools:
        raise InvalidInput(f"tools {short(tools)} must be a non-empty list of OpenAI tool objects")
    by_name: dict[str, Mapping[str, Any] | bool] = {}
    strict: set[str] = set()  # functions with strict: true (closed objects)
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
        # no parameters: no arguments, the empty object only
        by_name[function["name"]] = _NO_PARAMETERS if params is None else params
        if function.get("strict") is True:
            strict.add(function["name"])
    if name is not None and name not in by_name:
        raise InvalidInput(f"tool_choice names unknown tool {short(name)}; known tools: {sorted(by_name)}")
    fmt = TOOL_FORMATS.get(tool_format or TOOL_FORMATS.default)
    if fmt is None:
        raise InvalidInput(f"tool_format={short(tool_format)}; forced calls support {', '.join(TOOL_FORMATS)}")
    if tool_tags is not None:
        fmt = fmt.with_tags(*tool_tags)
    to_regex = closing_regex([by_name[n] for n in strict])
    return _lit(prefix) + forced_calls_pattern(fmt, by_name, name, parallel=parallel, to_regex=to_regex)
