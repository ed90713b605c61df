"""EngineLink against plain pyzmq peers: hello, request/abort order, malformed frames, step bytes.

The textproc side is bound here with bare pyzmq (PUSH for engine-in, PULL for engine-out), so
these tests check the wire contract of ``textproc.protocol``; the last ones feed packed steps
through the detokenizer's state machine (``RequestTable.on_step``) beside the same EngineStep.
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

from tests.helpers.engine_peer import ENC, OUT, EnginePeer, entries_of, poll_until
from textproc.engine import EngineLink, IncomingRequest
from textproc.errors import InvalidInput
from textproc.protocol import (
    EngineAbort,
    EngineHello,
    EngineRequest,
    EngineStep,
    EngineStepPacked,
    StepOutput,
    pack_ids,
    step_entries,
)

pytestmark = pytest.mark.timeout(30)


def test_hello_first_with_a_fresh_instance_id_each_link(peer: EnginePeer) -> None:
    a = EngineLink.connect(peer.engine_in, peer.engine_out)
    b = EngineLink.connect(peer.engine_in, peer.engine_out, instance_id="fixed")
    try:
        hellos = {peer.recv().instance_id, peer.recv().instance_id}
        assert hellos == {a.instance_id, "fixed"}
        assert len(a.instance_id) == 32 and a.hellos_sent == 1
    finally:
        a.close()
        b.close()


def test_request_fields_arrive_unpacked(peer: EnginePeer, link: EngineLink) -> None:
    ids = [0, 1, 151643, 2**32 - 1]
    peer.send(EngineRequest("r1", pack_ids(ids), 7, [5, 6], {"temperature": 0.5}, "a+", 2, True,
                            eos_token_ids=[5, 9]))
    peer.send(EngineRequest("r2", pack_ids([9]), 1))
    peer.send(EngineRequest("r3", pack_ids([4]), 2, logit_bias={7: -100.0, 8: 2.5}))
    got: list[IncomingRequest] = []
    while len(got) < 3:
        got += poll_until(link.poll_requests)
    assert [r.prompt_token_ids for r in got] == [array("I", ids), array("I", [9]), array("I", [4])]
    assert got == [
        IncomingRequest("r1", array("I", ids), 7, [5, 6], {"temperature": 0.5}, "a+", 2, True,
                        eos_token_ids=[5, 9]),
        IncomingRequest("r2", array("I", [9]), 1, [], {}, None, 0, False),
        IncomingRequest("r3", array("I", [4]), 2, [], {}, None, 0, False, {7: -100.0, 8: 2.5}),
    ]
    assert link.poll_requests() == [] and link.poll_aborts() == []


def test_prompt_ids_as_list_option(peer: EnginePeer) -> None:
    with EngineLink(peer.engine_in, peer.engine_out, prompt_ids_as_list=True) as lk:
        peer.send(EngineRequest("r1", pack_ids([3, 2**32 - 1]), 7))
        got = poll_until(lk.poll_requests)
        assert got[0].prompt_token_ids == [3, 2**32 - 1]
        assert type(got[0].prompt_token_ids) is list


def test_aborts_keep_order_with_requests(peer: EnginePeer, link: EngineLink) -> None:
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
    peer: EnginePeer, link: EngineLink, caplog: pytest.LogCaptureFixture
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
        (EngineRequest("neg-eos", pack_ids([1]), 3, eos_token_ids=[2, -1]), "eos_token_ids must be >= 0"),
    ],
)
def test_invalid_request_is_answered_with_an_error_step(
    peer: EnginePeer, link: EngineLink, frame: EngineRequest, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="textproc.engine")
    peer.send(frame)
    time.sleep(0.05)
    assert poll_until(lambda: link.poll_requests() or link.malformed_frames) == 1
    assert link.rejected_requests == 1
    step = peer.recv()
    assert step == EngineStepPacked(0, [frame.request_id], b"", pack_ids([0]), {0: "error"})
    assert why in caplog.text and frame.request_id in caplog.text


@pytest.fixture
def packed_link(peer: EnginePeer) -> Iterator[EngineLink]:
    lk = EngineLink.connect(peer.engine_in, peer.engine_out, step_format="packed")
    assert peer.recv() == EngineHello(lk.instance_id)
    yield lk
    lk.close()


def test_packed_step_bytes_equal_the_protocol_struct_encoding(peer: EnginePeer, packed_link: EngineLink) -> None:
    # the tuple fast path (no Structs built) writes exactly the bytes of the Struct
    link = packed_link
    entries = [("r1", [1, 2], None), ("r2", [], "stop"), ("r3", [2**32 - 1], "length"), ("r4", [5])]
    link.send_outputs(entries[:3])
    want = EngineStepPacked(0, ["r1", "r2", "r3"], pack_ids([1, 2, 2**32 - 1]), pack_ids([2, 0, 1]),
                            {1: "stop", 2: "length"})
    assert peer.recv_raw() == ENC.encode(want)
    # one id per request and nothing finished: no counts, no finished map
    link.send_outputs([("a", [7], None), ("b", (8,), None)])
    assert peer.recv_raw() == ENC.encode(EngineStepPacked(1, ["a", "b"], pack_ids([7, 8])))
    link.send_outputs([("a", [9])])  # 2-tuples: same bytes as with reason None
    assert peer.recv_raw() == ENC.encode(EngineStepPacked(2, ["a"], pack_ids([9])))
    link.send_outputs([StepOutput("r1", [3]), entries[3], ("r2", [], "abort")])  # mixed: normalised
    assert peer.recv_raw() == ENC.encode(
        EngineStepPacked(3, ["r1", "r4", "r2"], pack_ids([3, 5]), pack_ids([1, 1, 0]), {2: "abort"}))
    link.send_outputs([])
    assert peer.recv_raw() == ENC.encode(EngineStepPacked(4, [], b""))
    link.send_step(["x", "y"], array("I", [1, 2]), counts=[0, 2], finished={0: "stop"})
    assert peer.recv_raw() == ENC.encode(
        EngineStepPacked(5, ["x", "y"], pack_ids([1, 2]), pack_ids([0, 2]), {0: "stop"}))
    assert link.steps_sent == 6


def test_cached_tokens_ride_on_the_step_frame(peer: EnginePeer, link: EngineLink) -> None:
    # send_step: EngineStepPacked's trailing field; an older engine's frame (without it) is 0s
    link.send_step(["a", "b"], array("I", [1, 2]), cached_tokens={"b": 48})
    assert peer.recv_raw() == ENC.encode(
        EngineStepPacked(0, ["a", "b"], pack_ids([1, 2]), cached_tokens={"b": 48}))
    link.send_step(["a"], array("I", [3]))
    assert peer.recv_raw() == ENC.encode(EngineStepPacked(1, ["a"], pack_ids([3])))
    older = ("EngineStepPacked", 1, ["a"], pack_ids([3]), b"", {}, b"", b"")
    assert OUT.decode(ENC.encode(older)).cached_tokens == {}
    assert OUT.decode(ENC.encode(("EngineStep", 1, []))).cached_tokens == {}
    # send_outputs: EngineStep's
    link.send_outputs([("c", [4], None)], cached_tokens={"c": 0})
    assert peer.recv() == EngineStep(2, [StepOutput("c", [4])], {"c": 0})
    link.send_outputs([("c", [5], "stop")])
    assert peer.recv() == EngineStep(3, [StepOutput("c", [5], "stop")])


@pytest.mark.parametrize("step_format", ["legacy", "packed"])
def test_cached_tokens_in_every_step_format(peer: EnginePeer, step_format: Any) -> None:
    with EngineLink(peer.engine_in, peer.engine_out, step_format=step_format) as lk:
        assert peer.recv() == EngineHello(lk.instance_id)
        lk.send_step(["a"], array("I", [1]), cached_tokens={"a": 7})
        lk.send_outputs([("b", [2], None)], cached_tokens={"b": 9})
        assert [peer.recv().cached_tokens, peer.recv().cached_tokens] == [{"a": 7}, {"b": 9}]


@pytest.mark.parametrize("cached", [{"a": -1}, {"a": 1.5}, {"a": True}, {3: 1}])
def test_checked_link_refuses_bad_cached_tokens(peer: EnginePeer, cached: Any) -> None:
    with EngineLink(peer.engine_in, peer.engine_out, check_outputs=True) as lk:
        with pytest.raises(InvalidInput, match=r"send_step: cached_tokens entry .* expected a "
                                               r"request id \(str\) and a count"):
            lk.send_step(["a"], array("I", [1]), cached_tokens=cached)
        with pytest.raises(InvalidInput, match=r"send_outputs: cached_tokens entry"):
            lk.send_outputs([("a", [1], None)], cached_tokens=cached)


def test_send_step_takes_arrays_bytes_lists_and_numpy(peer: EnginePeer, link: EngineLink) -> None:
    want = [("a", [7], None), ("b", [8], "length")]
    link.send_step(("a", "b"), pack_ids([7, 8]), finished={1: "length"})
    link.send_step(["a", "b"], [7, 8], finished={1: "length"})
    link.send_step(["a", "b"], array("I", [7, 8]), counts=array("I", [1, 1]), finished={1: "length"})
    for _ in range(3):
        assert entries_of(peer.recv()) == want
    np = pytest.importorskip("numpy")
    link.send_step(["a", "b"], np.array([7, 8], dtype=np.uint32), finished={1: "length"})
    link.send_step(["a", "b"], np.array([7, 8], dtype=np.int64), counts=np.ones(2, np.int32),
                   finished={1: "length"})
    for _ in range(2):
        assert entries_of(peer.recv()) == want


@pytest.mark.parametrize(
    ("args", "kw", "why"),
    [
        ((["a", "b"], [1]), {}, "1 token_ids for 2 request_ids without counts"),
        ((["a"], [1, 2]), {"counts": [1, 1]}, "2 counts for 1 request_ids"),
        ((["a"], b"\x01\x00\x00"), {}, "multiple of 4 bytes"),
        ((["a"], [-1]), {}, r"token_ids is \[-1\]; expected uint32 ids"),
        ((["a"], [1.5]), {}, "expected uint32 ids"),
    ],
)
def test_send_step_checks_lengths(link: EngineLink, args: Any, kw: Any, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        link.send_step(*args, **kw)
    assert link.steps_sent == 0


def test_checked_send_step_checks_sums_and_reasons(peer: EnginePeer) -> None:
    with EngineLink(peer.engine_in, peer.engine_out, check_outputs=True) as lk:
        with pytest.raises(InvalidInput, match="counts sum to 3 but token_ids holds 2 ids"):
            lk.send_step(["a", "b"], [1, 2], counts=[1, 2])
        with pytest.raises(InvalidInput, match="finished entry 2: 'stop'; expected an index"):
            lk.send_step(["a", "b"], [1, 2], finished={2: "stop"})
        with pytest.raises(InvalidInput, match="finished entry 0: 'done'"):
            lk.send_step(["a", "b"], [1, 2], finished={0: "done"})
        with pytest.raises(InvalidInput, match=r"request_ids\[1\] is 7; expected str"):
            lk.send_step(["a", 7], [1, 2])  # type: ignore[list-item]


def test_unchecked_packed_send_outputs_still_refuses_ids_outside_uint32(packed_link: EngineLink) -> None:
    link = packed_link
    with pytest.raises(InvalidInput, match=r"send_outputs entry 1 is \('r', \[-1\], None\)"):
        link.send_outputs([("ok", [1], None), ("r", [-1], None)])
    assert link.steps_sent == 0


def test_auto_sends_engine_step_from_send_outputs_and_packed_from_send_step(
    peer: EnginePeer, link: EngineLink
) -> None:
    link.send_outputs([("r1", [1, 2], None), ("r2", [], "stop")])
    assert peer.recv() == EngineStep(0, [StepOutput("r1", [1, 2]), StepOutput("r2", [], "stop")])
    link.send_step(["r1"], [3])
    assert peer.recv_raw() == ENC.encode(EngineStepPacked(1, ["r1"], pack_ids([3])))


def test_legacy_step_bytes_equal_the_protocol_struct_encoding(peer: EnginePeer) -> None:
    link = EngineLink.connect(peer.engine_in, peer.engine_out, step_format="legacy")
    peer.recv()
    entries = [("r1", [1, 2], None), ("r2", [], "stop"), ("r3", [2**31], "length")]
    link.send_outputs(entries)
    # the tuples as they are: StepOutput without its trailing logprob fields (protocol 8),
    # and the step's cached_tokens (protocol 15), none here
    raw = peer.recv_raw()
    assert raw == ENC.encode(("EngineStep", 0, entries, {}))
    assert OUT.decode(raw) == EngineStep(0, [StepOutput(*e) for e in entries])
    link.send_outputs([StepOutput("r1", [3])])
    assert peer.recv_raw() == ENC.encode(EngineStep(1, [StepOutput("r1", [3])]))
    # 2-tuples omit the reason: not the same bytes, the same frame
    link.send_outputs([("r1", [4])])
    assert peer.recv() == EngineStep(2, [StepOutput("r1", [4], None)])
    link.send_step(["r1", "r2"], [5, 6], finished={1: "stop"})  # columns -> EngineStep too
    assert peer.recv() == EngineStep(3, [StepOutput("r1", [5]), StepOutput("r2", [6], "stop")])
    assert link.steps_sent == 4
    link.close()
    with pytest.raises(InvalidInput, match="step_format must be one of"):
        EngineLink("ipc:///x", "ipc:///y", step_format="columns")  # type: ignore[arg-type]


@pytest.mark.parametrize("step_format", ["auto", "packed", "legacy"])
def test_send_outputs_converts_other_iterables(peer: EnginePeer, step_format: Any) -> None:
    with EngineLink(peer.engine_in, peer.engine_out, step_format=step_format) as link:
        peer.recv()
        link.send_outputs((e for e in [("g", array("I", [7, 8]), None), ("h", range(2), "stop")]))
        assert entries_of(peer.recv()) == [("g", [7, 8], None), ("h", [0, 1], "stop")]
        link.send_outputs([])
        assert entries_of(peer.recv()) == []


@pytest.mark.parametrize(
    "entry",
    [("r", [1], 5), ("r", [1], "done"), (7, [1], None), ("r", ["x"], None), ("r", [-1], None),
     ("r",), "rr", ("r", [1], None, 4)],
)
def test_checked_link_names_a_bad_output_entry(peer: EnginePeer, entry: Any) -> None:
    with EngineLink(peer.engine_in, peer.engine_out, check_outputs=True) as lk:
        with pytest.raises(InvalidInput, match=r"send_outputs entry 1 is .*expected \(request_id: str"):
            lk.send_outputs([("ok", [1], None), entry])
        lk.send_outputs([StepOutput("ok", [2]), ("x", (3,), "stop")])
        assert isinstance(peer.recv(), EngineHello)
        assert entries_of(peer.recv()) == [("ok", [2], None), ("x", [3], "stop")]


def test_unchecked_link_does_not_validate_the_hot_path(peer: EnginePeer, link: EngineLink) -> None:
    link.send_outputs([(7, [1], None)])  # trusted: textproc's decoder rejects it, not the engine
    with pytest.raises(msgspec.ValidationError):
        OUT.decode(peer.recv_raw())


def test_close_is_idempotent_and_use_after_close_is_an_error(peer: EnginePeer) -> None:
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


def test_requests_in_dropped_steps_are_reported_failed(tmp_path: Path) -> None:
    # nobody binds engine-out yet: steps beyond the queue are dropped; their requests have a hole
    # in their text, so the link reports them finished with "error" once textproc is reachable
    lk = EngineLink.connect(f"ipc://{tmp_path}/engine-in", f"ipc://{tmp_path}/engine-out",
                            send_hwm_frames=4)
    try:
        for i in range(20):
            lk.send_outputs([(f"r{i % 3}", [1], None)])
        assert lk.dropped_steps >= 3
        peer = EnginePeer(tmp_path)
        try:
            failed: set[str] = set()
            deadline = time.monotonic() + 10
            while "next" not in failed and time.monotonic() < deadline:
                if lk.writable():
                    lk.send_outputs([("next", [2], "error")])
                while peer.pull.poll(50):
                    frame = OUT.decode(peer.pull.recv())
                    if isinstance(frame, EngineStepPacked):
                        failed |= {rid for rid, _, reason in zip(*step_entries(frame))
                                   if reason == "error"}
                    elif isinstance(frame, EngineStep):
                        failed |= {o.request_id for o in frame.outputs
                                   if o.finish_reason == "error"}
            assert {"r0", "r1", "r2"} <= failed
            assert lk.lost_requests_reported == 3
        finally:
            peer.close()
    finally:
        lk.close()


def test_hello_is_sent_again_after_textproc_side_restarts(tmp_path: Path) -> None:
    first = EnginePeer(tmp_path)
    lk = EngineLink.connect(first.engine_in, first.engine_out)
    try:
        assert first.recv() == EngineHello(lk.instance_id)
        first.close()
        second = EnginePeer(tmp_path)  # same addresses, a new process in real life
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


def test_oversized_frame_is_counted_and_the_link_keeps_working(peer: EnginePeer) -> None:
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


# -- packed steps through the detokenizer's state machine ------------------------------------------

def _detok_outputs(tok: Any, toy_model: Path, frames: list[Any]) -> tuple[Any, list[Any]]:
    from textproc.config import ServiceConfig
    from textproc.service.request_table import RequestTable
    from textproc.options import OutputOptions
    from textproc.protocol import Submit

    core = RequestTable(tok, ServiceConfig(model_dir=str(toy_model)))
    for rid in ("a", "b", "c"):
        engine_request = ENC.encode(EngineRequest(rid, pack_ids([1]), 50))
        core.on_submit(Submit(rid, b"client", 1, 50, engine_request,
                              output=OutputOptions(stop=["STOP"] if rid == "a" else [])))
    got: list[Any] = []
    for frame in frames:
        core.on_step(OUT.decode(ENC.encode(frame)))
        got.append(core.outbox)
        core.outbox = {}
    return core, got


def test_packed_steps_give_the_same_outputs_as_engine_steps(toy_model: Path) -> None:
    from textproc.core.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(toy_model)
    ids = tok.encode("alpha beta STOP gamma")
    steps = [  # a: one id per step, stops on the stop string; b: bursts; c: engine finish
        [("a", ids[i:i + 1], None) for i in range(len(ids))],
        [("b", ids[:2], None), ("b", ids[2:], None), ("b", [], "length")],
        [("c", ids[:1], None), ("c", ids[1:2], "stop")],
    ]
    per_step: list[list[tuple[str, list[int], str | None]]] = []
    for k in range(max(map(len, steps))):
        per_step.append([s[k] for s in steps if k < len(s)] + [("ghost", [1], None)])
    legacy = [EngineStep(k, [StepOutput(*e) for e in es]) for k, es in enumerate(per_step)]
    packed = []
    for k, es in enumerate(per_step):
        counts = [len(e[1]) for e in es]
        packed.append(EngineStepPacked(
            k, [e[0] for e in es], pack_ids([t for e in es for t in e[1]]),
            b"" if counts == [1] * len(es) else pack_ids(counts),
            {i: e[2] for i, e in enumerate(es) if e[2] is not None}))
    core_l, out_l = _detok_outputs(tok, toy_model, legacy)
    core_p, out_p = _detok_outputs(tok, toy_model, packed)
    assert out_p == out_l
    text = {"a": "", "b": "", "c": ""}
    finish = {}
    for box in out_p:
        for item in box.get(b"client", []):
            text[item.request_id] += "".join(d.get("content", "") for d in item.deltas)
            if item.finish_reason:
                finish[item.request_id] = (item.finish_reason, item.completion_tokens)
    assert text == {"a": "alpha beta ", "b": "alpha beta STOP gamma", "c": tok.decode(ids[:2])}
    assert finish["a"][0] == "stop" and finish["c"] == ("stop", 2)
    assert finish["b"] == ("length", len(ids))
    assert core_p.engine_aborts == core_l.engine_aborts == ["a"]  # stop string -> engine abort
    assert set(core_p.early) == set(core_l.early) == {"ghost"}  # unknown id: buffered
    assert core_p.counters == core_l.counters and core_p.live == {}


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (EngineStepPacked(1, ["a", "b"], pack_ids([1])), "one id per request is expected"),
        (EngineStepPacked(1, ["a"], pack_ids([1, 2]), pack_ids([1, 1])), "2 counts for 1"),
        (EngineStepPacked(1, ["a", "b"], pack_ids([1, 2]), pack_ids([1, 2])),
         "counts sum to 3 but token_ids holds 2"),
        (EngineStepPacked(1, ["a"], b"\x01\x00\x00"), "multiple of 4 bytes"),
        (EngineStepPacked(1, ["a"], pack_ids([1]), b"\x01"), "counts must be packed uint32"),
        (EngineStepPacked(1, ["a"], pack_ids([1]), b"", {1: "stop"}), "finished index 1 outside"),
    ],
)
def test_malformed_packed_step_is_refused_whole(toy_model: Path, frame: Any, why: str) -> None:
    from textproc.errors import ProtocolError
    from textproc.core.tokenizer import Tokenizer

    with pytest.raises(ValueError, match=why):
        step_entries(frame)
    core, _ = _detok_outputs(Tokenizer.from_dir(toy_model), toy_model, [])
    before = dict(core.counters)
    with pytest.raises(ProtocolError, match=why):
        core.on_step(frame)
    assert core.counters == before and core.outbox == {} and set(core.live) == {"a", "b", "c"}


def test_cached_tokens_reach_the_usage_of_the_last_output(toy_model: Path) -> None:
    """The detokenizer keeps a request's cached count from the step of its first output (or
    from before its Submit: buffered with its outputs) to its last output's usage."""
    from textproc.config import ServiceConfig
    from textproc.core.tokenizer import Tokenizer
    from textproc.protocol import Submit
    from textproc.service.request_table import RequestTable

    tok = Tokenizer.from_dir(toy_model)
    core = RequestTable(tok, ServiceConfig(model_dir=str(toy_model)))

    def submit(rid: str) -> None:
        engine_request = ENC.encode(EngineRequest(rid, pack_ids([1]), 50))
        core.on_submit(Submit(rid, b"client", 40, 50, engine_request))

    def step(frame: Any) -> dict[str, tuple[int, int, int]]:
        core.on_step(OUT.decode(ENC.encode(frame)))
        box, core.outbox = core.outbox.get(b"client", []), {}
        return {o.request_id: (o.prompt_tokens, o.completion_tokens, o.cached_tokens)
                for o in box if o.finish_reason}

    for rid in ("a", "b", "c"):
        submit(rid)
    assert step(EngineStepPacked(0, ["a", "b"], pack_ids([5, 6]), cached_tokens={"a": 32})) == {}
    assert step(EngineStep(1, [StepOutput("c", [7], "stop")], {"c": 16})) == {"c": (40, 1, 16)}
    assert step(EngineStepPacked(2, ["a", "b"], pack_ids([8, 9]), finished={0: "length", 1: "stop"})) \
        == {"a": (40, 2, 32), "b": (40, 2, 0)}  # b: the engine named none
    # outputs before their Submit: the count waits with them
    assert step(EngineStep(3, [StepOutput("d", [5])], {"d": 24})) == {}
    assert core.early_cached == {"d": 24}
    submit("d")
    assert core.early_cached == {}
    assert step(EngineStep(4, [StepOutput("d", [6], "length")])) == {"d": (40, 2, 24)}
    # a count whose outputs never get a Submit is dropped with them
    step(EngineStep(5, [StepOutput("e", [5])], {"e": 8}))
    core.expire_early(time.monotonic() + 3600)
    assert core.early_cached == {} and core.early == {}
