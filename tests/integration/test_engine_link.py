"""EngineLink against plain pyzmq peers: hello, request/abort order, malformed frames, step bytes.

The textproc side is bound here with bare pyzmq (PUSH for engine-in, PULL for engine-out), so
these tests check the wire contract of ``textproc.protocol`` and nothing else of textproc.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

from textproc.engine import EngineLink, IncomingRequest
from textproc.errors import InvalidInput
from textproc.protocol import (
    EngineAbort,
    EngineHello,
    EngineOutFrame,
    EngineRequest,
    EngineStep,
    StepOutput,
    pack_ids,
)

pytestmark = pytest.mark.timeout(30)

ENC = msgspec.msgpack.Encoder()
OUT = msgspec.msgpack.Decoder(EngineOutFrame)


class Peer:
    """The textproc side of the two engine sockets, bound with plain pyzmq."""

    def __init__(self, tmp_path: Path) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.engine_in = f"ipc://{tmp_path}/engine-in"
        self.engine_out = f"ipc://{tmp_path}/engine-out"
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.linger = 0
        self.push.bind(self.engine_in)
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.linger = 0
        self.pull.bind(self.engine_out)

    def send(self, frame: Any) -> None:
        self.push.send(frame if isinstance(frame, bytes) else ENC.encode(frame))

    def recv(self, timeout_s: float = 5.0) -> Any:
        if not self.pull.poll(int(timeout_s * 1000)):
            raise AssertionError(f"nothing on {self.engine_out} within {timeout_s} s")
        return OUT.decode(self.pull.recv())

    def recv_raw(self, timeout_s: float = 5.0) -> bytes:
        if not self.pull.poll(int(timeout_s * 1000)):
            raise AssertionError(f"nothing on {self.engine_out} within {timeout_s} s")
        return self.pull.recv()

    def close(self) -> None:
        self.push.close(0)
        self.pull.close(0)
        self.ctx.term()


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Peer]:
    p = Peer(tmp_path)
    yield p
    p.close()


@pytest.fixture
def link(peer: Peer) -> Iterator[EngineLink]:
    lk = EngineLink.connect(peer.engine_in, peer.engine_out)
    hello = peer.recv()
    assert hello == EngineHello(lk.instance_id)
    yield lk
    lk.close()


def poll_until(fn: Any, *, timeout_s: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{fn} returned nothing within {timeout_s} s")
        time.sleep(0.002)


def test_hello_first_with_a_fresh_instance_id_each_link(peer: Peer) -> None:
    a = EngineLink.connect(peer.engine_in, peer.engine_out)
    b = EngineLink.connect(peer.engine_in, peer.engine_out, instance_id="fixed")
    try:
        hellos = {peer.recv().instance_id, peer.recv().instance_id}
        assert hellos == {a.instance_id, "fixed"}
        assert len(a.instance_id) == 32 and a.hellos_sent == 1
    finally:
        a.close()
        b.close()


def test_request_fields_arrive_unpacked(peer: Peer, link: EngineLink) -> None:
    ids = [0, 1, 151643, 2**32 - 1]
    peer.send(EngineRequest("r1", pack_ids(ids), 7, [5, 6], {"temperature": 0.5}, "a+", 2, True))
    peer.send(EngineRequest("r2", pack_ids([9]), 1))
    got = poll_until(link.poll_requests)
    if len(got) == 1:
        got += poll_until(link.poll_requests)
    assert [r.prompt_token_ids for r in got] == [array("I", ids), array("I", [9])]
    assert got == [
        IncomingRequest("r1", array("I", ids), 7, [5, 6], {"temperature": 0.5}, "a+", 2, True),
        IncomingRequest("r2", array("I", [9]), 1, [], {}, None, 0, False),
    ]
    assert link.poll_requests() == [] and link.poll_aborts() == []


def test_prompt_ids_as_list_option(peer: Peer) -> None:
    with EngineLink(peer.engine_in, peer.engine_out, prompt_ids_as_list=True) as lk:
        peer.send(EngineRequest("r1", pack_ids([3, 2**32 - 1]), 7))
        got = poll_until(lk.poll_requests)
        assert got[0].prompt_token_ids == [3, 2**32 - 1]
        assert type(got[0].prompt_token_ids) is list


def test_aborts_keep_order_with_requests(peer: Peer, link: EngineLink) -> None:
    peer.send(EngineRequest("a", pack_ids([1]), 3))
    assert [r.request_id for r in poll_until(link.poll_requests)] == ["a"]
    peer.send(EngineAbort(["a"]))
    assert poll_until(link.poll_aborts) == ["a"]
    # request and its abort in the same drain: the request never reaches the engine
    peer.send(EngineRequest("b", pack_ids([1]), 3))
    peer.send(EngineRequest("c", pack_ids([1]), 3))
    peer.send(EngineAbort(["b", "zzz"]))
    time.sleep(0.1)
    assert [r.request_id for r in link.poll_requests()] == ["c"]
    assert link.poll_aborts() == ["b", "zzz"]
    # poll_aborts first: the request drained with it waits for poll_requests
    peer.send(EngineRequest("d", pack_ids([1]), 3))
    time.sleep(0.1)
    assert link.poll_aborts() == []
    assert [r.request_id for r in link.poll_requests()] == ["d"]


MALFORMED = [
    b"",
    b"\xff\xfe garbage",
    ENC.encode(["NoSuchTag", "x"]),
    ENC.encode(["EngineRequest", 5, b"\x01\x00\x00\x00", 3]),  # request_id not a str
    ENC.encode(["EngineAbort", "not-a-list"]),
    ENC.encode({"type": "EngineRequest"}),
    ENC.encode(EngineStep(0, [])),  # an engine-out frame on engine-in
    # sampling nested 3000 maps deep: msgspec raises RecursionError, not DecodeError
    b"\x96" + ENC.encode("EngineRequest") + ENC.encode("deep") + ENC.encode(b"\x01\x00\x00\x00")
    + ENC.encode(3) + ENC.encode([]) + b"\x81\xa1k" * 3000 + b"\xc0",
]


def test_malformed_frames_are_counted_and_logged_never_raised(
    peer: Peer, link: EngineLink, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="textproc.engine")
    for data in MALFORMED:
        peer.send(data)
    peer.send(EngineRequest("ok", pack_ids([4]), 1))
    got = poll_until(link.poll_requests)
    assert [r.request_id for r in got] == ["ok"]
    assert link.malformed_frames == len(MALFORMED)
    assert link.rejected_requests == 0
    assert "malformed frame #1 on engine-in" in caplog.text
    assert "NoSuchTag" in caplog.text


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (EngineRequest("bad-len", b"\x01\x02\x03", 4), "multiple of 4 bytes"),
        (EngineRequest("empty", b"", 4), "non-empty"),
        (EngineRequest("zero-max", pack_ids([1]), 0), "max_tokens must be >= 1, got 0"),
        (EngineRequest("neg-min", pack_ids([1]), 3, min_tokens=-1), "min_tokens must be >= 0"),
        (EngineRequest("neg-stop", pack_ids([1]), 3, [-4]), "stop_token_ids must be >= 0"),
    ],
)
def test_invalid_request_is_answered_with_an_error_step(
    peer: Peer, link: EngineLink, frame: EngineRequest, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="textproc.engine")
    peer.send(frame)
    time.sleep(0.05)
    assert poll_until(lambda: link.poll_requests() or link.malformed_frames) == 1
    assert link.rejected_requests == 1
    step = peer.recv()
    assert step == EngineStep(0, [StepOutput(frame.request_id, [], "error")])
    assert why in caplog.text and frame.request_id in caplog.text


def test_step_bytes_equal_the_protocol_struct_encoding(peer: Peer, link: EngineLink) -> None:
    entries = [("r1", [1, 2], None), ("r2", [], "stop"), ("r3", [2**31], "length")]
    link.send_outputs(entries)
    want = ENC.encode(EngineStep(0, [StepOutput(*e) for e in entries]))
    assert peer.recv_raw() == want
    link.send_outputs([StepOutput("r1", [3])])
    assert peer.recv_raw() == ENC.encode(EngineStep(1, [StepOutput("r1", [3])]))
    # 2-tuples omit the reason: not the same bytes, the same frame
    link.send_outputs([("r1", [4])])
    assert peer.recv() == EngineStep(2, [StepOutput("r1", [4], None)])
    assert link.steps_sent == 3


def test_send_outputs_converts_other_iterables(peer: Peer, link: EngineLink) -> None:
    link.send_outputs((e for e in [("g", array("I", [7, 8]), None), ("h", range(2), "stop")]))
    assert peer.recv() == EngineStep(0, [StepOutput("g", [7, 8]), StepOutput("h", [0, 1], "stop")])
    link.send_outputs([])
    assert peer.recv() == EngineStep(1, [])


@pytest.mark.parametrize(
    "entry",
    [("r", [1], 5), ("r", [1], "done"), (7, [1], None), ("r", ["x"], None), ("r", [-1], None),
     ("r",), "rr", ("r", [1], None, 4)],
)
def test_checked_link_names_a_bad_output_entry(peer: Peer, entry: Any) -> None:
    with EngineLink(peer.engine_in, peer.engine_out, check_outputs=True) as lk:
        with pytest.raises(InvalidInput, match=r"send_outputs entry 1 is .*expected \(request_id: str"):
            lk.send_outputs([("ok", [1], None), entry])
        lk.send_outputs([StepOutput("ok", [2]), ("x", (3,), "stop")])
        assert isinstance(peer.recv(), EngineHello)
        assert peer.recv() == EngineStep(0, [StepOutput("ok", [2]), StepOutput("x", [3], "stop")])


def test_unchecked_link_does_not_validate_the_hot_path(peer: Peer, link: EngineLink) -> None:
    link.send_outputs([(7, [1], None)])  # trusted: textproc's decoder rejects it, not the engine
    with pytest.raises(msgspec.ValidationError):
        OUT.decode(peer.recv_raw())


def test_close_is_idempotent_and_use_after_close_is_an_error(peer: Peer) -> None:
    lk = EngineLink(peer.engine_in, peer.engine_out)
    with pytest.raises(InvalidInput, match="before start"):
        lk.poll_requests()
    lk.start()
    with pytest.raises(InvalidInput, match="already started"):
        lk.start()
    lk.close()
    lk.close()
    assert lk.closed
    with pytest.raises(InvalidInput, match="after close"):
        lk.send_outputs([])
    with EngineLink(peer.engine_in, peer.engine_out) as lk2:
        assert not lk2.closed
    assert lk2.closed


def test_bad_address_is_a_clear_error() -> None:
    with pytest.raises(InvalidInput, match=r"cannot connect EngineLink to engine_in='nope://x'"):
        EngineLink.connect("nope://x", "ipc:///tmp/x")


def test_full_send_queue_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    # nobody binds engine-out: the PUSH queue fills at send_hwm_frames
    lk = EngineLink.connect(f"ipc://{tmp_path}/in", f"ipc://{tmp_path}/out", send_hwm_frames=4)
    try:
        t0 = time.perf_counter()
        for _ in range(20):
            lk.send_outputs([("r", [1], None)])
        assert time.perf_counter() - t0 < 1.0
        assert not lk.writable()
        assert 10 <= lk.dropped_steps < 20
    finally:
        lk.close()


def test_hello_is_sent_again_after_textproc_side_restarts(tmp_path: Path) -> None:
    first = Peer(tmp_path)
    lk = EngineLink.connect(first.engine_in, first.engine_out)
    try:
        assert first.recv() == EngineHello(lk.instance_id)
        first.close()
        second = Peer(tmp_path)  # same addresses, a new process in real life
        try:
            deadline = time.monotonic() + 10
            while not second.pull.poll(50):
                lk.poll_requests()  # the link notices the reconnect while polling
                assert time.monotonic() < deadline, "no EngineHello after reconnect"
            assert second.recv() == EngineHello(lk.instance_id)
            second.send(EngineRequest("after", pack_ids([1]), 1))
            assert [r.request_id for r in poll_until(lk.poll_requests)] == ["after"]
        finally:
            second.close()
    finally:
        lk.close()


def test_oversized_frame_is_counted_and_the_link_keeps_working(peer: Peer) -> None:
    # (zmq MAXMSGSIZE on a connecting socket would drop the connection for good)
    lk = EngineLink.connect(peer.engine_in, peer.engine_out, max_frame_bytes=4096)
    try:
        peer.recv()
        peer.send(EngineRequest("huge", pack_ids(list(range(5000))), 1))
        peer.send(EngineRequest("small", pack_ids([1]), 1))
        got = poll_until(lk.poll_requests)
        assert [r.request_id for r in got] == ["small"]
        assert lk.malformed_frames == 1
    finally:
        lk.close()
