"""Every textproc zmq context runs its I/O thread SCHED_BATCH (Linux): an idle I/O thread woken
by a send must not preempt the sender (see transport.new_context)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from textproc.transport import new_context


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH") or not Path("/proc/self/task").is_dir(),
                    reason="Linux scheduling policies")
@pytest.mark.parametrize("kind", [zmq.Context, zmq.asyncio.Context])
def test_the_io_thread_is_sched_batch(kind: type) -> None:
    before = {t.name for t in Path("/proc/self/task").iterdir()}
    context = new_context(kind)
    sock = context.socket(zmq.PUSH)  # the I/O thread starts with the first socket
    try:
        for _ in range(200):  # the thread names itself once it runs
            io = [t for t in Path("/proc/self/task").iterdir() if t.name not in before
                  and (t / "comm").read_text().strip().startswith("ZMQbg/IO")]
            if io:
                break
            time.sleep(0.01)
        assert io, "no zmq I/O thread found"
        assert all(os.sched_getscheduler(int(t.name)) == os.SCHED_BATCH for t in io)
        assert os.sched_getscheduler(0) != os.SCHED_BATCH  # the caller's own thread is untouched
    finally:
        sock.close(0)
        context.term()


def test_every_context_in_textproc_is_made_by_new_context() -> None:
    root = Path(__file__).resolve().parents[2]
    offenders = [str(p.relative_to(root)) for d in ("textproc", "engine_stub")
                 for p in (root / d).rglob("*.py")
                 if "zmq.Context(" in p.read_text() or "zmq.asyncio.Context(" in p.read_text()]
    assert offenders == ["textproc/transport.py"] or offenders == [], offenders
