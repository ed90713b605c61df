"""The vLLM front's fault handling (``textproc.vllm_front.front``), fast and exact: two fake
vLLM engines that speak vLLM's engine-core wire (``textproc.vllm_front.wire``) over real TCP
sockets, textproc's detokenizer side played by an ``EnginePeer``. A connection that drops and
dials again within the grace keeps its requests; one that stays away loses them (``error``),
and the other rank's requests finish; a request that finds only a rank that may come back
waits for it. (The real engines' faults: ``test_real_engine_dp.py``.)"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

from tests.helpers.engine_peer import EnginePeer, entries_of
from textproc.protocol import (
    EngineAbort,
    EngineCall,
    EngineCallResult,
    EngineHello,
    EngineRequest,
    pack_ids,
)
from textproc.vllm_front import front as front_module
from textproc.vllm_front import wire
from textproc.vllm_front.front import Front, FrontSettings

TOKENS = 40  # each fake request's length
STEP_S = 0.02


class FakeEngine:
    """One rank: the handshake, a ready message, then a token per request every ``STEP_S``
    (finish reason ``length`` after ``TOKENS``), aborts, and ``is_sleeping`` probes answered.
    ``drop(seconds)`` closes its input connection and dials again after ``seconds``, its
    requests running on meanwhile (a network blip); ``drop(None)``: it is gone, silent for good."""

    def __init__(self, rank: int, handshake: str) -> None:
        self.rank = rank
        self.identity = rank.to_bytes(2, "little")
        self.handshake = handshake
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.running: dict[str, int] = {}
        self.aborted: list[str] = []
        self.utility_calls: list[tuple[str, list[Any]]] = []  # (method, args) received
        self.first_delay_s = 0.0  # a request's first token comes this much later (a long prefill)
        self.start_at: dict[str, float] = {}
        # method -> (failure message, result) it answers (others: (None, False))
        self.answers: dict[str, tuple[str | None, Any]] = {}
        self._redial_at: float | None = None
        self._dropped = False
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> FakeEngine:
        self.thread.start()
        return self

    def drop(self, seconds: float | None) -> None:
        self._redial_at = None if seconds is None else time.monotonic() + seconds
        self._dropped = True

    def close(self) -> None:
        self._stop.set()
        self.thread.join(5)
        self.ctx.destroy(0)

    def _dial(self) -> Any:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, self.identity)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.input_address)
        return sock

    def _run(self) -> None:
        hello = self.ctx.socket(zmq.DEALER)
        hello.setsockopt(zmq.IDENTITY, self.identity)
        hello.setsockopt(zmq.LINGER, 0)
        hello.connect(self.handshake)
        hello.send(msgspec.msgpack.encode({"status": "HELLO", "local": False, "headless": True}))
        reply = msgspec.msgpack.decode(hello.recv())
        self.input_address = reply["addresses"]["inputs"][0]
        out = self.ctx.socket(zmq.PUSH)
        out.setsockopt(zmq.LINGER, 0)
        out.connect(reply["addresses"]["outputs"][0])
        inputs = self._dial()
        inputs.send(msgspec.msgpack.encode({
            "max_model_len": 4096, "num_gpu_blocks": 100, "block_size": 16,
            "vllm_version": wire.VLLM_VERSION}))
        next_step = time.monotonic()
        while not self._stop.is_set():
            if self._dropped and inputs is not None:
                inputs.close(0)
                inputs = None
            if inputs is None and self._redial_at is not None and time.monotonic() >= self._redial_at:
                inputs, self._dropped, self._redial_at = self._dial(), False, None
            if inputs is not None and inputs.poll(5):
                kind, payload = inputs.recv_multipart()
                message = msgspec.msgpack.decode(payload)
                if kind == wire.ADD:
                    self.running[message[0]] = 0
                    self.start_at[message[0]] = time.monotonic() + self.first_delay_s
                elif kind == wire.ABORT:
                    for rid in message:
                        self.aborted.append(rid)
                        self.running.pop(rid, None)
                elif kind == wire.UTILITY:
                    _, call_id, method, args = message
                    self.utility_calls.append((method, args))
                    if method == "pause_scheduler" and args[0] == "abort":  # as vLLM: ends all
                        out.send(msgspec.msgpack.encode(wire.Outputs(
                            engine_index=self.rank, outputs=[
                                wire.Output(rid, [], finish_reason=2) for rid in self.running])))
                        self.running.clear()
                    failure, result = self.answers.get(method, (None, False))
                    # vLLM's UtilityResult on the wire: (type info, value)
                    out.send(msgspec.msgpack.encode(wire.Outputs(
                        engine_index=self.rank, utility_output=[
                            call_id, failure, None if failure else [None, result]])))
            elif inputs is None:
                time.sleep(0.005)
            gone = self._dropped and self._redial_at is None
            if time.monotonic() >= next_step and self.running and not gone:
                next_step = time.monotonic() + STEP_S
                outputs = []
                for rid in list(self.running):
                    if time.monotonic() < self.start_at.get(rid, 0.0):
                        continue
                    self.running[rid] += 1
                    done = self.running[rid] >= TOKENS
                    outputs.append(wire.Output(rid, [5], finish_reason=1 if done else None))
                    if done:
                        del self.running[rid]
                out.send(msgspec.msgpack.encode(wire.Outputs(engine_index=self.rank, outputs=outputs)))
        for sock in (hello, out, inputs):
            if sock is not None:
                sock.close(0)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Deployment:
    def __init__(self, root: Path) -> None:
        self.peer = EnginePeer(root)
        port = _free_port()
        self.front = Front(FrontSettings(
            engine_in=(self.peer.engine_in,), engine_out=(self.peer.engine_out,), model_dir="-",
            engine_python="-", data_parallel_size=2, data_parallel_size_local=0,
            address="127.0.0.1", rpc_port=port, routing="round_robin", restart=False))
        self.front.start()
        self.thread = threading.Thread(target=self.front.run, daemon=True)
        self.thread.start()
        self.engines = [FakeEngine(rank, f"tcp://127.0.0.1:{port}").start() for rank in range(2)]
        assert isinstance(self.peer.recv(10), EngineHello)
        self.wait(lambda: all(e.state == "ready" for e in self.front.engines), "both ranks ready")
        self.finished: dict[str, str | None] = {}

    def wait(self, check: Any, what: str, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
            time.sleep(0.01)

    def send(self, rid: str) -> None:
        self.peer.send(EngineRequest(rid, pack_ids([1, 2, 3]), TOKENS))

    def collect(self, rids: list[str], timeout_s: float = 20.0) -> dict[str, str | None]:
        """Each request's finish reason, once all of them have one."""
        deadline = time.monotonic() + timeout_s
        while not all(rid in self.finished for rid in rids):
            assert time.monotonic() < deadline, (self.finished, rids)
            for rid, _, reason in entries_of(self.peer.recv(timeout_s)):
                if reason is not None:
                    self.finished[rid] = reason
        return {rid: self.finished[rid] for rid in rids}

    def close(self) -> None:
        self.front.stop()
        self.thread.join(10)
        for engine in self.engines:
            engine.close()
        self.front.close()
        self.peer.close()


@pytest.fixture
def dp(tmp_path: Path) -> Any:
    deployment = Deployment(tmp_path)
    yield deployment
    deployment.close()


def test_a_rank_that_dials_again_within_the_grace_keeps_its_requests(dp: Deployment) -> None:
    dp.send("a0")
    dp.send("a1")  # round robin: one on each rank
    dp.wait(lambda: all(e.running for e in dp.engines), "a request on each rank")
    dp.engines[1].drop(0.3)  # back before its request ends
    dp.wait(lambda: dp.front.engines[1].state == "suspect", "rank 1 suspect")
    dp.wait(lambda: dp.front.engines[1].state == "ready", "rank 1 dialled again")
    assert dp.collect(["a0", "a1"]) == {"a0": "length", "a1": "length"}
    assert dp.front.failed_requests == 0


def test_a_rank_that_stays_away_loses_only_its_requests(dp: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(front_module, "RECONNECT_GRACE_S", 1.0)
    dp.send("b0")
    dp.send("b1")
    dp.wait(lambda: all(e.running for e in dp.engines), "a request on each rank")
    dp.engines[1].drop(None)
    assert dp.collect(["b0", "b1"]) == {"b0": "length", "b1": "error"}
    assert dp.front.engines[1].state == "dead"
    dp.send("b2")  # the living rank takes it
    assert dp.collect(["b2"]) == {"b2": "length"}


def test_a_request_waits_for_a_rank_that_may_come_back(dp: Deployment) -> None:
    dp.engines[0].drop(None)
    dp.engines[1].drop(1.5)
    dp.wait(lambda: all(e.state in ("suspect", "dead") for e in dp.front.engines), "both ranks away")
    dp.send("c0")  # no rank is ready: it waits for rank 1, which dials again
    assert dp.collect(["c0"]) == {"c0": "length"}
    assert dp.front.engines[1].state == "ready"


def test_an_abort_for_a_rank_away_reaches_it_when_it_dials_again(dp: Deployment) -> None:
    dp.send("d0")
    dp.send("d1")
    dp.wait(lambda: all(e.running for e in dp.engines), "a request on each rank")
    dp.engines[1].drop(0.5)
    dp.wait(lambda: dp.front.engines[1].state == "suspect", "rank 1 suspect")
    dp.peer.send(EngineAbort(["d1"]))
    dp.wait(lambda: "d1" in dp.engines[1].aborted, "the abort reached rank 1", 10)
    assert dp.collect(["d0"]) == {"d0": "length"}


def test_the_stats_name_the_slowest_first_outputs(dp: Deployment) -> None:
    """The stats file lists the requests whose first output took longest from their ADD, with
    the rank that held them: where a stalled turn waited."""
    dp.engines[1].first_delay_s = 0.5
    dp.send("e0")
    dp.send("e1")  # round robin: rank 1, which is slow to start it
    assert dp.collect(["e0", "e1"]) == {"e0": "length", "e1": "length"}
    slowest = dp.front.stats()["slowest_first_outputs"]
    assert [(r["request_id"], r["rank"]) for r in slowest] == [("e1", 1), ("e0", 0)]
    assert slowest[0]["first_output_s"] >= 0.5 > slowest[1]["first_output_s"]
    assert slowest[0]["running_at_send"] == [1, 0]  # e0 was on rank 0 when e1 went


def _call_result(dp: Deployment, call: EngineCall) -> EngineCallResult:
    dp.peer.send(call)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        frame = dp.peer.recv(10)
        if isinstance(frame, EngineCallResult):
            assert frame.call_id == call.call_id
            return frame
        for rid, _, reason in entries_of(frame):  # steps before the answer
            if reason is not None:
                dp.finished[rid] = reason
    raise AssertionError(f"no answer to {call}")


def test_an_operators_call_reaches_every_rank(dp: Deployment) -> None:
    """Each ready rank gets the call as vLLM's own utility call (its arguments in vLLM's order,
    vLLM's defaults for those not given); the answer combines theirs; a rank's failure names
    it; a call with a bad argument stops at the link (400)."""
    dp.engines[1].answers["is_scheduler_paused"] = (None, True)
    dp.engines[0].answers["reset_prefix_cache"] = (None, True)
    dp.engines[1].answers["reset_prefix_cache"] = (None, False)  # blocks still held there
    dp.engines[1].answers["sleep"] = ("sleep mode is not enabled", None)
    assert _call_result(dp, EngineCall("p", "is_scheduler_paused")).result is True
    assert _call_result(dp, EngineCall("r", "reset_prefix_cache")).result is False
    for engine in dp.engines:
        assert ("is_scheduler_paused", []) in engine.utility_calls
        assert ("reset_prefix_cache", [False, False]) in engine.utility_calls
    failed = _call_result(dp, EngineCall("s", "sleep", {"level": 2}))
    assert failed.status == 500 and failed.error == "engine rank 1: sleep mode is not enabled"
    assert ("sleep", [2, "abort"]) in dp.engines[0].utility_calls
    bad = _call_result(dp, EngineCall("b", "pause_scheduler", {"mode": "later"}))
    assert bad.status == 400 and "mode='later'" in bad.error
    assert not any(m == "pause_scheduler" for e in dp.engines for m, _ in e.utility_calls)


def test_a_pause_that_aborts_ends_requests_with_abort(dp: Deployment) -> None:
    """vLLM ends every request of a rank an operator pauses in "abort" mode: the clients hear
    "abort" (an abort vLLM sends on its own, e.g. shutting down, is an "error")."""
    dp.send("e0")
    dp.send("e1")
    dp.wait(lambda: all(e.running for e in dp.engines), "a request on each rank")
    answer = _call_result(dp, EngineCall("pa", "pause_scheduler"))
    assert answer.status == 200 and not answer.error
    assert dp.collect(["e0", "e1"]) == {"e0": "abort", "e1": "abort"}
    assert not any(e.operator_abort for e in dp.front.engines)
