"""The real-world schema corpus (``scripts/fetch_schemas.py``) and how a compiled schema is
judged on it: instances go as UTF-8 bytes through the minimal DFA of the schema's regex.

Verdicts come from ``jsonschema`` (the schema's own draft, formats asserted, ``multipleOf``
exact in decimal as the spec says rather than in binary floating point): a suite or example
instance whose verdict ``jsonschema`` does not share is dropped. Per schema that compiles:

- every valid instance must be accepted, written as ``json.dumps`` writes it, its keys in its
  own order or in the order the schema declares them (the regex fixes key order);
- every invalid instance must be rejected in both orders, and so must invalid mutations of
  the valid ones (a value replaced, a key dropped or added, an item added);
- strings sampled by random walks of the DFA must parse and validate.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
from jsonschema import validators

from textproc.core.constraints import Budget, json_schema_to_regex
from textproc.core.constraints.automaton.dfa import ByteDFA, build_dfa
from textproc.core.constraints.regex.syntax import parse_regex
from textproc.errors import InvalidInput
from textproc.testing.models import REPO_ROOT

CORPUS = REPO_ROOT / ".cache" / "schemas" / "corpus.jsonl"
FETCH = ".venv/bin/python scripts/fetch_schemas.py"


def load_corpus(path: Path = CORPUS) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _exact_multiple_of(validator: Any, step: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "number"):
        return
    with localcontext() as ctx:
        ctx.prec = 1000
        try:
            ok = Decimal(repr(instance)) % Decimal(repr(step)) == 0
        except ArithmeticError:
            ok = False
    if not ok:
        yield jsonschema.ValidationError(f"{instance!r} is not a multiple of {step}")


def validator(schema: Any) -> Any:
    cls = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if "multipleOf" in cls.VALIDATORS:
        cls = validators.extend(cls, {"multipleOf": _exact_multiple_of})
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def key_orders(schema: Any) -> dict[str, int]:
    """Property names by first place in the schema document (declared order, roughly)."""
    order: dict[str, int] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "properties" and isinstance(value, dict):
                    for name in value:
                        order.setdefault(name, len(order))
                if key not in ("enum", "const", "examples", "default"):
                    walk(value)
        elif isinstance(node, list):
            for x in node:
                walk(x)

    walk(schema)
    return order


def texts(value: Any, order: dict[str, int]) -> list[str]:
    """``value`` as json.dumps writes it: its own key order, and the schema's (names the
    schema does not declare sorted, as required-only names are written)."""
    def sort(v: Any) -> Any:
        if isinstance(v, dict):
            keys = sorted(v, key=lambda k: (order.get(k, len(order)), k))
            return {k: sort(v[k]) for k in keys}
        return [sort(x) for x in v] if isinstance(v, list) else v

    own = json.dumps(value, ensure_ascii=False)
    declared = json.dumps(sort(value), ensure_ascii=False)
    return [own] if own == declared else [own, declared]


def accepts(dfa: ByteDFA, text: str) -> bool:
    if dfa.start < 0:
        return False
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: not text a model writes
        return False
    state = dfa.walk(dfa.start, data)
    return state >= 0 and dfa.accepting[state]


def walk_samples(dfa: ByteDFA, rng: random.Random, count: int, max_bytes: int = 300) -> list[str]:
    """Random accepted strings: random bytes, then the shortest way to an accepting state."""
    n = dfa.n_states
    if dfa.start < 0:
        return []
    distance = [-1] * n
    back: list[list[int]] = [[] for _ in range(n)]
    for q, row in enumerate(dfa.rows):
        for t in set(row):
            if t >= 0:
                back[t].append(q)
    frontier = [q for q in range(n) if dfa.accepting[q]]
    for q in frontier:
        distance[q] = 0
    while frontier:
        nxt = []
        for t in frontier:
            for q in back[t]:
                if distance[q] < 0:
                    distance[q] = distance[t] + 1
                    nxt.append(q)
        frontier = nxt
    out = []
    for _ in range(count):
        q, data = dfa.start, bytearray()
        while True:
            live = [b for b in range(256) if dfa.rows[q][b] >= 0]
            if dfa.accepting[q] and (not live or len(data) >= max_bytes or rng.random() < 0.05):
                break
            if len(data) >= max_bytes:
                live = [b for b in live if distance[dfa.rows[q][b]] < distance[q]]
            elif rng.random() < 0.5:  # prefer ASCII structure over random high bytes
                live = [b for b in live if b < 0x80] or live
            if not live:
                raise AssertionError(f"DFA state {q} (distance {distance[q]}) has no way on")
            b = rng.choice(live)
            data.append(b)
            q = dfa.rows[q][b]
        out.append(data.decode("utf-8"))
    return out


def mutations(value: Any, rng: random.Random) -> list[Any]:
    """Variants of ``value``: one leaf replaced, one key removed or added, one item added."""
    fillers: list[Any] = [None, True, 0, -1, 1.5, "", "x" * 30, [], {}, "2024-01-01", 10**12]
    out: list[Any] = []
    paths: list[tuple[Any, ...]] = []

    def collect(v: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(v, dict):
            for k, x in v.items():
                collect(x, path + (k,))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                collect(x, path + (i,))

    collect(value, ())
    for path in rng.sample(paths, min(len(paths), 6)):
        for filler in rng.sample(fillers, 3):
            out.append(_replace(value, path, lambda _old, f=filler: f))
        out.append(_replace(value, path, lambda old: _grow(old)))
        if path:
            out.append(_replace(value, path[:-1], lambda parent, k=path[-1]: _without(parent, k)))
    return out


def _grow(v: Any) -> Any:
    if isinstance(v, dict):
        return {**v, "zz_extra": 1}
    if isinstance(v, list):
        return v + (v[-1:] or [0])
    return v


def _without(parent: Any, key: Any) -> Any:
    if isinstance(parent, dict):
        return {k: x for k, x in parent.items() if k != key}
    return [x for i, x in enumerate(parent) if i != key]


def _replace(value: Any, path: tuple[Any, ...], fn: Any) -> Any:
    if not path:
        return fn(value)
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace(x, rest, fn) if k == head else x) for k, x in value.items()}
    return [(_replace(x, rest, fn) if i == head else x) for i, x in enumerate(value)]


@dataclass
class Verdict:
    """How one schema fared: ``status`` is "right", "wrong", "refused" or "skipped"."""

    name: str
    source: str
    status: str = "right"
    reason: str = ""
    valid: int = 0
    invalid: int = 0
    valid_rejected: list[str] = field(default_factory=list)
    invalid_accepted: list[str] = field(default_factory=list)
    states: int = 0


def case_instances(case: dict[str, Any], *, mutate: bool = True, seed: int = 0) -> tuple[Any, list[Any], list[Any]]:
    """(checker, valid, invalid): the case's instances whose verdict ``jsonschema`` shares,
    plus invalid mutations of the valid ones. Raises when jsonschema cannot use the schema."""
    check = validator(case["schema"])
    valid = [v for v in case["valid"] if check.is_valid(v)]
    invalid = [v for v in case["invalid"] if not check.is_valid(v)]
    if mutate:
        rng = random.Random(seed)
        for value in valid:
            invalid.extend(m for m in mutations(value, rng) if not check.is_valid(m))
    return check, valid, invalid


def judge_texts(verdict: Verdict, accept: Any, valid: list[Any], invalid: list[Any], order: dict[str, int]) -> None:
    """Fill ``verdict`` from ``accept(text) -> bool`` on the instances."""
    for value in valid:
        verdict.valid += 1
        if not any(accept(t) for t in texts(value, order)):
            verdict.valid_rejected.append(texts(value, order)[-1])
    for value in invalid:
        verdict.invalid += 1
        for text in texts(value, order):
            if accept(text):
                verdict.invalid_accepted.append(text)
    if verdict.valid_rejected or verdict.invalid_accepted:
        verdict.status = "wrong"


def judge(case: dict[str, Any], *, samples: int = 20, mutate: bool = True, seed: int = 0,
          budget_s: float = 20.0, max_states: int = 20_000) -> Verdict:
    """Compile ``case``'s schema and judge it on its instances (see the module docstring)."""
    verdict = Verdict(case["name"], case["source"])
    try:
        check, valid, invalid = case_instances(case, mutate=mutate, seed=seed)
    except Exception as e:  # a schema jsonschema itself cannot use (remote refs, ...)
        verdict.status, verdict.reason = "skipped", f"jsonschema: {type(e).__name__}"
        return verdict
    try:
        regex = json_schema_to_regex(case["schema"])
        dfa = build_dfa(parse_regex(regex), Budget(max_states=max_states, max_seconds=budget_s))
    except InvalidInput as e:
        verdict.status, verdict.reason = "refused", str(e)
        return verdict
    except RecursionError:
        verdict.status, verdict.reason = "refused", "nests too deeply"
        return verdict
    verdict.states = dfa.n_states
    judge_texts(verdict, lambda text: accepts(dfa, text), valid, invalid, key_orders(case["schema"]))
    for text in walk_samples(dfa, random.Random(seed), samples):
        verdict.invalid += 1
        try:
            ok = check.is_valid(json.loads(text))
        except ValueError:
            ok = False
        if not ok:
            verdict.invalid_accepted.append(text)
            verdict.status = "wrong"
    return verdict
