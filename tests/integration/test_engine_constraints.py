"""Constraint indexes at the engine: EngineIndex frames fill EngineLink's cache, requests that
name one get a Guide (table lookups), unknown or malformed indexes never reach the engine, and
the detokenizer's IndexRelay sends each index once and mirrors evictions."""

from __future__ import annotations


import pytest

from tests.helpers.engine_peer import EnginePeer, entries_of, poll_until
from textproc import TokenVocabulary, compile_constraint
from textproc.core.constraints import Guide
from textproc.engine import EngineLink
from textproc.errors import InvalidInput
from textproc.protocol import EngineIndex, EngineRequest, IndexTable, pack_ids
from textproc.service.constraints import IndexRelay, table_of

VOCAB = TokenVocabulary([b"a", b"b", b"ab", b"c", b""], end_ids=[4])


def test_request_naming_an_index_gets_a_guide(peer: EnginePeer, link: EngineLink) -> None:
    index = compile_constraint(VOCAB, regex="(ab|c)+", cache=None)
    peer.send(EngineIndex(table_of(index)))
    peer.send(EngineRequest("r1", pack_ids([1]), 8, [4], index_key=index.key))
    (req,) = poll_until(link.poll_requests)
    guide = req.guide
    assert isinstance(guide, Guide) and link.indexes_received == 1
    assert guide.allowed_mask() == index.allowed_mask(0) and guide.allowed_ids() == [0, 2, 3]
    with pytest.raises(InvalidInput, match="token id 1 is not allowed"):
        guide.advance(1)
    guide.advance(2)
    assert guide.is_accepting and not guide.is_finished
    guide.advance(4)
    assert guide.is_finished
    with pytest.raises(InvalidInput, match="already ended"):
        guide.advance(4)


def _rejected(peer: EnginePeer, link: EngineLink) -> object:
    poll_until(lambda: link.poll_requests() or peer.pull.poll(0))  # the drain answers at once
    return entries_of(peer.recv())


def test_unknown_index_is_rejected_and_bad_tables_counted(peer: EnginePeer, link: EngineLink) -> None:
    peer.send(EngineRequest("r1", pack_ids([1]), 8, [4], index_key="nope"))
    assert _rejected(peer, link) == [("r1", [], "error")]
    index = compile_constraint(VOCAB, regex="a", cache=None)
    fields = table_of(index)
    broken = IndexTable(**{**{f: getattr(fields, f) for f in fields.__struct_fields__}, "mask_of": b"\x05\0\0\0"})
    peer.send(EngineIndex(broken))
    peer.send(EngineRequest("r2", pack_ids([1]), 8, [4], index_key=index.key))
    assert _rejected(peer, link) == [("r2", [], "error")]
    assert link.malformed_frames == 3 and link.indexes_received == 0


def test_evictions_follow_the_relay(peer: EnginePeer, link: EngineLink) -> None:
    tables = [table_of(compile_constraint(VOCAB, regex=f"a{{{n}}}", cache=None)) for n in (1, 2, 3)]
    sizes = [len(t.masks) + 2 * len(t.exc_ids) + 64 for t in tables]  # what the relay counts
    relay = IndexRelay(engine_bytes=sizes[1] + sizes[2])
    for table in tables:
        relay.remember(table)
    assert relay.frame_for("unknown") is False
    for table in tables:
        frame = relay.frame_for(table.key)
        assert isinstance(frame, EngineIndex)
        peer.send(frame)
        peer.send(EngineRequest(table.key, pack_ids([1]), 4, index_key=table.key))
    assert relay.frame_for(tables[2].key) is None  # the engine holds it: nothing to send
    got = poll_until(link.poll_requests)
    while len(got) < 3:
        got += poll_until(link.poll_requests)
    assert all(r.guide is not None for r in got)
    assert link._receiver.caches[0].keys() == [tables[1].key, tables[2].key]  # tables[0] evicted
    relay.engine_restarted()
    assert isinstance(relay.frame_for(tables[2].key), EngineIndex)
