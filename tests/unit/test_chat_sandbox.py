"""Hostile chat templates: escapes to Python internals, endless loops and huge outputs.

Each payload must fail with TemplateError naming the template, quickly, and run no code. Known
payloads come from public jinja2 sandbox-escape reports (attribute walks to __globals__, private
TemplateReference attributes, str.format / format_map field lookups, |attr and map(attribute=)).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from textproc.core.chat.template import CHATML_TEMPLATE, RESERVED_VARIABLES, ChatTemplate, RenderLimits, render_chat
from textproc.errors import InvalidInput, TemplateError

MESSAGES = [{"role": "user", "content": "hi"}]

ESCAPES = {
    "class_mro": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "class_only": "{{ ''.__class__ }}",
    "cycler_globals": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "joiner_globals": "{{ joiner.__init__.__globals__ }}",
    "lipsum_globals": "{{ lipsum.__globals__['os'] }}",
    "namespace_init": "{{ namespace.__init__.__globals__ }}",
    "template_reference": "{{ self._TemplateReference__context }}",
    "loop_internals": "{% for x in [1] %}{{ loop.__class__.__init__.__globals__ }}{% endfor %}",
    "format_field": "{{ '{0.__class__.__mro__}'.format('') }}",
    "format_map_field": "{{ '{x.__class__}'.format_map({'x': 1}) }}",
    "format_via_attr": "{{ ('{0.__class__}'|attr('format'))('') }}",
    "attr_filter": "{{ ''|attr('__class__') }}",
    "map_attribute": "{{ messages|map(attribute='__class__')|list }}",
    "dict_global": "{{ dict.__class__.__init__.__globals__ }}",
    "namespace_dunder": "{% set ns = namespace(__class__=1) %}",
    "mutate_messages": "{{ messages.append(1) }}{{ messages[0].pop('role') }}",
    "include": "{% include '/etc/passwd' %}",
    "import": "{% import 'os' as os %}{{ os }}",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_payloads_fail_fast(name: str) -> None:
    start = time.monotonic()
    with pytest.raises(TemplateError, match=r"^chat template sha256:[0-9a-f]{12}: "):
        render_chat(ESCAPES[name], MESSAGES)
    assert time.monotonic() - start < 1.5  # immediate refusal; the bound leaves room for a loaded machine


def test_escape_runs_no_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payloads = [
        f"{{{{ cycler.__init__.__globals__.os.system('touch {marker}') }}}}",
        f"{{{{ ''.__class__.__mro__[1].__subclasses__()[0].__init__.__globals__['sys'].modules['os'].system('touch {marker}') }}}}",
        f"{{% set x = self.__init__.__globals__ %}}{{{{ x.__builtins__.__import__('os').system('touch {marker}') }}}}",
    ]
    for payload in payloads:
        with pytest.raises(TemplateError, match="unsafe"):
            render_chat(payload, MESSAGES)
    assert not marker.exists()


LOOPS = {
    "nested_range": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "nested_output": "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "exponential_macro": (
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}"
    ),
    "recursive_macro": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "recursive_loop": "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
    "loop_over_messages_forever": (
        "{% for a in range(100000) %}{% for m in messages %}{% for c in m.content %}{% endfor %}"
        "{% endfor %}{% endfor %}"
    ),
    "macro_buffer": (
        "{% macro f() %}{% for i in range(100000) %}{% for j in range(100000) %}"
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}{% endfor %}{% endmacro %}"
        "{{ f()|length }}"
    ),
}


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_endless_work_fails_within_limits(name: str) -> None:
    start = time.monotonic()
    with pytest.raises(TemplateError, match=r"max_steps=200000|timeout_s=0.5|RecursionError|max_output_chars"):
        render_chat(LOOPS[name], MESSAGES, limits=RenderLimits(max_steps=200_000, timeout_s=0.5))
    assert time.monotonic() - start < 1.5


def test_default_limits_stop_an_endless_loop() -> None:
    start = time.monotonic()
    with pytest.raises(TemplateError, match=r"max_steps=2000000|timeout_s=2.0"):
        render_chat(LOOPS["nested_range"], MESSAGES)
    assert time.monotonic() - start < 4.0


def test_step_limit_is_deterministic() -> None:
    source = "{% for i in range(1000) %}{{ i }}{% endfor %}"
    render_chat(source, MESSAGES, limits=RenderLimits(max_steps=2_100))  # 1000 iterations + 1000 outputs + range() call
    with pytest.raises(TemplateError, match="max_steps=1900"):
        render_chat(source, MESSAGES, limits=RenderLimits(max_steps=1_900))


BOMBS = {
    "repeat_str": "{{ 'a' * 10**10 }}",
    "repeat_list": "{{ ([1] * 10**9)|length }}",
    "int_power": "{{ 2 ** (10 ** 9) }}",
    "int_squaring": "{% set ns = namespace(x=3) %}{% for i in range(100) %}{% set ns.x = ns.x * ns.x %}{% endfor %}",
    "percent_width": "{{ '%999999999d' % 1 }}",
    "format_width": "{{ '{:>999999999}'.format(1) }}",
    "format_filter": "{{ '%999999999s'|format('x') }}",
    "center": "{{ 'x'|center(10**9) }}",
    "ljust": "{{ 'x'.ljust(10**9) }}",
    "expandtabs": "{{ ('\t' * 1000).expandtabs(100000000) }}",
    "indent": "{{ ('x\n' * 1000)|indent(10000000) }}",
    "tojson_indent": "{{ messages|tojson(indent=100000000) }}",
    "join": "{{ (['x' * 1000000] * 1000)|join }}",
    "str_join": "{{ ''.join(['x' * 1000000] * 1000) }}",
    "doubling_tilde": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "doubling_plus": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "doubling_replace": (
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s.replace('a', 'aa') %}{% endfor %}"
    ),
    "lipsum": "{{ lipsum(n=100000) }}",
    # many references to one big string: the danger is str()/repr()/json of the container
    "list_repr": "{% set b = 'x' * 4000000 %}{{ [b] * 100 }}",
    "list_literal_repr": "{% set b = 'x' * 4000000 %}{{ [b, b, b, b, b, b, b, b, b, b] }}",
    "tojson_refs": "{% set b = 'x' * 4000000 %}{{ ([b] * 100)|tojson }}",
    "string_filter": "{% set b = 'x' * 4000000 %}{{ ([b] * 100)|string }}",
    "concat_list": "{% set b = 'x' * 4000000 %}{{ 'a' ~ [b] * 100 }}",
    "concat_many": "{% set b = 'x' * 4000000 %}{{ b ~ b ~ b ~ b ~ b ~ b }}",
    "percent_tuple": "{% set b = 'x' * 4000000 %}{{ ('%s' * 100) % ((b,) * 100) }}",
    "map_join": "{% set b = 'x' * 4000000 %}{{ ([b] * 100)|map('string')|join }}",
    "str_join_generator": "{% set b = 'x' * 4000000 %}{{ ''.join(([b] * 100)|map('string')) }}",
    "format_args": "{% set b = 'x' * 4000000 %}{{ '{}{}{}{}{}{}{}{}{}{}'.format(b, b, b, b, b, b, b, b, b, b) }}",
    "namespace_repr": "{% set b = 'x' * 4000000 %}{% set ns = namespace(a=[b] * 100) %}{{ ns }}",
    "translate": "{{ ('a' * 1000000).translate({97: 'x' * 100}) }}",
    "batch": "{{ [1]|batch(10**9, 'x')|list|length }}",
    "slow_wordwrap": "{{ ('word ' * 1000000)|wordwrap(3) }}",
    "slow_urlize": "{{ ('www.a.com ' * 500000)|urlize }}",
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_size_bombs_fail_before_allocating(name: str) -> None:
    start = time.monotonic()
    with pytest.raises(TemplateError, match=r"max_output_chars=8000000|too large|bits|at most 200000"):
        render_chat(BOMBS[name], MESSAGES)
    assert time.monotonic() - start < 1.5  # refused before allocating; room for a loaded machine


def test_self_referencing_namespace_fails_cleanly() -> None:
    with pytest.raises(TemplateError, match="nested more than 200|RecursionError"):
        render_chat("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", MESSAGES)


def test_huge_raise_exception_message_is_clipped() -> None:
    with pytest.raises(TemplateError, match=r"\.\.\. \(1000000 chars\)$") as info:
        render_chat("{{ raise_exception('x' * 1000000) }}", MESSAGES)
    assert len(str(info.value)) < 2100


def test_deeply_nested_input_is_invalid_input() -> None:
    nested: object = "leaf"
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(InvalidInput, match=r"messages\[0\] is nested too deeply"):
        render_chat(CHATML_TEMPLATE, [{"role": "user", "content": nested}])


def test_output_limit_applies_to_real_templates() -> None:
    messages = [{"role": "user", "content": "ü" * 60_000}]
    assert len(render_chat(CHATML_TEMPLATE, messages, limits=RenderLimits(max_output_chars=70_000))) < 70_000
    with pytest.raises(TemplateError, match="max_output_chars=50000"):
        render_chat(CHATML_TEMPLATE, messages, limits=RenderLimits(max_output_chars=50_000))


def test_errors_name_the_template() -> None:
    template = ChatTemplate("{{ raise_exception('no system role, got ' ~ messages[0].role) }}", name="strict")
    with pytest.raises(TemplateError, match=r"^chat template strict: no system role, got user$"):
        template.render(MESSAGES)
    with pytest.raises(TemplateError, match=r"^chat template strict: UndefinedError: 'foo' is undefined$"):
        ChatTemplate("{{ foo.bar }}", name="strict").render(MESSAGES)
    with pytest.raises(TemplateError, match=r"^chat template broken: syntax error at line 2: "):
        ChatTemplate("ok\n{% for %}", name="broken").render(MESSAGES)
    with pytest.raises(TemplateError, match=r"^chat template tool_use:sha256:[0-9a-f]{12}: TypeError"):
        render_chat({"default": "x", "tool_use": "{{ 1 + 'a' }}"}, MESSAGES, [])


def test_a_failed_render_leaves_no_state_behind() -> None:
    with pytest.raises(TemplateError):
        render_chat(LOOPS["nested_range"], MESSAGES, limits=RenderLimits(max_steps=1_000))
    # The same compiled template, and others, render normally afterwards with fresh budgets.
    assert render_chat("{% for i in range(3000) %}.{% endfor %}", MESSAGES, limits=RenderLimits(max_steps=10_000)) == "." * 3000
    assert render_chat(CHATML_TEMPLATE, MESSAGES).endswith("<|im_start|>assistant\n")


def test_limits_cannot_come_from_template_variables() -> None:
    # A server forwarding a client's chat_template_kwargs must not let it lift the limits.
    with pytest.raises(InvalidInput, match="limits must be a textproc.core.chat.template.RenderLimits"):
        render_chat(LOOPS["nested_range"], MESSAGES, **{"limits": {"max_steps": 10**12}})
    with pytest.raises(TemplateError, match="max_steps=2000000|timeout_s=2.0"):
        render_chat(LOOPS["nested_range"], MESSAGES, **{"max_steps": 10**12, "timeout_s": 1e9})
    assert {"limits", "template_name", "messages", "tools"} <= RESERVED_VARIABLES
    # template and messages are positional-only: as variables they cannot collide with them
    assert render_chat("{{ template }}", MESSAGES, **{"template": "x"}) == "x"
    with pytest.raises(InvalidInput, match="'messages' is the conversation argument"):
        render_chat("x", MESSAGES, **{"messages": []})
    with pytest.raises(InvalidInput, match="max_steps must be a positive int"):
        RenderLimits(max_steps=0)
