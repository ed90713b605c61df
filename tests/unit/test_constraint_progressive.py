"""Progressive compiles: the DFA built on demand gives the index the walk definition gives, a
partial index (the first states) travels like a whole one, and a walk that outruns the builder
is held, then moves onto the whole index, and never takes an id the constraint forbids."""

from __future__ import annotations

import random
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.constraint_sample import SCHEMAS, walk_definition_states
from tests.helpers.constraint_sample import sample_vocab as _sample
from textproc import TokenVocabulary, compile_constraint
from textproc.core.constraints import Budget, Guide, json_schema_to_regex
from textproc.core.constraints.automaton.dfa import counted_states_floor
from textproc.core.constraints.automaton.lazy import lazy_dfa
from textproc.core.constraints.compile import compile_progressive
from textproc.core.constraints.index.build import build_index, build_partial
from textproc.core.constraints.index.table import TokenIndex
from textproc.core.constraints.regex.syntax import parse_regex
from textproc.errors import InvalidInput


@pytest.mark.parametrize("name", ["strings"])
def test_lazy_dfa_index_is_the_walk_definition(name: str) -> None:
    vocab = _sample()
    dfa = lazy_dfa(parse_regex(json_schema_to_regex(SCHEMAS[name])), Budget())
    index = build_index(dfa, vocab, Budget(), what=name)
    assert walk_definition_states(index, dfa, vocab, name) == index.n_states == dfa.n_states


def test_a_partial_index_travels_and_checks_its_tables() -> None:
    vocab = _sample()
    pattern = json_schema_to_regex(SCHEMAS["strings"])
    first = build_partial(lazy_dfa(parse_regex(pattern), Budget()), vocab, Budget(), what="x", seconds=0)
    assert first.partial and first.n_states == 1 < first.n_known
    fields = first.pack()
    back = TokenIndex.unpack(key="k", **fields)  # type: ignore[arg-type]
    assert back.partial and back.n_known == first.n_known and back.allowed_ids(0) == first.allowed_ids(0)
    fields["n_known"] = 0  # then its transitions name states it has no tables for
    with pytest.raises(ValueError, match="out of range"):
        TokenIndex.unpack(key="k", **fields)  # type: ignore[arg-type]


def test_guide_on_a_partial_index_holds_then_moves_onto_the_whole_one() -> None:
    vocab = _sample()
    pattern = json_schema_to_regex(SCHEMAS["strings"])
    first, rest = compile_progressive(vocab, pattern, cache=None, first_seconds=0)
    assert first.partial and rest is not None
    guide = Guide(first)
    token = next(t for t in guide.allowed_ids() if first.next_state(0, t) >= first.n_states)
    guide.advance(token)
    assert not guide.ready and not guide.is_finished and guide.forced_ids() == []
    with pytest.raises(InvalidInput, match="not built yet"):
        guide.allowed_mask()
    whole = rest()
    assert not whole.partial and whole.key == first.key
    first.successor = whole  # what the engine does when the whole index arrives
    assert guide.ready and guide.index is whole
    assert guide.state == whole.next_state(whole.initial_state, token)


@lru_cache(maxsize=None)
def _whole(schema: str) -> TokenIndex:
    return compile_constraint(_sample(), regex=json_schema_to_regex(SCHEMAS[schema]), cache=None)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=st.sampled_from(["strings", "counted", "enum-and-number"]), seed=st.integers(0, 2**32 - 1),
       arrives=st.integers(0, 30))
def test_an_engine_that_outruns_the_builder_never_takes_a_forbidden_id(schema: str, seed: int, arrives: int) -> None:
    """An engine steps on the partial index, holds a request whose state is not built, and the
    whole index arrives after ``arrives`` steps: every id it takes is allowed by the whole
    index at that point of the output, and a held step takes nothing."""
    vocab = _sample()
    pattern = json_schema_to_regex(SCHEMAS[schema])
    first = build_partial(lazy_dfa(parse_regex(pattern), Budget()), vocab, Budget(), what=schema, seconds=0)
    whole = _whole(schema)
    rng = random.Random(seed)
    guide, reference = Guide(first), Guide(whole)
    held = 0
    for step in range(60):
        if step == arrives:
            first.successor = whole
        if not guide.ready:
            held += 1
            continue
        allowed = guide.allowed_ids()
        assert allowed == reference.allowed_ids()
        if guide.is_finished:
            break
        token = rng.choice(allowed)
        guide.advance(token)
        reference.advance(token)
    assert held <= arrives and first.partial


@pytest.mark.parametrize("evicted", [False, True])
def test_the_whole_index_reaches_the_engine_after_its_partial_one(evicted: bool) -> None:
    """The relay sends the whole table once the engine got the partial one (again if the engine
    evicted the partial one meanwhile); the engine's cache makes it the partial's successor."""
    from textproc.engine.indexes import IndexCache as EngineCache
    from textproc.protocol import EngineIndex
    from textproc.service.constraints import IndexRelay, table_of

    vocab = TokenVocabulary([b"a", b"b", b"ab", b""], end_ids=[3])
    first, rest = compile_progressive(vocab, "(?:ab|ba){3}", cache=None, first_seconds=0)
    other, _ = compile_progressive(vocab, "b+", cache=None)
    assert first.partial and rest is not None
    relay = IndexRelay(engine_bytes=1 if evicted else 1 << 20)
    engine = EngineCache(1 << 20)
    assert relay.remember(table_of(first)) is None
    sent = relay.frame_for(first.key)
    assert isinstance(sent, EngineIndex) and sent.table.n_known == first.n_known
    assert engine.put(sent.table, sent.evict) is None
    guide = Guide(engine.get(first.key))
    if evicted:  # another constraint pushes the partial index out of the engine's cache
        relay.remember(table_of(other))
        pushed = relay.frame_for(other.key)
        assert isinstance(pushed, EngineIndex) and pushed.evict == [first.key]
        engine.put(pushed.table, pushed.evict)
    whole = relay.remember(table_of(rest()))
    assert isinstance(whole, EngineIndex) and whole.table.n_known == 0
    assert engine.put(whole.table, whole.evict) is None
    assert guide.ready and not guide.index.partial and guide.index is engine.get(first.key)
    assert relay.sent_to_engine == (2 if evicted else 1)
    assert relay.completed_on_engine == 1


def test_requests_on_a_partial_index_end_when_its_whole_one_cannot_come() -> None:
    """A key's requests are given up when the last worker compiling its whole index dies (not
    while another one still compiles it; also when its Submit is read after its death) or at
    the deadline; the whole index releases them; the ids kept stay under twice the live bound
    (finished requests are dropped)."""
    from textproc.service.partial_waits import PartialWaits

    now = [0.0]
    waits = PartialWaits(7.0, 4, lambda: now[0])
    live = {"a", "b", "c", "d"}
    waits.add("k1", "a", 100, live)
    waits.add("k1", "b", 101, live)  # a second worker compiles the same key
    waits.add("k2", "c", 100, live)
    waits.add("k3", "d", 0, live)  # no compiler named: only the deadline ends it
    assert waits.worker_died(100, "w0 died") == {"k2": ["c"]}  # worker 101 still compiles k1
    assert waits.worker_died(101, "w1 died") == {"k1": ["a", "b"]}
    waits.add("k5", "f", 100, live)  # read after its worker's death: expires at once
    assert waits.expired() == {"k5": (["f"], "w0 died")}
    now[0] = 6.9
    assert waits.expired() == {}
    now[0] = 7.0
    assert waits.expired() == {"k3": (["d"], "")} and len(waits) == 0
    waits.add("k4", "e", 102, live)
    assert waits.whole("k4") == ["e"] and waits.worker_died(102, "") == {} and waits.whole("k4") == []
    for i in range(100):  # finished requests leave the kept ids
        waits.add(f"key{i % 3}", f"r{i}", 103, {f"r{i}"})
        assert len(waits) < 2 * 4


def test_the_whole_index_reaches_the_engine_after_the_relay_dropped_its_partial_one() -> None:
    """The relay's store evicted the partial table the engine walks: its whole table still goes
    to the engine when it arrives (else the engine held the request for good)."""
    from textproc.protocol import EngineIndex
    from textproc.service.constraints import IndexRelay, table_of

    vocab = TokenVocabulary([b"a", b"b", b"ab", b""], end_ids=[3])
    first, rest = compile_progressive(vocab, "(?:ab|ba){3}", cache=None, first_seconds=0)
    other, _ = compile_progressive(vocab, "b+", cache=None)
    assert first.partial and rest is not None
    relay = IndexRelay(store_bytes=1)
    relay.remember(table_of(first))
    assert isinstance(relay.frame_for(first.key), EngineIndex)
    relay.remember(table_of(other))  # pushes the partial table out of the relay's store
    assert not relay.partial(first.key)
    whole = relay.remember(table_of(rest()))
    assert isinstance(whole, EngineIndex) and whole.table.key == first.key and not whole.table.n_known


def test_a_partial_index_whose_whole_compile_failed_leaves_the_engine() -> None:
    """The whole compile after a partial table the engine got fails: a request naming the key
    fails at once, the engine is told to evict it, and a later compile of the key (a deadline
    overrun is not cached) reaches the engine, partial then whole (before, the relay still
    listed the key as held: the new tables never went and the engine kept the request on a
    partial index that never completes)."""
    from textproc.engine.indexes import IndexCache as EngineCache
    from textproc.protocol import EngineIndex
    from textproc.service.constraints import IndexRelay, table_of

    vocab = TokenVocabulary([b"a", b"b", b"ab", b""], end_ids=[3])
    first, rest = compile_progressive(vocab, "(?:ab|ba){3}", cache=None, first_seconds=0)
    assert first.partial and rest is not None
    relay = IndexRelay()
    engine = EngineCache(1 << 20)
    relay.remember(table_of(first))
    sent = relay.frame_for(first.key)
    assert isinstance(sent, EngineIndex)
    engine.put(sent.table, sent.evict)
    relay.drop(first.key)  # its IndexDone says the whole compile failed
    assert relay.frame_for(first.key) is False
    assert relay.remember(table_of(first)) is None  # compiled again: partial first
    again = relay.frame_for(first.key)
    assert isinstance(again, EngineIndex) and again.evict == [first.key] and again.table.n_known
    engine.put(again.table, again.evict)
    guide = Guide(engine.get(first.key))
    whole = relay.remember(table_of(rest()))
    assert isinstance(whole, EngineIndex) and not whole.table.n_known
    engine.put(whole.table, whole.evict)
    assert guide.ready and not guide.index.partial and len(engine) == 1


def test_a_failed_whole_compile_leaves_another_workers_whole_table() -> None:
    """Two workers compiled one key: one's whole compile failed (its deadline), the other's
    whole table had reached the relay first. The table stays (requests on it are in flight and
    the worker that sent it sends it no more): a request naming the key still finds it."""
    from textproc.protocol import EngineIndex
    from textproc.service.constraints import IndexRelay, table_of

    vocab = TokenVocabulary([b"a", b"b", b"ab", b""], end_ids=[3])
    first, rest = compile_progressive(vocab, "(?:ab|ba){3}", cache=None, first_seconds=0)
    assert first.partial and rest is not None
    relay = IndexRelay()
    relay.remember(table_of(rest()))  # the other worker's whole table
    assert isinstance(relay.frame_for(first.key), EngineIndex)
    relay.drop(first.key)  # this worker's IndexDone: its whole compile failed
    assert relay.frame_for(first.key) is None  # the engine holds it; the relay still has it
    assert not relay.partial(first.key)


@pytest.mark.parametrize(("regex", "refused"), [
    ("[a-z]{0,60000}", True), ("x(ab|c){20000}y", True), ("(a{0,30000})*", True),
    ("(a?){0,60000}", False), ("[a-z]{0,500}", False), ("a*", False)])
def test_a_count_past_the_state_budget_is_refused_before_any_state(regex: str, refused: bool) -> None:
    """A counted repetition of something that reads a byte needs a DFA state per count: one
    past the state budget is a 400 before a first index goes out (not a failure mid-stream)."""
    floor = counted_states_floor(parse_regex(regex))[1]
    assert (floor > Budget().max_states) == refused
    if refused:
        with pytest.raises(InvalidInput, match="automaton states"):
            compile_progressive(_sample(), regex, cache=None)
