"""The checks of a generation request that need the model: messages against the prompt limit,
ids against the vocabulary. Each raises InvalidInput naming the field (``param``), the value and
what is allowed.

The checks that need no model (stops, counts, n, logprobs, tools, tool_choice) are
:mod:`textproc.options`', called wherever a request enters (HTTP body, worker) with the same
message. :class:`~textproc.service.request_builder.RequestBuilder` calls both.
"""

from __future__ import annotations

from typing import Any

from textproc.errors import InvalidInput, short
from textproc.protocol import unpack_ids

__all__ = ["check_messages", "check_stop_token_ids", "check_logit_bias", "check_ids"]


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
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):  # text and image parts (a vision model's messages)
            chars += sum(len(p["text"]) for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    if chars > max_prompt_chars:
        raise InvalidInput(
            f"the messages have {chars} characters of content, over the limit of "
            f"{max_prompt_chars} characters; shorten the messages",
            param="messages")


def check_stop_token_ids(ids: list[int], vocab: int) -> list[int]:
    """The ids, each in [0, vocab)."""
    for i, t in enumerate(ids):
        if not 0 <= t < vocab:
            raise InvalidInput(f"stop_token_ids[{i}]={t!r} is outside the vocabulary "
                               f"[0, {vocab})", param="stop_token_ids")
    return list(ids)


def check_logit_bias(bias: dict[int, float], vocab: int) -> dict[int, float]:
    """Every key a token id of this vocabulary (the values' range is
    :func:`textproc.options.check_sampling_options`'s)."""
    for token_id in bias:
        if not 0 <= token_id < vocab:
            raise InvalidInput(f"logit_bias key {short(token_id)} is not a token id of this "
                               f"model; allowed: 0..{vocab - 1}", param="logit_bias")
    return bias


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
