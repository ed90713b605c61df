"""The text core never imports the process layer (zmq, msgspec, asyncio)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CORE_MODULES = [
    "textproc",
    "textproc.errors",
    "textproc.tokenizer",
    "textproc.detokenizer",
    "textproc.stops",
    "textproc.pipeline",
    "textproc.convert",
    "textproc.demo",
    "textproc.chat",
    "textproc.parsing",
    "textproc.constraints",
]
FORBIDDEN = ("zmq", "msgspec", "asyncio", "multiprocessing")


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_imports_no_process_layer(module: str) -> None:
    code = (
        "import importlib, sys\n"
        f"importlib.import_module({module!r})\n"
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"{module} pulled in {out.stdout.strip()}"
