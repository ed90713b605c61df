"""A coding agent's tool set, in the shape such agents send (our own text, written for tests;
kept in ``textproc.testing.tool_sets``, which the strict-tool benchmark reads too), and calls
valid against it.

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

from textproc.testing.tool_sets import CODING_AGENT_TOOLS

__all__ = ["AGENT_TOOLS", "AGENT_CALLS"]

AGENT_TOOLS = CODING_AGENT_TOOLS

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
