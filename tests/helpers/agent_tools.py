"""A coding agent's tool set, in the shape such agents send (our own text, written for tests).

Twelve function tools with the parameters a coding agent offers (shell, file read / edit /
write, glob, grep, fetch, a todo list, ...) and the keywords their JSON Schemas carry: draft-07
``$schema``, ``additionalProperties: false``, ``minLength`` 1-2, ``format: uri``, a
``maximum: 600000`` timeout, numeric offsets, enums, nested arrays of objects. The last tool
(``ingest``, an MCP-style server tool) holds the bounds too large to unroll that made such tool
sets a 400: ``maxLength`` 1,000,000 and 100,000 (one with ``format``), ``maxItems`` 100,000 and a
``pattern`` with ``{0,200000}``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AGENT_TOOLS", "AGENT_CALLS"]

_DRAFT7 = "http://json-schema.org/draft-07/schema#"
_STR: dict[str, Any] = {"type": "string"}
_NUM: dict[str, Any] = {"type": "number"}
_BOOL: dict[str, Any] = {"type": "boolean"}


def _tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"The {name} tool.", "strict": True,
        "parameters": {"$schema": _DRAFT7, "type": "object", "properties": properties,
                       "required": required, "additionalProperties": False}}}


AGENT_TOOLS: list[dict[str, Any]] = [
    _tool("Task", {"description": _STR, "prompt": _STR, "subagent_type": _STR},
          ["description", "prompt", "subagent_type"]),
    _tool("Bash", {"command": _STR,
                   "timeout": {"type": "number", "maximum": 600000, "description": "milliseconds"},
                   "description": _STR, "run_in_background": _BOOL}, ["command"]),
    _tool("Glob", {"pattern": _STR, "path": _STR}, ["pattern"]),
    _tool("Grep", {"pattern": _STR, "path": _STR, "glob": _STR,
                   "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
                   "-A": _NUM, "-B": _NUM, "-C": _NUM, "-i": _BOOL, "-n": _BOOL, "type": _STR,
                   "head_limit": _NUM, "multiline": _BOOL}, ["pattern"]),
    _tool("Read", {"file_path": _STR, "offset": _NUM, "limit": _NUM}, ["file_path"]),
    _tool("Edit", {"file_path": _STR, "old_string": _STR, "new_string": _STR,
                   "replace_all": {"type": "boolean", "default": False}},
          ["file_path", "old_string", "new_string"]),
    _tool("Write", {"file_path": _STR, "content": _STR}, ["file_path", "content"]),
    _tool("WebFetch", {"url": {"type": "string", "format": "uri"}, "prompt": _STR}, ["url", "prompt"]),
    _tool("WebSearch", {"query": {"type": "string", "minLength": 2},
                        "allowed_domains": {"type": "array", "items": _STR},
                        "blocked_domains": {"type": "array", "items": _STR}}, ["query"]),
    _tool("TodoWrite", {"todos": {"type": "array", "items": {
        "type": "object",
        "properties": {"content": {"type": "string", "minLength": 1},
                       "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                       "activeForm": {"type": "string", "minLength": 1}},
        "required": ["content", "status", "activeForm"], "additionalProperties": False}}}, ["todos"]),
    _tool("ExitPlanMode", {"plan": _STR}, ["plan"]),
    _tool("ingest", {"document": {"type": "string", "maxLength": 1_000_000},
                     "source": {"type": "string", "format": "uri", "maxLength": 100_000},
                     "chunks": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 100_000},
                     "digest": {"type": "string", "pattern": "^[0-9a-f]{0,200000}$"}}, ["document"]),
]

# (tool name, arguments) valid against AGENT_TOOLS, keys in the schema's order (the order the
# regex writes), some past the bounds MAX_EXACT_COUNT leaves unenforced (300 characters, 300 chunks)
AGENT_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("Bash", {"command": "ls -la", "timeout": 600000, "run_in_background": False}),
    ("Read", {"file_path": "/tmp/a.py", "offset": 10, "limit": 2000}),
    ("Grep", {"pattern": "def \\w+", "output_mode": "content", "-C": 2, "-n": True}),
    ("TodoWrite", {"todos": [{"content": "fix it", "status": "in_progress", "activeForm": "Fixing it"}]}),
    ("WebFetch", {"url": "https://example.com/a?b=1", "prompt": "summarise"}),
    ("ingest", {"document": "x" * 300, "source": "https://example.com/d", "chunks": ["ab"] * 300,
                "digest": "0f" * 150}),
]
