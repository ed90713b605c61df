"""Every ``>>>`` example in textproc's docstrings runs here, so none can drift from the code.

Modules are found by walking ``textproc/`` (nothing to keep in sync). Examples that load a
real vocabulary use ``.cache/models/NAME`` relative to the repository root (the working
directory here); when that vocabulary is missing the module's examples skip with the fetch hint.
"""

from __future__ import annotations

import doctest
import importlib
import os
import re
from pathlib import Path

import pytest

from tests.helpers.models import FETCH_HINT, MODELS_DIR, REPO_ROOT

PACKAGE = REPO_ROOT / "textproc"
_MODEL_REF = re.compile(r"\.cache/models/(\w+)")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules_with_examples() -> list[str]:
    return sorted(_module_name(p) for p in PACKAGE.rglob("*.py")
                  if ">>>" in p.read_text(encoding="utf-8"))


def test_examples_are_found() -> None:
    assert {"textproc.core.deltas", "textproc.core.tokenizer"} <= set(_modules_with_examples())


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    source = Path(module.__file__ or "").read_text(encoding="utf-8")
    for model in set(_MODEL_REF.findall(source)):
        if not (MODELS_DIR / model / "tokenizer.json").is_file():
            pytest.skip(f"{name}'s examples need the {model} vocabulary; {FETCH_HINT}")
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, raise_on_error=False,
                                 verbose=False, report=True)
    finally:
        os.chdir(cwd)
    assert result.attempted > 0, f"{name} has '>>>' but doctest found no example"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (see output)"
