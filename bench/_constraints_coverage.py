#!/usr/bin/env python3
"""Structured-output coverage on real-world JSON Schemas: textproc beside llguidance.

    .venv/bin/python bench/constraints.py --coverage [--per-source N] [--sources a,b] [--json PATH]

The corpus is ``.cache/schemas/corpus.jsonl`` (``scripts/fetch_schemas.py``): the JSON Schema
Test Suite (``suite``), SchemaStore schemas vendored by check-jsonschema with its example files
(``schemastore``) and function-calling tools of the Berkeley Function Calling Leaderboard
(``bfcl``). Per schema both engines get the same instances (``textproc/testing/schema_corpus``:
verdicts from ``jsonschema``, invalid mutations of the valid ones), as ``json.dumps`` text in
the instance's key order or the schema's:

- textproc: ``json_schema_to_regex`` -> minimal byte DFA, each text walked as UTF-8 bytes (plus
  strings sampled from the DFA, which must validate);
- llguidance: ``grammar_from_json_schema`` (its defaults) -> ``LLMatcher`` on the model's
  tokenizer, each text tokenized and consumed, accepted when the matcher accepts at its end.

Per engine and source: schemas compiled with every instance judged right, refused (by reason),
and wrong (a valid instance rejected, or an invalid one accepted: counted apart). ``--per-source``
takes every k-th schema of a source (deterministic) to keep a run within a couple of minutes.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from textproc.testing.schema_corpus import (
    CORPUS, FETCH, Verdict, case_instances, judge, judge_texts, key_orders, load_corpus)

SOURCES = ("suite", "schemastore", "bfcl")


def pick(cases: list[dict[str, Any]], per_source: int | None, sources: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for source in sources:
        mine = [c for c in cases if c["source"] == source]
        if per_source is not None and len(mine) > per_source:
            step = len(mine) / per_source
            mine = [mine[int(i * step)] for i in range(per_source)]
        out.extend(mine)
    return out


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
        return matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()

    judge_texts(verdict, accept, valid, invalid, key_orders(case["schema"]))
    return verdict


def reason_of(message: str) -> str:
    """A refusal message without its paths and values, to count refusals by reason."""
    m = re.search(r"keyword '([^']+)'|format '([^']+)'|(oneOf)|(\$ref)|(automaton states)|"
                  r"(expands to a regex)|(multipleOf)|(contains)|(patternProperties)|(recursion)|"
                  r"(took over)|(pattern)", message)
    if m is None:
        return message[:60]
    return next(g for g in m.groups() if g)


def summarise(verdicts: list[Verdict]) -> dict[str, Any]:
    status = Counter(v.status for v in verdicts)
    judged = [v for v in verdicts if v.status != "skipped"]
    return {
        "schemas": len(judged), "right": status["right"], "refused": status["refused"],
        "wrong": status["wrong"],
        "valid_rejected": sum(1 for v in judged if v.valid_rejected),
        "invalid_accepted": sum(1 for v in judged if v.invalid_accepted),
        "right_pct": round(100 * status["right"] / max(len(judged), 1), 1),
        "refused_by": dict(Counter(reason_of(v.reason) for v in judged if v.status == "refused").most_common(12)),
    }


def run(args: Any, tokenizer_json: Path | None) -> list[dict[str, Any]]:
    if not CORPUS.is_file():
        print(f"no schema corpus at {CORPUS}; run: {FETCH}")
        return []
    sources = tuple(args.sources.split(",")) if args.sources else SOURCES
    cases = pick(load_corpus(), args.per_source, sources)
    llg = tok = None
    if not args.no_references and tokenizer_json is not None:
        try:
            import llguidance as llg

            tok = llg.LLTokenizer(tokenizer_json.read_text())
        except ImportError:
            print("llguidance not installed: pip install llguidance")
    ours: list[Verdict] = []
    theirs: list[Verdict] = []
    t0 = time.perf_counter()
    for case in cases:
        ours.append(judge(case, samples=10, budget_s=args.schema_budget))
        if llg is not None:
            theirs.append(llguidance_verdict(case, llg, tok))
    rows = []
    for source in sources:
        for engine, verdicts in (("textproc", ours), ("llguidance", theirs)):
            mine = [v for v in verdicts if v.source == source]
            if mine:
                rows.append({"source": source, "engine": engine, **summarise(mine)})
    both = {v.name: v for v in theirs}
    better = [v.name for v in ours if v.status == "right" and both.get(v.name) and both[v.name].status != "right"]
    worse = [v.name for v in ours if v.status != "right" and both.get(v.name) and both[v.name].status == "right"]
    for row in rows:
        print(json.dumps(row))
    print(f"judged {len(cases)} schemas in {time.perf_counter() - t0:.0f} s; textproc right where "
          f"llguidance is not: {len(better)}, the reverse: {len(worse)}")
    for v in ours:
        if v.invalid_accepted:
            print("INVALID ACCEPTED by textproc:", v.source, v.name, v.invalid_accepted[:2])
    return rows
