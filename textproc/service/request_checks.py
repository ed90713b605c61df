"""Checks of a generation request's fields where they enter the worker: each raises
InvalidInput naming the field (``param``), the value and what is allowed.

Owns the rules, not the request: :class:`~textproc.service.requests.RequestBuilder` calls them
with the limits of its config and the vocabulary's size.
"""

from __future__ import annotations

from typing import Any

from textproc.errors import InvalidInput, short
from textproc.protocol import LOGIT_BIAS_RANGE, MAX_LOGIT_BIAS, unpack_ids

__all__ = ["check_messages", "check_tools", "check_tool_choice", "check_stops",
           "check_stop_token_ids", "check_logit_bias", "check_sampling", "check_ids"]

_TOOL_CHOICES = ("none", "auto", "required")
_SCALARS = (str, int, float, bool, type(None))


def check_messages(messages: Any, max_prompt_chars: int) -> None:
    """A non-empty list of objects with a role; their string contents within max_prompt_chars
    (checked before rendering: a 10 MB message must not reach the template's output budget)."""
    if not isinstance(messages, list) or not messages:
        raise InvalidInput(f"messages must be a non-empty list, got {short(messages)}",
                           param="messages")
    chars = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidInput(f"messages[{i}] must be an object, got {short(message)}",
                               param=f"messages[{i}]")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidInput(f"messages[{i}].role must be a non-empty string, got "
                               f"{short(role)}", param=f"messages[{i}].role")
        content = message.get("content")
        chars += len(content) if isinstance(content, str) else 0
    if chars > max_prompt_chars:
        raise InvalidInput(
            f"the messages have {chars} characters of content, over the limit of "
            f"{max_prompt_chars} characters; shorten the messages",
            param="messages")


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """``tools`` as OpenAI's function tools (each with a non-empty name); [] for None."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidInput(f"tools must be a list, got {short(tools)}")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or \
                not isinstance(name, str) or not name:
            raise InvalidInput(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': str, ...}}}}, "
                f"got {short(tool)}")
    return tools


def check_tool_choice(tool_choice: Any,
                      tools: list[dict[str, Any]]) -> tuple[str, str | None]:
    """('none' | 'auto' | 'required' | 'named', the forced function's name or None)."""
    names = [t["function"]["name"] for t in tools]
    if isinstance(tool_choice, str):
        if tool_choice not in _TOOL_CHOICES:
            raise InvalidInput(
                f"tool_choice {tool_choice!r} is not allowed; use 'none', 'auto', 'required' "
                "or {'type': 'function', 'function': {'name': ...}}")
        if tool_choice == "required" and not tools:
            raise InvalidInput("tool_choice 'required' needs at least one tool in tools")
        return tool_choice, None
    fn = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise InvalidInput(
            f"tool_choice {short(tool_choice)} must name a function: "
            "{'type': 'function', 'function': {'name': ...}}")
    if name not in names:
        raise InvalidInput(f"tool_choice names unknown tool {name!r}; tools are {short(names)}")
    return "named", name


def check_stops(stop: list[str], max_stops: int, max_stop_chars: int) -> None:
    """At most max_stops non-empty strings of at most max_stop_chars each."""
    if len(stop) > max_stops:
        raise InvalidInput(f"stop has {len(stop)} strings; at most {max_stops} "
                           "are allowed", param="stop")
    for i, s in enumerate(stop):
        if not s:
            raise InvalidInput(f"stop[{i}] is empty; stop strings must be non-empty",
                               param="stop")
        if len(s) > max_stop_chars:
            raise InvalidInput(f"stop[{i}] has {len(s)} characters; at most "
                               f"{max_stop_chars} allowed", param="stop")


def check_stop_token_ids(ids: list[int], vocab: int) -> list[int]:
    """The ids, each in [0, vocab)."""
    for i, t in enumerate(ids):
        if not 0 <= t < vocab:
            raise InvalidInput(f"stop_token_ids[{i}]={t!r} is outside the vocabulary "
                               f"[0, {vocab})", param="stop_token_ids")
    return list(ids)


def check_logit_bias(bias: Any, vocab: int) -> dict[int, float]:
    """OpenAI's rules: token ids (ints, or their decimal strings as JSON keys) in the
    vocabulary -> numbers in LOGIT_BIAS_RANGE; at most MAX_LOGIT_BIAS entries."""
    if bias is None:
        return {}
    if not isinstance(bias, dict):
        raise InvalidInput(f"logit_bias must map token ids to numbers, got {short(bias)}",
                           param="logit_bias")
    if len(bias) > MAX_LOGIT_BIAS:
        raise InvalidInput(f"logit_bias has {len(bias)} entries; at most {MAX_LOGIT_BIAS} "
                           "are allowed", param="logit_bias")
    low, high = LOGIT_BIAS_RANGE
    out: dict[int, float] = {}
    for key, value in bias.items():
        token_id = key if isinstance(key, int) and not isinstance(key, bool) else (
            int(key) if isinstance(key, str) and key.isascii() and key.isdigit() else None)
        if token_id is None or not 0 <= token_id < vocab:
            raise InvalidInput(f"logit_bias key {short(key)} is not a token id of this "
                               f"model; allowed: 0..{vocab - 1}", param="logit_bias")
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not low <= value <= high:
            raise InvalidInput(f"logit_bias[{short(key)}]={short(value)}; allowed: numbers "
                               f"from {low:g} to {high:g}", param="logit_bias")
        out[token_id] = float(value)
    return out


def check_sampling(sampling: dict[str, Any]) -> None:
    """Every sampling value a scalar or a list of scalars (what the engine request carries)."""
    for key, value in sampling.items():
        if not isinstance(value, _SCALARS) and not (
                isinstance(value, list) and all(isinstance(v, _SCALARS) for v in value)):
            raise InvalidInput(f"sampling[{key!r}]={short(value)}; allowed: numbers, strings, "
                               "booleans, null or lists of them", param=str(key))


def check_ids(data: bytes, vocab: int, param: str, what: str, *,
              allow_empty: bool = False) -> list[int]:
    """Packed ids (protocol.pack_ids) unpacked, each in [0, vocab); empty only if allowed."""
    try:
        ids = unpack_ids(data)
    except ValueError as e:
        raise InvalidInput(f"{what}: {e}", param=param) from e
    if not ids and not allow_empty:
        raise InvalidInput(f"{what} are empty", param=param)
    bad = [t for t in ids if t >= vocab]
    if bad:
        raise InvalidInput(f"{what} outside the vocabulary [0, {vocab}): {short(bad[:10])}",
                           param=param)
    return ids
