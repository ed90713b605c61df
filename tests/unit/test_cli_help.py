"""``--help`` says what every flag does and its default, in plain words."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from textproc.cli import build_parser
from textproc.http.settings import build_parser as http_parser

REPO = Path(__file__).resolve().parents[2]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings
            and not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("name", ["serve", "keys", "http"])
def test_every_flag_has_help_naming_its_default(name: str) -> None:
    parser = http_parser() if name == "http" else _subparsers(build_parser())[name]
    for action in _flags(parser):
        flag = action.option_strings[0]
        assert action.help, f"{name} {flag} has no help"
        if isinstance(action, (argparse._StoreTrueAction, argparse._AppendAction)) \
                or action.required:
            continue  # a switch, a repeatable pass-through, a required value: no default
        assert "default" in action.help, f"{name} {flag}: help names no default: {action.help!r}"


def test_textproc_help_opens_in_plain_words() -> None:
    text = build_parser().format_help()
    assert "->" not in text and "``" not in text
    assert "HTTP API" in text


def test_readme_names_the_benchmarks_and_routes_as_they_are(capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    from textproc.cli import main

    assert main(["bench", "--help"]) == 0
    names = capsys.readouterr().out.split("benchmarks: ")[1].strip().split(", ")
    readme = (REPO / "README.md").read_text()
    for name in names:
        assert f"`{name}`" in readme, f"README does not name the benchmark {name}"
    # the routes outside /v1 are not listed under it
    v1 = re.search(r"`http://127\.0\.0\.1:8000/v1` \(([^)]*)\)", readme)
    assert v1 is not None
    for route in ("tokenize", "detokenize", "health", "metrics"):
        assert route not in v1.group(1), f"README lists /{route} under /v1"
        assert f"`/{route}`" in readme
