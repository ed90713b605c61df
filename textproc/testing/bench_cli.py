"""The flags every benchmark shares (``--quick``, ``--json``, ``--model-dir``) and the model
directory they resolve to.

A benchmark builds its parser with ``bench_parser`` and adds its own flags; ``model_dir_arg``
turns ``--model-dir`` into a directory that has a tokenizer.json, or ends the run through
``parser.error`` (exit 2) with the command that builds the vocabularies.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from textproc.testing.models import FETCH_HINT, MODELS_DIR, build_toy_model, find_model

__all__ = ["bench_parser", "model_dir_arg"]


def bench_parser(doc: str | None, *, quick: str, json_help: str = "append one JSON line per result here",
                 model: str | None = "qwen3", prog: str | None = None) -> argparse.ArgumentParser:
    """A parser with ``--quick`` (``quick`` says what it runs), ``--json PATH`` and, unless
    ``model`` is None, ``--model-dir DIR`` (default ``.cache/models/<model>``). Its description
    is the first line of ``doc`` (the benchmark's module docstring)."""
    p = argparse.ArgumentParser(prog=prog, description=(doc or "").strip().splitlines()[0] if doc else None)
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--json", type=Path, help=json_help)
    if model is not None:
        p.add_argument("--model-dir", help=f"model directory (default {MODELS_DIR / model})")
    return p


def model_dir_arg(parser: argparse.ArgumentParser, arg: str | Path | None, name: str = "qwen3", *,
                  toy_dir: Path | None = None) -> Path:
    """``arg`` when given, else the cached model ``name``; without either, the toy model built
    in ``toy_dir`` when one is given. The directory must have a tokenizer.json."""
    if arg:
        path = Path(arg)
    else:
        found = find_model(name)
        if found is None and toy_dir is not None:
            return build_toy_model(toy_dir)
        path = found or MODELS_DIR / name
    if not (path / "tokenizer.json").is_file():
        parser.error(f"{path} has no tokenizer.json; the vocabularies: {FETCH_HINT}")
    return path
