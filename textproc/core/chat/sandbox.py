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
anywhere but the active budget (:mod:`textproc.core.chat.budget`; templates are compiled once
and shared).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
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

from textproc.core.chat.budget import (
    MAX_JSON_INDENT,
    RenderBudget,
    check_binop,
    check_format_string,
    check_join,
    check_text,
    current_budget,
    estimate_str_method,
    text_size,
)
from textproc.errors import short

__all__ = ["compile_template", "SandboxedChatEnvironment"]

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
        current_budget().fail(f"tojson indent {short(indent)} is too large; at most {MAX_JSON_INDENT}")
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
    budget = current_budget()
    for item in iterable:
        budget.step()
        yield item


@jinja2.pass_context
def _out_guard(context: jinja2.runtime.Context, value: Any) -> Any:
    # Measures what `{{ value }}` writes and returns the value itself, so jinja's own str() or
    # escape() (inside {% autoescape %}) still does the conversion exactly as in transformers.
    budget = current_budget()
    if isinstance(value, str):
        budget.write(len(value))
    else:
        check_text(value, budget, "an output value")
        budget.write(len(str(value)))
    return value


@jinja2.pass_context
def _charge_guard(context: jinja2.runtime.Context, n_chars: int) -> str:
    # The literal template text of one output statement: charged, writes nothing.
    current_budget().write(n_chars)
    return ""


@jinja2.pass_context
def _concat_guard(context: jinja2.runtime.Context, operands: list[Any]) -> str:
    # `a ~ b ~ c` outside autoescape blocks: jinja's str_join, with each operand sized before
    # str() and the running total checked, so no operand list can build a huge string.
    budget = current_budget()
    budget.step()
    parts: list[str] = []
    total = 0
    for operand in operands:
        check_text(operand, budget, "a ~ concatenation", total)
        part = str(operand)
        total += len(part)
        budget.check_size(total, "a ~ concatenation")
        parts.append(part)
    return "".join(parts)


@jinja2.pass_context
def _text_guard(context: jinja2.runtime.Context, value: Any) -> Any:
    check_text(value, current_budget(), "a ~ operand")
    return value


@jinja2.pass_context
def _size_guard(context: jinja2.runtime.Context, value: Any) -> Any:
    budget = current_budget()
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
        budget = current_budget()
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
        check_text((values, kwargs), budget, f"the input of filter {name!r}")
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
        check_format_string(values[0], budget)
    elif name == "replace" and len(values) >= 3:
        text, old, new = (str(v) for v in values[:3])
        count = text.count(old) if old else len(text) + 1
        budget.check_size(len(text) + count * max(0, len(new) - len(old)), "filter 'replace' result")
    elif name == "join" and values and isinstance(values[0], (list, tuple)):
        sep = values[1] if len(values) > 1 else kwargs.get("d", "")
        check_join(sep if isinstance(sep, str) else "", values[0], budget)
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
        budget = current_budget()
        budget.step()
        check_binop(operator, left, right, budget)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        budget = current_budget()
        budget.step()
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            name = getattr(__obj, "__name__", "")
            if name == "join" and args and not isinstance(args[0], (list, tuple, str)):
                args = (list(args[0]), *args[1:])  # a generator from map(): size it before joining
            estimate_str_method(owner, name, args, budget)
        elif isinstance(getattr(getattr(__obj, "__wrapped__", None), "__self__", None), str):
            # str.format / format_map, already routed through jinja's SandboxedFormatter
            check_text((args, kwargs), budget, "format() arguments", len(__obj.__wrapped__.__self__))
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
            check_format_string(value.__self__, current_budget())
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
