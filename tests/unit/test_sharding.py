"""The shard function and the split of one engine step by owner shard (``--detokenizers N``).

``shard_of`` is the one routing rule workers, clients and EngineLink share: pinned values (it
must not change between versions or processes), balance, and the split of a step's columns or
entries so that every request's outputs land, whole and in order, on its owner's part.
"""

from __future__ import annotations

import subprocess
import sys
from array import array
from collections import Counter

from hypothesis import given, settings, strategies as st

from textproc.engine.routing import Owners, entry_ids, split_columns, split_entries
from textproc.protocol import EngineStepPacked, StepOutput, pack_ids, step_entries
from textproc.sharding import group_by_shard, shard_of


def test_shard_of_is_pinned_and_the_same_in_another_process() -> None:
    ids = ["r1", "r4", "chatcmpl-3f2a", "abcdef-17", "abcdef-17-0", "émoji-😀"]
    here = [shard_of(rid, n) for rid in ids for n in (1, 2, 3, 7)]
    assert [shard_of(rid, 2) for rid in ids[:2]] == [0, 1]
    assert all(shard_of(rid, 1) == 0 for rid in ids)
    code = ("from textproc.sharding import shard_of; "
            f"print([shard_of(r, n) for r in {ids!r} for n in (1, 2, 3, 7)])")
    # hash() is salted per process; shard_of must not be
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PYTHONPATH": ":".join(sys.path)})
    assert other.stdout.strip() == str(here)


def test_shard_of_spreads_sequential_client_ids_evenly() -> None:
    for pattern in ("abcdef-{}", "chatcmpl-{}", "r{}", "req-{}-0"):
        for n in (2, 3, 4):
            counts = Counter(shard_of(pattern.format(i), n) for i in range(6000))
            assert sorted(counts) == list(range(n))
            assert max(counts.values()) < 1.15 * 6000 / n, (pattern, n, counts)


def test_sub_request_ids_of_one_request_spread_like_random_ones() -> None:
    # plain CRC-32 put all of <id>-0..3 on one shard for every id (it is linear in the bits)
    together = sum(len({shard_of(f"base{b}-{i}", 2) for i in range(4)}) == 1 for b in range(2000))
    assert 0.08 < together / 2000 < 0.17  # 1/8 for independent coin flips


def test_group_by_shard_keeps_order_within_a_shard() -> None:
    ids = [f"r{i}" for i in range(50)]
    groups = group_by_shard(ids, 3)
    assert sorted(sum(groups.values(), [])) == sorted(ids)
    for k, members in groups.items():
        assert members == [r for r in ids if shard_of(r, 3) == k]


_steps = st.lists(
    st.tuples(st.integers(0, 10_000), st.lists(st.integers(0, 2**32 - 1), max_size=4),
              st.sampled_from([None, None, "stop", "length", "abort", "error"])),
    max_size=40, unique_by=lambda e: e[0])


def _rows_of(token_ids: list[int], k: int) -> tuple[bytes, bytes]:
    """Fake logprob columns: float32 rows of 1 + k per token, uint32 rows of k, from the id."""
    floats = array("f", [float(t % 1000) + j / 8 for t in token_ids for j in range(1 + k)])
    alts = array("I", [(t + j) % 2**32 for t in token_ids for j in range(k)])
    return floats.tobytes(), alts.tobytes()


@settings(max_examples=60, deadline=None)
@given(entries=_steps, n_shards=st.integers(2, 4), one_each=st.booleans(),
       k=st.sampled_from([None, 0, 2]))
def test_split_columns_gives_each_owner_its_entries_whole_and_in_order(
        entries: list[tuple[int, list[int], str | None]], n_shards: int, one_each: bool,
        k: int | None) -> None:
    rows = [(f"req-{i}", [ids[0] if ids else 7] if one_each else ids, reason)
            for i, ids, reason in entries]
    request_ids = [r for r, _, _ in rows]
    all_ids = [t for _, ids, _ in rows for t in ids]
    tokens = pack_ids(all_ids)
    counts = b"" if one_each else pack_ids([len(ids) for _, ids, _ in rows])
    finished = {i: reason for i, (_, _, reason) in enumerate(rows) if reason is not None}
    logprobs, top_ids = _rows_of(all_ids, k) if k is not None else (b"", b"")
    owners = Owners(n_shards).of(request_ids)
    parts = split_columns(owners, n_shards, request_ids, tokens, counts, finished, logprobs, top_ids)
    assert len(parts) == n_shards
    for shard, part in enumerate(parts):
        mine = [row for row in rows if shard_of(row[0], n_shards) == shard]
        if part is None:
            assert not mine
            continue
        frame = EngineStepPacked(0, *part)
        got = [(r, list(ids), f) for r, ids, f in zip(*step_entries(frame))]
        assert got == mine
        assert (part[2] == b"") == one_each
        mine_ids = [t for _, ids, _ in mine for t in ids]
        assert (part[4], part[5]) == (_rows_of(mine_ids, k) if k is not None else (b"", b""))


@settings(max_examples=40, deadline=None)
@given(entries=_steps, n_shards=st.integers(2, 4))
def test_split_entries_gives_each_owner_its_entries(
        entries: list[tuple[int, list[int], str | None]], n_shards: int) -> None:
    outputs = [(f"x{i}", ids, reason) if i % 2 else StepOutput(f"x{i}", ids, reason)
               for i, ids, reason in entries]
    request_ids = entry_ids(outputs)
    assert request_ids == [f"x{i}" for i, _, _ in entries]
    parts = split_entries(Owners(n_shards).of(request_ids), n_shards, outputs)
    for k, part in enumerate(parts):
        mine = [e for e, rid in zip(outputs, request_ids) if shard_of(rid, n_shards) == k]
        assert (part or []) == mine


def test_owners_prefers_the_shard_a_request_came_from_and_is_bounded() -> None:
    owners = Owners(2)
    owners.note("a", shard_of("a", 2))
    assert owners.of(["a", "b"]) == [shard_of("a", 2), shard_of("b", 2)]
    assert len(owners) == 2  # computed owners are cached too
    owners.forget(["a", "b", "never"])
    assert len(owners) == 0
