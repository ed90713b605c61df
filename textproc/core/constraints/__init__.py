"""Constraints on generated text: JSON Schema -> regex (``schema``, with its regex building
blocks in ``regex_parts``) and the forced tool-call pattern."""

from __future__ import annotations

from textproc.core.constraints.schema import MAX_BOUND, MAX_COUNT, json_schema_to_regex, tool_call_pattern

__all__ = ["json_schema_to_regex", "tool_call_pattern", "MAX_COUNT", "MAX_BOUND"]
