"""Structured outputs: JSON Schema -> regular expression (the schema stage's entry).

Owns ``json_schema_to_regex`` and ``closing_regex`` (a tool's arguments, closed where the tool
is strict). The schema is first resolved and merged into a union of flat conjunctions
(:mod:`textproc.core.constraints.schema.flat`, :mod:`~textproc.core.constraints.schema.merge`),
then each flat is written as regex text by :mod:`~textproc.core.constraints.schema.emit`, with
numbers from :mod:`~textproc.core.constraints.schema.numbers`, formats from
:mod:`~textproc.core.constraints.schema.formats` and string pieces from
:mod:`~textproc.core.constraints.regex.parts`. The regex is what the token index enforces; the
forced tool-call output around it is :mod:`textproc.core.constraints.plans.forced_calls`.

Serialisation the regex allows: what ``json.dumps(value, ensure_ascii=False)`` writes
(separators ``", "`` and ``": "``, no other whitespace); declared properties in the order the
schema lists them (``allOf`` parts in order), then any extra keys. Strings may use any JSON
escape except surrogate ``\\u`` escapes; strings with a ``pattern`` or ``format``, and extra
keys, only the canonical escapes of ``json.dumps``.

Invariant (tested on the JSON Schema Test Suite and real-world schemas): every string the
regex matches parses as JSON and validates against the schema, but for one widening: an upper
bound over ``MAX_EXACT_COUNT`` (256: ``maxLength``, ``maxItems``, a ``pattern``'s ``{m,n}``,
raw-text tool arguments' ``maxLength``) is written unbounded (``{m,}``; llama.cpp's grammars do
the same past 2,000). Each position of a counted repetition is automaton states and index (a
JSON string of ``maxLength`` 256 compiles to a 38 MB index in ~2 s of CPU on Qwen3; 1,000
would be 136 MB, past the service's index budget). Such bounds are sanity limits (a tool's
``maxLength: 100000``) that a reply rarely reaches within its ``max_tokens``; the mask does not
enforce them, a caller that needs them validates the output, and a ``pattern`` / ``format``
with one is taken as the pattern alone. Lower bounds (``minLength``, ``minItems``, ``{m,}``)
stay exact, since a looser one lets a value end early (the common case): past the compile
budget they are refused, over ``MAX_COUNT`` (65,536) at once.
Where the schema allows more than a regex can say, the regex allows less, and these are the
only narrowings:

- Extra keys (``additionalProperties`` absent / ``true`` / a schema, ``patternProperties``)
  come after the declared ones; a key matching several patterns gets a value valid for all
  of them; duplicate extra keys are not excluded (each value valid for the key).
- Values with no constraint are any JSON value nested at most ``any_depth`` deep; the values
  of extra keys that nothing types (``additionalProperties`` absent or ``true``) one level less.
- ``$ref`` recursion is unrolled ``max_recursion`` times per reference on a path; deeper
  outputs are not produced (a branch that needs more is dropped).
- ``oneOf`` only when its branches are provably disjoint (distinct types, or a required
  property with distinct constants): otherwise refused.
- Numbers with bounds or ``multipleOf`` are written without an exponent; integers without a
  fraction (``1``, never ``1.0``); ``-0`` is not produced in bounded ranges.
- ``enum`` / ``const`` values are written as ``json.dumps`` writes them (objects with their
  keys in the order given, numbers inside arrays and objects as given; a top-level integral
  number also with a zero fraction).
- ``contains`` only with ``minContains`` up to 4 and no ``prefixItems`` / ``maxItems``.
- ``format``: see :mod:`~textproc.core.constraints.schema.formats`.

Keywords JSON Schema does not define and annotations are ignored. Assertions that no regular
language enforces (``not``, ``if``, ``uniqueItems``, ``propertyNames``, ``min/maxProperties``,
``unevaluated*``, ``dependentSchemas``, overlapping ``oneOf``, ``pattern`` with ``minLength``,
a ``maxLength`` up to 256 or ``format``, ...) are an ``InvalidInput`` naming the keyword and
its JSON path, never dropped.

``strict`` (OpenAI's ``strict: true``): an object schema that lists ``properties`` and says
nothing of ``additionalProperties`` is closed (no extra keys), as OpenAI's strict mode has it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from textproc.core.constraints.budget import MAX_REGEX_CHARS
from textproc.core.constraints.regex.parts import MAX_COUNT, MAX_EXACT_COUNT
from textproc.core.constraints.schema.emit import Compiler
from textproc.core.constraints.schema.nodes import Node
from textproc.errors import InvalidInput, short

__all__ = ["json_schema_to_regex", "closing_regex", "MAX_COUNT", "MAX_EXACT_COUNT",
           "MAX_BOUND", "MAX_RECURSION", "MAX_REGEX_CHARS"]

MAX_BOUND = 10**308  # largest |minimum| / |maximum| (JSON numbers beyond are not portable)
MAX_RECURSION = 5  # default expansions of one $ref on a path (a 4-deep expression fits)


# a schema's regex up to this long is plain ``re`` syntax; a longer one writes each sub-regex of
# over DEFINE_FROM_CHARS once and calls it (``(?&name)``, the ``regex`` module's syntax): a
# SchemaStore schema (codecov) is 18.9 M characters plain, 483 K with calls
PLAIN_MAX_CHARS = 1 << 16
DEFINE_FROM_CHARS = 256


def json_schema_to_regex(
    schema: Mapping[str, Any] | bool,
    *,
    max_recursion: int = MAX_RECURSION,
    any_depth: int = 2,
    strict: bool = False,
    max_chars: int = MAX_REGEX_CHARS,
) -> str:
    """A regex whose matches are JSON texts (``json.dumps`` style) valid against ``schema``.

    See the module docstring for the serialisation, the narrowings and ``strict``. A schema
    whose regex would pass ``max_chars`` characters is an ``InvalidInput`` as soon as a part of
    it does (an object's n optional properties are spelled O(n log n) times, nesting multiplies).
    A regex that would pass ``PLAIN_MAX_CHARS`` starts with a ``(?(DEFINE)...)`` block of its
    long sub-regexes, called as ``(?&name)`` where they recur (the ``regex`` module's syntax,
    which the token compiler reads too; Python's ``re`` does not).

    >>> json_schema_to_regex({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}, strict=True)
    '\\\\{"n": -?(?:0|[1-9][0-9]*)\\\\}'
    """
    if not isinstance(schema, (Mapping, bool)):
        raise InvalidInput(f"JSON schema {short(schema)} at $ must be an object or a boolean")
    compiler = Compiler(schema, max_recursion=max_recursion, any_depth=any_depth, strict=strict,
                        max_chars=min(max_chars, PLAIN_MAX_CHARS))
    try:
        result = compiler.compile([Node(schema, "", "$")])
    except InvalidInput:
        if not compiler.too_long or max_chars <= PLAIN_MAX_CHARS:
            raise
        # long: write each long sub-regex once and call it where it recurs
        compiler = Compiler(schema, max_recursion=max_recursion, any_depth=any_depth, strict=strict,
                            max_chars=max_chars, define_from=DEFINE_FROM_CHARS)
        result = compiler.compile([Node(schema, "", "$")])
    if result is None:
        where = "; ".join(compiler.empty[:2]) or "$"
        raise InvalidInput(
            f"JSON schema at $ accepts no value: nothing is valid at {where}. Look for keywords "
            f"that exclude each other (a minimum above the maximum, minLength above maxLength, "
            f"a required property that allows nothing, false), or $ref recursion deeper than "
            f"{max_recursion} levels with no non-recursive alternative"
        )
    return compiler.definitions() + result


def closing_regex(closed: Sequence[Mapping[str, Any] | bool]) -> Callable[[Mapping[str, Any] | bool], str]:
    """``json_schema_to_regex`` of a tool's arguments (or of one of their properties: a format
    that writes arguments as elements asks for each), with ``strict=True`` for the ``closed``
    parameter schemas and every schema inside them (OpenAI's strict mode: their objects that
    list properties take no other keys), as given for the others."""
    ids: set[int] = set()
    todo: list[Any] = list(closed)
    while todo:
        x = todo.pop()
        if isinstance(x, Mapping) and id(x) not in ids:
            ids.add(id(x))
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)

    def to_regex(schema: Mapping[str, Any] | bool) -> str:
        return json_schema_to_regex(schema, strict=id(schema) in ids)

    return to_regex
