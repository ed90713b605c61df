"""``textproc.testing.engine``: the StepEngine the benchmarks drive (one token per running
request per step, ``length`` at ``max_tokens``, aborts honoured, timings recorded), in-process
and as ``python -m textproc.testing.engine``, against ``EnginePeer``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.engine_peer import EnginePeer, entries_of
from textproc.engine import EngineLink
from textproc.protocol import EngineAbort, EngineHello, EngineRequest, pack_ids
from textproc.testing.engine import EngineProcess, StepEngine

pytestmark = pytest.mark.timeout(60)


def _take_until(engine: StepEngine, running: set[str]) -> None:
    """Take arrivals until exactly ``running`` run (at most 10 s)."""
    for _ in range(200):
        engine.link.wait(0.05)
        engine.take()
        if set(engine.running) == running:
            return
    raise AssertionError(f"running {sorted(engine.running)}, expected {sorted(running)}")


def test_one_token_per_step_until_max_tokens_and_aborts(peer: EnginePeer, link: EngineLink) -> None:
    engine = StepEngine(link, [7, 8, 9], stride=1, record=True)
    peer.send(EngineRequest("a", pack_ids([1]), 2))
    peer.send(EngineRequest("b", pack_ids([1]), 5))
    peer.send(EngineRequest("c", pack_ids([1]), 5))
    _take_until(engine, {"a", "b", "c"})
    assert engine.step() == 3
    # request k starts at position k * stride of the ids: a at 1, b at 2, c at 0
    assert entries_of(peer.recv()) == [("a", [8], None), ("b", [9], None), ("c", [7], None)]
    peer.send(EngineAbort(["c"]))
    _take_until(engine, {"a", "b"})
    assert engine.step() == 2
    assert entries_of(peer.recv()) == [("a", [9], "length"), ("b", [7], None)]
    assert list(engine.running) == ["b"]
    timings = engine.timings()
    assert len(timings["steps"]) == 2 and timings["steps"][0] <= timings["steps"][1]
    # [arrived, first step, tokens]: a and b ran from step 0; c was aborted after one token
    assert [timings["requests"][r][1:] for r in "abc"] == [[0, 2], [0, 2], [0, 1]]
    assert engine.step() == 1 and engine.running and not engine.guides


def test_engine_process_serves_and_reports_timings(tmp_path: Path) -> None:
    peer = EnginePeer(tmp_path)
    engine = EngineProcess(peer.engine_in, peer.engine_out, [5, 6], step_ms=1.0).start()
    try:
        assert isinstance(peer.recv(timeout_s=30), EngineHello)
        peer.send(EngineRequest("r", pack_ids([1, 2]), 3))
        got = [entries_of(peer.recv(timeout_s=10)) for _ in range(3)]
        assert got == [[("r", [5], None)], [("r", [6], None)], [("r", [5], "length")]]
    finally:
        timings = engine.stop()
        peer.close()
    assert engine.proc is not None and engine.proc.returncode == 0
    assert timings["requests"]["r"][1:] == [0, 3] and len(timings["steps"]) == 3
