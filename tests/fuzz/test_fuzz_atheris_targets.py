"""The atheris targets of scripts/fuzz_atheris.py stay runnable: seeds and random bytes, no atheris.

The long coverage-guided runs are a separate command (see that script's docstring); this only
keeps the targets from rotting and checks them on hypothesis-drawn bytes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.models import REPO_ROOT


def _script() -> ModuleType:
    name = "textproc_fuzz_atheris"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / "fuzz_atheris.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.CRITICAL, logger="textproc")


def test_seeds_run_on_every_target() -> None:
    script = _script()
    assert set(script.SEEDS) == set(script.TARGETS)
    for name, target in script.TARGETS.items():
        for seed in script.SEEDS[name]:
            target(seed)


@given(st.sampled_from(sorted(_script().TARGETS)), st.data())
def test_targets_on_random_bytes(name: str, data: st.DataObject) -> None:
    script = _script()
    seed = script.SEEDS[name][0]
    raw = data.draw(st.one_of(
        st.binary(max_size=200),
        st.builds(lambda cut, junk: seed[:cut] + junk, st.integers(0, len(seed)), st.binary(max_size=8)),
    ))
    script.TARGETS[name](raw)


def test_usage_without_a_target() -> None:
    assert _script().main(["fuzz_atheris.py"]) == 2
    assert Path(REPO_ROOT / "scripts" / "fuzz_atheris.py").read_text().count("-max_total_time") >= 2
