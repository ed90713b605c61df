"""serve --text-cpus: CPU lists, finding the CPUs an engine's process tree is bound to, pinning
every thread of a process. Real processes (a bound grandchild, a process with a thread)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from textproc.config import ServeConfig, ServiceConfig
from textproc.errors import InvalidInput
from textproc.placement import check_text_cpus, engine_cpus, parse_cpu_list, pin, text_cpus_for

CPUS = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(CPUS) < 2, reason="needs a process allowed on 2 CPUs or more")


def test_cpu_lists() -> None:
    assert parse_cpu_list("3") == {3}
    assert parse_cpu_list("0-2,7, 9-10") == {0, 1, 2, 7, 9, 10}
    for bad in ("", "a", "1-", "3-1", "1,,2", "-1"):
        with pytest.raises(InvalidInput):
            parse_cpu_list(bad)


def test_the_setting_is_checked_where_the_config_is_built(tmp_path: Path) -> None:
    assert check_text_cpus("auto") == "auto" and check_text_cpus("none") == "none"
    assert check_text_cpus(str(CPUS[0])) == str(CPUS[0])
    with pytest.raises(InvalidInput, match="may not use"):
        check_text_cpus(str(max(CPUS) + 1000))
    with pytest.raises(InvalidInput, match="CPU list"):
        ServeConfig(service=ServiceConfig(model_dir=str(tmp_path)), text_cpus="first")


def _wait_threads(pid: int, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(os.listdir(f"/proc/{pid}/task")) < n:
        assert time.monotonic() < deadline, "the child's thread did not start"
        time.sleep(0.01)


def _allowed(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")]


@needs_two
def test_an_engine_tree_with_a_bound_grandchild() -> None:
    """Only threads bound narrower than the whole machine count; the tree is walked."""
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        while not (kids := Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert engine_cpus(parent.pid) == frozenset()  # nothing bound: nobody moves
        assert text_cpus_for("auto", parent.pid) is None
        os.sched_setaffinity(int(kids[0]), {CPUS[0]})
        assert engine_cpus(parent.pid) == {CPUS[0]}
        assert text_cpus_for("auto", parent.pid) == set(CPUS) - {CPUS[0]}
        assert text_cpus_for("none", parent.pid) is None
        assert text_cpus_for(str(CPUS[-1]), None) == {CPUS[-1]}
    finally:
        parent.kill()
        parent.wait()


@needs_two
def test_pin_moves_every_thread() -> None:
    code = "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        _wait_threads(child.pid, 2)
        pin(child.pid, frozenset({CPUS[-1]}))
        assert _allowed(child.pid) == [{CPUS[-1]}, {CPUS[-1]}]
    finally:
        child.kill()
        child.wait()
    pin(child.pid, frozenset({CPUS[0]}))  # gone: skipped
