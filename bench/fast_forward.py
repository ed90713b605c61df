#!/usr/bin/env python3
"""Fast-forward: how many tokens per output a guide's ``forced_ids`` lets an engine append
without sampling (each the only allowed id), for structured outputs, forced tool calls and
strict tool calls.

    .venv/bin/python bench/fast_forward.py [--quick] [--json PATH] [--model-dir DIR] [--outputs N]

Two walks per constraint:

- ``tokenizer``: a valid output as the tokenizer encodes it (what a model trained on that
  text tends to write); a position counts as forced when the guide allows only that id;
- ``random``: engine_stub's random mode (uniform among the allowed ids, ends with probability
  1/2 where the output may end), each step first taking ``forced_ids()``.

JSON lines out: tokens per output, forced tokens per output and their share; ``uptime`` in the
header (a shared machine).
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

from textproc.core.constraints import Budget, Guide, TokenVocabulary, compile_constraint
from textproc.core.constraints.plans.forced_calls import tool_call_pattern
from textproc.core.constraints.plans.strict_calls import strict_calls_pattern
from textproc.core.constraints.schema.to_regex import json_schema_to_regex
from textproc.core.parsing import REASONING_FORMATS, TOOL_FORMATS
from textproc.core.tokenizer import Tokenizer
from textproc.testing.bench_cli import bench_parser, model_dir_arg

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 14}},
           "required": ["city", "unit", "days"], "additionalProperties": False}
WEATHER_VALUE = {"city": "Paris", "unit": "celsius", "days": 3}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


def _cases() -> list[tuple[str, str, str]]:
    """(name, regex, a valid output)."""
    call = '<tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps(WEATHER_VALUE) + "}\n</tool_call>"
    strict = strict_calls_pattern(TOOL_FORMATS["hermes"], {"get_weather": WEATHER}, parallel=True,
                                  to_regex=json_schema_to_regex, reasoning=REASONING_FORMATS["think"])
    return [("json_schema", json_schema_to_regex(WEATHER), json.dumps(WEATHER_VALUE)),
            ("forced_call", tool_call_pattern(TOOLS, "get_weather"), call),
            ("strict_auto", strict, "Let me look that up. " + call)]


def _tokenizer_walk(guide: Guide, ids: list[int]) -> tuple[int, int]:
    forced = 0
    for token_id in ids:
        if guide.forced_ids(1) == [token_id]:
            forced += 1
        guide.advance(token_id)
    return len(ids), forced


def _random_walk(guide: Guide, rng: random.Random, max_tokens: int) -> tuple[int, int]:
    total = forced = 0
    while total < max_tokens and not guide.is_finished:
        run = guide.forced_ids(max_tokens - total)
        for token_id in run:
            guide.advance(token_id)
        total += len(run)
        forced += len(run)
        if guide.is_finished or total >= max_tokens:
            break
        if guide.is_accepting and rng.random() < 0.5:
            break
        guide.advance(rng.choice([t for t in guide.allowed_ids() if t not in guide.end_set]))
        total += 1
    return total, forced


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="few outputs (the smoke test)",
                     json_help="append JSON lines here")
    p.add_argument("--outputs", type=int, default=50, help="random walks per constraint")
    args = p.parse_args(argv)
    args.model_dir = model_dir_arg(p, args.model_dir)
    tok = Tokenizer.from_dir(args.model_dir)
    markers = ["<tool_call>", "</tool_call>", "<think>", "</think>"]
    vocab = TokenVocabulary.from_tokenizer(tok, text_specials=markers)
    lines: list[dict[str, Any]] = [{"bench": "fast_forward", "model_dir": Path(args.model_dir).name,
                                    "load": os.getloadavg(), "time": time.time()}]
    n = 3 if args.quick else args.outputs
    for name, regex, text in _cases():
        t0 = time.perf_counter()
        index = compile_constraint(vocab, regex=regex, cache=None, budget=Budget(max_seconds=120))
        compile_s = time.perf_counter() - t0
        ids = tok.encode(text)
        tokens, forced = _tokenizer_walk(Guide(index), ids)
        rng = random.Random(0)
        walks = [_random_walk(Guide(index), rng, 200) for _ in range(n)]
        r_tokens, r_forced = sum(w[0] for w in walks), sum(w[1] for w in walks)
        lines.append({"constraint": name, "compile_s": round(compile_s, 3), "states": index.n_states,
                      "tokenizer_tokens": tokens, "tokenizer_forced": forced,
                      "random_tokens_per_output": round(r_tokens / n, 1),
                      "random_forced_per_output": round(r_forced / n, 2),
                      "random_forced_share": round(r_forced / max(1, r_tokens), 4)})
    for line in lines:
        print(json.dumps(line))
    if args.json:
        with args.json.open("a") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
