"""The on-disk store of compiled constraint indexes (``--constraint-cache-dir``): a constraint
one worker compiled is read back by another worker (or after a restart) instead of compiled,
the index read back is the one compiled, a file that does not decode is dropped and the
constraint compiled again, and the directory stays under its byte cap."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.service import Service, run
from textproc import Tokenizer
from textproc.client import TextClient
from textproc.service.constraints import WorkerConstraints, table_of
from textproc.core.constraints import TokenIndex
from textproc.errors import InvalidInput
from textproc.protocol import IndexDone, IndexTable
from textproc.service.index_store import IndexStore

pytestmark = pytest.mark.timeout(240)

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6},
                                          "days": {"type": "integer", "minimum": 1, "maximum": 14}},
          "required": ["city"]}


def _worker(toy_model: Path, directory: Path, **kwargs: Any) -> WorkerConstraints:
    tok = Tokenizer.from_dir(toy_model)
    end_ids = [tok.added_tokens["<|im_end|>"]]
    worker = WorkerConstraints(tok, end_ids, max_frame_bytes=1 << 26, store=IndexStore(directory, **kwargs))
    worker.prepare()
    return worker


class HeldBuilds:
    """A worker's background builds held until :meth:`run` (the test decides when a whole
    index is made)."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[[], Any], Future[Any]]] = []

    def submit(self, job: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self.jobs.append((job, future))
        return future

    def run(self) -> None:
        for job, future in self.jobs:
            try:
                future.set_result(job())
            except BaseException as e:
                future.set_exception(e)
        self.jobs.clear()


def _settle(worker: WorkerConstraints) -> list[tuple[IndexDone, list[int]]]:
    """What the worker's loop sends once its pending whole indexes are made (held builds run
    now)."""
    if isinstance(worker._builds, HeldBuilds):
        worker._builds.run()
    settled = []
    deadline = time.monotonic() + 60
    while worker.pending:
        settled += worker.take_wholes()
        assert time.monotonic() < deadline, "whole indexes not made in 60 s"
        time.sleep(0.005)
    return settled


def _compile(worker: WorkerConstraints, pattern: str) -> tuple[TokenIndex, IndexTable | None]:
    """The whole index, as a worker has it once the request went out (a progressive compile
    hands out a partial index first; the whole one is built in the background and stored)."""
    index, table = worker.compile(pattern)
    if index.partial:
        [(done, _)] = _settle(worker)
        whole = worker.cache.get(index.key)
        assert done.table is not None and whole is not None
        return whole, done.table
    return index, table


def test_a_constraint_compiled_once_is_read_back(toy_model: Path, tmp_path: Path) -> None:
    from textproc.service.constraints import structured_regex

    pattern = structured_regex({"json": SCHEMA})
    first = _worker(toy_model, tmp_path / "store")
    index, _ = _compile(first, pattern)
    assert first.compiles == 1 and [p.name for p in (tmp_path / "store").iterdir()] == [f"{index.key}.index"]
    second = _worker(toy_model, tmp_path / "store")  # another worker, or the next run
    again, table = second.compile(pattern)
    assert second.compiles == 0 and second.store is not None and second.store.hits == 1
    assert table is not None and table == table_of(index)  # the same tables reach the engine
    assert second.compile(pattern)[0] is again  # then from memory
    # a torn or foreign file is dropped and the constraint compiled again
    (tmp_path / "store" / f"{index.key}.index").write_bytes(b"\x93not an index")
    third = _worker(toy_model, tmp_path / "store")
    rebuilt, _ = _compile(third, pattern)
    assert third.compiles == 1 and table_of(rebuilt) == table_of(index)
    assert (tmp_path / "store" / f"{index.key}.index").stat().st_size > 20


def test_the_store_stays_under_its_cap(toy_model: Path, tmp_path: Path) -> None:
    worker = _worker(toy_model, tmp_path / "store", max_bytes=6_000)
    for n in range(1, 12):
        worker.compile(f"[a-z]{{{n}}}x")
    _settle(worker)  # the last ones' whole indexes (their first states go with them)
    files = list((tmp_path / "store").iterdir())
    assert 0 < len(files) < 11 and sum(f.stat().st_size for f in files) <= 6_000


def test_service_workers_share_the_store(toy_model: Path, tmp_path: Path) -> None:
    store = tmp_path / "indexes"
    svc = Service(tmp_path / "svc", toy_model, workers=2, args=["--max-model-len", "4096", "--stub-mode",
                                                                  "random", "--constraint-cache-dir", str(store)])
    svc.start()
    try:
        async def main() -> None:
            async with await TextClient.connect(svc.runtime_dir) as client:
                for _ in range(4):  # both workers see it: one compiles, the other reads it back
                    async for _event in client.chat([{"role": "user", "content": "go"}],
                                                    structured={"json": SCHEMA}, max_tokens=40):
                        pass

        run(main)
    finally:
        svc.stop()
    assert len(list(store.glob("*.index"))) == 1
    assert store.stat().st_mode & 0o777 == 0o700


def test_a_whole_index_over_budget_after_its_partial_one_says_why(toy_model: Path, tmp_path: Path) -> None:
    """The partial index went out; the whole one passes the index size budget: the worker
    sends the failure to the detokenizer shards that got the partial table (their requests
    fail with it) and forgets having sent them the key; nothing but the failure reaches the
    store, and the next request fails at once with it."""
    from textproc.service.constraints import structured_regex

    tok = Tokenizer.from_dir(toy_model)
    worker = WorkerConstraints(tok, [tok.added_tokens["<|im_end|>"]], max_frame_bytes=4096,
                               store=IndexStore(tmp_path / "store"), first_seconds=0)
    worker.prepare()
    index, table = worker.compile(structured_regex({"json": SCHEMA}), shard=1)
    assert index.partial and table is not None and table.n_known == index.n_known
    worker.sent(index.key, 1)
    [(done, shards)] = _settle(worker)
    assert shards == [1] and done.key == index.key and done.table is None
    assert "index size budget" in done.error and not worker.pending
    assert not list((tmp_path / "store").glob("*.index"))
    with pytest.raises(InvalidInput, match="index size budget"):
        worker.compile(structured_regex({"json": SCHEMA}), shard=1)


def _partial_compile(worker: WorkerConstraints, pattern: str) -> TokenIndex:
    """The first states of ``pattern``, its whole index held back (the worker keeps the key's
    claim until it is made: ``_settle``)."""
    worker._builds = HeldBuilds()  # type: ignore[assignment]
    index, _ = worker.compile(pattern)
    assert index.partial and index.key in worker.pending
    return index


def test_a_constraint_is_compiled_once_whoever_asks(toy_model: Path, tmp_path: Path) -> None:
    """Worker b needs the key worker a is compiling: its requests start at once on the first
    states a published; b then serves other requests, looking for a's whole index between
    them (``take_wholes`` never waits), instead of compiling it too, and passes on the very
    table a stored."""
    from textproc.service.constraints import structured_regex

    pattern = structured_regex({"json": SCHEMA})
    a = _worker(toy_model, tmp_path / "store")
    b = _worker(toy_model, tmp_path / "store")
    a.first_seconds = 0.0
    first = _partial_compile(a, pattern)
    index, table = b.compile(pattern, shard=1)
    assert index.partial and b.compiles == 0 and b.first_states_taken == 1
    assert table == table_of(first)  # a's first states, as a sent them
    assert list(b.pending) == [index.key]
    b.sent(index.key, 1)
    assert b.compile(pattern, shard=1) == (index, None)  # the next request goes on them too
    assert b.take_wholes() == []  # a still compiles
    other = _compile(b, "[a-z]{3}x")[0]  # a request on another constraint is served meanwhile
    assert not other.partial and b.compiles == 1
    [(done, _)] = _settle(a)
    assert done.table is not None
    assert b.take_wholes() == [(done, [1])]  # a's table, to the shard b sent the first states
    assert not b.pending and b.compiles == 1
    assert not list((tmp_path / "store").glob("*.part"))  # gone with the whole file


def test_a_failure_that_repeats_is_shared(toy_model: Path, tmp_path: Path) -> None:
    """a's whole compile passes the index size budget: b, with the same budget, fails at once
    with a's message; a worker with another budget is not told a failure that may not be its."""
    from textproc.service.constraints import structured_regex

    pattern = structured_regex({"json": SCHEMA})
    tok = Tokenizer.from_dir(toy_model)
    end_ids = [tok.added_tokens["<|im_end|>"]]

    def small(**kwargs: Any) -> WorkerConstraints:
        worker = WorkerConstraints(tok, end_ids, max_frame_bytes=4096,
                                   store=IndexStore(tmp_path / "store"), **kwargs)
        worker.prepare()
        return worker

    a = small(first_seconds=0)
    _partial_compile(a, pattern)
    [(done, _)] = _settle(a)
    assert done.table is None and "index size budget" in done.error
    b = small()
    with pytest.raises(InvalidInput, match="index size budget"):
        b.compile(pattern)
    assert b.compiles == 0
    roomy = _worker(toy_model, tmp_path / "store")  # a 32 MiB index budget: compiles it
    assert _compile(roomy, pattern)[1] is not None and roomy.compiles == 1


def test_a_claim_given_up_without_an_index_is_compiled_by_the_waiter(toy_model: Path,
                                                                     tmp_path: Path) -> None:
    """The compiling worker let go of its claim with nothing stored (it died: the kernel
    releases its lock; or its deadline passed): the waiting worker, whose requests started on
    the first states, compiles the key itself; a waiter whose own budget runs out first fails
    its requests with a message naming the wait, and stores no failure (the compile is not
    its own); it waits ``WAIT_BUDGETS`` budgets, as the compiler's build may wait behind
    that worker's other builds."""
    import time

    from textproc.service.constraints import structured_regex

    pattern = structured_regex({"json": SCHEMA})
    a = _worker(toy_model, tmp_path / "store")
    b = _worker(toy_model, tmp_path / "store")
    a.first_seconds = 0.0
    first = _partial_compile(a, pattern)
    from textproc.service.constraints import WAIT_BUDGETS

    b.max_compile_s = 0.2
    assert b.compile(pattern)[0].partial and b.take_wholes() == []
    time.sleep(0.25)
    assert b.take_wholes() == []  # one budget: the compiler's build may still be queued
    time.sleep(0.2 * WAIT_BUDGETS - 0.25 + 0.05)
    [(done, shards)] = b.take_wholes()  # its wait is spent
    assert shards == [0] and done.table is None
    assert "for another worker's compile" in done.error and "retry" in done.error
    assert not list((tmp_path / "store").glob("*.fail")) and not b.pending
    b.max_compile_s = 30.0
    assert b.compile(pattern)[0].partial and b.take_wholes() == []
    a._release(a.pending[first.key].claim)  # what a's death does to its lock
    [(done, _)] = b.take_wholes()
    assert done.table is not None and b.compiles == 1
    assert list((tmp_path / "store").glob("*.index"))


def test_concurrent_first_requests_share_one_compile(toy_model: Path, tmp_path: Path) -> None:
    """Sixteen requests at once with a schema new to the service, on two workers (the runtime
    directory's store, no --constraint-cache-dir): every one is answered with valid output and
    the schema was compiled once in all."""
    import asyncio
    import json

    import jsonschema

    svc = Service(tmp_path / "svc", toy_model, workers=2,
                  args=["--max-model-len", "4096", "--stub-mode", "random"])
    svc.start()
    try:
        async def main() -> tuple[list[str], int]:
            async with await TextClient.connect(svc.runtime_dir) as client:
                async def one(i: int) -> str:
                    text = ""
                    async for event in client.chat([{"role": "user", "content": f"go {i}"}],
                                                   structured={"json": SCHEMA}, max_tokens=60):
                        text += "".join(d.get("content") or "" for d in event.deltas)
                    return text

                texts = await asyncio.gather(*(one(i) for i in range(16)))
                stats = await client.stats()
                return list(texts), sum(int(s.counters.get("constraint_compiles", 0))
                                        for s in stats if s.role == "worker")

        texts, compiles = run(main)
    finally:
        svc.stop()
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)
    assert compiles == 1


def test_a_deadline_overrun_fails_the_requests_that_waited_for_it(toy_model: Path, tmp_path: Path) -> None:
    """a's compile ran out of time: a request that arrived before it ended fails at once with
    its message (it waited for that compile; one more would overrun too), one that arrives
    later compiles again (a quieter machine may pass)."""
    import time

    from textproc.service.constraints import structured_regex

    pattern = structured_regex({"json": SCHEMA})
    a = _worker(toy_model, tmp_path / "store")
    b = _worker(toy_model, tmp_path / "store")
    waited_since = time.monotonic()
    time.sleep(0.01)
    with pytest.raises(InvalidInput, match="compile time budget"):  # its request came long ago
        a.compile(pattern, started=time.monotonic() - 2 * a.max_compile_s)
    with pytest.raises(InvalidInput, match="compile time budget"):
        b.compile(pattern, started=waited_since)
    assert b.compiles == 0
    assert _compile(b, pattern)[1] is not None and b.compiles == 1


def test_requests_go_out_while_a_whole_index_is_built(toy_model: Path, tmp_path: Path) -> None:
    """While a partial index's whole one is built in the background, a request on the same
    constraint goes out on the partial index at once, and one on another new constraint is
    compiled meanwhile (its own first states out too); each whole index then goes to the
    shards that have its partial one."""
    from textproc.service.constraints import structured_regex

    pattern = structured_regex({"json": SCHEMA})
    other = structured_regex({"json": {**SCHEMA, "required": ["days"]}})
    worker = _worker(toy_model, tmp_path / "store")
    worker.first_seconds = 0.0
    first = _partial_compile(worker, pattern)
    worker.sent(first.key, 0)
    again, table = worker.compile(pattern)
    assert again is first and table is None and worker.compiles == 1
    second, table = worker.compile(other, shard=1)
    assert second.partial and table is not None and worker.compiles == 2
    assert worker.take_wholes() == []  # both still held
    settled = {done.key: (done, shards) for done, shards in _settle(worker)}
    assert settled[first.key][1] == [0] and settled[second.key][1] == [1]
    assert all(done.table is not None for done, _ in settled.values())
    assert not list((tmp_path / "store").glob("*.lock"))  # both claims given back


def test_a_worker_serves_while_its_background_build_runs(toy_model: Path, tmp_path: Path) -> None:
    """The real background thread: the first states go out at once, the worker thread is free
    (another request is compiled and answered) while the whole index is built, and the whole
    index arrives through take_wholes."""
    from textproc.service.constraints import structured_regex

    worker = _worker(toy_model, tmp_path / "store")
    worker.first_seconds = 0.0
    index, _ = worker.compile(structured_regex({"json": SCHEMA}))
    assert index.partial and index.key in worker.pending
    other, _ = worker.compile("[a-z]{2}y")  # served on this thread meanwhile
    settled = {done.key: (done, shards) for done, shards in _settle(worker)}
    done, shards = settled[index.key]
    assert done.table is not None and shards == [0]
    assert set(settled) == {index.key} | ({other.key} if other.partial else set())
    assert worker.compile(structured_regex({"json": SCHEMA}))[0].n_known == 0  # whole now


def test_a_burst_on_one_new_schema_to_one_worker(toy_model: Path, tmp_path: Path) -> None:
    """Twelve requests at once with a new schema and then another, on one worker (the queued
    ones go out on the first states of its index): every one answered with valid output."""
    import asyncio
    import json

    import jsonschema

    other = {**SCHEMA, "required": ["city", "days"]}
    svc = Service(tmp_path / "svc", toy_model, workers=1,
                  args=["--max-model-len", "4096", "--stub-mode", "random"])
    svc.start()
    try:
        async def main() -> list[tuple[dict[str, Any], str]]:
            async with await TextClient.connect(svc.runtime_dir) as client:
                async def one(i: int) -> tuple[dict[str, Any], str]:
                    schema = SCHEMA if i % 3 else other
                    text = ""
                    async for event in client.chat([{"role": "user", "content": f"go {i}"}],
                                                   structured={"json": schema}, max_tokens=60):
                        text += "".join(d.get("content") or "" for d in event.deltas)
                    return schema, text

                return list(await asyncio.gather(*(one(i) for i in range(12))))

        answers = run(main)
    finally:
        svc.stop()
    for schema, text in answers:
        jsonschema.validate(json.loads(text), schema)


def test_a_whole_build_queued_past_its_budget_is_not_charged_for_the_wait(toy_model: Path,
                                                                          tmp_path: Path) -> None:
    """A burst of new schemas queues their whole builds on one thread: a build that starts
    after its first request's budget has passed still gets its whole budget (from when it
    starts), and another worker waiting for it gets the index, not a refusal."""
    from textproc.service.constraints import structured_regex

    pattern = structured_regex({"json": SCHEMA})
    a = _worker(toy_model, tmp_path / "store")
    b = _worker(toy_model, tmp_path / "store")
    a.first_seconds = 0.0
    a.max_compile_s = b.max_compile_s = 1.0
    first = _partial_compile(a, pattern)  # held: it waits behind other builds
    assert b.compile(pattern)[0].partial and b.take_wholes() == []
    time.sleep(1.2)  # past both first requests' budgets
    [(done, shards)] = _settle(a)
    assert done.key == first.key and done.table is not None and not done.error
    [(done, _)] = b.take_wholes()
    assert done.table is not None and b.compiles == 0


def test_a_whole_build_that_waited_too_long_to_start_fails_its_requests(toy_model: Path,
                                                                        tmp_path: Path) -> None:
    """A build that could not start within WAIT_BUDGETS budgets of its first request is not
    started: its requests fail saying the service is busy, and a later request compiles it."""
    from textproc.service.constraints import WAIT_BUDGETS, structured_regex

    pattern = structured_regex({"json": SCHEMA})
    a = _worker(toy_model, tmp_path / "store")
    a.first_seconds = 0.0
    a.max_compile_s = 0.1
    _partial_compile(a, pattern)
    time.sleep(0.1 * WAIT_BUDGETS + 0.05)
    [(done, _)] = _settle(a)
    assert done.table is None and "behind other constraints' compiles" in done.error
    a.max_compile_s = 30.0
    assert _compile(a, pattern)[1] is not None and a.compiles == 2
