#!/usr/bin/env python3
"""Structured-output coverage on real-world JSON Schemas: textproc beside llguidance.

    .venv/bin/python bench/constraints.py --coverage [--per-source N | --sample N [--seed S]]
        [--sources a,b] [--service-budget] [--json PATH] [--verdicts PATH]

The corpus is ``.cache/schemas/corpus.jsonl`` (``scripts/fetch_schemas.py``): the JSON Schema
Test Suite (``suite``), SchemaStore schemas vendored by check-jsonschema with its example files
(``schemastore``) and function-calling tools of the Berkeley Function Calling Leaderboard
(``bfcl``). Per schema both engines get the same instances (``textproc/testing/schema_corpus``:
verdicts from ``jsonschema``, invalid mutations of the valid ones), as ``json.dumps`` text in
the instance's key order or the schema's:

- textproc, by default: ``json_schema_to_regex`` -> minimal byte DFA under ``--schema-budget``,
  each text walked as UTF-8 bytes (plus strings sampled from the DFA, which must validate);
- textproc with ``--service-budget``: what a request meets, ``structured_regex({"json":
  schema})`` (the HTTP layer's spec) -> ``WorkerConstraints.compile`` of a worker built with
  ``textproc serve``'s defaults (its ``ServiceConfig``: ``MAX_COMPILE_S`` wall seconds from the
  request's arrival, the regex included; the index byte budget of the default frame size; the
  progressive compile's whole index made within the same budget), each text's Qwen3 token ids
  walked through the index and the end id allowed at its end;
- llguidance: ``grammar_from_json_schema`` (its defaults) -> ``LLMatcher`` on the model's
  tokenizer, each text tokenized and consumed, accepted when the matcher accepts at its end.

Per engine and source: schemas accepted (compiled), right (accepted with every instance judged
right), refused by kind (``REFUSAL_KINDS``: an unsupported keyword or construct, the time
budget, the size or state budget, other) and by reason, and wrong: a valid instance rejected,
or an invalid one accepted. An invalid instance textproc accepts only because a bound it
documents writing unbounded (``maxLength`` / ``maxItems`` over ``MAX_EXACT_COUNT``) is counted
as widened, not wrong. ``--per-source`` takes every k-th schema of a source, ``--sample`` a
seeded random sample stratified by source; both deterministic.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textproc import Tokenizer
from textproc.config import ServiceConfig
from textproc.core.constraints import TokenIndex
from textproc.core.constraints.schema.to_regex import MAX_EXACT_COUNT
from textproc.errors import InvalidInput
from textproc.service.constraints import WorkerConstraints, structured_regex
from textproc.service.request_builder import RequestBuilder
from textproc.testing.schema_corpus import (
    CORPUS, FETCH, Verdict, case_instances, judge, judge_texts, key_orders, load_corpus)

SOURCES = ("suite", "schemastore", "bfcl")
REFUSAL_KINDS = ("unsupported keyword", "budget time", "budget size/states", "other")
# phrases of the refusal messages (textproc's and llguidance's), first kind that matches wins
_KIND_PHRASES = (
    ("budget time", ("compile time budget",)),
    ("budget size/states", ("state budget", "index size budget", "character budget", "expands to a regex of over",
                            "distributes into over", "one automaton state or more per repetition",
                            "schema too large")),
    ("unsupported keyword", ("cannot be enforced", "is not supported", "is enforced only", "is enforced alone",
                             "are enforced", "is enforced on integers only", "only 1, or no more",
                             "points outside the schema", "oneOf forbids",
                             # llguidance
                             "Unimplemented keys", "not supported", "Unknown format", "not present in a registry",
                             "are not disjoint", "only supported when", "too many digits")),
)


def refusal_kind(message: str) -> str:
    """One of ``REFUSAL_KINDS`` for a refusal message of textproc or llguidance."""
    for kind, phrases in _KIND_PHRASES:
        if any(p in message for p in phrases):
            return kind
    return "other"


def pick(cases: list[dict[str, Any]], per_source: int | None, sources: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for source in sources:
        mine = [c for c in cases if c["source"] == source]
        if per_source is not None and len(mine) > per_source:
            step = len(mine) / per_source
            mine = [mine[int(i * step)] for i in range(per_source)]
        out.extend(mine)
    return out


def stratified(cases: list[dict[str, Any]], n: int, seed: int, sources: tuple[str, ...]) -> list[dict[str, Any]]:
    """A seeded random sample of about ``n`` schemas, an equal share per source (a source with
    fewer gives all of them, the rest split among the others), in corpus order."""
    by_source = {s: [i for i, c in enumerate(cases) if c["source"] == s] for s in sources}
    share: dict[str, int] = {}
    left, todo = n, sorted(sources, key=lambda s: len(by_source[s]))
    while todo:
        source = todo.pop(0)
        share[source] = min(len(by_source[source]), left // (len(todo) + 1))
        left -= share[source]
    rng = random.Random(seed)
    chosen = sorted(i for s in sources for i in rng.sample(by_source[s], share[s]))
    return [cases[i] for i in chosen]


@dataclass
class ServiceVerdict(Verdict):
    """A :class:`Verdict` on the service's compile path, with how it was refused and its cost."""

    kind: str = ""  # one of REFUSAL_KINDS when refused
    late: bool = False  # refused after its partial index went out (the whole compile failed)
    wall_s: float = 0.0  # from the request's arrival to its whole index (or its refusal)
    cpu_s: float = 0.0
    widened: list[str] = field(default_factory=list)  # invalid texts accepted by a documented widening


def service_worker(model_dir: Path) -> tuple[WorkerConstraints, Tokenizer]:
    """The compiler a worker of ``textproc serve --model-dir model_dir`` builds with the
    service's defaults (its ``ServiceConfig``: compile budget, index bytes, first-index seconds,
    the format markers written as text), its vocabulary tables built as before Ready."""
    tokenizer = Tokenizer.from_dir(model_dir)
    worker = RequestBuilder(tokenizer, ServiceConfig(model_dir=str(model_dir))).constraints
    worker.prepare()
    return worker, tokenizer


def service_compile(worker: WorkerConstraints, schema: Any, verdict: ServiceVerdict) -> TokenIndex | None:
    """The whole index of ``{"json": schema}`` as a worker makes it for a request arriving now
    (None: refused, ``verdict`` says why and how long it took)."""
    arrived, cpu = time.monotonic(), time.process_time()
    index: TokenIndex | None = None
    try:
        index, _ = worker.compile(structured_regex({"json": schema}), started=arrived)
        if index.partial:  # the request went out with a partial index: its whole one follows
            index = _whole(worker, index.key, verdict)
    except InvalidInput as e:
        verdict.status, verdict.reason, verdict.kind, index = "refused", str(e), refusal_kind(str(e)), None
    except RecursionError:
        verdict.status, verdict.reason, verdict.kind, index = "refused", "nests too deeply", "other", None
    verdict.wall_s, verdict.cpu_s = time.monotonic() - arrived, time.process_time() - cpu
    return index


def _whole(worker: WorkerConstraints, key: str, verdict: ServiceVerdict) -> TokenIndex:
    """``key``'s whole index once the worker's background build made it (as its loop takes
    it, between requests); its failure raised."""
    while True:
        for done, _ in worker.take_wholes():
            if done.key != key:
                continue
            if done.table is None:
                verdict.late = True
                raise InvalidInput(done.error)
            whole = worker.cache.get(key)
            assert whole is not None
            return whole
        time.sleep(0.001)


def walks(index: TokenIndex, token_ids: list[int]) -> bool:
    """Whether ``token_ids`` walk ``index`` from its initial state to a state that allows the end id."""
    state = index.initial_state
    for token_id in token_ids:
        state = index.next_state(state, token_id)
        if state < 0:
            return False
    return index.is_accepting(state)


def service_verdict(case: dict[str, Any], worker: WorkerConstraints, tokenizer: Tokenizer) -> ServiceVerdict:
    """Compile ``case``'s schema on the service's path and judge it on its instances' token ids
    (the model's own tokenization of each text, special tokens' text as text)."""
    verdict = ServiceVerdict(case["name"], case["source"])
    try:
        check, valid, invalid = case_instances(case)
    except Exception as e:  # a schema jsonschema itself cannot use (remote refs, ...)
        verdict.status, verdict.reason = "skipped", f"jsonschema: {type(e).__name__}"
        return verdict
    index = service_compile(worker, case["schema"], verdict)
    if index is None:
        return verdict
    verdict.states = index.n_states

    def accept(text: str) -> bool:
        try:
            return walks(index, tokenizer.encode_specials_as_text(text))
        except InvalidInput:  # lone surrogates: not text a model writes
            return False

    judge_texts(verdict, accept, valid, invalid, key_orders(case["schema"]))
    split_widened(verdict, check)
    return verdict


def split_widened(verdict: ServiceVerdict, check: Any) -> None:
    """Move the accepted invalid texts whose every error is an upper bound textproc writes
    unbounded (``maxLength`` / ``maxItems`` over ``MAX_EXACT_COUNT``) to ``verdict.widened``."""
    wrong = []
    for text in verdict.invalid_accepted:
        errors = list(check.iter_errors(json.loads(text)))
        if errors and all(e.validator in ("maxLength", "maxItems") and isinstance(e.validator_value, int)
                          and e.validator_value > MAX_EXACT_COUNT for e in errors):
            verdict.widened.append(text)
        else:
            wrong.append(text)
    verdict.invalid_accepted = wrong
    verdict.status = "wrong" if verdict.valid_rejected or wrong else "right"


def llguidance_verdict(case: dict[str, Any], llg: Any, tok: Any) -> Verdict:
    verdict = Verdict(case["name"], case["source"])
    try:
        _, valid, invalid = case_instances(case)
    except Exception as e:
        verdict.status, verdict.reason = "skipped", f"jsonschema: {type(e).__name__}"
        return verdict
    try:
        grammar = llg.LLMatcher.grammar_from_json_schema(case["schema"])
        error = llg.LLMatcher.validate_grammar(grammar, tok)
    except Exception as e:  # llguidance raises ValueError on schemas it does not support
        error = str(e)
    if error:
        verdict.status, verdict.reason = "refused", error
        return verdict

    def accept(text: str) -> bool:
        matcher = llg.LLMatcher(tok, grammar, log_level=0)
        ids = tok.tokenize_str(text)
        return bool(matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting())

    judge_texts(verdict, accept, valid, invalid, key_orders(case["schema"]))
    return verdict


def reason_of(message: str) -> str:
    """A refusal message without its paths and values, to count refusals by reason."""
    m = re.search(r"(accepts no value)|keyword '([^']+)'|format '([^']+)'|(oneOf)|(\$ref)|(automaton states)|"
                  r"(expands to a regex)|(multipleOf)|(contains)|(patternProperties)|(recursion)|"
                  r"(took over)|(pattern)|(uniqueItems)|(distributes into)|(index size budget)|"
                  r"(Unimplemented keys: .*)|(Unknown format)|(not present in a registry)", message)
    if m is None:
        return message[:60]
    return next(g for g in m.groups() if g)


def summarise(verdicts: list[Verdict]) -> dict[str, Any]:
    status = Counter(v.status for v in verdicts)
    judged = [v for v in verdicts if v.status != "skipped"]
    refused = [v for v in judged if v.status == "refused"]
    row = {
        "schemas": len(judged), "accepted": status["right"] + status["wrong"], "right": status["right"],
        "refused": status["refused"], "wrong": status["wrong"],
        "valid_rejected": sum(1 for v in judged if v.valid_rejected),
        "invalid_accepted": sum(1 for v in judged if v.invalid_accepted),
        "right_pct": round(100 * status["right"] / max(len(judged), 1), 1),
        "refused_kind": {k: n for k in REFUSAL_KINDS
                         if (n := sum(1 for v in refused if refusal_kind(v.reason) == k))},
        "refused_by": dict(Counter(reason_of(v.reason) for v in refused).most_common(12)),
    }
    service = [v for v in judged if isinstance(v, ServiceVerdict)]
    if service:
        row["widened"] = sum(1 for v in service if v.widened)
        row["late"] = sum(1 for v in service if v.late)
        row["wall_s"] = round(sum(v.wall_s for v in service), 1)
        row["cpu_s"] = round(sum(v.cpu_s for v in service), 1)
    return row


def _llguidance(args: Any, model_dir: Path) -> tuple[Any, Any]:
    if args.no_references:
        return None, None
    try:
        import llguidance as llg
    except ImportError:
        print("llguidance not installed: pip install llguidance")
        return None, None
    return llg, llg.LLTokenizer((model_dir / "tokenizer.json").read_text())


def _cases(args: Any, sources: tuple[str, ...]) -> list[dict[str, Any]]:
    cases = load_corpus()
    if args.sample:
        return stratified(cases, args.sample, args.seed, sources)
    return pick(cases, args.per_source, sources)


def _schema_row(v: Verdict, engine: str) -> dict[str, Any]:
    row = {"engine": engine, "source": v.source, "name": v.name, "status": v.status,
           "kind": refusal_kind(v.reason) if v.status == "refused" else "", "reason": v.reason[:300],
           "valid": v.valid, "invalid": v.invalid, "valid_rejected": v.valid_rejected[:2],
           "invalid_accepted": v.invalid_accepted[:2]}
    if isinstance(v, ServiceVerdict):
        row.update(late=v.late, wall_s=round(v.wall_s, 3), cpu_s=round(v.cpu_s, 3), widened=len(v.widened))
    return row


def run(args: Any, model_dir: Path) -> list[dict[str, Any]]:
    """Judge the chosen schemas with textproc (the DFA path, or the service's with
    ``--service-budget``) and llguidance; one summary row per engine and source, then "all"."""
    if not CORPUS.is_file():
        print(f"no schema corpus at {CORPUS}; run: {FETCH}")
        return []
    sources = tuple(args.sources.split(",")) if args.sources else SOURCES
    cases = _cases(args, sources)
    llg, tok = _llguidance(args, model_dir)
    service = None
    if args.service_budget:
        service = service_worker(model_dir)
        print(f"textproc on the service path: max_compile_s {service[0].max_compile_s:g}, index budget "
              f"{service[0].max_index_bytes / 2**20:g} MiB, first index {service[0].first_seconds:g} s")
    ours: list[Verdict] = []
    theirs: list[Verdict] = []
    t0 = time.perf_counter()
    for i, case in enumerate(cases):
        if i and i % 250 == 0:
            print(f"... {i} of {len(cases)} schemas in {time.perf_counter() - t0:.0f} s", flush=True)
        if service is not None:
            ours.append(service_verdict(case, *service))
        else:
            ours.append(judge(case, samples=10, budget_s=args.schema_budget))
        if llg is not None:
            theirs.append(llguidance_verdict(case, llg, tok))
    engine = "textproc-service" if service is not None else "textproc"
    rows = []
    for source in (*sources, "all"):
        for name, verdicts in ((engine, ours), ("llguidance", theirs)):
            mine = [v for v in verdicts if source in ("all", v.source)]
            if mine:
                rows.append({"source": source, "engine": name, **summarise(mine)})
    _report(rows, ours, theirs, len(cases), time.perf_counter() - t0)
    if args.verdicts is not None:
        with open(args.verdicts, "a", encoding="utf-8") as fh:
            for name, verdicts in ((engine, ours), ("llguidance", theirs)):
                fh.writelines(json.dumps(_schema_row(v, name)) + "\n" for v in verdicts)
    return rows


def _report(rows: list[dict[str, Any]], ours: list[Verdict], theirs: list[Verdict], n: int, secs: float) -> None:
    pairs = list(zip(ours, theirs))  # the same cases in the same order (names repeat in BFCL)
    better = [a.name for a, b in pairs if a.status == "right" and b.status not in ("right", "skipped")]
    worse = [a.name for a, b in pairs if a.status not in ("right", "skipped") and b.status == "right"]
    for row in rows:
        print(json.dumps(row))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"judged {n} schemas in {secs:.0f} s (load average now {load}); textproc right where "
          f"llguidance is not: {len(better)}, the reverse: {len(worse)}")
    for v in ours:
        if v.invalid_accepted:
            print("INVALID ACCEPTED by textproc:", v.source, v.name, v.invalid_accepted[:2])
        if v.valid_rejected:
            print("VALID REJECTED by textproc:", v.source, v.name, v.valid_rejected[:1])
        if isinstance(v, ServiceVerdict) and v.kind == "budget time":
            print(f"OVER THE TIME BUDGET: {v.source} {v.name} ({v.wall_s:.1f} s wall, {v.cpu_s:.1f} s CPU)")
