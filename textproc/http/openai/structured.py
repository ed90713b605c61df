"""Structured-output request fields -> the one constraint spec the service enforces.

Owns the mapping of OpenAI's ``response_format`` (``text``, ``json_object``, ``json_schema``),
vLLM's ``structured_outputs`` (``json``, ``regex``, ``choice``) and its older ``guided_json`` /
``guided_regex`` / ``guided_choice`` into ``{"json": schema} | {"regex": str} | {"choice":
[str]}`` (``ChatRequest.structured``; ``json_schema.strict: true`` adds ``"strict": True``). Nothing is silently ignored: a field this server
cannot enforce (``guided_grammar``, ``structured_outputs.grammar`` / ``structural_tag``, a
second constraint next to the first) is a 400 naming it. The schema itself is compiled by a
worker, whose errors (unsupported keyword with its JSON path, compile budget) come back as
400 too.
"""

from __future__ import annotations

import json
from typing import Any

from textproc.errors import short
from textproc.http.api_types import ApiError

__all__ = ["structured_spec"]

_VLLM_KINDS = ("json", "regex", "choice")
_VLLM_UNSUPPORTED = ("grammar", "structural_tag", "json_object")


def structured_spec(req: Any) -> dict[str, Any] | None:
    """The constraint of a chat or completion request body (decoded), or None for free text."""
    found: list[tuple[str, dict[str, Any]]] = []
    fmt = getattr(req, "response_format", None)
    if fmt is not None and fmt.type != "text":
        found.append(("response_format", _response_format(fmt)))
    outputs = getattr(req, "structured_outputs", None)
    if outputs is not None:
        found.append(("structured_outputs", _vllm(outputs)))
    for name in ("guided_json", "guided_regex", "guided_choice"):
        value = getattr(req, name, None)
        if value is not None:
            kind = name.removeprefix("guided_")
            found.append((name, _vllm({kind: value}, where=name)))
    if getattr(req, "guided_grammar", None) is not None:
        raise ApiError("guided_grammar is not supported by this server; use guided_json, "
                       "guided_regex or guided_choice", param="guided_grammar")
    if len(found) > 1:
        raise ApiError(f"{found[0][0]} and {found[1][0]} both constrain the output; give one",
                       param=found[1][0])
    return found[0][1] if found else None


def _response_format(fmt: Any) -> dict[str, Any]:
    if fmt.type == "json_object":
        return {"json": {"type": "object"}}
    if fmt.type == "json_schema":
        spec = fmt.json_schema
        if spec is None or spec.schema_ is None:
            raise ApiError("response_format type 'json_schema' needs json_schema.schema",
                           param="response_format.json_schema.schema")
        # strict: true closes objects that list properties (OpenAI's strict mode)
        return {"json": spec.schema_, "strict": True} if spec.strict else {"json": spec.schema_}
    raise ApiError(f"response_format type {short(fmt.type)} is not supported; supported: "
                   "'text', 'json_object', 'json_schema'", param="response_format.type")


def _vllm(outputs: Any, *, where: str = "structured_outputs") -> dict[str, Any]:
    if not isinstance(outputs, dict):
        raise ApiError(f"{where} {short(outputs)} must be an object", param=where)
    given = {k: v for k, v in outputs.items() if v is not None}
    for key in given:
        if key in _VLLM_UNSUPPORTED:
            raise ApiError(f"{where}.{key} is not supported by this server; supported: "
                           f"{', '.join(_VLLM_KINDS)}", param=f"{where}.{key}")
    kinds = [k for k in given if k in _VLLM_KINDS]
    if len(kinds) != 1:
        raise ApiError(f"{where} must set exactly one of {', '.join(_VLLM_KINDS)}; got "
                       f"{sorted(given) or 'none'}", param=where)
    kind = kinds[0]
    value = given[kind]
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as e:
                raise ApiError(f"{where} json is not valid JSON: {e}", param=where) from e
        if not isinstance(value, (dict, bool)):
            raise ApiError(f"{where} json {short(value)} must be a JSON Schema object", param=where)
    elif kind == "regex" and not isinstance(value, str):
        raise ApiError(f"{where} regex {short(value)} must be a string", param=where)
    elif kind == "choice" and (not isinstance(value, list) or not value
                               or not all(isinstance(c, str) for c in value)):
        raise ApiError(f"{where} choice {short(value)} must be a non-empty list of strings",
                       param=where)
    return {kind: value}
