"""The format registry: every family module declares well-formed formats, each tool format's
declared call spelling parses back through its own parser, and no code outside the family
modules compares a format's name."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from textproc.core.parsing import REASONING_FORMATS, TOOL_FORMATS, OutputParser, merge_deltas, parse_output
from textproc.core.parsing.detect import detect_formats
from textproc.core.parsing.formats import DEFAULT_REASONING_FORMAT, DEFAULT_TOOL_FORMAT, family_modules

ROOT = Path(__file__).resolve().parents[2] / "textproc"
ARGS = {"city": "Zürich", "days": 3, "opts": {"hours": [1, 2]}, "flag": True}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"},
    "flag": {"type": "boolean"}}}}},
         {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]


def test_registry_collects_every_family_module() -> None:
    assert "hermes" in family_modules() and "think" in family_modules()
    assert (DEFAULT_TOOL_FORMAT, DEFAULT_REASONING_FORMAT) == ("hermes", "think")
    assert list(TOOL_FORMATS)[0] == DEFAULT_TOOL_FORMAT and list(REASONING_FORMATS)[0] == DEFAULT_REASONING_FORMAT
    for fmt in TOOL_FORMATS.values():
        assert fmt.detect, f"{fmt.name} declares no detection rule"
        assert (fmt.body is None) == (fmt.whole_parser is not None), fmt.name
        assert fmt.reasoning is None or fmt.reasoning in REASONING_FORMATS


@pytest.mark.parametrize("name", sorted(TOOL_FORMATS))
def test_declared_spelling_parses_back(name: str) -> None:
    fmt = TOOL_FORMATS[name]
    calls = [("get_weather", ARGS), ("ping", {})] if fmt.calls.parallel else [("get_weather", ARGS)]
    text = fmt.calls.render(calls)
    got = parse_output(text, tools=True, reasoning=True, tool_format=name,
                       reasoning_format=fmt.reasoning or DEFAULT_REASONING_FORMAT, tool_schemas=TOOLS)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got["tool_calls"]] == calls
    assert got["content"].strip("\n") == "", text  # (separators between sections are content)


@pytest.mark.parametrize("name", sorted(TOOL_FORMATS))
def test_each_format_is_detected_from_its_own_markers(name: str) -> None:
    # a template holding a rule's markers (and the call spelling) picks the format, unless a
    # rule of lower rank also matches (then it is a less specific rule of the same markup)
    rule = min(TOOL_FORMATS[name].detect, key=lambda d: d.rank)
    assert detect_formats("\n".join(rule.markers)).tool_format == name


def test_no_format_name_is_compared_outside_the_family_modules() -> None:
    names = "|".join(re.escape(n) for n in {*TOOL_FORMATS, *REASONING_FORMATS})
    compare = re.compile(rf"""(?:==|!=|\bin)\s*\(?\s*["'](?:{names})["']""")
    found = []
    for path in ROOT.rglob("*.py"):
        if "families" in path.parts:
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if compare.search(line):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert found == []


@pytest.mark.parametrize("name", sorted(n for n, f in REASONING_FORMATS.items() if f.open_tags))
def test_declared_reasoning_tags_split_reasoning_from_content(name: str) -> None:
    fmt = REASONING_FORMATS[name]
    opening = "" if fmt.starts_in_reasoning else fmt.open_tags[0]  # (DeepSeek R1's prompt opens it)
    text = f"{opening}\nplan <b>\n{fmt.close_tags[0]}\n\nanswer"
    want = {"reasoning_content": "plan <b>", "content": "answer", "tool_calls": []}
    for size in (1, 2, 5, len(text)):
        parser = OutputParser(reasoning=True, reasoning_format=name)
        deltas = [d for i in range(0, len(text), size) for d in parser.feed(text[i : i + size])]
        assert merge_deltas(deltas + parser.finish()) == want
    # a prompt that leaves the block open: the answer starts as reasoning until the close tag
    opened = text[len(opening):]
    assert parse_output(opened, reasoning=True, starts_in_reasoning=True, reasoning_format=name) == want
    if fmt.close_text is not None:  # what a forced output writes first closes the block
        assert parse_output(fmt.close_text + "answer", reasoning=True, starts_in_reasoning=True,
                            reasoning_format=name)["content"] == "answer"
        assert fmt.prompt_leaves_open("<|im_start|>assistant\n" + fmt.open_tags[0] + "\n")
