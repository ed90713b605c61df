#!/usr/bin/env python3
"""Constraint compile time, compiled size and per-step engine cost: textproc vs outlines-core
vs llguidance, side by side in one run on the Qwen3 vocabulary.

    .venv/bin/python bench/constraints.py [--quick] [--json PATH] [--model-dir DIR] [--reps N]
    .venv/bin/python bench/constraints.py --coverage [--per-source N | --sample N] [--sources suite,bfcl]
        [--service-budget] [--verdicts PATH]

Per schema (the same regex goes to every compiler: ``json_schema_to_regex`` output, or the
forced tool-call pattern):

- compile: textproc ``compile_constraint`` (no cache), outlines-core ``Index(regex + "$")``,
  llguidance ``LLMatcher(grammar_from_regex(regex))``; best of ``--reps``;
- time to first mask (``*_first_mask_ms``): how long until an engine can mask the first step
  of a request with a constraint never seen before: textproc ``compile_progressive`` (what a
  worker sends first: the partial index of a DFA built on demand, its first states for
  ``FIRST_SECONDS``; the whole index follows) + the first mask
  (``textproc_whole_first_mask_ms``: the whole index first, as before progressive compiles);
  llguidance ``LLMatcher`` + its first ``compute_mask`` (it builds lazily); ``textproc_repeat_ms``: the same constraint compiled
  before by another worker or an earlier run (``--constraint-cache-dir``: a file read and a
  table copy). The summary line gives p50 / p75 over the schemas;
- size: textproc ``TokenIndex.nbytes`` (what travels to the engine once), outlines-core's
  transition count (its table has one entry per allowed (state, token));
- per step, walking the tokens of a valid instance: textproc ``guide.advance(t)`` +
  ``guide.allowed_mask()`` copied into a preallocated int32 buffer (``textproc_lookup_us``:
  without the copy, for an engine that reads the mask bytes in place); outlines-core
  ``Guide.advance(t)`` + ``write_mask_into``; llguidance ``consume_token(t)`` +
  ``unsafe_compute_mask_ptr`` (fill + consume). Median and p99 microseconds per step.

``--coverage``: schema coverage on the real-world corpus instead, beside llguidance
(``bench/_constraints_coverage.py``); with ``--service-budget`` textproc is judged where users
meet it, the service's compile path under its default budget, its index walked by token ids.

One-time vocabulary set-up is reported separately. JSON lines out (``--json``); ``uptime``
load average is in the header: compare ratios, not absolute numbers, on a shared machine.
"""

from __future__ import annotations

import ctypes
import json
import math
import shutil
import statistics
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

from _common import print_table, write_json

from textproc import TokenVocabulary, Tokenizer, compile_constraint
from textproc.core.constraints import Budget, Guide, json_schema_to_regex, tool_call_pattern
from textproc.core.constraints.compile import compile_progressive
from textproc.service.constraints import table_of
from textproc.service.index_store import IndexStore
from textproc.testing.bench_cli import bench_parser, model_dir_arg
from textproc.testing.machine import describe, machine

STR = {"type": "string"}
INT = {"type": "integer"}


def _tool(name: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": props, "required": required}}}


SMALL_TOOL = _tool("get_weather", {"location": STR, "unit": {"enum": ["celsius", "fahrenheit"]}}, ["location"])
EIGHT = {"type": "object", "properties": {
    "query": STR, "limit": {"type": "integer", "minimum": 1, "maximum": 100}, "offset": INT,
    "sort": {"enum": ["relevance", "date", "popularity"]}, "ascending": {"type": "boolean"},
    "lang": STR, "score": {"type": "number"}, "tags": {"type": "array", "items": STR}},
    "required": ["query", "limit"]}
# (name, regex, a valid instance text the per-step walk tokenizes)
CASES: list[tuple[str, dict[str, Any] | None, list[dict[str, Any]] | None, Any]] = [
    ("small-tool", None, [SMALL_TOOL], {"location": "Paris", "unit": "celsius"}),
    ("8-property-tool", EIGHT, None, {"query": "cheap flights to Rome", "limit": 10, "offset": 0,
                                     "sort": "date", "ascending": True, "lang": "en", "score": 0.5,
                                     "tags": ["travel", "europe"]}),
    ("nested", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"name": STR, "age": INT, "address": {
            "type": "object", "properties": {"city": STR, "zip": STR}, "required": ["city"]}},
                 "required": ["name", "address"]},
        "active": {"type": "boolean"}}, "required": ["user"]}, None,
     {"user": {"name": "Ada Lovelace", "age": 36, "address": {"city": "London", "zip": "W1"}}, "active": True}),
    ("enums", {"type": "object", "properties": {
        "color": {"enum": ["red", "green", "blue", "cyan", "magenta", "yellow"]},
        "size": {"enum": ["S", "M", "L", "XL"]}, "status": {"const": "ok"}},
               "required": ["color", "size", "status"]}, None, {"color": "magenta", "size": "XL", "status": "ok"}),
    ("arrays", {"type": "object", "properties": {
        "ids": {"type": "array", "items": INT, "minItems": 1},
        "names": {"type": "array", "items": STR, "maxItems": 4}}, "required": ["ids"]}, None,
     {"ids": [3, 14, 159], "names": ["a", "bc"]}),
    ("formats", {"type": "object", "properties": {
        "when": {"type": "string", "format": "date-time"}, "id": {"type": "string", "format": "uuid"},
        "email": {"type": "string", "format": "email"}}, "required": ["when", "id", "email"]}, None,
     {"when": "2024-05-06T07:08:09Z", "id": "123e4567-e89b-12d3-a456-426614174000", "email": "ada@example.org"}),
    ("anyof", {"type": "object", "properties": {"value": {"anyOf": [INT, STR, {"type": "null"}]},
                                                "unit": {"type": ["string", "null"]}}, "required": ["value"]},
     None, {"value": "twelve", "unit": None}),
    ("int-ranges", {"type": "object", "properties": {
        "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
        "month": {"type": "integer", "minimum": 1, "maximum": 12},
        "temp": {"type": "integer", "minimum": -60, "maximum": 60}}, "required": ["year", "month", "temp"]},
     None, {"year": 2024, "month": 7, "temp": -5}),
    ("short-strings", {"type": "object", "properties": {
        "code": {"type": "string", "maxLength": 8}, "country": {"type": "string", "minLength": 2, "maxLength": 2}},
                       "required": ["code", "country"]}, None, {"code": "AB12", "country": "FR"}),
    ("20-tool-required", None,
     [_tool(f"tool_{i:02d}_{w}", {"arg": STR, "n": INT}, ["arg"]) for i, w in enumerate(
         "search fetch parse store load save send read write open close list move copy sort find "
         "join split merge count".split())],
     {"arg": "x", "n": 3}),
]
QUICK = {"small-tool", "enums"}  # fast for every compiler (the smoke test)


def _regex(schema: dict[str, Any] | None, tools: list[dict[str, Any]] | None) -> str:
    if tools is not None:
        return tool_call_pattern(tools, None if len(tools) > 1 else tools[0]["function"]["name"],
                                 parallel=False)
    assert schema is not None
    return json_schema_to_regex(schema)


def _instance_text(tools: list[dict[str, Any]] | None, value: Any) -> str:
    args = json.dumps(value, ensure_ascii=False)
    if tools is None:
        return args
    name = tools[-1]["function"]["name"]
    return f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {args}}}\n</tool_call>'


def _best(fn: Any, reps: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _steps_us(step: Any, ids: list[int], rounds: int) -> tuple[float, float]:
    times: list[float] = []
    for _ in range(rounds):
        state = step(None)
        for token_id in ids:
            t0 = time.perf_counter_ns()
            state = step((state, token_id))
            times.append(time.perf_counter_ns() - t0)
    times.sort()
    return statistics.median(times) / 1000, times[int(0.99 * (len(times) - 1))] / 1000


def _parser() -> Any:
    p = bench_parser(__doc__, quick="2 schemas, 1 rep (the smoke test)",
                     json_help="append JSON lines here")
    p.add_argument("--reps", type=int, default=3, help="compiles per schema and compiler (best kept)")
    p.add_argument("--no-references", action="store_true", help="textproc only")
    p.add_argument("--no-outlines", action="store_true", help="textproc and llguidance (outlines-core "
                   "compiles take seconds to minutes here)")
    p.add_argument("--coverage", action="store_true", help="schema coverage on the real-world corpus")
    p.add_argument("--per-source", type=int, default=40, help="--coverage: schemas per source (0: all)")
    p.add_argument("--sources", help="--coverage: comma-separated sources (suite, schemastore, bfcl)")
    p.add_argument("--schema-budget", type=float, default=10.0, help="--coverage: seconds per DFA build")
    p.add_argument("--service-budget", action="store_true", help="--coverage: textproc on the service's "
                   "compile path (structured_regex -> WorkerConstraints.compile with serve's defaults: "
                   "MAX_COMPILE_S wall from arrival, the index byte budget), token ids walked through the "
                   "index, instead of the DFA under --schema-budget")
    p.add_argument("--sample", type=int, default=0, help="--coverage: a seeded random sample of N schemas "
                   "stratified by source instead of --per-source")
    p.add_argument("--seed", type=int, default=0, help="--coverage --sample: the sample's seed")
    p.add_argument("--verdicts", type=Path, help="--coverage: append one JSON line per schema and engine here")
    return p


class References:
    """outlines-core and llguidance on the same vocabulary, when installed and wanted."""

    def __init__(self, args: Any, model: Path, vocab: TokenVocabulary, setup: dict[str, float]) -> None:
        self.oc: Any = None
        self.llg: Any = None
        if not args.no_references:
            try:
                if not args.no_outlines:
                    import outlines_core

                    self.oc = outlines_core
            except ImportError:
                print("outlines-core not installed: pip install outlines-core")
            try:
                import llguidance

                self.llg = llguidance
            except ImportError:
                print("llguidance not installed: pip install llguidance")
        self.oc_vocab: Any = None
        self.llg_tok: Any = None
        if self.oc is not None:
            t0 = time.perf_counter()
            by_bytes: dict[bytes, list[int]] = {}
            for i in range(vocab.size):
                data = vocab.token_bytes(i)
                if data:
                    by_bytes.setdefault(data, []).append(i)
            self.oc_vocab = self.oc.Vocabulary(vocab.end_ids[0], by_bytes)
            setup["outlines_vocab_s"] = time.perf_counter() - t0
        if self.llg is not None:
            t0 = time.perf_counter()
            self.llg_tok = self.llg.LLTokenizer((model / "tokenizer.json").read_text(),
                                                n_vocab=vocab.size, eos_token=list(vocab.end_ids))
            setup["llguidance_vocab_s"] = time.perf_counter() - t0


class Masks:
    """A mask buffer of the vocabulary's width, as an engine holds one (int32 words)."""

    def __init__(self, vocab_size: int) -> None:
        self.width = (vocab_size + 31) // 32
        self.buf = array("i", [0]) * self.width
        self.addr = ctypes.addressof((ctypes.c_int32 * self.width).from_buffer(self.buf))
        self.view = memoryview(self.buf).cast("B")


def _timing_budget() -> Budget:
    return Budget(max_seconds=600.0)


def _textproc_row(row: dict[str, Any], vocab: TokenVocabulary, regex: str, ids: list[int],
                  store: IndexStore, masks: Masks, reps: int, rounds: int) -> None:
    # (the budget of a timing run: what a compile costs is measured here, not where the
    # service stops one; a busy box stretches the wall time a default budget counts)
    secs, index = _best(lambda: compile_constraint(vocab, regex=regex, cache=None, budget=_timing_budget()), reps)
    row.update(textproc_compile_s=secs, textproc_states=index.n_states, textproc_mb=index.nbytes / 1e6)
    row["textproc_first_mask_ms"] = 1e3 * _best(
        lambda: compile_progressive(vocab, regex, cache=None, budget=_timing_budget())[0].allowed_mask(0), reps)[0]
    row["textproc_whole_first_mask_ms"] = 1e3 * _best(
        lambda: compile_constraint(vocab, regex=regex, cache=None, budget=_timing_budget()).allowed_mask(0), reps)[0]
    store.put(table_of(index))
    row["textproc_repeat_ms"] = 1e3 * _best(lambda: store.get(index.key).allowed_mask(0), reps)[0]  # type: ignore[union-attr]

    def ours(arg: Any) -> Any:
        if arg is None:
            return Guide(index)
        guide, token_id = arg
        guide.advance(token_id)
        masks.view[:] = guide.allowed_mask()
        return guide

    def ours_lookup(arg: Any) -> Any:  # an engine that reads the mask bytes in place
        if arg is None:
            return Guide(index)
        guide, token_id = arg
        guide.advance(token_id)
        guide.allowed_mask()
        return guide

    row["textproc_step_us"], row["textproc_step_p99_us"] = _steps_us(ours, ids, rounds)
    row["textproc_lookup_us"], _ = _steps_us(ours_lookup, ids, rounds)


def _reference_rows(row: dict[str, Any], refs: References, regex: str, ids: list[int],
                    masks: Masks, reps: int, rounds: int) -> None:
    oc, llg, addr, width = refs.oc, refs.llg, masks.addr, masks.width
    if oc is not None:
        secs, theirs = _best(lambda: oc.Index(f"(?:{regex})$", refs.oc_vocab), reps)
        row.update(outlines_compile_s=secs, outlines_transitions=sum(map(len, theirs.get_transitions().values())))

        def outlines(arg: Any) -> Any:
            if arg is None:
                return oc.Guide(theirs)
            guide, token_id = arg
            guide.advance(token_id)
            guide.write_mask_into(addr, width, 4)
            return guide

        row["outlines_step_us"], row["outlines_step_p99_us"] = _steps_us(outlines, ids, rounds)
    if llg is not None:
        grammar = llg.LLMatcher.grammar_from_regex(regex)
        secs, _ = _best(lambda: llg.LLMatcher(refs.llg_tok, grammar, log_level=0), reps)
        row["llguidance_compile_s"] = secs

        def llg_first_mask() -> None:
            llg.LLMatcher(refs.llg_tok, grammar, log_level=0).unsafe_compute_mask_ptr(addr, width * 4)

        row["llguidance_first_mask_ms"] = 1e3 * _best(llg_first_mask, reps)[0]

        def guidance(arg: Any) -> Any:
            if arg is None:
                return llg.LLMatcher(refs.llg_tok, grammar, log_level=0)
            matcher, token_id = arg
            matcher.consume_token(token_id)
            matcher.unsafe_compute_mask_ptr(addr, width * 4)
            return matcher

        row["llguidance_step_us"], row["llguidance_step_p99_us"] = _steps_us(guidance, ids, rounds)
    for ref in ("outlines", "llguidance"):
        if f"{ref}_compile_s" in row:
            row[f"compile_vs_{ref}"] = row["textproc_compile_s"] / row[f"{ref}_compile_s"]


def _report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The table, and time to first mask over the schemas (p50 / p75, nearest rank)."""
    print_table(rows, [("case", "case", "s"), ("tp 1st ms", "textproc_first_mask_ms", ".1f"),
                       ("tp whole 1st ms", "textproc_whole_first_mask_ms", ".1f"),
                       ("tp repeat ms", "textproc_repeat_ms", ".2f"), ("llg 1st ms", "llguidance_first_mask_ms", ".2f"),
                       ("tp s", "textproc_compile_s", ".3f"),
                       ("oc s", "outlines_compile_s", ".3f"), ("llg s", "llguidance_compile_s", ".4f"),
                       ("states", "textproc_states", "d"), ("tp MB", "textproc_mb", ".2f"),
                       ("oc trans", "outlines_transitions", "d"), ("tp us/step", "textproc_step_us", ".2f"),
                       ("tp lookup us", "textproc_lookup_us", ".2f"),
                       ("oc us/step", "outlines_step_us", ".1f"), ("llg us/step", "llguidance_step_us", ".1f")])
    summary = {}
    for col in ("textproc_first_mask_ms", "textproc_whole_first_mask_ms", "textproc_repeat_ms",
                "llguidance_first_mask_ms"):
        values = sorted(r[col] for r in rows if col in r)
        if values:
            summary[col] = {"p50": round(statistics.median(values), 2),
                            "p75": round(values[math.ceil(0.75 * len(values)) - 1], 2)}  # nearest rank
    print("time to first mask (ms) over the schemas:", json.dumps(summary))
    return summary


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.coverage:
        from _constraints_coverage import run

        info = machine()
        print(describe(info))
        args.per_source = args.per_source or None
        write_json(args.json, run(args, model_dir_arg(p, args.model_dir)), info)
        return 0
    reps = 1 if args.quick else args.reps
    rounds = 3 if args.quick else 20
    info = machine()
    print(describe(info))
    model = model_dir_arg(p, args.model_dir)
    tok = Tokenizer.from_dir(model)
    t0 = time.perf_counter()
    vocab = TokenVocabulary.from_dir(model)
    vocab.tables()
    setup = {"textproc_vocab_s": time.perf_counter() - t0}
    refs = References(args, model, vocab, setup)
    print("vocabulary set-up (once):", {k: round(v, 2) for k, v in setup.items()})
    masks = Masks(vocab.size)
    rows: list[dict[str, Any]] = []
    store = IndexStore(tempfile.mkdtemp(prefix="textproc-bench-indexes-"))
    store.start()
    for name, schema, tools, value in CASES:
        if args.quick and name not in QUICK:
            continue
        regex = _regex(schema, tools)
        ids = tok.encode(_instance_text(tools, value))  # the end id is not walked (outlines-core refuses it)
        row: dict[str, Any] = {"case": name, "regex_chars": len(regex), "steps": len(ids)}
        _textproc_row(row, vocab, regex, ids, store, masks, reps, rounds)
        _reference_rows(row, refs, regex, ids, masks, reps, rounds)
        rows.append(row)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
    summary = _report(rows)
    shutil.rmtree(store.directory, ignore_errors=True)
    info["setup"] = setup
    info["first_mask"] = summary
    write_json(args.json, rows, info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
