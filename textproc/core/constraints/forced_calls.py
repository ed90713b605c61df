"""Forced tool calls for every tool-call format: the regex of the family's own rendering.

Owns, per format of :mod:`textproc.core.parsing.formats`, the literal text around a call and
how its arguments are spelled, so ``tool_choice`` required / named works for every family
through the regex -> token automaton compiler. Each pattern accepts the call as the family's
chat template renders it (checked against the real templates in the tests) and the format's
parser reads back what the pattern accepts to the same name and arguments (round-trip tested).

Arguments are JSON (``json_schema_to_regex``), except:

* ``qwen3_coder``, ``glm45``, ``glm47`` write raw values: a ``string`` property is any text
  without ``<`` (so it cannot end its tag early), other types their JSON; properties in schema
  order, required ones present;
* ``pythonic`` writes Python literals: strings in single quotes without backslashes or control
  characters, integers and numbers as JSON writes them, ``True`` / ``False``, ``None``; other
  property types are refused (InvalidInput).

Special-token markup (``[TOOL_CALLS]``, ``<｜tool▁sep｜>``, ...) is matched as text: a
constrained decoder spells it with ordinary tokens, and the detokenizer hands the parser the
same text either way. Only the regex subset ``json_schema_to_regex`` emits is used (no
lookarounds, no backreferences).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from textproc.core.constraints.regex_parts import group as _group
from textproc.core.constraints.regex_parts import lit as _lit
from textproc.core.constraints.regex_parts import repeat as _repeat
from textproc.errors import InvalidInput, short

__all__ = ["FORCED_FORMATS", "forced_calls_pattern"]

_RAW_TEXT = "[^<]*"
_PY_STRING = "'[^'\\\\\\x00-\\x1f]*'"
_INDEX = "(?:0|[1-9][0-9]*)"

# (format, schema compiler) -> one call's regex
_CallRegex = Callable[[str, Mapping[str, Any] | bool, Callable[[Any], str]], str]


@dataclass(frozen=True)
class _Shape:
    begin: str  # literal text before the calls
    call: _CallRegex
    sep: str  # literal text between calls
    end: str  # literal text after the calls
    parallel: bool = True  # several calls in one output


def _properties(params: Mapping[str, Any] | bool) -> list[tuple[str, Any, bool]]:
    # (key, schema, required) in schema order
    if not isinstance(params, Mapping):
        return []
    props = params.get("properties") or {}
    required = set(params.get("required") or ())
    return [(k, v, k in required) for k, v in props.items()] if isinstance(props, Mapping) else []


def _is_string(schema: Any) -> bool:
    from textproc.core.parsing.raw_values import string_only

    return string_only(schema)


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


def _raw_params(open_key: str, mid: str, close: str, to_regex: Callable[[Any], str],
                params: Mapping[str, Any] | bool, *, strip_newlines: bool) -> str:
    parts = []
    for key, schema, required in _properties(params):
        value = _raw_string(schema, key) if _is_string(schema) else to_regex(schema)
        nl = "\n" if strip_newlines else ""
        one = _lit(open_key + key + mid + nl) + value + _lit(nl + close)
        parts.append(one if required else f"(?:{one})?")
    return "".join(parts)


def _json_member_call(args_key: str, prefix: str, suffix: str) -> _CallRegex:
    def call(name: str, params: Mapping[str, Any] | bool, to_regex: Callable[[Any], str]) -> str:
        head = f'{prefix}{{"name": {json.dumps(name, ensure_ascii=False)}, "{args_key}": '
        return _lit(head) + to_regex(params) + _lit("}" + suffix)

    return call


def _wrapped_args(before: Callable[[str], str], after: str, *, index: bool = False) -> _CallRegex:
    def call(name: str, params: Mapping[str, Any] | bool, to_regex: Callable[[Any], str]) -> str:
        head = _lit(before(name))
        if index:
            head += _INDEX + _lit("<|tool_call_argument_begin|>")
        return head + to_regex(params) + _lit(after)

    return call


_MISTRAL_ID = "[A-Za-z0-9]{9}"


def _mistral_v11(name: str, params: Mapping[str, Any] | bool, to_regex: Callable[[Any], str]) -> str:
    # ``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` as Mistral Small 3.2 renders it (the id optional)
    return (_lit(f"[TOOL_CALLS]{name}") + f"(?:{_lit('[CALL_ID]')}{_MISTRAL_ID})?" + _lit("[ARGS]")
            + to_regex(params))


def _mistral_object(name: str, params: Mapping[str, Any] | bool, to_regex: Callable[[Any], str]) -> str:
    # one object of the list form of earlier models (``"id"`` optional, as Nemo renders it)
    head = _lit(f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": ')
    return head + to_regex(params) + f'(?:{_lit(", ")}"id": "{_MISTRAL_ID}")?' + _lit("}")


def _qwen3_coder(name: str, params: Mapping[str, Any] | bool, to_regex: Callable[[Any], str]) -> str:
    body = _raw_params("<parameter=", ">", "</parameter>\n", to_regex, params, strip_newlines=True)
    return _lit(f"<tool_call>\n<function={name}>\n") + body + _lit("</function>\n</tool_call>")


def _glm(nl: str) -> _CallRegex:
    def call(name: str, params: Mapping[str, Any] | bool, to_regex: Callable[[Any], str]) -> str:
        body = _raw_params("<arg_key>", "</arg_key>" + nl + "<arg_value>", "</arg_value>" + nl,
                           to_regex, params, strip_newlines=False)
        return _lit(f"<tool_call>{name}{nl}") + body + _lit("</tool_call>")

    return call


def _py_value(schema: Any, where: str) -> str:
    if isinstance(schema, Mapping) and isinstance(schema.get("enum"), list) and all(
            isinstance(v, str) and "'" not in v and "\\" not in v for v in schema["enum"]):
        return _group([_lit(repr(v)) for v in schema["enum"]])
    t = schema.get("type") if isinstance(schema, Mapping) else None
    from textproc.core.constraints.schema import json_schema_to_regex

    if t == "string" and not (set(schema) - {"type", "description", "title"}):
        return _PY_STRING
    if t in ("integer", "number"):
        return json_schema_to_regex(schema)
    if t == "boolean":
        return "(?:True|False)"
    if t == "null":
        return "None"
    raise InvalidInput(
        f"pythonic forced calls support string, integer, number, boolean and null arguments; "
        f"{where} is {short(schema)}"
    )


def _pythonic(name: str, params: Mapping[str, Any] | bool, to_regex: Callable[[Any], str]) -> str:
    items = [(_lit(key + "=") + _py_value(schema, f"parameter {key!r} of {name!r}"), required)
             for key, schema, required in _properties(params)]
    # the first present argument has no ", " before it: one alternative per possible first
    options = []
    for first in range(len(items)):
        if any(req for _, req in items[:first]):
            break
        rest = "".join(_lit(", ") + r if req else f"(?:{_lit(', ')}{r})?" for r, req in items[first + 1:])
        options.append(items[first][0] + rest)
    if not options:
        args = ""
    elif all(not req for _, req in items):
        args = "(?:" + "|".join(options) + ")?"
    else:
        args = _group(options)
    return _lit(name + "(") + args + _lit(")")


_SHAPES: dict[str, _Shape] = {
    "hermes": _Shape("", _json_member_call("arguments", "<tool_call>\n", "\n</tool_call>"), "\n", ""),
    "llama3_json": _Shape("", _json_member_call("parameters", "", ""), "; ", ""),
    "granite": _Shape("<|tool_call|>[", _json_member_call("arguments", "", ""), ", ", "]"),
    "mistral": _Shape("", _mistral_v11, "", ""),  # or the list form, see forced_calls_pattern
    "deepseek_v3": _Shape(
        "<｜tool▁calls▁begin｜>",
        _wrapped_args(lambda n: f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n",
                      "\n```<｜tool▁call▁end｜>"),
        "\n", "<｜tool▁calls▁end｜>"),
    "deepseek_v31": _Shape(
        "<｜tool▁calls▁begin｜>",
        _wrapped_args(lambda n: f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>", "<｜tool▁call▁end｜>"),
        "", "<｜tool▁calls▁end｜>"),
    "kimi_k2": _Shape(
        "<|tool_calls_section_begin|>",
        _wrapped_args(lambda n: f"<|tool_call_begin|>functions.{n}:", "<|tool_call_end|>", index=True),
        "", "<|tool_calls_section_end|>"),
    "gpt_oss": _Shape(
        "", _wrapped_args(lambda n: f" to=functions.{n}<|channel|>commentary json<|message|>", ""),
        "", "", parallel=False),
    "qwen3_coder": _Shape("", _qwen3_coder, "\n", ""),
    "glm45": _Shape("", _glm("\n"), "\n", ""),
    "glm47": _Shape("", _glm(""), "", ""),
    "pythonic": _Shape("[", _pythonic, ", ", "]"),
}

FORCED_FORMATS = frozenset(_SHAPES)


def forced_calls_pattern(tool_format: str, by_name: Mapping[str, Mapping[str, Any] | bool],
                         name: str | None, *, parallel: bool,
                         to_regex: Callable[[Any], str]) -> str:
    """The regex of a forced output in ``tool_format``: one call of ``name`` (or of any tool),
    or with ``parallel`` one or more calls, as the family's template writes them."""
    shape = _SHAPES.get(tool_format)
    if shape is None:
        raise InvalidInput(f"tool_format={short(tool_format)}; forced calls support {', '.join(_SHAPES)}")
    calls = []
    for tool_name, params in by_name.items():
        if name is not None and tool_name != name:
            continue
        try:
            calls.append(shape.call(tool_name, params, to_regex))
        except InvalidInput as e:
            raise InvalidInput(f"tool {tool_name!r} parameters: {e}") from e
    many = name is None and parallel and shape.parallel
    body = _calls(calls, shape.sep, many)
    if tool_format == "mistral":  # the v11 form, or the list form of earlier models
        objects = [_mistral_object(n, p, to_regex) for n, p in by_name.items() if name in (None, n)]
        listed = _lit("[TOOL_CALLS][") + _calls(objects, ", ", many) + _lit("]")
        return f"(?:{body}|{listed})"
    return _lit(shape.begin) + body + _lit(shape.end)


def _calls(calls: list[str], sep: str, many: bool) -> str:
    one = _group(calls)
    return f"{one}(?:{_lit(sep)}{one})*" if many else one
