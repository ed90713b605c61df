"""The Responses API's ``tools`` and ``tool_choice``: what the model is offered, and the names
its calls come back under.

- ``function`` tools are offered as chat function tools.
- A ``namespace`` tool groups function tools; each is offered to the model under its flat name
  ``<namespace>__<name>`` (Codex CLI's own flattening: the namespace's trailing and the name's
  leading underscores trimmed around the ``__``), described by the namespace's description and
  its own. A call of a flat name comes back as the Responses API returns namespaced calls: a
  ``function_call`` item with ``namespace`` and the function's own ``name``; a namespaced
  ``function_call`` handed back in ``input`` is flattened again.
- A tool this server cannot run (hosted tools such as ``web_search``, ``file_search``,
  ``code_interpreter``, ``image_generation``, ``mcp``, ``computer``; tools whose calls are not
  function calls, such as ``custom``, ``local_shell``, ``shell``, ``apply_patch``) is not offered
  to the model: it is named in the response's ``warnings`` (code ``tool_not_offered``) rather
  than refused, so an agent that always sends one (Codex CLI sends ``web_search``) still works.
  ``tool_choice`` forcing such a tool is a 400: the call cannot happen. A type OpenAI does not
  define is a 400 naming it (a typo must not silently drop a tool). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textproc.errors import short
from textproc.http.api_types import ApiError

__all__ = ["ResponsesTools", "parse_tools", "flat_name", "chat_tool_choice", "NOT_OFFERED"]

# tool types the Responses API defines whose calls this server cannot produce or run
NOT_OFFERED = (
    "web_search", "web_search_2025_08_26", "web_search_preview",
    "web_search_preview_2025_03_11", "file_search", "code_interpreter", "image_generation",
    "mcp", "computer", "computer_use_preview", "local_shell", "shell", "apply_patch", "custom",
    "tool_search", "programmatic_tool_calling",
)
_FUNCTION_KEYS = ("description", "parameters", "strict")


def flat_name(namespace: str, name: str) -> str:
    """The name a namespaced function is offered under.

    >>> flat_name("mcp__docs__", "_search")
    'mcp__docs__search'
    >>> flat_name("multi_agent_v1", "spawn_agent")
    'multi_agent_v1__spawn_agent'
    """
    return f"{namespace.rstrip('_')}__{name.lstrip('_')}"


@dataclass
class ResponsesTools:
    """The tools of one request: ``chat`` (what the model is offered, chat-completions shape),
    ``echo`` (the Responses tools as the response repeats them), ``namespaced`` (flat name ->
    (namespace, name)) and ``warnings`` (tools not offered)."""

    chat: list[dict[str, Any]] | None = None
    echo: list[dict[str, Any]] = field(default_factory=list)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    warnings: list[dict[str, Any]] = field(default_factory=list)

    def call_name(self, name: str) -> tuple[str | None, str]:
        """(namespace, name) of a call the model made under ``name``."""
        found = self.namespaced.get(name)
        return (None, name) if found is None else found


def _string(tool: dict[str, Any], key: str, at: str) -> str:
    value = tool.get(key)
    if not isinstance(value, str) or not value:
        raise ApiError(f"{at}.{key} must be a non-empty string, got {short(value)}",
                       param=f"{at}.{key}")
    return value


def _not_offered(kind: str, at: str) -> dict[str, Any]:
    return {"code": "tool_not_offered", "param": at,
            "message": f"tool type {kind!r} at {at} is not run by this server; it was not "
                       "offered to the model (this server runs function and namespace tools)"}


def _function(tool: dict[str, Any], at: str, name: str, prefix: str = "") -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name}
    for key in _FUNCTION_KEYS:
        if tool.get(key) is not None:
            fn[key] = tool[key]
    if prefix:
        fn["description"] = f"{prefix}\n\n{fn['description']}" if fn.get("description") \
            else prefix
    return {"type": "function", "function": fn}


def parse_tools(tools: list[Any] | None) -> ResponsesTools:
    """Check ``tools`` and split them into what is offered and what is named as not offered."""
    out = ResponsesTools()
    if tools is None:
        return out
    chat: list[dict[str, Any]] = []
    where: dict[str, str] = {}  # offered name -> where it was declared

    def offer(fn: dict[str, Any], at: str) -> None:
        name = fn["function"]["name"]
        if name in where:
            raise ApiError(f"tool name {name!r} at {at} is declared twice (also at "
                           f"{where[name]}; a namespaced function is offered as "
                           "<namespace>__<name>)", param=at)
        where[name] = at
        chat.append(fn)

    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            offer(_function(tool, at, _string(tool, "name", at)), at)
            out.echo.append({"type": "function", "description": None, "parameters": None,
                             "strict": None, **chat[-1]["function"]})
        elif kind == "namespace":
            out.echo.append(_namespace(tool, at, out, offer))
        elif kind in NOT_OFFERED:
            out.warnings.append(_not_offered(kind, at))
        else:
            raise ApiError(f"tool type {short(kind)} at {at}.type is not a Responses API tool "
                           f"type; this server runs function and namespace tools (and does not "
                           f"offer: {', '.join(NOT_OFFERED)})", param=f"{at}.type")
    out.chat = chat or None
    return out


def _namespace(tool: dict[str, Any], at: str, out: ResponsesTools,
               offer: Any) -> dict[str, Any]:
    """Offer a namespace's function tools; return the namespace as echoed."""
    namespace = _string(tool, "name", at)
    members = tool.get("tools")
    if not isinstance(members, list):
        raise ApiError(f"{at}.tools must be a list of function tools, got {short(members)}",
                       param=f"{at}.tools")
    description = tool.get("description")
    prefix = f"({namespace}) {description}" if isinstance(description, str) and description \
        else ""
    echoed = []
    for j, member in enumerate(members):
        inner = f"{at}.tools[{j}]"
        kind = member.get("type") if isinstance(member, dict) else None
        if kind == "function":
            name = _string(member, "name", inner)
            flat = flat_name(namespace, name)
            offer(_function(member, inner, flat, prefix), inner)
            out.namespaced[flat] = (namespace, name)
            echoed.append({k: member[k] for k in ("type", "name", *_FUNCTION_KEYS)
                           if member.get(k) is not None})
        elif kind == "custom":
            out.warnings.append(_not_offered(kind, inner))
        else:
            raise ApiError(f"tool type {short(kind)} at {inner}.type is not allowed in a "
                           "namespace; allowed: function (custom is not offered)",
                           param=f"{inner}.type")
    return {"type": "namespace", "name": namespace, "description": description,
            "tools": echoed}


def chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """``tool_choice`` as the chat rules take it (``none`` / ``auto`` / ``required`` are checked
    there). A forced function may be named by its flat name or, with ``namespace``, by its
    namespace and own name."""
    if choice is None or isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function" and isinstance(choice.get("name"), str):
        name = choice["name"]
        if isinstance(choice.get("namespace"), str):
            name = flat_name(choice["namespace"], name)
        return {"type": "function", "function": {"name": name}}
    if kind in NOT_OFFERED:
        raise ApiError(f"tool_choice forces a {kind!r} tool, which this server does not run",
                       param="tool_choice.type")
    raise ApiError(f"tool_choice {short(choice)} is not supported; use 'none', 'auto', "
                   "'required' or {\"type\": \"function\", \"name\": ...}", param="tool_choice")
