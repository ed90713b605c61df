"""Tool sets that agents and benchmarks send, for the strict-tool benchmark and the constraint
tests: a coding agent's twelve tools (our own text), Codex CLI's (captured from the installed
CLI), BFCL's multi-tool cases (from the ``bfcl-eval`` wheel that ``scripts/fetch_schemas.py``
downloads) and synthetic twenty-tool sets. Each set is a list of OpenAI chat tools
``{"type": "function", "function": {"name", "description", "parameters"}}``.
"""

from __future__ import annotations

import http.server
import json
import random
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any

from textproc.testing.codex import codex_installed, run_codex_exec
from textproc.testing.models import REPO_ROOT

__all__ = ["CODING_AGENT_TOOLS", "codex_cli_tools", "bfcl_cases", "bfcl_schema", "synthetic_tools",
           "CODEX_TOOLS_FILE", "BFCL_WHEEL"]

Tools = list[dict[str, Any]]

_DRAFT7 = "http://json-schema.org/draft-07/schema#"
_STR: dict[str, Any] = {"type": "string"}
_NUM: dict[str, Any] = {"type": "number"}
_BOOL: dict[str, Any] = {"type": "boolean"}


def _agent_tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"The {name} tool.", "strict": True,
        "parameters": {"$schema": _DRAFT7, "type": "object", "properties": properties,
                       "required": required, "additionalProperties": False}}}


# A coding agent's tool set in the shape such agents send (our own text): shell, file read /
# edit / write, glob, grep, fetch, a todo list, ...; draft-07 ``$schema``,
# ``additionalProperties: false``, ``minLength`` 1-2, ``format: uri``, a ``maximum: 600000``
# timeout, numeric offsets, enums, nested arrays of objects. The last tool (``ingest``, an
# MCP-style server tool) holds bounds too large to unroll: ``maxLength`` 1,000,000 and 100,000
# (one with ``format``), ``maxItems`` 100,000 and a ``pattern`` with ``{0,200000}``.
CODING_AGENT_TOOLS: Tools = [
    _agent_tool("Task", {"description": _STR, "prompt": _STR, "subagent_type": _STR},
                ["description", "prompt", "subagent_type"]),
    _agent_tool("Bash", {"command": _STR,
                         "timeout": {"type": "number", "maximum": 600000, "description": "milliseconds"},
                         "description": _STR, "run_in_background": _BOOL}, ["command"]),
    _agent_tool("Glob", {"pattern": _STR, "path": _STR}, ["pattern"]),
    _agent_tool("Grep", {"pattern": _STR, "path": _STR, "glob": _STR,
                         "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
                         "-A": _NUM, "-B": _NUM, "-C": _NUM, "-i": _BOOL, "-n": _BOOL, "type": _STR,
                         "head_limit": _NUM, "multiline": _BOOL}, ["pattern"]),
    _agent_tool("Read", {"file_path": _STR, "offset": _NUM, "limit": _NUM}, ["file_path"]),
    _agent_tool("Edit", {"file_path": _STR, "old_string": _STR, "new_string": _STR,
                         "replace_all": {"type": "boolean", "default": False}},
                ["file_path", "old_string", "new_string"]),
    _agent_tool("Write", {"file_path": _STR, "content": _STR}, ["file_path", "content"]),
    _agent_tool("WebFetch", {"url": {"type": "string", "format": "uri"}, "prompt": _STR}, ["url", "prompt"]),
    _agent_tool("WebSearch", {"query": {"type": "string", "minLength": 2},
                              "allowed_domains": {"type": "array", "items": _STR},
                              "blocked_domains": {"type": "array", "items": _STR}}, ["query"]),
    _agent_tool("TodoWrite", {"todos": {"type": "array", "items": {
        "type": "object",
        "properties": {"content": {"type": "string", "minLength": 1},
                       "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                       "activeForm": {"type": "string", "minLength": 1}},
        "required": ["content", "status", "activeForm"], "additionalProperties": False}}}, ["todos"]),
    _agent_tool("ExitPlanMode", {"plan": _STR}, ["plan"]),
    _agent_tool("ingest", {"document": {"type": "string", "maxLength": 1_000_000},
                           "source": {"type": "string", "format": "uri", "maxLength": 100_000},
                           "chunks": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                      "maxItems": 100_000},
                           "digest": {"type": "string", "pattern": "^[0-9a-f]{0,200000}$"}}, ["document"]),
]

CODEX_TOOLS_FILE = REPO_ROOT / ".cache" / "agents" / "codex-cli-tools.json"


def codex_cli_tools(path: Path = CODEX_TOOLS_FILE, *, timeout_s: float = 90) -> Tools | None:
    """Codex CLI's tools as chat tools (its Responses tools, namespaces flattened the way
    textproc's Responses API offers them): read from ``path``, or captured once from the
    installed CLI (``bash scripts/fetch_agents.sh``) and kept there: ``codex exec`` against a
    local server that records its first request and refuses it; every other host goes to a
    dead proxy. None when neither is there."""
    if path.is_file():
        tools: Tools = json.loads(path.read_text())
        return tools
    if not codex_installed():
        return None
    body = _capture_codex_request(timeout_s)
    if body is None:
        return None
    # here: only a capture needs the Responses API's parser
    from textproc.http.responses.bodies import parse_responses_request

    request = json.loads(body)
    request["model"] = "m"
    offered = parse_responses_request(json.dumps(request).encode(), served_models=["m"]).chat.tools
    if not offered:
        return None
    tools = offered
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(tools, indent=1) + "\n")
    return tools


def _capture_codex_request(timeout_s: float) -> bytes | None:
    """The body of the first request ``codex exec`` sends to a Responses server, or None."""
    got: list[bytes] = []

    class Capture(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            got.append(self.rfile.read(int(self.headers.get("content-length", 0))))
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "captured", "type": "invalid_request_error"}}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Capture)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run_codex_exec(f"http://127.0.0.1:{server.server_port}", "qwen3", Path(tmp), "say hi",
                           timeout_s=timeout_s)
    finally:
        server.shutdown()
        server.server_close()
    return got[0] if got else None


BFCL_WHEEL = REPO_ROOT / ".cache" / "downloads" / "bfcl_eval-2026.3.23-py3-none-any.whl"
BFCL_MULTI = ["multiple", "parallel_multiple", "live_multiple", "live_parallel_multiple"]
# bfcl_eval.model_handler's GORILLA_TO_OPENAPI: its type names (Python, Java and JavaScript)
# -> JSON Schema's
_BFCL_TYPES = {
    "integer": "integer", "number": "number", "float": "number", "string": "string",
    "boolean": "boolean", "bool": "boolean", "array": "array", "list": "array", "dict": "object",
    "object": "object", "tuple": "array", "any": "string", "byte": "integer", "short": "integer",
    "long": "integer", "double": "number", "char": "string", "ArrayList": "array",
    "Array": "array", "HashMap": "object", "Hashtable": "object", "Queue": "array",
    "Stack": "array", "Any": "string", "String": "string", "Bigint": "integer",
}  # fmt: skip


def bfcl_schema(node: Any) -> Any:
    """BFCL's parameter dialect -> JSON Schema, as its OpenAI handler converts it (``dict`` ->
    ``object``, ``float`` -> ``number``, ``tuple`` -> ``array``, ...); the corpus that
    ``scripts/fetch_schemas.py`` builds converts its BFCL tools with it too."""
    if isinstance(node, list):
        return [bfcl_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: bfcl_schema(v) for k, v in node.items()}
    if isinstance(node.get("type"), str):
        out["type"] = _BFCL_TYPES.get(node["type"], node["type"])
    return out


def bfcl_cases(wheel: Path = BFCL_WHEEL) -> list[tuple[str, Tools]]:
    """BFCL's cases that offer several functions (its multiple, parallel-multiple and live
    categories), by case id, in the files' order; function names with ``.`` written with ``_``
    (as BFCL's OpenAI handler sends them). [] when the wheel is not downloaded."""
    if not wheel.is_file():
        return []
    cases = []
    with zipfile.ZipFile(wheel) as z:
        for stem in BFCL_MULTI:
            for line in z.read(f"bfcl_eval/data/BFCL_v4_{stem}.json").decode().splitlines():
                entry = json.loads(line)
                functions = entry.get("function") or []
                if len(functions) < 2:
                    continue
                cases.append((entry["id"], [{"type": "function", "function": {
                    "name": f["name"].replace(".", "_"), "description": f.get("description", ""),
                    "parameters": bfcl_schema(f.get("parameters") or {"type": "object", "properties": {}})}}
                    for f in functions]))
    return cases


_VERBS = ("search fetch parse store load save send read write open close list move copy sort find "
          "join split merge count").split()
_NOUNS = ("path query limit offset name title body tags mode user email url count level format "
          "start end items options depth").split()


def synthetic_tools(n: int = 20, *, seed: int = 0, closed: bool = True) -> Tools:
    """``n`` tools of 2-6 parameters each (strings, enums, bounded integers, numbers, booleans,
    arrays of strings, a nested object), drawn with ``seed``. ``closed``: as OpenAI's strict
    mode requires (``additionalProperties: false`` everywhere, every property required), else
    open objects with half the properties optional (ordinary tools under ``--strict-tools``)."""
    rng = random.Random(seed)
    tools = []
    for i in range(n):
        names = rng.sample(_NOUNS, rng.randint(2, 6))
        props: dict[str, Any] = {}
        for name in names:
            kind = rng.choice(["string", "string", "enum", "integer", "number", "boolean", "array", "object"])
            if kind == "enum":
                props[name] = {"type": "string", "enum": rng.sample(["low", "medium", "high", "auto", "none"], 3)}
            elif kind == "integer":
                props[name] = {"type": "integer", "minimum": 0, "maximum": rng.choice([10, 100, 1000])}
            elif kind == "array":
                props[name] = {"type": "array", "items": {"type": "string"}}
            elif kind == "object":
                inner = {"key": {"type": "string"}, "value": {"type": "string"}}
                props[name] = {"type": "object", "properties": inner, "required": list(inner)}
                if closed:
                    props[name]["additionalProperties"] = False
            else:
                props[name] = {"type": kind}
            props[name]["description"] = f"The {name}."
        params: dict[str, Any] = {"type": "object", "properties": props,
                                  "required": names if closed else names[: (len(names) + 1) // 2]}
        if closed:
            params["additionalProperties"] = False
        tools.append({"type": "function", "function": {
            "name": f"{_VERBS[i % len(_VERBS)]}_{names[0]}_{i:02d}", "description": f"Tool {i}.",
            "strict": closed, "parameters": params}})
    return tools
