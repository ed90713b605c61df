"""Fuzz chat rendering: random templates, escape payloads, endless work, random messages and tools.

- Templates built at random from a grammar of Jinja snippets (loops, macros, recursion, filters,
  string methods, namespace writes, generation blocks, syntax errors) with known sandbox-escape
  payloads and endless-work snippets mixed in: the render gives a str or TemplateError within the
  limits' time, and no output shows what an escape would (a builtin class or method repr,
  ``__globals__``, a module).
- Random JSON values in place of messages, roles, content, tool_calls, tools and template
  variables, into CHATML_TEMPLATE and every real template present in .cache/templates: a str,
  or InvalidInput / TemplateError. Lone surrogates in content render or fail the same way.

Deeper run: ``TEXTPROC_MAX_EXAMPLES=5000 .venv/bin/python -m pytest tests/fuzz/test_fuzz_chat.py``.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.helpers.templates import REAL_TEMPLATES, TEMPLATES_DIR
from textproc.core.chat.template import CHATML_TEMPLATE, RenderLimits, render_chat
from textproc.errors import InvalidInput, TemplateError

LIMITS = RenderLimits(max_steps=200_000, timeout_s=0.5, max_output_chars=200_000)
# What an escape would print. The reprs of the template globals themselves (cycler, joiner,
# namespace classes, lipsum/range/raise_exception functions, generators from filters) are
# harmless and print the same under transformers, so they are allowed.
_LEAK_MARKS = ("<built-in", "<module ", "__globals__", "<bound method", "<method-wrapper",
               "<slot wrapper", "mappingproxy", "__subclasses__", "<class 'function'>")
_ALLOWED_CLASSES = {"jinja2.utils.Cycler", "jinja2.utils.Joiner", "textproc.core.chat.sandbox._TemplateNamespace"}
_CLASS_REPR = re.compile(r"<class '([^']+)'>")


def _leaks(out: str) -> list[str]:
    found = [mark for mark in _LEAK_MARKS if mark in out]
    found += [m for m in _CLASS_REPR.findall(out) if m not in _ALLOWED_CLASSES]
    return found

_EXPR = [
    "messages", "messages[0]", "messages[-1].content", "m", "m.role", "m['content']", "loop.index",
    "x", "ns.v", "tools", "1", "'a'", "'%s'", "[1, 2, 3]", "{'a': 1}", "range(10)", "range(99999999)",
    "none", "true", "9 ** 9", "'x' * 1000", "x * x", "'{}'.format(x)", "(1, 2)", "self", "cycler",
    "joiner", "namespace", "lipsum", "dict", "messages.__class__", "''.__class__.__mro__", "m | tojson",
    "x | string", "x | list", "x | join(',')", "x | length", "x | items", "x | map('upper')",
    "x | selectattr('role')", "x | sort", "x | unique", "x | reverse", "x | batch(3)",
    "x | wordwrap(3)", "x | indent(4)", "x | replace('a', 'bb')", "x | center(1000000)",
    "x | format(x)", "x | int", "x | float", "x | abs", "x | first", "x | last", "x | trim", "x | e",
    "x | safe", "x | pprint", "x | urlize", "x | truncate(3)", "x | groupby('role')", "x | sum",
    "x | min", "x | max", "x | attr('__class__')", "x.__init__", "x.mro", "strftime_now('%Y')",
    "x is defined", "x is string", "x in messages", "x ~ x", "-x", "not x", "x if x else 'n'",
    "x[1:]", "x[::-1]", "x.split(',')", "x.upper()", "x.items()", "x.keys()", "x.append(1)",
    "x.update({})", "x.pop()", "x | tojson(indent=2)", "x | string | length", "caller()", "varargs",
    "kwargs", "ns", "raise_exception('boom')", "'%s' % x", "x.__len__()", "'ab'.join(x)",
    "'{0.__class__}'.format(x)", "x | map(attribute='__class__') | list", "dict(a=1)",
    "messages | map(attribute='content') | join", "(x ~ x) * 1000", "x | tojson | length",
]
_PAYLOADS = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ self._TemplateReference__context }}",
    "{{ '{0.__class__.__mro__}'.format('') }}",
    "{{ ('{0.__class__}'|attr('format'))('') }}",
    "{% set ns = namespace(__class__=1) %}",
    "{% include '/etc/passwd' %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
    "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
    "{% set s = 'x' * 100000 %}{{ s * 100000 }}",
    "{% set ns = namespace(v=[]) %}{% for i in range(100000) %}{% set ns.v = ns.v + ns.v + [1] %}{% endfor %}",
    "{{ 'x' | center(2 ** 40) }}",
    "{{ (range(10 ** 8) | list) | length }}",
    "{{ 10 ** 10 ** 10 }}",
    "{{ [[1] * 10 ** 6] * 10 ** 6 | tojson }}",
]


def _stmt(depth: int) -> st.SearchStrategy[str]:
    e = st.one_of(st.sampled_from(_EXPR), st.builds(lambda a, b, op: f"({a} {op} {b})", st.sampled_from(_EXPR),
                                                    st.sampled_from(_EXPR), st.sampled_from(["~", "+", "*", "%", "==", "and", "in"])))
    leaf = st.one_of(
        e.map(lambda x: "{{ %s }}" % x),
        st.just("text "),
        e.map(lambda x: "{%% set x = %s %%}" % x),
        e.map(lambda x: "{%% set ns.v = %s %%}" % x),
        e.map(lambda x: "{%% set ns = namespace(v=%s) %%}" % x),
        st.sampled_from(["{{", "{% for %}", "{% endif %}", "{% do x.append(1) %}", "{% break %}",
                         "{% raw %}{{ x }}{% endraw %}", "{# c #}", "{%- if true -%} t {%- endif -%}"]),
        st.sampled_from(_PAYLOADS),
    )
    if depth <= 0:
        return leaf
    inner = _stmt(depth - 1)
    block = st.one_of(
        st.builds(lambda x, b: "{%% for m in %s %%}%s{%% endfor %%}" % (x, b), e, inner),
        st.builds(lambda x, a, b: "{%% if %s %%}%s{%% else %%}%s{%% endif %%}" % (x, a, b), e, inner, inner),
        st.builds(lambda b, x: "{%% macro g(x) %%}%s{%% endmacro %%}{{ g(%s) }}" % (b, x), inner, e),
        st.builds(lambda b, x: "{%% macro f(x) %%}%s{{ f(x) }}{%% endmacro %%}{{ f(%s) }}" % (b, x), inner, e),
        inner.map(lambda b: "{%% filter upper %%}%s{%% endfilter %%}" % b),
        st.builds(lambda x, b: "{%% with x = %s %%}%s{%% endwith %%}" % (x, b), e, inner),
        inner.map(lambda b: "{%% generation %%}%s{%% endgeneration %%}" % b),
        inner.map(lambda b: "{%% set x %%}%s{%% endset %%}" % b),
        inner.map(lambda b: "{%% autoescape true %%}%s{%% endautoescape %%}" % b),
    )
    return st.lists(st.one_of(leaf, block), min_size=1, max_size=3).map("".join)


templates = st.builds(lambda body: "{% set x = messages %}{% set ns = namespace(v=1) %}" + body, _stmt(2))
_MESSAGES = [{"role": "user", "content": "hi, there"}, {"role": "assistant", "content": "yo"}]
_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@given(templates)
def test_random_templates_render_or_fail_cleanly(source: str) -> None:
    start = time.monotonic()
    try:
        out = render_chat(source, _MESSAGES, _TOOLS, limits=LIMITS)
    except TemplateError as e:
        assert str(e).startswith("chat template "), e
        event("TemplateError")
    else:
        event("rendered")
        assert isinstance(out, str) and len(out) <= LIMITS.max_output_chars
        assert not _leaks(out), out[:300]
    assert time.monotonic() - start < 3.0


# -- messages, tools, variables ----------------------------------------------------------------

_safe_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), _safe_text,
              st.sampled_from(["user", "assistant", "system", "tool", "developer", "\ud800", "{{ x }}",
                               "<|im_end|>", "<think>", "</think>"])),
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(
        st.one_of(st.sampled_from(["role", "content", "tool_calls", "function", "name", "arguments",
                                   "type", "text", "id", "tool_call_id", "reasoning_content",
                                   "parameters", "properties", "description"]), _safe_text), c, max_size=4)),
    max_leaves=10,
)
_content = st.one_of(_safe_text, _values, st.lists(st.fixed_dictionaries({"type": st.sampled_from(
    ["text", "image", "image_url"]), "text": _values}), max_size=2))
_tool_call = st.one_of(_values, st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries(
        {"name": st.one_of(_safe_text, _values), "arguments": st.one_of(_values, st.just('{"a": 1}'))})},
    optional={"id": _values}))
_message = st.one_of(
    st.fixed_dictionaries({"role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), _values),
                           "content": _content},
                          optional={"tool_calls": st.one_of(_values, st.lists(_tool_call, max_size=2)),
                                    "reasoning_content": _values, "name": _values, "tool_call_id": _values}),
    _values,
)
_messages = st.one_of(st.lists(_message, max_size=4), _values)
_tools = st.one_of(st.none(), _values, st.lists(st.one_of(_values, st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries(
        {"name": _values, "description": _values, "parameters": _values})})), max_size=2))


def _template_names() -> list[str]:
    present = [name for name, file in sorted(REAL_TEMPLATES.items()) if (TEMPLATES_DIR / file).is_file()]
    return ["chatml", *present]


_SOURCES: dict[str, str] = {}


def _source(name: str) -> str:
    if name == "chatml":
        return CHATML_TEMPLATE
    if name not in _SOURCES:
        _SOURCES[name] = (TEMPLATES_DIR / REAL_TEMPLATES[name]).read_text()
    return _SOURCES[name]


@given(st.sampled_from(_template_names()), _messages, _tools, st.booleans(),
       st.dictionaries(st.sampled_from(["enable_thinking", "bos_token", "eos_token", "date_string",
                                        "documents_x", "thinking", "custom"]), _values, max_size=3))
def test_random_messages_and_tools(name: str, messages: Any, tools: Any, gen: bool,
                                   variables: dict[str, Any]) -> None:
    try:
        out = render_chat(_source(name), messages, tools, add_generation_prompt=gen, limits=LIMITS,
                          **variables)
    except (InvalidInput, TemplateError) as e:
        assert str(e)
        event(type(e).__name__)
        return
    event("rendered")
    assert isinstance(out, str)
    assert not _leaks(out), out[:300]


@pytest.mark.parametrize("name", _template_names())
@pytest.mark.parametrize("where", ["content", "role", "tool_arguments", "tool_name", "variable"])
def test_lone_surrogates(name: str, where: str) -> None:
    bad = "a\ud800b"
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    variables: dict[str, Any] = {}
    if where == "content":
        messages[0]["content"] = bad
    elif where == "role":
        messages[0]["role"] = bad
    elif where == "variable":
        variables["bos_token"] = bad
    else:
        call = {"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        call["function"]["arguments" if where == "tool_arguments" else "name"] = bad
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
    try:
        out = render_chat(_source(name), messages, limits=LIMITS, **variables)
    except (InvalidInput, TemplateError):
        return
    assert isinstance(out, str)


# Found by test_random_templates_render_or_fail_cleanly: jinja lets these through to Python's
# compile(), which raised SyntaxError / RecursionError out of render_chat (fixed in chat.py).
_COMPILE_FAILURES = {
    "continue_top_level": "{% continue %}",
    "break_in_autoescape": "{% autoescape true %}{% break %}{% endautoescape %}",
    "break_in_set_block": "{% set x %}{% break %}{% endset %}",
    "break_in_macro": "{% macro f() %}{% break %}{% endmacro %}{{ f() }}",
    "break_in_filter": "{% filter upper %}{% break %}{% endfilter %}",
    "nested_ifs": "{% if true %}" * 3000 + "x" + "{% endif %}" * 3000,
    "nested_parens": "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    "nested_lists": "{{ " + "[" * 200 + "]" * 200 + " }}",
    "long_sum": "{{ 1" + " + 1" * 20000 + " }}",
    "long_attribute_chain": "{{ x." + "a." * 5000 + "b }}",
}


@pytest.mark.parametrize("name", sorted(_COMPILE_FAILURES))
def test_templates_python_cannot_compile_are_template_errors(name: str) -> None:
    with pytest.raises(TemplateError, match=r"^chat template sha256:[0-9a-f]{12}: (invalid template|too deeply nested)"):
        render_chat(_COMPILE_FAILURES[name], _MESSAGES)
    # and a loop control inside a loop still works
    assert render_chat("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
                       "{{ m.content }}{% endfor %}", _MESSAGES) == "hi, there"
