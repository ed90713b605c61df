"""The Jinja environment chat templates run in: transformers' sandbox plus work and size limits.

Owns compiling a chat template exactly the way transformers' ``_compile_jinja_template`` does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, the ``{% generation %}``
block, a ``tojson`` that does not escape HTML, ``raise_exception``, ``strftime_now``, the
restricted ``dict`` and ``namespace``), and the limits that make an untrusted template safe to
render in a server: every loop iteration, call, operator, filter and output statement is one
*step* charged to the render's :class:`RenderBudget`, which fails the render with
:class:`~textproc.errors.TemplateError` when it passes ``max_steps`` or ``timeout_s``, when a value
or the text written passes ``max_output_chars``, or when the template touches an unsafe attribute.

Invariant: for a template that stays within the limits and never touches an unsafe attribute, the
rendered text is identical to transformers' (the limits only observe values, never change them).
Must not: import anything outside the standard library and jinja2, or keep per-render state
anywhere but the budget in :data:`_BUDGET` (templates are compiled once and shared).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from datetime import datetime
from functools import lru_cache, update_wrapper
from typing import Any, NoReturn

import jinja2
import jinja2.exceptions
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.runtime
import jinja2.utils
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from textproc.errors import InvalidInput, TemplateError, short

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_TIMEOUT_S",
    "RenderBudget",
    "RenderLimits",
    "compile_template",
    "active_budget",
]

DEFAULT_MAX_OUTPUT_CHARS = 8_000_000  # ~2M tokens of prompt; real templates write < 10 KB + content
DEFAULT_MAX_STEPS = 2_000_000  # ~1.2 s of work; a 1,000-message chat with Qwen3's template takes ~8,500
DEFAULT_TIMEOUT_S = 2.0
WORK_FACTOR = 4  # text written anywhere (macros, set blocks) may reach 4x max_output_chars
MAX_INT_BITS = 1_000_000  # ints beyond this are arithmetic bombs, not chat data
MAX_JSON_INDENT = 64
# Filters whose work per character is high (regexes, textwrap, pprint): one call on millions of
# characters could run for seconds where the cooperative deadline cannot interrupt it.
SLOW_FILTERS = frozenset({"urlize", "wordwrap", "striptags", "pprint", "urlencode", "xmlattr"})
SLOW_FILTER_MAX_CHARS = 200_000

# Names a template cannot spell (they contain a space), so only the instrumentation uses them.
_LOOP_FILTER = "textproc loop"
_OUT_FILTER = "textproc out"
_CONCAT_FILTER = "textproc concat"
_CHARGE_FILTER = "textproc charge"
_TEXT_FILTER = "textproc text"
_SIZE_FILTER = "textproc size"


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
            _budget().fail(f"a value is nested more than {MAX_NESTING} containers deep")
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


def _check_text(value: Any, budget: RenderBudget, what: str, used: int = 0) -> None:
    if not isinstance(value, str):
        budget.check_size(used + text_size(value, budget.max_output_chars - used), what)


# Limits used when no render is active: jinja folds constant expressions at compile time.
_COMPILE_TIME = RenderBudget("<compile>", max_steps=sys.maxsize, timeout_s=1e9)
_BUDGET: ContextVar[RenderBudget | None] = ContextVar("textproc_chat_budget", default=None)


def active_budget() -> ContextVar[RenderBudget | None]:
    """The context variable a render sets to its budget while the template runs."""
    return _BUDGET


def _budget() -> RenderBudget:
    budget = _BUDGET.get()
    return _COMPILE_TIME if budget is None else budget


# --- pre-checks for the calls that can blow up a value from small arguments -----------------

_BIG_NUMBER = re.compile(r"\d{7,}")  # a width/precision of >= 1,000,000 in a format string


def _check_format_string(fmt: str, budget: RenderBudget) -> None:
    for match in _BIG_NUMBER.finditer(fmt):
        budget.check_size(int(match.group()), f"format width {short(match.group())}")


def _estimate_str_method(obj: str, name: str, args: tuple[Any, ...], budget: RenderBudget) -> None:
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
        _check_join(obj, args[0], budget)
    elif name == "translate" and args and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        budget.check_size(len(obj) * max(longest, 1), "str.translate() result")


def _check_join(sep: str, items: list[Any] | tuple[Any, ...], budget: RenderBudget) -> None:
    total = len(sep) * max(0, len(items) - 1)
    for item in items:
        total += text_size(item, budget.max_output_chars - total)
        if total > budget.max_output_chars:
            break
    budget.check_size(total, "join result")


def _check_binop(operator: str, left: Any, right: Any, budget: RenderBudget) -> None:
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
        _check_format_string(left, budget)
        _check_text(right, budget, "%-formatting arguments", len(left))
    elif operator == "+":
        for value in (left, right):
            if not isinstance(value, (str, list, tuple)):
                return
        budget.check_size(len(left) + len(right), "concatenation with +")


# --- transformers' template globals and filters --------------------------------------------


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers overrides jinja's tojson: no HTML escaping, and json.dumps' options exposed.
    if isinstance(indent, int) and indent > MAX_JSON_INDENT or isinstance(indent, str) and len(indent) > MAX_JSON_INDENT:
        _budget().fail(f"tojson indent {short(indent)} is too large; at most {MAX_JSON_INDENT}")
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    # transformers' limited `dict` global: a call and fromkeys, nothing to reach through.
    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    # transformers' namespace: rejects underscore-prefixed attribute names.
    def __init__(*args: Any, **kwargs: Any) -> None:
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, but got "
                f"{name!r}. Please rename the attribute."
            )


class GenerationExtension(Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body (transformers' AssistantTracker).

    Like transformers it compiles to a call block, so the body is its own scope. Assistant-token
    masks are not tracked here; the body's text is returned unchanged.
    """

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context: jinja2.nodes.EvalContext, caller: jinja2.runtime.Macro) -> str:
        return str(caller())


# --- instrumentation: charge every loop iteration, output and ~ concatenation --------------


@jinja2.pass_context
def _loop_guard(context: jinja2.runtime.Context, iterable: Iterable[Any]) -> Iterator[Any]:
    budget = _budget()
    for item in iterable:
        budget.step()
        yield item


@jinja2.pass_context
def _out_guard(context: jinja2.runtime.Context, value: Any) -> Any:
    # Measures what `{{ value }}` writes and returns the value itself, so jinja's own str() or
    # escape() (inside {% autoescape %}) still does the conversion exactly as in transformers.
    budget = _budget()
    if isinstance(value, str):
        budget.write(len(value))
    else:
        _check_text(value, budget, "an output value")
        budget.write(len(str(value)))
    return value


@jinja2.pass_context
def _charge_guard(context: jinja2.runtime.Context, n_chars: int) -> str:
    # The literal template text of one output statement: charged, writes nothing.
    _budget().write(n_chars)
    return ""


@jinja2.pass_context
def _concat_guard(context: jinja2.runtime.Context, operands: list[Any]) -> str:
    # `a ~ b ~ c` outside autoescape blocks: jinja's str_join, with each operand sized before
    # str() and the running total checked, so no operand list can build a huge string.
    budget = _budget()
    budget.step()
    parts: list[str] = []
    total = 0
    for operand in operands:
        _check_text(operand, budget, "a ~ concatenation", total)
        part = str(operand)
        total += len(part)
        budget.check_size(total, "a ~ concatenation")
        parts.append(part)
    return "".join(parts)


@jinja2.pass_context
def _text_guard(context: jinja2.runtime.Context, value: Any) -> Any:
    _check_text(value, _budget(), "a ~ operand")
    return value


@jinja2.pass_context
def _size_guard(context: jinja2.runtime.Context, value: Any) -> Any:
    budget = _budget()
    budget.step()
    return budget.check_value(value, "a ~ concatenation")


def _wrap(expr: nodes.Expr, filter_name: str, lineno: int) -> nodes.Filter:
    return nodes.Filter(expr, filter_name, [], [], None, None, lineno=lineno)


class _Instrument(NodeTransformer):
    """Rewrite a parsed template so loops, outputs and ``~`` charge the render budget."""

    def __init__(self) -> None:
        self.in_eval_context_block = 0  # inside {% autoescape %}: keep jinja's own ~ joining

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        iterable: nodes.Expr = node.iter  # type: ignore[assignment]  # the parser only puts an Expr here
        node.iter = _wrap(iterable, _LOOP_FILTER, node.lineno)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)
        literal = sum(len(child.data) for child in node.nodes if isinstance(child, nodes.TemplateData))
        children: list[nodes.Expr] = [_wrap(nodes.Const(literal), _CHARGE_FILTER, node.lineno)] if literal else []
        for child in node.nodes:
            is_literal = isinstance(child, nodes.TemplateData)
            children.append(child if is_literal else _wrap(child, _OUT_FILTER, child.lineno))
        node.nodes = children
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        if self.in_eval_context_block:
            node.nodes = [_wrap(operand, _TEXT_FILTER, node.lineno) for operand in node.nodes]
            return _wrap(node, _SIZE_FILTER, node.lineno)
        return _wrap(nodes.List(list(node.nodes), lineno=node.lineno), _CONCAT_FILTER, node.lineno)

    def visit_ScopedEvalContextModifier(self, node: nodes.ScopedEvalContextModifier) -> nodes.Node:
        self.in_eval_context_block += 1
        self.generic_visit(node)
        self.in_eval_context_block -= 1
        return node


# Filters that turn their input (or arguments) into text: size it before they call str() on it.
_STRINGIFYING_FILTERS = frozenset(
    {
        "capitalize", "center", "e", "escape", "forceescape", "format", "indent", "lower", "pprint",
        "replace", "safe", "string", "striptags", "sum", "title", "tojson", "trim", "truncate",
        "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
    }
)


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a built-in filter so its input and result are size-checked and it costs a step."""
    n_leading = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        if name == "join" and len(args) > n_leading and not isinstance(args[n_leading], (list, tuple, str)):
            value = args[n_leading]
            if not isinstance(value, jinja2.runtime.Undefined):
                args = (*args[:n_leading], list(value), *args[n_leading + 1 :])
        _precheck_filter(name, args[n_leading:], kwargs, budget)
        return budget.check_value(func(*args, **kwargs), f"the result of filter {name!r}")

    return update_wrapper(guarded, func)  # keeps jinja_pass_arg, so jinja passes the same context


def _precheck_filter(name: str, values: tuple[Any, ...], kwargs: dict[str, Any], budget: RenderBudget) -> None:
    # values: the filtered value, then the filter's positional arguments.
    if name in _STRINGIFYING_FILTERS:
        _check_text((values, kwargs), budget, f"the input of filter {name!r}")
    if name in SLOW_FILTERS:
        size = text_size((values, kwargs), SLOW_FILTER_MAX_CHARS)
        if size > SLOW_FILTER_MAX_CHARS:
            budget.fail(f"filter {name!r} takes at most {SLOW_FILTER_MAX_CHARS} characters of input, got about {size}")
    if name in ("batch", "slice") and len(values) > 1 and isinstance(values[1], int):
        size = len(values[0]) if isinstance(values[0], (str, list, tuple, dict)) else 0
        if values[1] > max(10_000, size):
            budget.fail(f"filter {name!r} count {values[1]} is too large for a value of {size} items")
    if name in ("center", "indent") and values:
        width = values[1] if len(values) > 1 else kwargs.get("width", 0)
        text = str(values[0])
        if isinstance(width, int):
            lines = text.count("\n") + 1 if name == "indent" else 1
            budget.check_size(len(text) + max(width, 0) * lines, f"filter {name!r} result")
        elif isinstance(width, str):
            budget.check_size(len(text) + len(width) * (text.count("\n") + 1), f"filter {name!r} result")
    elif name == "format" and values and isinstance(values[0], str):
        _check_format_string(values[0], budget)
    elif name == "replace" and len(values) >= 3:
        text, old, new = (str(v) for v in values[:3])
        count = text.count(old) if old else len(text) + 1
        budget.check_size(len(text) + count * max(0, len(new) - len(old)), "filter 'replace' result")
    elif name == "join" and values and isinstance(values[0], (list, tuple)):
        sep = values[1] if len(values) > 1 else kwargs.get("d", "")
        _check_join(sep if isinstance(sep, str) else "", values[0], budget)
    elif name == "wordwrap" and len(values) > 1 and isinstance(values[1], int) and values[1] < 1:
        budget.fail("wordwrap width must be positive")


class SandboxedChatEnvironment(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment with every value-producing path metered."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree: nodes.Template = _Instrument().visit(super()._parse(source, name, filename))
        tree.set_environment(self)
        return tree

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        budget = _budget()
        budget.step()
        _check_binop(operator, left, right, budget)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _budget()
        budget.step()
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            name = getattr(__obj, "__name__", "")
            if name == "join" and args and not isinstance(args[0], (list, tuple, str)):
                args = (list(args[0]), *args[1:])  # a generator from map(): size it before joining
            _estimate_str_method(owner, name, args, budget)
        elif isinstance(getattr(getattr(__obj, "__wrapped__", None), "__self__", None), str):
            # str.format / format_map, already routed through jinja's SandboxedFormatter
            _check_text((args, kwargs), budget, "format() arguments", len(__obj.__wrapped__.__self__))
        elif __obj is jinja2.utils.generate_lorem_ipsum or getattr(__obj, "__name__", "") == "generate_lorem_ipsum":
            budget.check_size(int(args[0] if args else kwargs.get("n", 5)) * 1000, "lipsum()")
        result = super().call(__context, __obj, *args, **kwargs)
        return budget.check_value(result, f"the result of calling {short(getattr(__obj, '__name__', __obj))}")

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        # jinja returns an Undefined that prints as "" here; a template that reaches for Python
        # internals is hostile, so fail loudly instead of rendering on.
        raise jinja2.exceptions.SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is not None:
            _check_format_string(value.__self__, _budget())
        return wrapper


def _make_environment() -> SandboxedChatEnvironment:
    env = SandboxedChatEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationExtension, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    for name, func in list(env.filters.items()):
        env.filters[name] = _guard_filter(name, func)
    env.filters[_LOOP_FILTER] = _loop_guard
    env.filters[_OUT_FILTER] = _out_guard
    env.filters[_CONCAT_FILTER] = _concat_guard
    env.filters[_CHARGE_FILTER] = _charge_guard
    env.filters[_TEXT_FILTER] = _text_guard
    env.filters[_SIZE_FILTER] = _size_guard
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


_ENVIRONMENT: list[SandboxedChatEnvironment] = []


def _environment() -> SandboxedChatEnvironment:
    if not _ENVIRONMENT:
        _ENVIRONMENT.append(_make_environment())
    return _ENVIRONMENT[0]


@lru_cache(maxsize=128)
def compile_template(source: str) -> jinja2.Template:
    """Compile ``source`` once (cached by source text); jinja errors propagate to the caller."""
    template: jinja2.Template = _environment().from_string(source)
    return template
