"""Logprobs on the engine's side of the wire (protocol 8): what EngineLink sends and receives.

An engine attaches per new token its logprob and k alternatives (ids + logprobs) to a step:
packed columns from ``send_step``, per-request rows from ``send_outputs``; the request says how
many alternatives it wants (``IncomingRequest.logprobs``). Checked against plain pyzmq peers
and ``protocol.logprob_rows``, the one unpacking the detokenizer uses.
"""

from __future__ import annotations

from array import array
from typing import Any

import pytest

from tests.helpers.engine_peer import ENC, EnginePeer, poll_until
from textproc.engine import EngineLink, IncomingRequest
from textproc.errors import InvalidInput
from textproc.protocol import (
    EngineRequest,
    EngineStep,
    EngineStepPacked,
    StepOutput,
    logprob_rows,
    pack_floats,
    pack_ids,
)

pytestmark = pytest.mark.timeout(30)

# two requests, 1 and 2 new ids, k = 2 alternatives per id
RIDS = ["a", "b"]
IDS = [5, 6, 7]
FLOATS = [-0.5, -0.25, -1.5, -1.0, -1.0, -2.0, -0.125, -0.125, -3.0]  # 3 rows of 1 + 2
TOPS = [5, 9, 6, 8, 7, 1]  # 3 rows of 2


def _rows(frame: Any) -> tuple[int, list[float], list[int]]:
    width, floats, ids = logprob_rows(len(IDS), frame.logprobs, frame.top_ids, "test")
    return width, list(floats), list(ids)


def test_request_asks_for_alternatives(peer: EnginePeer, link: EngineLink) -> None:
    peer.send(EngineRequest("r", pack_ids([1, 2]), 5, logprobs=3))
    peer.send(EngineRequest("plain", pack_ids([1]), 5))
    got: list[IncomingRequest] = poll_until(link.poll_requests)
    while len(got) < 2:  # the two frames may arrive in different polls on a busy box
        got += poll_until(link.poll_requests)
    assert [(r.request_id, r.logprobs) for r in got] == [("r", 3), ("plain", None)]


@pytest.mark.parametrize("k", [-1, 21])
def test_request_with_logprobs_out_of_range_is_rejected(peer: EnginePeer, link: EngineLink,
                                                        k: int) -> None:
    peer.send(EngineRequest("r", pack_ids([1]), 5, logprobs=k))
    poll_until(lambda: link.malformed_frames == 1 and [True] or link.poll_requests())
    step = peer.recv()
    assert step.request_ids == ["r"] and step.finished == {0: "error"}


def test_packed_step_carries_float32_rows(peer: EnginePeer, link: EngineLink) -> None:
    link.send_step(RIDS, IDS, counts=[1, 2], logprobs=array("f", FLOATS), top_ids=TOPS)
    frame = peer.recv()
    assert isinstance(frame, EngineStepPacked)
    assert frame.logprobs == pack_floats(FLOATS) and frame.top_ids == pack_ids(TOPS)
    assert _rows(frame) == (3, FLOATS, TOPS)


def test_packed_step_without_logprobs_has_empty_columns(peer: EnginePeer,
                                                        link: EngineLink) -> None:
    link.send_step(RIDS, IDS[:2])
    raw = peer.recv_raw()
    assert raw == ENC.encode(EngineStepPacked(0, RIDS, pack_ids(IDS[:2])))
    # two empty bin fields and no cached_tokens (an empty map): 5 bytes per step
    assert raw.endswith(b"\xc4\x00\xc4\x00\x80")


def test_send_step_takes_numpy_matrices(peer: EnginePeer, link: EngineLink) -> None:
    np = pytest.importorskip("numpy")
    link.send_step(RIDS, np.array(IDS, dtype=np.uint32), counts=[1, 2],
                   logprobs=np.array(FLOATS, dtype=np.float64).reshape(3, 3),
                   top_ids=np.array(TOPS, dtype=np.int64).reshape(3, 2))
    assert _rows(peer.recv()) == (3, FLOATS, TOPS)
    link.send_step(RIDS, IDS, counts=[1, 2], logprobs=np.array(FLOATS, np.float32).reshape(3, 3),
                   top_ids=np.array(TOPS, np.uint32).reshape(3, 2))
    assert _rows(peer.recv()) == (3, FLOATS, TOPS)


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"logprobs": FLOATS[:8], "top_ids": TOPS}, "8 logprobs for 3 new ids"),
        ({"logprobs": FLOATS, "top_ids": TOPS[:5]}, "5 top_ids for 3 new ids with 2"),
        ({"logprobs": FLOATS}, "0 top_ids for 3 new ids with 2"),
        ({"logprobs": b"\x00" * 5, "top_ids": b""}, "multiple of 4 bytes"),
        ({"logprobs": ["x"], "top_ids": []}, "expected float32 logprobs"),
    ],
)
def test_send_step_checks_logprob_lengths(link: EngineLink, kw: Any, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        link.send_step(RIDS, IDS, counts=[1, 2], **kw)
    assert link.steps_sent == 0


def test_legacy_link_cuts_the_columns_into_per_request_rows(peer: EnginePeer) -> None:
    with EngineLink.connect(peer.engine_in, peer.engine_out, step_format="legacy") as link:
        peer.recv()  # hello
        link.send_step(RIDS, IDS, counts=[1, 2], finished={1: "stop"}, logprobs=FLOATS,
                       top_ids=TOPS)
        frame = peer.recv()
    assert frame == EngineStep(0, [
        StepOutput("a", [5], None, pack_floats(FLOATS[:3]), pack_ids(TOPS[:2])),
        StepOutput("b", [6, 7], "stop", pack_floats(FLOATS[3:]), pack_ids(TOPS[2:])),
    ])


@pytest.mark.parametrize("step_format", ["auto", "packed", "legacy"])
def test_send_outputs_with_logprobs_sends_per_request_rows(peer: EnginePeer,
                                                           step_format: Any) -> None:
    with EngineLink.connect(peer.engine_in, peer.engine_out, step_format=step_format) as link:
        peer.recv()
        # lists encode as they are; an array is packed first; k differs per request
        link.send_outputs([("a", [5], None, [-0.5, -0.25], [5]),
                           ("b", [6, 7], "stop", array("f", [-1.0, -2.0]), array("I")),
                           ("c", [1], None)])
        frame = peer.recv()
    assert isinstance(frame, EngineStep)
    a, b, c = frame.outputs
    assert list(logprob_rows(1, a.logprobs, a.top_ids, "a")[1]) == [-0.5, -0.25]
    assert logprob_rows(1, a.logprobs, a.top_ids, "a")[0] == 2
    width, floats, ids = logprob_rows(2, b.logprobs, b.top_ids, "b")
    assert (width, list(floats), list(ids)) == (1, [-1.0, -2.0], [])
    assert (c.logprobs, c.top_ids) == (None, None)


def test_checked_link_names_a_bad_logprob_entry(peer: EnginePeer) -> None:
    with EngineLink.connect(peer.engine_in, peer.engine_out, check_outputs=True) as link:
        with pytest.raises(InvalidInput, match=r"entry 1 .*3 logprobs for 2 new ids"):
            link.send_outputs([("a", [5], None), ("b", [6, 7], None, [-1.0, -2.0, -3.0], [])])


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ((0, b"", b""), "0 logprobs for 0 new ids"),
        ((2, pack_floats([0.0] * 3), b""), "3 logprobs for 2 new ids"),
        ((2, pack_floats([0.0] * 4), pack_ids([1])), "1 top_ids for 2 new ids with 1"),
        ((1, b"\x00\x00", b""), "multiple of 4 bytes"),
        ((1, pack_floats([0.0, 0.0]), b"\x00"), "top_ids: packed token ids must be"),
    ],
)
def test_logprob_rows_that_do_not_fit_are_value_errors(args: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        logprob_rows(*args, "step 3")


def test_stub_echo_rows_are_deterministic_and_sorted() -> None:
    from engine_stub.scripts import RequestState

    request = IncomingRequest("r", [1], 9, [], {}, None, 0, False, logprobs=3)
    state = RequestState(request, [4, 5, 6])
    state.vocab_size = 100
    new, _ = state.take(3)
    rows = state.logprob_rows(new, 0)
    assert rows == state.logprob_rows(new, 0) and len(rows) == 3
    for token_id, (value, alts) in zip(new, rows):
        assert -5 < value <= 0 and len(alts) == 3 and alts[0] == (token_id, value)
        assert [lp for _, lp in alts] == sorted((lp for _, lp in alts), reverse=True)
        assert all(0 <= alt < 100 for alt, _ in alts)


def test_stub_random_rows_are_the_uniform_value() -> None:
    import math
    import random

    from engine_stub.scripts import RequestState

    request = IncomingRequest("r", [1], 9, [], {}, None, 0, False, logprobs=2)
    state = RequestState(request, None, rng=random.Random(0),
                         pool=list(range(50)))
    new, _ = state.take(2)
    for value, alts in state.logprob_rows(new, 0):
        assert value == pytest.approx(-math.log(50)) and len(alts) == 2
        assert all(lp == value for _, lp in alts)


def test_stub_constrained_rows_are_uniform_over_the_allowed_ids() -> None:
    import math
    import random

    from engine_stub.scripts import RequestState
    from textproc import TokenVocabulary, compile_constraint
    from textproc.core.constraints import Guide

    vocab = TokenVocabulary([b"a", b"b", b"ab", b"c", b""], end_ids=[4])
    index = compile_constraint(vocab, regex="(ab|c)+", cache=None)
    request = IncomingRequest("r", [1], 6, [4], {}, None, 0, False, logprobs=1)
    state = RequestState(request, None, pool=list(range(5)))
    guide = Guide(index)
    state.constrain(guide, random.Random(3))
    allowed = []  # the allowed ids before each token, replayed on a second guide
    replay = Guide(index)
    new, _ = state.take(6)
    for token_id in new:
        allowed.append(replay.allowed_ids())
        replay.advance(token_id)
    rows = state.logprob_rows(new, 0)
    assert len(rows) == len(new)
    for ids, (value, alts) in zip(allowed, rows):
        assert value == pytest.approx(-math.log(len(ids)) if len(ids) > 1 else 0.0)
        assert len(alts) == 1 and alts[0][0] in ids and alts[0][1] == value
