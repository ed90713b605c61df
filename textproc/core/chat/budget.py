"""The work and size budget of one chat-template render, and the checks that charge it.

Owns :class:`RenderLimits` (max steps, timeout, output size), :class:`RenderBudget` (the running
count for one render, which fails it with :class:`~textproc.errors.TemplateError`), the context
variable that holds the active budget, and the pre-checks for calls that can blow a value up
from small arguments (format strings, str methods, join, arithmetic). The sandbox
(:mod:`textproc.core.chat.sandbox`) calls these; they only observe values, never change them.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from contextvars import ContextVar
from typing import Any, NoReturn

import jinja2

from textproc.errors import InvalidInput, TemplateError, short

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_TIMEOUT_S",
    "WORK_FACTOR",
    "MAX_INT_BITS",
    "MAX_JSON_INDENT",
    "MAX_NESTING",
    "RenderLimits",
    "RenderBudget",
    "text_size",
    "check_text",
    "active_budget",
    "current_budget",
    "check_format_string",
    "estimate_str_method",
    "check_join",
    "check_binop",
]

DEFAULT_MAX_OUTPUT_CHARS = 8_000_000  # ~2M tokens of prompt; real templates write < 10 KB + content
DEFAULT_MAX_STEPS = 2_000_000  # ~1.2 s of work; a 1,000-message chat with Qwen3's template takes ~8,500
DEFAULT_TIMEOUT_S = 2.0
WORK_FACTOR = 4  # text written anywhere (macros, set blocks) may reach 4x max_output_chars
MAX_INT_BITS = 1_000_000  # ints beyond this are arithmetic bombs, not chat data
MAX_JSON_INDENT = 64


@dataclasses.dataclass(frozen=True)
class RenderLimits:
    """How much work one render may do before it fails with TemplateError.

    ``max_steps`` (loop iterations, calls, operators, filters, outputs) is deterministic;
    ``timeout_s`` is wall-clock, checked at every step; ``max_output_chars`` bounds the prompt and
    every value built on the way (text written anywhere may reach 4x it).
    """

    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    max_steps: int = DEFAULT_MAX_STEPS
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("max_output_chars", "max_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InvalidInput(f"RenderLimits.{name} must be a positive int, got {short(value)}")
        if not isinstance(self.timeout_s, (int, float)) or not self.timeout_s > 0:
            raise InvalidInput(f"RenderLimits.timeout_s must be a positive number, got {short(self.timeout_s)}")


class RenderBudget:
    """Work and size limits for one render; every hook in the environment charges it.

    ``steps`` counts loop iterations, calls, intercepted operators, filters and output
    statements; ``written_chars`` counts text written by output statements anywhere.
    """

    __slots__ = (
        "template_name",
        "max_output_chars",
        "max_steps",
        "timeout_s",
        "deadline",
        "steps",
        "written_chars",
    )

    def __init__(
        self,
        template_name: str,
        *,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        max_steps: int = DEFAULT_MAX_STEPS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.template_name = template_name
        self.max_output_chars = max_output_chars
        self.max_steps = max_steps
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.steps = 0
        self.written_chars = 0

    def fail(self, what: str) -> NoReturn:
        raise TemplateError(f"chat template {self.template_name}: {what}")

    def step(self) -> None:
        """Charge one step; fail past ``max_steps`` or the deadline."""
        self.steps += 1
        if self.steps > self.max_steps:
            self.fail(
                f"rendering took more than max_steps={self.max_steps} steps (loop iterations, "
                "calls, operators, outputs); the template loops without end or the input is too "
                "large"
            )
        if time.monotonic() > self.deadline:
            self.fail(f"rendering took longer than timeout_s={self.timeout_s}")

    def write(self, n_chars: int) -> None:
        self.step()
        self.written_chars += n_chars
        limit = WORK_FACTOR * self.max_output_chars
        if self.written_chars > limit:
            self.fail(
                f"the template wrote more than {limit} characters (4 x max_output_chars="
                f"{self.max_output_chars})"
            )

    def check_size(self, n: int, what: str) -> None:
        if n > self.max_output_chars:
            self.fail(f"{what} would have {n} items/characters; max_output_chars={self.max_output_chars}")

    def check_value(self, value: Any, what: str) -> Any:
        """Fail if ``value`` is a string or container over the size limit, or a huge int."""
        if isinstance(value, (str, list, tuple, dict, set, frozenset)):
            self.check_size(len(value), what)
        elif isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            self.fail(f"{what} is an integer of {value.bit_length()} bits; the limit is {MAX_INT_BITS}")
        return value


MAX_NESTING = 200  # containers nested deeper than this are refused before str() recurses into them


def text_size(value: Any, limit: int, depth: int = 0) -> int:
    """About how many characters ``str(value)`` has, stopping early once past ``limit``.

    Containers holding many references to one big string are the cheap way to a huge ``str()``
    (``[big] * 1000``); this walks them without building the text. Strings inside containers
    count their length (their repr may add escapes; the result is size-checked afterwards).
    """
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple, set, frozenset, dict, jinja2.utils.Namespace)):
        if depth > MAX_NESTING:
            current_budget().fail(f"a value is nested more than {MAX_NESTING} containers deep")
        if isinstance(value, jinja2.utils.Namespace):
            value = object.__getattribute__(value, "_Namespace__attrs")
        total = 2
        if isinstance(value, dict):
            for key, item in value.items():
                total += 4 + text_size(key, limit - total, depth + 1) + text_size(item, limit - total, depth + 1)
                if total > limit:
                    return total
        else:
            for item in value:
                total += 2 + text_size(item, limit - total, depth + 1)
                if total > limit:
                    return total
        return total
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() // 3 + 2
    return 16  # floats, None, bools, macros, Undefined, cyclers: short reprs


def check_text(value: Any, budget: RenderBudget, what: str, used: int = 0) -> None:
    if not isinstance(value, str):
        budget.check_size(used + text_size(value, budget.max_output_chars - used), what)


# Limits used when no render is active: jinja folds constant expressions at compile time.
_COMPILE_TIME = RenderBudget("<compile>", max_steps=sys.maxsize, timeout_s=1e9)
_BUDGET: ContextVar[RenderBudget | None] = ContextVar("textproc_chat_budget", default=None)


def active_budget() -> ContextVar[RenderBudget | None]:
    """The context variable a render sets to its budget while the template runs."""
    return _BUDGET


def current_budget() -> RenderBudget:
    budget = _BUDGET.get()
    return _COMPILE_TIME if budget is None else budget


# --- pre-checks for the calls that can blow up a value from small arguments -----------------

_BIG_NUMBER = re.compile(r"\d{7,}")  # a width/precision of >= 1,000,000 in a format string


def check_format_string(fmt: str, budget: RenderBudget) -> None:
    for match in _BIG_NUMBER.finditer(fmt):
        budget.check_size(int(match.group()), f"format width {short(match.group())}")


def estimate_str_method(obj: str, name: str, args: tuple[Any, ...], budget: RenderBudget) -> None:
    """Refuse str methods whose result would pass the size limit, before they allocate it."""
    if name in ("ljust", "rjust", "center", "zfill") and args and isinstance(args[0], int):
        budget.check_size(args[0], f"str.{name}() width")
    elif name == "expandtabs":
        tab = args[0] if args and isinstance(args[0], int) else 8
        budget.check_size(len(obj) + obj.count("\t") * max(tab, 0), "str.expandtabs() result")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        count = obj.count(args[0]) if args[0] else len(obj) + 1
        budget.check_size(len(obj) + count * max(0, len(args[1]) - len(args[0])), "str.replace() result")
    elif name == "join" and args and isinstance(args[0], (list, tuple)):
        check_join(obj, args[0], budget)
    elif name == "translate" and args and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        budget.check_size(len(obj) * max(longest, 1), "str.translate() result")


def check_join(sep: str, items: list[Any] | tuple[Any, ...], budget: RenderBudget) -> None:
    total = len(sep) * max(0, len(items) - 1)
    for item in items:
        total += text_size(item, budget.max_output_chars - total)
        if total > budget.max_output_chars:
            break
    budget.check_size(total, "join result")


def check_binop(operator: str, left: Any, right: Any, budget: RenderBudget) -> None:
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
                budget.check_size(len(seq) * max(times, 0), "repetition with *")
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                budget.fail(f"integer product of {left.bit_length()} x {right.bit_length()} bits is too large")
    elif operator == "**":
        if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
            if left.bit_length() * right > MAX_INT_BITS:
                budget.fail(f"integer power {short(left)} ** {short(right)} is too large")
    elif operator == "%" and isinstance(left, str):
        check_format_string(left, budget)
        check_text(right, budget, "%-formatting arguments", len(left))
    elif operator == "+":
        for value in (left, right):
            if not isinstance(value, (str, list, tuple)):
                return
        budget.check_size(len(left) + len(right), "concatenation with +")
