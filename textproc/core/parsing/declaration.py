"""What a tool-call or reasoning format declaration holds: the one entry every user reads.

A format family is one module in :mod:`textproc.core.parsing.families` whose ``FORMATS`` tuple
holds its :class:`ToolFormat` / :class:`ReasoningFormat` values; :mod:`textproc.core.parsing.formats`
collects them. Each declaration says:

* how the text is recognised and parsed (``open_tags``, ``start_chars``, ``body``, or a
  whole-output parser such as harmony's), and which special tokens the detokenizer must keep
  for it (``specials``);
* how it is detected from a model's chat template and added tokens (``detect``: rules with a
  rank, lower ranks checked first across every family, so the more specific markup wins);
* how the family's template spells a call (``calls``: literal markers, the name, the
  arguments' layout), read by the forced / strict call compilers
  (:mod:`textproc.core.constraints.plans.forced_calls`) and by test vectors;
* for reasoning, the tags, and the text that ends a block the prompt left open
  (``close_text``), which the service forces before a forced call or structured output.

Nothing outside a family's module compares a format's name.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from textproc.core.deltas import Deltas
from textproc.core.parsing.section import Body

__all__ = [
    "ToolFormat", "ReasoningFormat", "Detect", "CallSpelling", "Lit", "Name", "Slot", "JsonArgs",
    "RawArgs", "PythonArgs", "DelimitedArgs", "Part", "ArgsLayout", "WholeParser", "WholeParserFactory",
]


# -- how a call is spelled ----------------------------------------------------------------------

@dataclass(frozen=True)
class Lit:
    """Literal markup."""

    text: str


@dataclass(frozen=True)
class Name:
    """The tool's name: as is, or as a JSON string (``quoted``)."""

    quoted: bool = False


@dataclass(frozen=True)
class Slot:
    """Text the model writes that the caller does not choose (a call index, a call id):
    ``pattern`` is its regex (plain subset: no lookarounds, no backreferences), ``example`` one
    instance (what :meth:`CallSpelling.render` writes)."""

    pattern: str
    example: str


@dataclass(frozen=True)
class JsonArgs:
    """The arguments object as JSON text, as ``json.dumps(args, ensure_ascii=False)`` writes it."""

    def render(self, args: Mapping[str, Any]) -> str:
        return json.dumps(dict(args), ensure_ascii=False)


@dataclass(frozen=True)
class RawArgs:
    """One ``key_open KEY key_close VALUE value_close`` per argument, in order: a string value
    is written raw, any other as JSON (the templates' ``tojson``); read back typed by the
    tool's schema (:mod:`textproc.core.parsing.raw_values`). ``string_key_close``: the
    ``key_close`` of string values when it differs (DSML marks them ``string="true"``);
    ``empty``: the text written for a call without arguments; ``python_values``: the template
    writes non-string values with Jinja's ``string`` filter (``True``, ``{'a': 1}``), which the
    parser reads as well, while this spelling (forced calls) writes them as JSON. ``{key}`` in
    ``value_close`` stands for the argument's key (MiniMax M3 closes a value with a tag naming
    it). ``item``: the template expands objects and lists into nested elements spelled like the
    arguments (members by key, list entries as elements named ``item``; None left out), and
    forced calls spell them so where the schema names the members."""

    key_open: str
    key_close: str
    value_close: str
    string_key_close: str | None = None
    empty: str = ""  # what the template writes for no arguments at all
    python_values: bool = False  # the template writes non-strings as Python literals
    item: str = ""  # the element of a list entry, when objects and lists are nested elements

    def key_close_for(self, is_string: bool) -> str:
        """The text between a key and its value (``{type}`` in it stands for the value's JSON
        type name: ``string``, ``number``, ``boolean``, ``null``, ``object``, ``array``)."""
        return self.string_key_close if is_string and self.string_key_close is not None else self.key_close

    def render(self, args: Mapping[str, Any]) -> str:
        if not args:
            return self.empty
        if self.item:
            return self._element(args)
        return "".join(f"{self.key_open}{k}{self.key_close_for(isinstance(v, str)).replace('{type}', json_type(v))}"
                       f"{_raw(v)}{self.value_close_for(k)}" for k, v in args.items())

    def value_close_for(self, key: str) -> str:
        """The text after the value of argument ``key``."""
        return self.value_close.replace("{key}", key)

    def _element(self, value: Any) -> str:
        # the body of an element holding value, objects and lists nested (``item``)
        if isinstance(value, Mapping):
            return "".join(self._member(k, v) for k, v in value.items() if v is not None)
        if isinstance(value, (list, tuple)):
            return "".join(self._member(self.item, v) for v in value)
        return "" if value is None else _raw(value)

    def _member(self, key: str, value: Any) -> str:
        return f"{self.key_open}{key}{self.key_close}{self._element(value)}{self.value_close_for(key)}"


@dataclass(frozen=True)
class PythonArgs:
    """``key=value, ...`` with Python literals (``'text'``, ``3``, ``True``, ``None``)."""

    def render(self, args: Mapping[str, Any]) -> str:
        return ", ".join(f"{k}={_py(v)}" for k, v in args.items())


@dataclass(frozen=True)
class DelimitedArgs:
    """``key:value`` items joined by ``item_sep`` in a JSON-like dialect (Gemma 4): keys bare,
    strings raw between ``string_open`` / ``string_close``, numbers as written, ``true`` /
    ``false``, lists ``[a,b]`` and objects ``{k:v}`` spelled the same way; items sorted by key
    when ``sort_keys`` (the template's ``dictsort``)."""

    string_open: str
    string_close: str
    item_sep: str = ","
    key_sep: str = ":"
    sort_keys: bool = True

    def render(self, args: Mapping[str, Any]) -> str:
        keys = sorted(args) if self.sort_keys else list(args)
        return self.item_sep.join(f"{k}{self.key_sep}{self.render_value(args[k])}" for k in keys)

    def render_value(self, value: Any) -> str:
        if isinstance(value, str):
            return self.string_open + value + self.string_close
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, Mapping):
            return "{" + self.render(value) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + self.item_sep.join(self.render_value(v) for v in value) + "]"
        return str(value)


ArgsLayout = JsonArgs | RawArgs | PythonArgs | DelimitedArgs
Part = Lit | Name | Slot | JsonArgs | RawArgs | PythonArgs | DelimitedArgs


def json_type(value: Any) -> str:
    """The JSON type name of a value."""
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    return "object" if isinstance(value, Mapping) else "array"


def _raw(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _py(value: Any) -> str:
    if isinstance(value, str):
        return repr(value) if "'" in value or "\\" in value else "'" + value + "'"
    return json.dumps(value) if isinstance(value, float) else repr(value)


@dataclass(frozen=True)
class CallSpelling:
    """How the family's chat template writes one or more calls: ``begin``, the calls separated
    by ``sep``, ``end`` (all literal); one call is ``call``, a sequence of parts in order.
    ``parallel``: several calls may follow each other in one output. ``alternatives``: other
    spellings the parser reads as well (a forced output may take any of them)."""

    call: tuple[Part, ...]
    begin: str = ""
    sep: str = ""
    end: str = ""
    parallel: bool = True
    alternatives: tuple[CallSpelling, ...] = ()

    @property
    def args_layout(self) -> ArgsLayout:
        """The layout of the arguments in :attr:`call`."""
        for part in self.call:
            if isinstance(part, (JsonArgs, RawArgs, PythonArgs, DelimitedArgs)):
                return part
        raise ValueError("a call spelling without arguments")

    def render_call(self, name: str, args: Mapping[str, Any]) -> str:
        """One call, as the template writes it."""
        out = []
        for part in self.call:
            if isinstance(part, Lit):
                out.append(part.text)
            elif isinstance(part, Name):
                out.append(json.dumps(name, ensure_ascii=False) if part.quoted else name)
            elif isinstance(part, Slot):
                out.append(part.example)
            else:
                out.append(part.render(args))
        return "".join(out)

    def render(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """``begin``, the calls, ``end``."""
        return self.begin + self.sep.join(self.render_call(n, a) for n, a in calls) + self.end


# -- detection ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Detect:
    """The format applies when every one of ``markers`` occurs in the chat template or the
    added tokens. Rules of every family are tried in ``rank`` order (lowest first)."""

    rank: int
    markers: tuple[str, ...]
    why: str


# -- whole-output parsers (harmony) -------------------------------------------------------------

class WholeParser(Protocol):
    """A parser that owns the whole output (its own channels), instead of tags in content."""

    n_calls: int

    @property
    def idle_key(self) -> str | None: ...

    def feed(self, text: str, out: Deltas) -> None: ...

    def finish(self, out: Deltas) -> None: ...


class WholeParserFactory(Protocol):
    def __call__(self, *, tools: bool, make_id: Callable[[int], str], names: frozenset[str] | None,
                 schemas: Mapping[str, Any] | None, max_calls: int | None) -> WholeParser: ...


# -- declarations -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolFormat:
    """How one family writes tool calls.

    ``open_tags``: text in content that starts a call section (``body`` parses what follows);
    ``start_chars``: a section may also start with one of these characters as the first
    non-space character of the answer (the character is part of the section);
    ``ends_reasoning``: an open tag also ends an open reasoning block (Kimi K2);
    ``specials``: special tokens of the format the detokenizer must keep for the parser;
    ``raw_values``: argument values are raw text, typed by the tool schemas;
    ``calls``: the template's spelling of calls; ``detect``: how a model's files show it;
    ``reasoning``: the reasoning format this one implies (harmony);
    ``whole_parser``: a parser for the whole output instead of sections in content;
    ``retag``: the format with custom (open, close) tags, when the close tag matters to it
    (else custom tags only replace ``open_tags``); ``is_default``: the format used when a
    model's files name none; ``listed``: where the name shows in listings (help, errors),
    lowest first, then by name; ``hidden_tags``: markup in content that is neither content nor
    a call (channel wrappers), dropped.
    """

    name: str
    open_tags: tuple[str, ...]
    body: Body | None
    calls: CallSpelling
    start_chars: str = ""
    ends_reasoning: bool = False
    specials: tuple[str, ...] = ()
    raw_values: bool = False
    detect: tuple[Detect, ...] = ()
    reasoning: str | None = None
    whole_parser: WholeParserFactory | None = None
    retag: Callable[[str, str], ToolFormat] | None = None
    is_default: bool = False
    listed: int = 1000
    hidden_tags: tuple[str, ...] = ()

    def with_tags(self, open_tag: str, close_tag: str) -> ToolFormat:
        """This format with custom tags (``tool_tags=``)."""
        if self.retag is not None:
            return self.retag(open_tag, close_tag)
        return dataclasses.replace(self, open_tags=(open_tag,), specials=(open_tag, close_tag))

    @property
    def needs_close_tag(self) -> bool:
        """Custom tags must name a close tag (the body reads it)."""
        return self.retag is not None


@dataclass(frozen=True)
class ReasoningFormat:
    """How one family writes reasoning: open tags, close tags, and whether the answer starts
    inside reasoning whatever the prompt says (DeepSeek R1 opens ``<think>`` in the prompt).
    ``close_text``: what a forced output writes first to end a block the prompt left open (None:
    a prompt cannot leave one open); ``detect``, ``whole_parser``, ``is_default``, ``listed``,
    ``hidden_tags`` as for :class:`ToolFormat`."""

    name: str
    open_tags: tuple[str, ...]
    close_tags: tuple[str, ...]
    starts_in_reasoning: bool = False
    specials: tuple[str, ...] = ()
    close_text: str | None = None
    detect: tuple[Detect, ...] = ()
    whole_parser: WholeParserFactory | None = None
    is_default: bool = False
    listed: int = 1000
    hidden_tags: tuple[str, ...] = ()

    def prompt_leaves_open(self, prompt: str) -> bool:
        """True when ``prompt`` (a rendered chat prompt) ends inside an open block of this
        format, so the model's text starts as reasoning."""
        if self.close_text is None or not self.open_tags or not self.close_tags:
            return False
        # (imported here: chat.template loads jinja2, which the detokenizer process never needs)
        from textproc.core.chat.template import prompt_starts_in_reasoning

        return prompt_starts_in_reasoning(prompt, open_tag=self.open_tags[0], close_tag=self.close_tags[0])
