#!/usr/bin/env python3
"""Strict tool sets: the CPU one compile of a real tool list costs, as strict calls in free text
(``tool_choice: "auto"`` with strict tools, ``serve --strict-tools``) and as forced calls
(``tool_choice: "required"``), per tool-call format, beside another tree's numbers.

    .venv/bin/python bench/strict_tools.py [--quick] [--json PATH] [--model-dir DIR] [--reps N]
        [--formats hermes,qwen3_coder] [--bfcl-every N] [--before TREE]

One compile is ``compile_constraint(vocab, regex=..., cache=None)`` under the service's budget
(``MAX_COMPILE_S`` of wall time, ``MAX_INDEX_BYTES``), timed in CPU seconds
(``time.process_time``: the box is shared, wall time is noise), in a process that first did
what a worker does before Ready (the vocabulary and its tables, the warm-up compile) and then
compiled the sets listed before this one: "first" is the first compile of that regex there,
the other reps compile it again (what it derived per vocabulary kept, the index not); p50 and
p95 are over the reps (nearest rank). Every tool is marked ``strict: true`` and the patterns are
the service's (each tree's own): strict: ``constraint_plan.strict_tools_pattern``
(``RequestBuilder._strict`` in older trees; strict calls in free text, optional ``think``
reasoning first); forced: ``tool_call_pattern(tools)`` (any tool, parallel).

Tool sets (``textproc.testing.tool_sets``): a coding agent's 12 tools in Claude Code's shape;
Codex CLI's (captured once from the installed CLI, ``bash scripts/fetch_agents.sh``; skipped
without it); BFCL's multi-tool cases (every Nth of the 1,477 that offer several functions, and
the three largest; skipped without the wheel ``scripts/fetch_schemas.py`` downloads); synthetic
20-tool sets, three closed in their schemas as OpenAI's strict mode requires and three whose schemas
leave them open (closed by the service once their tools are strict).

``--before TREE`` measures the same in a child process with ``PYTHONPATH=TREE`` first (a
checkout of the tree before, e.g. ``git worktree add /tmp/strict-old <commit>``), format by
format, and prints both. JSON lines: a header (machine, load), then one per tree, format, set
and mode.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from textproc.testing.bench_cli import bench_parser, model_dir_arg

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("hermes", "qwen3_coder")
REASONING = "think"  # Qwen3's reasoning format: strict outputs may open with a think block
MODES = ("strict", "forced")
# what a worker compiles before Ready (textproc.service.constraints' warm-up)
WARM_UP = {"type": "object", "properties": {"s": {"type": "string"}, "c": {"type": "string", "maxLength": 4},
                                            "n": {"type": "integer"}}}


def held_sets(quick: bool, bfcl_every: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """(name, tools) of the sets measured, in order."""
    from textproc.testing.tool_sets import CODING_AGENT_TOOLS, bfcl_cases, codex_cli_tools, synthetic_tools

    if quick:
        return [("coding-agent-4", CODING_AGENT_TOOLS[:4]), ("synthetic-3", synthetic_tools(3))]
    sets = [("coding-agent-12", CODING_AGENT_TOOLS)]
    codex = codex_cli_tools()
    if codex:
        sets.append(("codex-cli", codex))
    cases = bfcl_cases()
    largest = sorted(cases, key=lambda c: -len(json.dumps(c[1])))[:3]
    picked = cases[::bfcl_every] + [c for c in largest if c not in cases[::bfcl_every]]
    sets += [(f"bfcl:{case_id}", tools) for case_id, tools in picked]
    sets += [(f"synthetic-20-strict-{seed}", synthetic_tools(20, seed=seed, closed=True)) for seed in range(3)]
    sets += [(f"synthetic-20-open-{seed}", synthetic_tools(20, seed=seed, closed=False)) for seed in range(3)]
    return sets


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, -(-len(s) * q // 100) - 1))] if s else float("nan")


def measure(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The rows of one tree (whichever ``textproc`` imports): per format, set and mode. Only
    what every tree has is used, so an older checkout runs it too."""
    import textproc
    from textproc.core.constraints import Budget, TokenVocabulary, compile_constraint
    try:
        from textproc.core.constraints.plans.forced_calls import tool_call_pattern
    except ImportError:  # a tree from before the constraints' stage folders
        from textproc.core.constraints.schema import tool_call_pattern  # type: ignore[no-redef]
    from textproc.core.parsing import REASONING_FORMATS, TOOL_FORMATS
    from textproc.core.tokenizer import Tokenizer
    from textproc.errors import InvalidInput
    from textproc.service.constraints import MAX_COMPILE_S, MAX_INDEX_BYTES
    try:
        from textproc.service.constraint_plan import strict_tools_pattern as strict_pattern
    except ImportError:  # a tree from before constraint_plan
        from textproc.service.request_builder import RequestBuilder
        strict_pattern = RequestBuilder._strict

    tok = Tokenizer.from_dir(spec["model_dir"])
    rfmt = REASONING_FORMATS[REASONING]
    for fmt_name in spec["formats"]:
        fmt = TOOL_FORMATS[fmt_name]
        t0 = time.process_time()
        vocab = TokenVocabulary.from_tokenizer(tok, text_specials=set(fmt.specials) | set(rfmt.specials))
        vocab.tables()
        compile_constraint(vocab, json_schema=WARM_UP, cache=None)
        yield {"format": fmt_name, "set": "(worker start)", "prepare_s": round(time.process_time() - t0, 3),
               "textproc": str(Path(textproc.__file__).parent)}
        for name, tools in spec["sets"]:
            tools = [{**t, "function": {**t["function"], "strict": True}} for t in tools]  # as OpenAI's strict mode
            for mode in MODES:
                row: dict[str, Any] = {"format": fmt_name, "set": name, "tools": len(tools), "mode": mode}
                try:
                    if mode == "strict":
                        regex = strict_pattern(tools, fmt_name, rfmt, False, parallel=True)
                    else:
                        regex = tool_call_pattern(tools, tool_format=fmt_name)
                except InvalidInput as e:
                    yield {**row, "error": f"refused: {e}"[:160]}
                    continue
                times: list[float] = []
                for _ in range(spec["reps"]):
                    budget = Budget(max_seconds=MAX_COMPILE_S, max_bytes=MAX_INDEX_BYTES)
                    t0 = time.process_time()
                    try:
                        index = compile_constraint(vocab, regex=regex, cache=None, budget=budget)
                    except InvalidInput as e:
                        row["error"] = str(e)[:160]
                        break
                    times.append(time.process_time() - t0)
                if times:
                    row.update(chars=len(regex), states=index.n_states, mb=round(index.nbytes / 1e6, 2),
                               first_s=round(times[0], 3), p50_s=round(_pct(times, 50), 3),
                               p95_s=round(_pct(times, 95), 3))
                yield row


def _run_tree(tree: Path, spec_path: Path, fmt: str) -> list[dict[str, Any]]:
    """``measure`` in a child process importing ``textproc`` from ``tree`` (a line per row as
    it comes)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    rows = []
    with tempfile.TemporaryFile("w+") as err:
        with subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--measure", str(spec_path),
                               "--formats", fmt], env=env, stdout=subprocess.PIPE, stderr=err, text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                row = {"tree": str(tree), **json.loads(line)}
                rows.append(row)
                took = row.get("first_s", row.get("prepare_s", row.get("error", "")))
                print(f"  {tree.name:>14} {fmt:12} {row['set'][:36]:36} {row.get('mode', ''):7} {took}", flush=True)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"strict_tools: the child for {tree} failed:\n{err.read()[-2000:]}")
    return rows


def _summary(rows: list[dict[str, Any]], trees: list[str]) -> list[str]:
    """Per tree, format and mode: p50 / p95 (nearest rank) over the sets of their first compile
    and of their p95, the worst, and how many passed 1 s or failed."""
    out = []
    for fmt in sorted({r["format"] for r in rows}):
        for mode in MODES:
            for tree in trees:
                got = [r for r in rows if r["tree"] == tree and r["format"] == fmt and r.get("mode") == mode]
                firsts = [r["first_s"] for r in got if "first_s" in r]
                p95s = [r["p95_s"] for r in got if "p95_s" in r]
                failed = [r["set"] for r in got if "error" in r and not r["error"].startswith("refused")]
                refused = sum(1 for r in got if r.get("error", "").startswith("refused"))
                if not firsts:
                    continue
                out.append(f"{fmt:12} {mode:7} {Path(tree).name:14} sets {len(firsts):3}  first p50 "
                           f"{_pct(firsts, 50):6.3f} p95 {_pct(firsts, 95):6.3f} max {max(firsts):6.3f}  "
                           f"rep-p95 p50 {_pct(p95s, 50):6.3f} p95 {_pct(p95s, 95):6.3f}  "
                           f"over 1 s {sum(1 for x in p95s if x > 1.0):3}  failed {len(failed)}  refused {refused}")
    return out


def _table(rows: list[dict[str, Any]], trees: list[str]) -> list[str]:
    """One line per format, set and mode: CPU first / p50 / p95, MB and states, per tree."""
    lines = []
    keyed = {(r["tree"], r["format"], r["set"], r.get("mode")): r for r in rows}
    head = f"{'format':12} {'set':36} {'mode':7} {'tools':>5}"
    for tree in trees:
        head += f" | {Path(tree).name[:14]:>14}: first    p50    p95      MB  states"
    lines.append(head)
    seen = []
    for r in rows:
        key = (r["format"], r["set"], r.get("mode"))
        if "mode" not in r or key in seen:
            continue
        seen.append(key)
        line = f"{r['format']:12} {r['set'][:36]:36} {r['mode']:7} {r['tools']:5}"
        for tree in trees:
            got = keyed.get((tree, *key))
            if got is None:
                line += f" | {'':>14}  {'-':>5}"
            elif "first_s" in got:
                line += (f" | {'':>14}  {got['first_s']:6.3f} {got['p50_s']:6.3f} {got['p95_s']:6.3f} "
                         f"{got['mb']:7.2f} {got['states']:7}")
            else:
                line += f" | {'':>14}  {got['error'][:44]}"
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="two small sets, one rep, hermes (the smoke test)")
    p.add_argument("--reps", type=int, default=3, help="compiles of each regex (the first is 'first')")
    p.add_argument("--formats", default=",".join(FORMATS), help="tool-call formats, comma-separated")
    p.add_argument("--bfcl-every", type=int, default=50, help="every Nth BFCL multi-tool case")
    p.add_argument("--before", type=Path, help="a checkout of the tree to compare with (PYTHONPATH)")
    p.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child's spec
    args = p.parse_args(argv)
    if args.measure is not None:  # the child: one tree's rows on stdout
        spec = json.loads(args.measure.read_text())
        spec["formats"] = args.formats.split(",")
        for row in measure(spec):
            print(json.dumps(row), flush=True)
        return 0
    model_dir = model_dir_arg(p, args.model_dir)
    formats = ["hermes"] if args.quick else args.formats.split(",")
    reps = 1 if args.quick else args.reps
    sets = held_sets(args.quick, args.bfcl_every)
    from textproc.testing.machine import machine

    info = machine()
    print(f"strict_tools: {len(sets)} tool sets x {formats} x {MODES}, {reps} reps; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start", flush=True)
    trees = ([str(args.before.resolve())] if args.before else []) + [str(ROOT)]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps({"model_dir": str(model_dir), "reps": reps, "sets": sets}))
        for fmt in formats:
            for tree in trees:
                rows += _run_tree(Path(tree), spec_path, fmt)
    load_end = os.getloadavg()
    for line in _table(rows, trees):
        print(line)
    print()
    for line in _summary(rows, trees):
        print(line)
    print(f"load average {' '.join(f'{x:.2f}' for x in load_end)} at the end", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with args.json.open("a") as f:
            f.write(json.dumps({"bench": "strict_tools", "machine": info, "load_end": list(load_end),
                                "reps": reps, "trees": trees}) + "\n")
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
