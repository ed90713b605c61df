"""Two detokenizer shards (``serve --detokenizers 2``) with real processes and the stub engine.

Every output, abort and failure reaches the right client and the right shard (checked against
``textproc.sharding.shard_of`` and each shard's Stats); n > 1 choices and constrained requests
spread over both shards (each shard gets the index table it needs, the engine's per-shard
caches answer repeats); endpoints.json and processes.json list every shard. A shard killed with
kill -9 fails only its own streams (a WorkerDied naming it), the others finish whole; the
supervisor restarts it, the engine and the clients reconnect, and new requests to it work.
Over tcp behind the HTTP frontend both shards serve, and /metrics has each shard's counters;
an external engine started from the printed addresses (a list per socket) serves both shards.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.prom import families
from tests.helpers.service import Service, run
from textproc.client import TextClient
from textproc.errors import InvalidInput, WorkerDied
from textproc.sharding import shard_of

pytestmark = pytest.mark.timeout(120)


def _ids(prefix: str, shard: int, n: int) -> list[str]:
    """n request ids that shard ``shard`` of 2 owns."""
    out = [rid for rid in (f"{prefix}-{i}" for i in range(40 * n)) if shard_of(rid, 2) == shard]
    return out[:n]


async def _text(client: TextClient, rid: str, content: str, **options: Any) -> tuple[str, str | None]:
    text, finish = "", None
    async for event in client.chat([{"role": "user", "content": content}], request_id=rid,
                                   **options):
        text += event.text
        finish = event.finish_reason
    return text, finish


async def _shard_stats(client: TextClient) -> dict[int, dict[str, int]]:
    return {s.index: s.counters for s in await client.stats() if s.role == "detokenizer"}


def test_two_shards_route_outputs_aborts_and_failures(tmp_path: Path, toy_model: Path) -> None:
    service = Service(tmp_path / "s", toy_model, workers=2,
                      args=["--detokenizers", "2", "--stub-arg=--step-ms=2"]).start()
    try:
        info = json.loads((service.runtime_dir / "endpoints.json").read_text())
        shards = info["endpoints"]["detokenizers"]
        assert info["n_detokenizers"] == 2 and len(shards) == 2
        assert shards[1]["engine_in"].endswith("/engine-in-1")
        procs = service.refresh_pids()
        assert set(procs["detokenizers"]) == {"0", "1"} and procs["detokenizer"] == procs[
            "detokenizers"]["0"]

        async def main() -> None:
            a = await TextClient.connect(service.runtime_dir)
            b = await TextClient.connect(service.runtime_dir)
            try:
                assert a.n_detokenizers == 2 and all(a.detok_instances)
                before = await _shard_stats(a)
                ids = {k: _ids("ok", k, 6) for k in (0, 1)}
                every = ids[0] + ids[1]
                got = await asyncio.gather(*(_text(a if i % 2 else b, rid, f"echo {rid} 你好")
                                             for i, rid in enumerate(every)))
                assert got == [(f"echo {rid} 你好", "stop") for rid in every]
                after = await _shard_stats(a)
                for k in (0, 1):  # each shard held exactly the requests shard_of gave it
                    assert after[k]["requests_finished"] - before[k]["requests_finished"] == 6
                # n = 4 choices: sub-ids spread over both shards, one stream
                texts = ["", "", "", ""]
                async for event in a.chat([{"role": "user", "content": "many"}],
                                          request_id="multi", n=4):
                    texts[event.index] += event.text
                assert texts == ["many"] * 4
                assert {shard_of(f"multi-{i}", 2) for i in range(4)} == {0, 1}
                # constrained choices: each shard gets the table once; repeats hit the caches
                for rid in ("c1", "c2"):
                    outs = ["", "", "", ""]
                    async for event in a.chat([{"role": "user", "content": "yes"}], request_id=rid,
                                              n=4, structured={"choice": ["yes", "no"]}):
                        outs[event.index] += event.text
                    assert all(o in ("yes", "no") for o in outs), outs
                stats = await _shard_stats(a)
                assert [stats[k]["indexes_sent_to_engine"] for k in (0, 1)] == [1, 1]
                # an abort reaches the owner shard only
                long = f"{'word ' * 400}"
                for k in (0, 1):
                    rid = _ids("ab", k, 1)[0]
                    stream = b.chat([{"role": "user", "content": long}], request_id=rid)
                    await stream.__anext__()
                    await stream.aclose()  # type: ignore[attr-defined]
                deadline = time.monotonic() + 10
                while True:
                    now = await _shard_stats(a)
                    moved = [now[k]["requests_aborted"] - stats[k]["requests_aborted"] for k in (0, 1)]
                    if moved == [1, 1] or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.05)
                assert moved == [1, 1]
                # a failure from a shard reaches the client that sent the request: a duplicate
                # live id (b holds it, a sends it again) fails a's stream only
                rid = _ids("dup", 1, 1)[0]
                held = b.chat([{"role": "user", "content": long}], request_id=rid)
                await held.__anext__()
                with pytest.raises(InvalidInput, match="duplicate request_id"):
                    await _text(a, rid, "again")
                await held.aclose()  # type: ignore[attr-defined]
            finally:
                await a.close()
                await b.close()

        run(main)
    finally:
        service.stop()


def test_kill_9_one_shard_fails_only_its_requests_and_it_restarts(tmp_path: Path,
                                                                  toy_model: Path) -> None:
    service = Service(tmp_path / "s", toy_model, workers=2,
                      args=["--detokenizers", "2", "--stub-arg=--step-ms=10"]).start()
    try:
        victim_pid = int(service.refresh_pids()["detokenizers"]["1"])

        async def main() -> None:
            client = await TextClient.connect(service.runtime_dir)
            try:
                content = "w 你好 😀 " * 60  # ~180 tokens: ~2 s at 10 ms a step
                # both workers hand this constraint's table to shard 1 (which then dies)
                for rid in _ids("before-c", 1, 4):
                    text, _ = await _text(client, rid, "no", structured={"choice": ["yes", "no"]})
                    assert text in ("yes", "no")
                ids = {k: _ids("live", k, 5) for k in (0, 1)}
                tasks = {rid: asyncio.ensure_future(_text(client, rid, content))
                         for rid in ids[0] + ids[1]}
                started = time.monotonic()
                while time.monotonic() - started < 10:  # every stream has produced output
                    stats = await _shard_stats(client)
                    if all(stats[k]["live_requests"] == 5 for k in (0, 1)):
                        break
                    await asyncio.sleep(0.05)
                os.kill(victim_pid, signal.SIGKILL)
                results = {rid: r for rid, r in zip(tasks, await asyncio.wait_for(
                    asyncio.gather(*tasks.values(), return_exceptions=True), 60))}
                for rid in ids[0]:  # the other shard's streams finish whole
                    assert results[rid] == (content, "stop"), (rid, results[rid])
                for rid in ids[1]:  # the killed shard's fail with a clear error
                    err = results[rid]
                    assert isinstance(err, WorkerDied), (rid, err)
                    assert "detokenizer 1" in str(err), err
                # restarted by the supervisor, the engine reconnected: new requests to it work
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    pid = service.refresh_pids()["detokenizers"]["1"]
                    if pid and int(pid) != victim_pid:
                        break
                    await asyncio.sleep(0.1)
                assert int(service.refresh_pids()["detokenizers"]["1"]) != victim_pid
                fresh = _ids("after", 1, 3) + _ids("after", 0, 1)
                got = await asyncio.wait_for(asyncio.gather(
                    *(_text(client, rid, f"back {rid}") for rid in fresh)), 60)
                assert got == [(f"back {rid}", "stop") for rid in fresh]
                for rid in _ids("after-c", 1, 4):  # the new shard gets the table again
                    text, _ = await _text(client, rid, "no", structured={"choice": ["yes", "no"]})
                    assert text in ("yes", "no")
            finally:
                await client.close()

        run(main)
        assert "detokenizer-1 (pid" in service.log(tail=None)
    finally:
        service.stop()


def test_one_shard_is_the_default_and_unchanged(tmp_path: Path, toy_model: Path) -> None:
    service = Service(tmp_path / "s", toy_model, workers=1).start()
    try:
        info = json.loads((service.runtime_dir / "endpoints.json").read_text())
        assert info["n_detokenizers"] == 1
        shard, = info["endpoints"]["detokenizers"]
        assert sorted(shard) == ["detok_front", "detok_in", "engine_in", "engine_out"]
        assert not set(shard) & set(info["endpoints"])  # the list is the only spelling
        assert sorted(p.name for p in service.runtime_dir.glob("engine-*")) == ["engine-in",
                                                                                "engine-out"]

        async def main() -> None:
            async with await TextClient.connect(service.runtime_dir) as client:
                assert await _text(client, "one", "hi there") == ("hi there", "stop")
                assert [(s.role, s.index) for s in await client.stats()] == [
                    ("detokenizer", 0), ("worker", 0)]

        run(main)
    finally:
        service.stop()


def test_two_shards_over_tcp_behind_the_http_frontend(tmp_path: Path, toy_model: Path) -> None:
    import httpx

    from tests.helpers.service import http_url

    service = Service(tmp_path / "s", toy_model, workers=1,
                      args=["--detokenizers", "2", "--endpoints", "tcp", "--http", "127.0.0.1:0"]
                      ).start()
    try:
        info = json.loads((service.runtime_dir / "endpoints.json").read_text())
        addresses = [a for shard in info["endpoints"]["detokenizers"] for a in shard.values()]
        assert len(set(addresses)) == 8 and all(a.startswith("tcp://127.0.0.1:") for a in addresses)
        url, _ = http_url(service, None)
        with httpx.Client(base_url=url, timeout=30) as http:
            for i in range(6):  # server-made ids: both shards serve them
                body = {"model": toy_model.name, "messages": [{"role": "user", "content": f"hi {i}"}]}
                answer = http.post("/v1/chat/completions", json={**body, "n": 2}).json()
                assert "choices" in answer, answer
                assert [c["message"]["content"] for c in answer["choices"]] == [f"hi {i}"] * 2
            metrics = http.get("/metrics").text
        finished = [s for s in families(metrics)["textproc_process_events"].samples
                    if s.labels["role"] == "detokenizer"
                    and s.labels["counter"] == "requests_finished"]
        counts = {s.labels["index"]: int(s.value) for s in finished}
        assert set(counts) == {"0", "1"} and sum(counts.values()) == 12, finished
    finally:
        service.stop()


def test_an_external_engine_connects_to_every_printed_shard(tmp_path: Path, toy_model: Path) -> None:
    import subprocess
    import sys

    service = Service(tmp_path / "s", toy_model, workers=1, engine="external",
                      args=["--detokenizers", "2"]).start()
    engine: subprocess.Popen[bytes] | None = None
    try:
        addresses = service.engine_addresses()
        assert len(addresses["engine_in"]) == len(addresses["engine_out"]) == 2
        command = [sys.executable, "-m", "engine_stub", "--model-dir", str(toy_model)]
        for engine_in, engine_out in zip(addresses["engine_in"], addresses["engine_out"]):
            command += ["--engine-in", engine_in, "--engine-out", engine_out]
        engine = subprocess.Popen(command, stdin=subprocess.DEVNULL)

        async def main() -> list[tuple[str, str | None]]:
            async with await TextClient.connect(service.runtime_dir) as client:
                ids = _ids("ext", 0, 3) + _ids("ext", 1, 3)
                return await asyncio.wait_for(asyncio.gather(
                    *(_text(client, rid, f"to {rid}") for rid in ids)), 60)

        got = run(main)
        assert got == [(f"to {rid}", "stop") for rid in _ids("ext", 0, 3) + _ids("ext", 1, 3)]
    finally:
        if engine is not None:
            engine.terminate()
            engine.wait(10)
        service.stop()
