"""One tool call written the way each family's chat template writes it (tests and bench).

``render(fmt, name, args)`` gives the text of one call of tool ``name`` with the arguments
object ``args`` in tool format ``fmt`` (a ``textproc.core.parsing.TOOL_FORMATS`` name), as the
real templates render assistant tool calls (checked in tests/unit/test_parsing_detect.py).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["render"]

DS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>")


def _raw(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def _py(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v + "'"  # (the instances hold no quote, backslash or control character)
    return repr(v) if not isinstance(v, float) else json.dumps(v)


def render(fmt: str, name: str, args: dict[str, Any]) -> str:
    """One call as the family's chat template writes it."""
    j = json.dumps(args, ensure_ascii=False)
    if fmt == "hermes":
        return f'<tool_call>\n{{"name": "{name}", "arguments": {j}}}\n</tool_call>'
    if fmt == "llama3_json":
        return f'{{"name": "{name}", "parameters": {j}}}'
    if fmt == "granite":
        return f'<|tool_call|>[{{"name": "{name}", "arguments": {j}}}]'
    if fmt == "mistral":
        return f"[TOOL_CALLS]{name}[ARGS]{j}"
    if fmt == "deepseek_v3":
        return f"{DS[0]}{DS[1]}function{DS[2]}{name}\n```json\n{j}\n```{DS[3]}{DS[4]}"
    if fmt == "deepseek_v31":
        return f"{DS[0]}{DS[1]}{name}{DS[2]}{j}{DS[3]}{DS[4]}"
    if fmt == "kimi_k2":
        return (f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0<|tool_call_argument_begin|>"
                f"{j}<|tool_call_end|><|tool_calls_section_end|>")
    if fmt == "gpt_oss":
        return f" to=functions.{name}<|channel|>commentary json<|message|>{j}"
    if fmt == "qwen3_coder":
        params = "".join(f"<parameter={k}>\n{_raw(v)}\n</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    if fmt in ("glm45", "glm47"):
        nl = "\n" if fmt == "glm45" else ""
        kv = "".join(f"<arg_key>{k}</arg_key>{nl}<arg_value>{_raw(v)}</arg_value>{nl}" for k, v in args.items())
        return f"<tool_call>{name}{nl}{kv}</tool_call>"
    assert fmt == "pythonic"
    return f"[{name}(" + ", ".join(f"{k}={_py(v)}" for k, v in args.items()) + ")]"
