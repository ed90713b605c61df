"""The engine methods an operator may call (``EngineCall``): vLLM's ``EngineCore`` admin methods,
their arguments in vLLM's order with vLLM's defaults, and the one check of a call's arguments.

An engine answers each call with ``EngineLink.answer_call``: what it can do, or a 501 naming
why not. The HTTP routes (``textproc.http.admin``) build calls from vLLM's query parameters;
vLLM's engine processes take the same names and arguments as utility calls
(``textproc.vllm_front``).
"""

from __future__ import annotations

from typing import Any

from textproc.errors import short
from textproc.protocol import EngineCall

__all__ = ["ENGINE_CALLS", "PAUSE_MODES", "call_args", "check_call"]

PAUSE_MODES = ("abort", "wait", "keep")  # vLLM's PauseMode: what happens to running requests

# method -> its arguments in vLLM's order, with vLLM's defaults
ENGINE_CALLS: dict[str, tuple[tuple[str, Any], ...]] = {
    "reset_prefix_cache": (("reset_running_requests", False), ("reset_connector", False)),
    "sleep": (("level", 1), ("mode", "abort")),
    "wake_up": (("tags", None),),
    "is_sleeping": (),
    "pause_scheduler": (("mode", "abort"), ("clear_cache", True)),
    "resume_scheduler": (),
    "is_scheduler_paused": (),
    # vLLM's runtime LoRA routes: the engine loads (or forgets) an adapter under a name
    "load_lora_adapter": (("lora_name", ""), ("lora_path", "")),
    "unload_lora_adapter": (("lora_name", ""),),
}


def check_call(call: EngineCall) -> str | None:
    """What is wrong with ``call`` (an unknown method or argument, a value of the wrong kind),
    or None."""
    spec = ENGINE_CALLS.get(call.method)
    if spec is None:
        return f"unknown engine method {short(call.method)}; known: {sorted(ENGINE_CALLS)}"
    names = dict(spec)
    for name, value in call.args.items():
        if name not in names:
            return (f"{call.method} takes no argument {short(name)}; it takes "
                    f"{sorted(names) or 'none'}")
        if name in ("mode",) and value not in PAUSE_MODES:
            return f"mode={short(value)}; allowed: {', '.join(PAUSE_MODES)}"
        if name == "level" and (type(value) is not int or not 0 <= value <= 2):
            return f"level={short(value)}; allowed: 0, 1 or 2"
        if name == "tags" and value is not None and not (
                isinstance(value, list) and all(isinstance(t, str) for t in value)):
            return f"tags={short(value)}; allowed: a list of strings or null"
        if name in ("lora_name", "lora_path") and (not isinstance(value, str) or not value):
            return f"{name}={short(value)}; allowed: a non-empty string"
        if name in ("reset_running_requests", "reset_connector", "clear_cache") and \
                not isinstance(value, bool):
            return f"{name}={short(value)}; allowed: true or false"
    return None


def call_args(call: EngineCall) -> list[Any]:
    """``call``'s arguments in vLLM's order, vLLM's default for each one not given."""
    return [call.args.get(name, default) for name, default in ENGINE_CALLS[call.method]]
