"""Stopping the service's children: SIGTERM, a grace period, then SIGKILL; the engine gets the
longer grace its adapter asks for (vLLM's executor needs seconds to let its model worker go)."""

from __future__ import annotations

import subprocess
import sys
import time

from textproc.launchers import engine_adapter, engine_names
from textproc.service.children import Child, stop_children

# exits by itself (code 3) some seconds after SIGTERM: a slow, graceful shutdown
SLOW_EXIT = ("import signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(float(sys.argv[1])), sys.exit(3)))\n"
             "print('up', flush=True)\n"
             "while True: time.sleep(1)\n")


def _start(role: str, exit_after_s: float) -> Child:
    child = Child(role, 0, [sys.executable, "-c", SLOW_EXIT, str(exit_after_s)])
    child.process = subprocess.Popen(child.command, stdout=subprocess.PIPE)
    assert child.process.stdout is not None
    with child.process.stdout:
        assert child.process.stdout.readline() == b"up\n"  # its SIGTERM handler is set
    return child


def test_the_engine_gets_its_own_grace_and_the_rest_the_services() -> None:
    engine, worker = _start("engine", 0.6), _start("worker", 3.0)
    started = time.monotonic()
    stop_children([engine, worker], 0.2, engine_timeout_s=5.0)
    assert time.monotonic() - started < 2.5  # the engine's exit, not its whole grace; no 3 s
    assert engine.process is not None and engine.process.returncode == 3  # exited by itself
    assert worker.process is not None and worker.process.returncode == -9  # killed


def test_a_grace_shorter_than_the_services_changes_nothing() -> None:
    engine = _start("engine", 0.6)
    stop_children([engine], 5.0, engine_timeout_s=0.1)
    assert engine.process is not None and engine.process.returncode == 3


def test_every_adapter_states_its_stop_grace() -> None:
    graces = {name: engine_adapter(name).stop_timeout_s for name in engine_names()}
    assert graces["vllm"] >= 10.0, graces  # vLLM's worker: 5 s to exit, then SIGTERM and 4 s
    assert all(grace >= 0.0 for grace in graces.values()), graces
