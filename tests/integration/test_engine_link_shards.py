"""EngineLink connected to two detokenizer shards (``--detokenizers 2``) over plain pyzmq peers.

Each shard gets its own EngineHello; requests, aborts and indexes are read from every shard;
each step's outputs reach the shard that owns the request (``textproc.sharding.shard_of``),
with finish reasons re-indexed, whole and in order; a rejected request is answered on its
owner's socket; index caches are per shard (one shard's eviction does not break the other's
requests); ``for_service`` reads every shard from endpoints.json.
"""

from __future__ import annotations

import json
import time
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from tests.helpers.engine_peer import EnginePeer, entries_of, poll_until
from textproc import TokenVocabulary, compile_constraint
from textproc.config import ipc_endpoints
from textproc.engine import EngineLink, IncomingRequest
from textproc.errors import InvalidInput
from textproc.protocol import EngineAbort, EngineHello, EngineIndex, EngineRequest, pack_ids
from textproc.service.constraints import table_of
from textproc.sharding import shard_of

pytestmark = pytest.mark.timeout(30)

VOCAB = TokenVocabulary([b"a", b"b", b"ab", b"c", b""], end_ids=[4])


@pytest.fixture
def peers(tmp_path: Path) -> Iterator[list[EnginePeer]]:
    made = []
    for k in range(2):
        (tmp_path / str(k)).mkdir()
        made.append(EnginePeer(tmp_path / str(k)))
    yield made
    for p in made:
        p.close()


@pytest.fixture
def sharded(peers: list[EnginePeer]) -> Iterator[EngineLink]:
    lk = EngineLink.connect([p.engine_in for p in peers], [p.engine_out for p in peers])
    for p in peers:
        assert p.recv() == EngineHello(lk.instance_id)
    yield lk
    lk.close()


def _ids_on(shard: int, n: int) -> list[str]:
    return [rid for rid in (f"req-{i}" for i in range(200)) if shard_of(rid, 2) == shard][:n]


def test_each_shard_gets_only_its_own_requests_outputs(peers: list[EnginePeer],
                                                       sharded: EngineLink) -> None:
    mine = [_ids_on(0, 3), _ids_on(1, 3)]
    for k, ids in enumerate(mine):
        for rid in ids:
            peers[k].send(EngineRequest(rid, pack_ids([1]), 4))
    got: list[str] = []
    while len(got) < 6:
        got += [r.request_id for r in poll_until(sharded.poll_requests)]
    assert sorted(got) == sorted(mine[0] + mine[1])
    order = [mine[0][0], mine[1][0], mine[0][1], mine[1][1], mine[0][2], mine[1][2]]
    # columns: one id each, the second and fifth finish
    sharded.send_step(order, array("I", range(6)), finished={1: "stop", 4: "length"})
    assert entries_of(peers[0].recv()) == [(mine[0][0], [0], None), (mine[0][1], [2], None),
                                           (mine[0][2], [4], "length")]
    assert entries_of(peers[1].recv()) == [(mine[1][0], [1], "stop"), (mine[1][1], [3], None),
                                           (mine[1][2], [5], None)]
    # columns with counts, and per-request tuples
    sharded.send_step(order[:2], array("I", [7, 8, 9]), counts=array("I", [2, 1]))
    assert entries_of(peers[0].recv()) == [(mine[0][0], [7, 8], None)]
    assert entries_of(peers[1].recv()) == [(mine[1][0], [9], None)]
    sharded.send_outputs([(mine[1][1], [5], "stop"), (mine[0][1], [6], None)])
    assert entries_of(peers[1].recv()) == [(mine[1][1], [5], "stop")]
    assert entries_of(peers[0].recv()) == [(mine[0][1], [6], None)]
    # a step for one shard only sends nothing to the other
    sharded.send_step([mine[1][2]], array("I", [3]))
    assert entries_of(peers[1].recv()) == [(mine[1][2], [3], None)]
    assert not peers[0].pull.poll(100)


def test_aborts_from_every_shard_and_rejects_go_to_the_owner(peers: list[EnginePeer],
                                                            sharded: EngineLink) -> None:
    a, b = _ids_on(0, 1)[0], _ids_on(1, 1)[0]
    peers[0].send(EngineRequest(a, pack_ids([1]), 4))
    peers[1].send(EngineRequest(b, pack_ids([1]), 4))
    peers[1].send(EngineAbort([b]))
    peers[0].send(EngineAbort([a]))
    poll_until(lambda: sharded.wait(0.05))
    got = []
    aborts: list[str] = []
    while len(aborts) < 2:
        got += sharded.poll_requests()
        aborts += sharded.poll_aborts()
    # each abort follows its request (same shard, same socket): a request handed over in an
    # earlier drain is aborted in a later one, one still pending when its abort came is dropped
    assert sorted(aborts) == sorted([a, b]) and {r.request_id for r in got} <= {a, b}
    bad = _ids_on(1, 2)[1]
    peers[1].send(EngineRequest(bad, pack_ids([1]), 0))  # max_tokens 0: rejected
    poll_until(lambda: sharded.poll_requests() or peers[1].pull.poll(0))
    assert entries_of(peers[1].recv()) == [(bad, [], "error")]
    assert not peers[0].pull.poll(50)


def test_index_caches_are_per_shard(peers: list[EnginePeer], sharded: EngineLink) -> None:
    index = compile_constraint(VOCAB, regex="(ab|c)+", cache=None)
    other = compile_constraint(VOCAB, regex="a+", cache=None)
    for p in peers:
        p.send(EngineIndex(table_of(index)))
    # shard 0 evicts it; shard 1 still holds it, so shard 1's request gets a guide
    peers[0].send(EngineIndex(table_of(other), [index.key]))
    a, b = _ids_on(0, 1)[0], _ids_on(1, 1)[0]
    peers[1].send(EngineRequest(b, pack_ids([1]), 8, [4], index_key=index.key))
    peers[0].send(EngineRequest(a, pack_ids([1]), 8, [4], index_key=index.key))
    got: list[IncomingRequest] = []

    def both_arrived() -> bool:  # shard 1's request handed over, shard 0's rejected
        got.extend(sharded.poll_requests())
        return bool(got) and bool(peers[0].pull.poll(0))

    poll_until(both_arrived)
    assert [r.request_id for r in got] == [b] and got[0].guide is not None
    assert entries_of(peers[0].recv()) == [(a, [], "error")]
    assert sharded.indexes_received == 3


def test_for_service_reads_every_shard_and_mismatched_addresses_are_refused(tmp_path: Path) -> None:
    ep = ipc_endpoints(str(tmp_path), 1, 2)
    (tmp_path / "endpoints.json").write_text(json.dumps({"endpoints": ep.to_dict()}))
    lk = EngineLink.for_service(str(tmp_path))
    assert lk.engine_ins == (ep.detokenizers[0].engine_in, ep.detokenizers[1].engine_in) and lk.n_shards == 2
    assert lk.engine_outs == (ep.detokenizers[0].engine_out, ep.detokenizers[1].engine_out)
    with pytest.raises(InvalidInput, match="one engine_in and one engine_out address per"):
        EngineLink(["ipc:///a", "ipc:///b"], "ipc:///c")
    with pytest.raises(InvalidInput, match="cannot read the engine endpoints"):
        EngineLink.for_service(str(tmp_path / "nowhere"))


def test_logprob_rows_follow_their_requests(peers: list[EnginePeer], sharded: EngineLink) -> None:
    a, b = _ids_on(0, 1)[0], _ids_on(1, 1)[0]
    floats = array("f", [-0.5, -1.5, -0.25, -2.0])  # 1 + k = 2 per token
    alts = array("I", [11, 12])
    sharded.send_step([a, b], array("I", [1, 2]), logprobs=floats, top_ids=alts)
    first, second = peers[0].recv(), peers[1].recv()
    assert (first.request_ids, first.logprobs, first.top_ids) == (
        [a], array("f", [-0.5, -1.5]).tobytes(), array("I", [11]).tobytes())
    assert (second.request_ids, second.logprobs, second.top_ids) == (
        [b], array("f", [-0.25, -2.0]).tobytes(), array("I", [12]).tobytes())


def test_a_shard_that_is_away_loses_only_its_own_steps(tmp_path: Path) -> None:
    """Shard 1 is not bound: its frames drop once its queue is full, and its requests (only
    its) are reported failed on its socket when it comes; shard 0 gets every step."""
    (tmp_path / "0").mkdir()
    (tmp_path / "1").mkdir()
    first = EnginePeer(tmp_path / "0")
    away_in, away_out = f"ipc://{tmp_path}/1/engine-in", f"ipc://{tmp_path}/1/engine-out"
    # a queue of 64 frames: shard 0, read after every step, stays far from it (zmq's credit
    # comes back every hwm/2 frames read, so a tiny queue can refuse a frame already read)
    lk = EngineLink.connect([first.engine_in, away_in], [first.engine_out, away_out],
                            send_hwm_frames=64)
    try:
        assert first.recv() == EngineHello(lk.instance_id)
        a, b = _ids_on(0, 1)[0], _ids_on(1, 2)
        shard0 = lk._shard_outs[0]
        for i in range(200):
            # zmq gives a reader's credit back every hwm/2 frames through its I/O thread, which
            # a loaded host runs late: wait for shard 0's credit (never for shard 1's)
            assert shard0.poll(5000, zmq.POLLOUT), "shard 0's queue stayed full"
            lk.send_outputs([(a, [1], None), (b[i % 2], [1], None)])
            assert entries_of(first.recv()) == [(a, [1], None)]  # shard 0 never drops
        assert lk.dropped_steps >= 100 and lk.lost_requests_reported == 0
        assert not lk.writable()  # a step may have outputs for the full shard
        second = EnginePeer(tmp_path / "1")
        try:
            failed: set[str] = set()
            deadline = time.monotonic() + 10
            while not set(b) <= failed and time.monotonic() < deadline:
                if lk.writable():
                    lk.send_outputs([(b[0], [2], None)])
                while second.pull.poll(50):
                    frame = second.recv()
                    if not isinstance(frame, EngineHello):
                        failed |= {rid for rid, _, reason in entries_of(frame) if reason == "error"}
            assert failed == set(b) and lk.lost_requests_reported == 2
            assert not first.pull.poll(100)  # nothing was reported lost to shard 0
        finally:
            second.close()
    finally:
        lk.close()
        first.close()


def test_cached_tokens_follow_their_requests(peers: list[EnginePeer], sharded: EngineLink) -> None:
    mine = [_ids_on(0, 2), _ids_on(1, 2)]
    order = [mine[0][0], mine[1][0], mine[0][1], mine[1][1]]
    sharded.send_step(order, array("I", range(4)), cached_tokens={mine[1][0]: 32, mine[0][1]: 0})
    assert peers[0].recv().cached_tokens == {mine[0][1]: 0}
    assert peers[1].recv().cached_tokens == {mine[1][0]: 32}
    sharded.send_outputs([(order[0], [1], None), (order[1], [2], None)],
                         cached_tokens={order[0]: 16})
    assert peers[0].recv().cached_tokens == {order[0]: 16}
    assert peers[1].recv().cached_tokens == {}  # (its part of the step had none)
