"""Flat schemas -> regex text: objects, arrays, strings, numbers, enums, any value.

Owns :class:`Compiler`, the second half of ``json_schema_to_regex`` (the first is
:mod:`textproc.core.constraints.schema.flat`). Regexes of repeated sub-schemas (the same
schema object reached with the same ``$ref`` history) are computed once; the result is
refused when it would pass ``max_chars`` (the compile stays bounded). With ``define_from``,
each sub-regex longer than that is written once, in a ``(?(DEFINE)(?P<name>...))`` block
ahead of the regex, and called as ``(?&name)`` wherever it recurs (the ``regex`` module's
syntax; the name is a hash of the text, so regexes joined into one pattern agree on it).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import regex as re_

from textproc.core.constraints.budget import regex_too_long
from textproc.core.constraints.regex.parts import CHAR, Shared, key_except, may_overlap, translate_pattern, upper_bound
from textproc.core.constraints.regex.parts import group as _group
from textproc.core.constraints.regex.parts import lit as _lit
from textproc.core.constraints.regex.parts import repeat as _repeat
from textproc.core.constraints.schema.flat import Flattener
from textproc.core.constraints.schema.formats import FORMATS
from textproc.core.constraints.schema.merge import types_of
from textproc.core.constraints.schema.nodes import TYPES, Flat, Node, ObjPart, describe
from textproc.core.constraints.schema.numbers import number_regex
from textproc.errors import InvalidInput, short

__all__ = ["Compiler", "MAX_CONTAINS"]

MAX_CONTAINS = 4  # largest minContains enforced (each one is a copy of the item regex)
MAX_UNIQUE = 32  # largest item set uniqueItems is enforced on
_SCALARS = [f'"{CHAR}*"', r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", "(?:true|false)", "null"]


class Compiler:
    def __init__(self, root: Any, *, max_recursion: int, any_depth: int, strict: bool, max_chars: int,
                 define_from: int | None = None) -> None:
        self.flattener = Flattener(root, max_recursion=max_recursion, strict=strict)
        self.any_depth = any_depth
        self.max_chars = max_chars
        self.shared = Shared(define_from)
        self.too_long = False  # the last InvalidInput was the size budget
        self._memo: dict[tuple[Any, ...], str | None] = {}
        self._any: dict[int, str] = {}
        self._patterns: dict[str, Any] = {}
        self.empty: list[str] = []  # where no value was valid, innermost first (for the error)
        self._empty_memo: dict[tuple[Any, ...], tuple[str, list[str]]] = {}  # key -> (path, empty)

    def compile(self, nodes: list[Node]) -> str | None:
        """Regex of the values valid against every node, or None when none is."""
        key = tuple((id(n.schema), n.base, n.refs) for n in nodes)
        path = nodes[0].path if nodes else "$"
        if key in self._memo:
            if self._memo[key] is None:  # name it again, under this path
                was, entries = self._empty_memo[key]
                for entry in entries:
                    entry = path + entry[len(was):] if entry.startswith(was) else entry
                    if entry not in self.empty:
                        self.empty.append(entry)
            return self._memo[key]
        alternatives = []
        flats = 0
        mark = len(self.empty)
        for flat in self.flattener.flatten_all(nodes):
            flats += 1
            regex = self.emit(flat)
            if regex is not None:
                alternatives.append(regex)
        result = _group(alternatives) if alternatives else None
        if not flats:
            self.nothing(path, "false, or keywords no type satisfies")
        if result is not None:
            del self.empty[mark:]  # what failed inside did not make this fail
            self.check_size(result, path)
            result = self.define(result)
        else:
            self._empty_memo[key] = (path, self.empty[mark:])
        self._memo[key] = result
        return result

    def check_size(self, regex: str, path: str) -> None:
        """``InvalidInput`` when ``regex`` (with the definitions so far) passes ``max_chars``
        (the regex size budget)."""
        if len(regex) + self.shared.chars > self.max_chars:
            self.too_long = True
            raise InvalidInput(regex_too_long(
                f"the JSON schema at {path} expands to a regex of over "
                f"{len(regex) + self.shared.chars:,} characters", self.max_chars))

    @property
    def defined(self) -> dict[str, str]:
        """Name -> regex of the sub-regexes written once so far."""
        return self.shared.defined

    def define(self, regex: str) -> str:
        """``regex``, or a call of its definition when ``define_from`` says it is long."""
        return self.shared.call(regex)

    def definitions(self) -> str:
        """The ``(?(DEFINE)...)`` block the regex's calls need ("" when there are none)."""
        return self.shared.block()

    def matcher(self, regex: str) -> Any:
        """``regex`` (which may call the definitions so far) compiled by the ``regex`` module."""
        return re_.compile(self.definitions() + regex)

    def emit(self, flat: Flat) -> str | None:
        mark = len(self.empty)
        regex = self._emit(flat)
        if regex is None:
            self.nothing(flat.path, describe(flat))
        else:
            del self.empty[mark:]  # an optional property or an array position that allows nothing
        return regex

    def _emit(self, flat: Flat) -> str | None:
        if flat.enum is not None:
            return self.enum(flat)
        types = flat.types
        if types == set(TYPES) and _unconstrained(flat):
            return self.any_value(self.any_depth)
        alternatives: list[str | None] = []
        if "object" in types:
            alternatives.append(self.object(flat))
        if "array" in types:
            alternatives.append(self.array(flat))
        if "string" in types:
            alternatives.append(self.string(flat))
        if "integer" in types:
            alternatives.append(number_regex("fraction" not in types, flat.lo, flat.hi, flat.multiple_of, flat.path))
        if "boolean" in types:
            alternatives.append("(?:true|false)")
        if "null" in types:
            alternatives.append("null")
        kept = [a for a in alternatives if a is not None]
        return _group(kept) if kept else None

    def nothing(self, path: str, what: str) -> None:
        """Note that no value is valid at ``path``; kept only while that makes an enclosing
        schema accept nothing too (the error names the innermost ones)."""
        entry = f"{path} ({what})"
        if entry not in self.empty:
            self.empty.append(entry)

    def enum(self, flat: Flat) -> str | None:
        assert flat.enum is not None
        rest = replace(flat, enum=None)
        values = [v for v in flat.enum if any(types_of(replace(flat, enum=[v])))]
        if not _unconstrained(rest) and values:
            regex = self.emit(rest)
            matcher = self.matcher(regex) if regex is not None else None
            values = [v for v in values if matcher is not None and matcher.fullmatch(_dumps(v))]
        texts = []
        for v in values:
            text = _lit(_dumps(v))
            if _is_integral(v):  # 2, 2.0 and 2.00 are one JSON Schema value
                text = _lit(str(int(v))) + r"(?:\.0+)?"
            if text not in texts:
                texts.append(text)
        return _group(texts) if texts else None

    # -- objects --------------------------------------------------------------------------

    def object(self, flat: Flat) -> str | None:
        names: list[str] = []
        for part in flat.parts:
            names.extend(k for k in part.props if k not in names)
        names.extend(sorted(k for k in flat.required if k not in names))
        members: list[tuple[str, bool]] = []
        for name in names:
            nodes = [n for part in flat.parts for n in self.nodes_for(part, name, flat.path)]
            mark = len(self.empty)
            value = self.compile(nodes) if nodes else self.any_value(self.any_depth)
            if value is None:
                if name in flat.required:
                    return None
                del self.empty[mark:]  # left out: no cause
                continue
            members.append((_lit(_dumps(name)) + ": " + value, name in flat.required))
        if flat.min_props > max(1, len(set(flat.required))):
            raise InvalidInput(f"minProperties {flat.min_props} at {flat.path}.minProperties: only 1, or no more "
                               f"than the required properties, is enforced")
        return _members(members, self.extra_member(flat, names), nonempty=flat.min_props > 0,
                        check=lambda regex: self.check_size(regex, flat.path))

    def nodes_for(self, part: ObjPart, name: str, path: str) -> list[Node]:
        """What ``part`` says of the value under key ``name`` (all of them apply)."""
        if name in part.props:
            return [part.props[name]]
        matched = [n for p, n in part.patterns if self.matches(p, name, path)]
        if matched:
            return matched
        return [] if part.additional is None else [part.additional]

    def matches(self, pattern: str, text: str, path: str) -> bool:
        compiled = self._patterns.get(pattern)
        if compiled is None:
            try:
                compiled = self._patterns[pattern] = re_.compile(pattern)
            except re_.error as e:
                raise InvalidInput(f"patternProperties {short(pattern)} at {path} is not a regex: {e}") from None
        return compiled.search(text) is not None

    def extra_member(self, flat: Flat, names: list[str]) -> str | None:
        """Regex of one ``"key": value`` for a key not in ``names``, or None when none may come."""
        general: list[Node] = []
        for part in flat.parts:
            if part.additional is not None:
                general.append(part.additional)
            general.extend(n for _, n in part.patterns)
        alternatives = []
        # free extra keys take shallower values than declared free values (each object repeats
        # them: the automaton grows with their depth)
        value = self.compile(general) if general else self.any_value(self.any_depth - 1)
        if value is not None:
            alternatives.append(f'"{key_except(names)}": {value}')
        for j, part in enumerate(flat.parts):
            for pattern, _ in part.patterns:
                clash = [k for k in names if self.matches(pattern, k, flat.path)]
                if clash:
                    raise InvalidInput(
                        f"patternProperties {short(pattern)} at {flat.path} also matches the declared "
                        f"properties {clash}; keys of a pattern that exclude some names cannot be "
                        f"enforced here: rename the properties or narrow the pattern"
                    )
                nodes = [n for q in flat.parts for r, n in q.patterns if r == pattern or may_overlap(r, pattern)]
                nodes += [q.additional for i, q in enumerate(flat.parts) if i != j and q.additional is not None]
                value = self.compile(nodes)
                if value is not None:
                    key = translate_pattern(pattern, f"{flat.path}.patternProperties")
                    alternatives.append(f'"{key}": {value}')
        return _group(alternatives) if alternatives else None

    # -- arrays ---------------------------------------------------------------------------

    def array(self, flat: Flat) -> str | None:
        lo, hi = flat.min_items, flat.max_items
        if hi is not None and hi < lo:
            return None
        hi = upper_bound(lo, hi)  # over MAX_EXACT_COUNT: unbounded (the schema module's widening)
        width = max((len(prefix) for prefix, _ in flat.item_parts), default=0)
        positions: list[str] = []
        closed = False
        for p in range(width if hi is None else min(width, hi)):
            nodes: list[Node] = []
            for prefix, rest_node in flat.item_parts:
                if p < len(prefix):
                    nodes.append(prefix[p])
                elif rest_node is not None:
                    nodes.append(rest_node)
            value = self.compile(nodes) if nodes else self.any_value(self.any_depth)
            if value is None:
                closed = True
                break
            positions.append(value)
        rest_nodes = [rest for _, rest in flat.item_parts if rest is not None]
        rest = None if closed else (self.compile(rest_nodes) if rest_nodes else self.any_value(self.any_depth))
        n = len(positions)
        if rest is None or len(positions) < width:
            hi = n if hi is None else min(hi, n)
        if hi is not None and hi < lo:
            return None
        if flat.contains:
            return self.contains(flat, positions, rest, lo, hi)
        if flat.unique and (hi is None or hi > 1):
            return self.unique(flat, rest_nodes, rest, width, lo, hi)
        if n == 0:
            if hi == 0 or rest is None:
                return r"\[\]" if lo == 0 else None
            body = rest + ("" if hi == 1 else f"(?:, {rest}){_repeat(max(lo - 1, 0), None if hi is None else hi - 1)}")
            return rf"\[{body}\]" if lo > 0 else rf"\[(?:{body})?\]"
        more_hi = None if hi is None else hi - n
        tail = "" if rest is None or more_hi == 0 else f"(?:, {rest}){_repeat(max(lo - n, 0), more_hi)}"
        for i in reversed(range(1, n)):
            tail = f", {positions[i]}{tail}"
            if i >= lo:
                tail = f"(?:{tail})?"
        body = positions[0] + tail
        return rf"\[{body}\]" if lo > 0 else rf"\[(?:{body})?\]"

    def unique(self, flat: Flat, rest_nodes: list[Node], rest: str | None, width: int, lo: int,
               hi: int | None) -> str | None:
        """uniqueItems over a finite item set: the items in the order the set lists them."""
        flats = self.flattener.flatten_all(rest_nodes) if rest_nodes else []
        values: list[Any] = []
        for f in flats:
            if f.enum is None and not types_of(f) <= {"boolean", "null"}:
                values = []
                break
            values.extend(f.enum if f.enum is not None else
                          [x for t, xs in (("boolean", [True, False]), ("null", [None])) if t in f.types for x in xs])
        if width or not values or lo > 1 or len(values) > MAX_UNIQUE or (hi is not None and hi < len(values)):
            raise InvalidInput(
                f"uniqueItems at {flat.path}.uniqueItems is enforced only for items from a finite set (enum, "
                f"boolean) of at most {MAX_UNIQUE} values, without prefixItems, minItems above 1 or maxItems "
                f"below the set's size (or with maxItems 1)"
            )
        matcher = self.matcher(rest) if rest is not None else None
        texts: list[str] = []
        for v in values:
            text = _dumps(v)
            if matcher is not None and matcher.fullmatch(text) and _lit(text) not in texts:
                texts.append(_lit(text))
        return _members([(t, False) for t in texts], None, nonempty=lo > 0, braces=(r"\[", r"\]"))

    def contains(self, flat: Flat, positions: list[str], rest: str | None, lo: int, hi: int | None) -> str | None:
        (node, least), *others = flat.contains
        if others or positions or hi is not None or lo > least or least > MAX_CONTAINS:
            raise InvalidInput(
                f"contains at {flat.path}.contains is enforced alone (one contains, minContains at most "
                f"{MAX_CONTAINS}, no prefixItems, maxItems or minItems above minContains)"
            )
        rest_nodes = [r for _, r in flat.item_parts if r is not None]
        hit = self.compile(rest_nodes + [node])
        if hit is None or rest is None:
            return None
        body = f"(?:{rest}, )*{hit}" + f"(?:(?:, {rest})*, {hit})" * (least - 1) + f"(?:, {rest})*"
        return rf"\[{body}\]"

    # -- strings and any value ------------------------------------------------------------

    def string(self, flat: Flat) -> str | None:
        lo, hi = flat.min_len, flat.max_len
        if hi is not None and hi < lo:
            return None
        hi = upper_bound(lo, hi)  # over MAX_EXACT_COUNT: unbounded (the schema module's widening)
        if len(flat.patterns) + len(flat.formats) > 1:
            raise InvalidInput(f"several patterns/formats {flat.patterns + flat.formats} at {flat.path} "
                               f"(their intersection) cannot be enforced; keep one")
        if flat.patterns or flat.formats:
            if lo > 0 or hi is not None:
                raise InvalidInput(f"minLength/maxLength together with pattern/format at {flat.path} "
                                   f"cannot be enforced; put the length into the pattern")
            text = flat.patterns[0] if flat.patterns else f"^(?:{FORMATS[flat.formats[0]]})$"
            return '"' + translate_pattern(text, f"{flat.path}.pattern") + '"'
        return f'"{CHAR}{_repeat(lo, hi)}"'

    def any_value(self, depth: int) -> str:
        if depth not in self._any:
            if depth <= 0:
                self._any[depth] = _group(_SCALARS)
            else:
                inner = self.any_value(depth - 1)
                array = rf"\[(?:{inner}(?:, {inner})*)?\]"
                member = f'"{CHAR}*": {inner}'
                obj = rf"\{{(?:{member}(?:, {member})*)?\}}"
                self._any[depth] = self.define(_group(_SCALARS + [array, obj]))
        return self._any[depth]


def _members(members: list[tuple[str, bool]], extra: str | None, *, nonempty: bool = False,
             braces: tuple[str, str] = (r"\{", r"\}"), check: Any = None) -> str | None:
    """``{...}`` of the declared members in order (optional ones may be left out), then any
    number of ``extra`` members; ``nonempty``: at least one member."""
    first_member = _written(members, 0, len(members), check) if members else None
    more = f"(?:, {extra})*" if extra else ""
    optional = "" if nonempty else "?"
    if first_member is None:
        if not extra:
            return None if nonempty else braces[0] + braces[1]
        body = f"(?:{extra}{more}){optional}"
    elif any(required for _, required in members):
        body = first_member + more
    elif extra:
        body = f"(?:{first_member}{more}|{extra}{more}){optional}"
    else:
        body = f"(?:{first_member}){optional}"
    return braces[0] + body + braces[1]


def _written(members: list[tuple[str, bool]], lo: int, hi: int, check: Any) -> str:
    """Members ``lo..hi-1`` as written: at least one, in order, ", "-separated, every required
    one among them. Split in halves: the first one written is in the left half (then the left
    half's members as written, then the right half's each after a ", ") or, when the left half
    has no required member, in the right half. Each member is spelled O(log n) times, not once
    per member that may come first (quadratic text, and nesting multiplies it); the automaton
    builder shares the spellings that are followed alike."""
    if hi - lo == 1:
        return members[lo][0]
    mid = (lo + hi) // 2
    left = _written(members, lo, mid, check)
    after = "".join(f", {m}" if required else f"(?:, {m})?" for m, required in members[mid:hi])
    regex = left + after
    if not any(required for _, required in members[lo:mid]):
        regex = f"(?:{regex}|{_written(members, mid, hi, check)})"
    if check is not None:
        check(regex)  # stop as soon as it is too long
    return regex


def _unconstrained(flat: Flat) -> bool:
    return not (
        flat.parts or flat.required or flat.item_parts or flat.contains or flat.min_items
        or flat.max_items is not None or flat.min_len or flat.max_len is not None or flat.patterns
        or flat.formats or flat.lo or flat.hi or flat.multiple_of or flat.min_props or flat.unique
    )


def _is_integral(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or (math.isfinite(value) and value.is_integer())


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
