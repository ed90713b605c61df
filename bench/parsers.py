#!/usr/bin/env python3
"""Output-parser CPU per token for every tool-call format, on long outputs of growing length.

    .venv/bin/python bench/parsers.py [--quick] [--json PATH] [--sizes 16000,128000,1024000]
        [--formats hermes,...] [--repeat 3]

For each format of ``textproc.core.parsing.TOOL_FORMATS`` an output is built from blocks of
content text (the mixed corpus of ``textproc/testing/corpus.py``, no markup) and one tool call
written as the family's template writes it (the format declaration's call spelling, arguments of
~300 characters with nested values and non-ASCII text), repeated until the output has ``size``
characters. It is cut into deltas of 4 characters (about one token each) and timed three ways,
CPU seconds (``time.process_time``), best of ``--repeat``:

- ``stream``: ``OutputParser.feed`` per delta then ``finish`` (reasoning and tools on, the
  request's tools declared): the work the detokenizer process does per token;
- ``one_shot``: one ``feed`` of the whole text (the floor for the same parse);
- ``reparse`` (the two smallest sizes only): the whole text so far parsed again at every delta
  and diffed, what parsers that keep no state do (quadratic; the fix other servers adopted).

O(delta) shows as a constant ``stream`` cost per token as the output grows; ``stream/one_shot``
is the price of streaming.
"""

from __future__ import annotations

import json
import time
from typing import Any

from _common import print_table, write_json

from textproc.core.parsing import REASONING_FORMATS, TOOL_FORMATS, OutputParser, parse_output
from textproc.core.parsing.formats import DEFAULT_REASONING_FORMAT
from textproc.testing.bench_cli import bench_parser
from textproc.testing.corpus import mixed_text
from textproc.testing.machine import describe, machine

DELTA_CHARS = 4
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "opts": {"type": "object"}, "note": {"type": "string"}}}}}]
ARGS = {"city": "Zürich", "days": 3, "opts": {"unit": "c", "hours": list(range(12)), "deep": {"a": [1, {"b": None}]}},
        "note": "Regen möglich, 雨の可能性 — " * 6}


def _reasoning_format(fmt: str) -> str:
    return TOOL_FORMATS[fmt].reasoning or DEFAULT_REASONING_FORMAT


def build_output(fmt: str, size: int) -> str:
    """Content blocks and calls, ``size`` characters."""
    spelling = TOOL_FORMATS[fmt].calls
    call = spelling.render([("get_weather", ARGS)])
    if TOOL_FORMATS[fmt].whole_parser is not None:  # harmony: each call is a message, content in final
        call = "<|start|>assistant" + call + "<|call|>"
        filler = mixed_text(600)[:600].replace("<", "(")
        block = f"<|start|>assistant<|channel|>final<|message|>{filler}<|end|>{call}"
        text = "<|channel|>analysis<|message|>plan<|end|>"
    elif TOOL_FORMATS[fmt].start_chars:  # calls that open the answer (Llama 3 JSON, pythonic): one run
        one = spelling.render_call("get_weather", ARGS)
        inner = one
        while len(spelling.begin + inner + spelling.end) < size:
            inner += spelling.sep + one
        return spelling.begin + inner + spelling.end
    else:
        filler = mixed_text(600)[:600].replace("<", "(").replace("[", "(").replace("{", "(")
        block = filler + call
        rfmt = REASONING_FORMATS[_reasoning_format(fmt)]
        text = rfmt.open_tags[0] + "plan" + rfmt.close_tags[0] if rfmt.open_tags else ""
    while len(text) < size:
        text += block
    return text


def _deltas(text: str) -> list[str]:
    return [text[i:i + DELTA_CHARS] for i in range(0, len(text), DELTA_CHARS)]


def _parser(fmt: str) -> OutputParser:
    return OutputParser(reasoning=True, tools=True, tool_format=fmt, tool_schemas=TOOLS,
                        reasoning_format=_reasoning_format(fmt))


def time_stream(fmt: str, deltas: list[str]) -> tuple[float, int]:
    parser = _parser(fmt)
    t0 = time.process_time()
    for delta in deltas:
        parser.feed(delta)
    parser.finish()
    return time.process_time() - t0, parser.has_tool_calls


def time_one_shot(fmt: str, text: str) -> float:
    parser = _parser(fmt)
    t0 = time.process_time()
    parser.feed(text)
    parser.finish()
    return time.process_time() - t0


def time_reparse(fmt: str, deltas: list[str]) -> float:
    opts = {"reasoning": True, "tools": True, "tool_format": fmt, "tool_schemas": TOOLS,
            "reasoning_format": _reasoning_format(fmt), "stream_calls": True}
    t0 = time.process_time()
    so_far = ""
    sent = ""
    for delta in deltas:
        so_far += delta
        content = parse_output(so_far, **opts)["content"]
        sent = content[len(sent):] and content  # the diff a stateless parser sends
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, quick="small sizes (< 1 min)",
                     json_help="append one JSON line per result here", model=None)
    p.add_argument("--sizes", help="output sizes in characters, comma list")
    p.add_argument("--formats", help="comma list (default: every format)")
    p.add_argument("--repeat", type=int, default=3, help="runs per case; the best counts")
    args = p.parse_args(argv)
    info = machine()
    print(f"parsers: {describe(info)}", flush=True)
    sizes = [int(s) for s in (args.sizes or ("4000,16000" if args.quick else "16000,128000,1024000")).split(",")]
    formats = args.formats.split(",") if args.formats else list(TOOL_FORMATS)
    rows: list[dict[str, Any]] = []
    for fmt in formats:
        for i, size in enumerate(sizes):
            text = build_output(fmt, size)
            deltas = _deltas(text)
            stream = min(time_stream(fmt, deltas)[0] for _ in range(args.repeat))
            one = min(time_one_shot(fmt, text) for _ in range(args.repeat))
            reparse = time_reparse(fmt, deltas) if i < 2 and len(deltas) <= 8000 else None
            n_calls = len(parse_output(text, tools=True, tool_format=fmt, tool_schemas=TOOLS,
                                       reasoning=True,
                                       reasoning_format=_reasoning_format(fmt))["tool_calls"])
            n = len(deltas)
            row = {"format": fmt, "chars": len(text), "deltas": n, "calls": n_calls,
                   "stream_us_per_token": stream / n * 1e6, "one_shot_us_per_token": one / n * 1e6,
                   "stream_vs_one_shot": stream / one if one else None,
                   "reparse_us_per_token": reparse / n * 1e6 if reparse is not None else None,
                   "reparse_vs_stream": reparse / stream if reparse is not None and stream else None}
            rows.append(row)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    print_table(rows, [("format", "format", "s"), ("chars", "chars", ",d"), ("calls", "calls", "d"),
                       ("stream us/tok", "stream_us_per_token", ".2f"),
                       ("one-shot us/tok", "one_shot_us_per_token", ".2f"),
                       ("stream/one-shot", "stream_vs_one_shot", ".2f"),
                       ("reparse us/tok", "reparse_us_per_token", ".1f"),
                       ("reparse/stream", "reparse_vs_stream", ".0f")])
    write_json(args.json, rows, info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
