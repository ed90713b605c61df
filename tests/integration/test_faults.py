"""Faults and transports: kill -9 every kind of process under load, repeatedly; stuck workers; overload.

Each test runs its own service (they kill processes or change endpoints). Every in-flight
request must end (result or a clear error) within a few seconds of a kill, nothing may hang, a
completed stream's text must equal the in-process core's (complete, in order, no duplicates),
and new requests must succeed afterwards. ``TEXTPROC_FAULT_ROUNDS`` (default 2) sets how many
rounds of kills ``test_kill_every_process_kind_under_load`` runs (``-m slow`` adds a 10-round run); the
counts are printed (-s). With ``--detokenizers 2`` each shard, a worker and the engine are killed
once the same way (a shard's kill fails only its share of the streams).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from tests.helpers.service import Service, http_url, run
from textproc.client import TextClient
from textproc.errors import TextprocError, WorkerDied

pytestmark = pytest.mark.timeout(120)


async def _drive(client: TextClient, n: int, words: int, prefix: str) -> list[Any]:
    """Start ``n`` chats of ``words`` words; return each one's text or the exception it raised."""

    async def one(i: int) -> Any:
        try:
            text = ""
            async for event in client.chat([{"role": "user", "content": f"w{i} " * words}],
                                           request_id=f"{prefix}-{i}"):
                text += event.text
            return text
        except TextprocError as e:
            return e

    return list(await asyncio.gather(*(one(i) for i in range(n))))


def _pid_of(pids: dict[str, Any], key: str) -> Any:
    """``key``'s pid in a processes.json table: worker-i, detokenizer-k (a shard), or a role."""
    for prefix, table in (("worker-", "workers"), ("detokenizer-", "detokenizers")):
        if key.startswith(prefix):
            return pids[table].get(key[len(prefix):])
    return pids.get(key)


async def _until(ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout_s} s")
        await asyncio.sleep(0.02)


def _wait_restarted(service: Service, key: str, old_pid: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid = _pid_of(service.refresh_pids(), key)
        if pid and pid != old_pid:
            return
        time.sleep(0.05)
    raise AssertionError(f"{key} was not restarted within {timeout_s} s:\n{service.log()}")


def test_stub_over_tcp_loopback(tmp_path: Path, toy_model: Path) -> None:
    service = Service(tmp_path / "s", toy_model, workers=1, args=["--endpoints", "tcp"]).start()
    try:
        info = (service.runtime_dir / "endpoints.json").read_text()
        assert "tcp://127.0.0.1:" in info and "ipc://" not in info

        async def main() -> list[Any]:
            async with await TextClient.connect(service.runtime_dir) as client:
                return await _drive(client, 20, 10, "tcp")

        assert run(main) == [f"w{i} " * 10 for i in range(20)]
    finally:
        service.stop()


def test_sigint_stops_everything(tmp_path: Path, toy_model: Path) -> None:
    service = Service(tmp_path / "s", toy_model, workers=1).start()
    assert service.proc is not None
    service.proc.send_signal(signal.SIGINT)
    service.stop()  # asserts that no process and no socket file is left


def test_serve_reports_a_missing_model_and_a_startup_timeout(tmp_path: Path, toy_model: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "textproc.cli", "serve", "--model-dir",
                          str(tmp_path / "nothing")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and f"no tokenizer.json in {tmp_path / 'nothing'}" in out.stderr
    rt = tmp_path / "rt"
    out = subprocess.run([sys.executable, "-m", "textproc.cli", "serve", "--model-dir",
                          str(toy_model), "--workers", "1", "--runtime-dir", str(rt),
                          "--startup-timeout", "0.2"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "waited 0 s for Ready from" in out.stderr and "worker-0" in out.stderr, out.stderr
    assert not rt.exists(), "the runtime dir it created was left behind"


def test_kill_9_supervisor_leaves_no_orphans_and_no_hung_requests(tmp_path: Path, toy_model: Path) -> None:
    from tests.helpers.service import reap

    service = Service(tmp_path / "s", toy_model, workers=1,
                      args=["--stub-arg=--step-ms=20"]).start()
    assert service.proc is not None
    proc = service.proc
    children = {k: v for k, v in service.all_pids().items() if k != "supervisor"}

    async def main() -> tuple[list[Any], float]:
        async with await TextClient.connect(service.runtime_dir) as client:
            load = asyncio.ensure_future(_drive(client, 20, 200, "orphan"))
            await asyncio.sleep(0.5)
            proc.kill()
            t_kill = time.monotonic()
            results = await asyncio.wait_for(load, 40)
            return results, time.monotonic() - t_kill

    try:
        results, ended_s = run(main)
    finally:
        proc.wait(10)
        service.proc = None  # nothing left to stop; socket files stay (documented)
        service._log.close()
        left = reap(children, timeout_s=10, poll_s=0.1)
    assert not left, f"orphans after kill -9 of the supervisor: {left}"
    assert all(isinstance(r, WorkerDied) for r in results), results[:3]
    assert ended_s < 20, f"requests took {ended_s:.1f} s to fail after the service died"


def test_a_launcher_killed_with_9_takes_its_service_with_it(tmp_path: Path, toy_model: Path) -> None:
    """``serve --exit-with-parent`` (what ServeProcess, hence the benchmarks and these tests,
    passes): when the process that started serve dies, even by kill -9 with no cleanup, the
    supervisor stops every child and removes its files instead of running on as an orphan."""
    import subprocess
    import sys

    from tests.helpers.service import reap

    runtime = tmp_path / "rt"
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); "
         "time.sleep(600)", sys.executable, "-m", "textproc.cli", "serve", "--model-dir",
         str(toy_model), "--workers", "1", "--runtime-dir", str(runtime), "--exit-with-parent"],
        stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (runtime / "processes.json").is_file():
            assert launcher.poll() is None and time.monotonic() < deadline, "serve never started"
            time.sleep(0.05)
        procs = json.loads((runtime / "processes.json").read_text())
        pids = {"supervisor": int(procs["supervisor"]), "detokenizer": int(procs["detokenizer"]),
                "engine": int(procs["engine"]),
                **{f"worker-{i}": int(p) for i, p in procs["workers"].items()}}
        launcher.kill()
        launcher.wait(10)
        left = reap(pids, timeout_s=20, poll_s=0.1)
        assert not left, f"still running after their launcher was killed: {left}"
        assert not (runtime / "processes.json").exists()  # the supervisor cleaned up
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_external_engine_connects_to_the_printed_endpoints(tmp_path: Path, toy_model: Path) -> None:
    import subprocess
    import sys

    service = Service(tmp_path / "s", toy_model, workers=1, engine="external").start()
    engine: subprocess.Popen[bytes] | None = None
    try:
        addresses = service.engine_addresses()
        engine = subprocess.Popen([sys.executable, "-m", "engine_stub", "--engine-in",
                                   addresses["engine_in"], "--engine-out", addresses["engine_out"],
                                   "--model-dir", str(toy_model)], stdin=subprocess.DEVNULL)

        async def main() -> list[Any]:
            async with await TextClient.connect(service.runtime_dir) as client:
                # sent before or after the engine connects: queued in the detokenizer meanwhile
                return await asyncio.wait_for(_drive(client, 5, 3, "ext"), 60)

        assert run(main) == [f"w{i} " * 3 for i in range(5)]
    finally:
        if engine is not None:
            engine.terminate()
            engine.wait(10)
        service.stop()


# -- every process kind, repeatedly -----------------------------------------------------------

FAULT_ROUNDS = int(os.environ.get("TEXTPROC_FAULT_ROUNDS", "2"))
_HANG_S = 30.0  # a request still open this long after its start counts as hung
_KINDS = ("worker-0", "detokenizer", "engine", "engine-sigterm", "http")


def _content(i: int, words: int) -> str:
    return f"w{i} 你好 😀 " * words  # multi-byte characters split across tokens


def _reference(model_dir: Path) -> Any:
    """The in-process core's text for an echoed message: tokenizer -> OutputPipeline."""
    from textproc.core.pipeline import OutputPipeline
    from textproc.core.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(str(model_dir))

    def text(content: str) -> str:
        ids = tok.encode(content, add_special_tokens=False) + [tok.eos_token_id]
        pipe = OutputPipeline(tok, reasoning=True)
        deltas = pipe.feed(ids) + pipe.finish("stop")
        assert all(set(d) == {"content"} for d in deltas), deltas
        return "".join(d["content"] for d in deltas)

    return text


async def _client_stream(client: TextClient, i: int, words: int, prefix: str) -> Any:
    text, finish = "", None
    async for event in client.chat([{"role": "user", "content": _content(i, words)}],
                                   request_id=f"{prefix}-{i}"):
        assert finish is None, "an event after the last one"
        text += event.text
        finish = event.finish_reason
    assert finish == "stop", finish
    return text


async def _http_stream(http: httpx.AsyncClient, url: str, model: str, i: int, words: int) -> Any:
    body = {"model": model, "stream": True,
            "messages": [{"role": "user", "content": _content(i, words)}]}
    text, done = "", False
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            raise TextprocError(f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            chunk = json.loads(line[len("data: "):])
            if "error" in chunk:
                raise TextprocError(f"SSE error event: {chunk['error']}")
            text += chunk["choices"][0]["delta"].get("content") or ""
    if not done:
        raise TextprocError("the SSE stream ended without [DONE]")
    return text


async def _timed(coro: Any) -> Any:
    try:
        return await asyncio.wait_for(coro, _HANG_S)
    except (asyncio.TimeoutError, TimeoutError):
        return "HUNG"
    except (TextprocError, httpx.HTTPError) as e:
        return e


def _error_kinds(errors: list[Exception]) -> str:
    """``Type: first words of the message`` per distinct kind, with counts."""
    kinds: dict[str, int] = {}
    for e in errors:
        text = re.sub(r"(chatcmpl-)?[0-9a-f]{8,}|[\w-]+-\d+\b", "ID", str(e) or "(no message)")
        text = re.sub(r"\d+", "N", text.replace("\\", "")).replace('"', "")
        key = f"{type(e).__name__}: {' '.join(text.split()[:14])[:120]}"
        kinds[key] = kinds.get(key, 0) + 1
    return "; ".join(f"{n} x {k}" for k, n in sorted(kinds.items()))


def test_kill_every_process_kind_under_load(tmp_path: Path, toy_model: Path) -> None:
    """kill -9 a worker, the detokenizer, the engine stub, the HTTP frontend, and SIGTERM-restart
    the engine, each under load of TextClient and HTTP streams, ``FAULT_ROUNDS`` times."""
    _kill_rounds(tmp_path, toy_model, FAULT_ROUNDS)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kill_every_process_kind_many_rounds(tmp_path: Path, toy_model: Path,
                                             request: pytest.FixtureRequest) -> None:
    """The same, 10 rounds (50 kills): only with ``-m slow``."""
    if "slow" not in (request.config.getoption("-m") or ""):
        pytest.skip("10 rounds of kills: run with -m slow (or TEXTPROC_FAULT_ROUNDS=N)")
    _kill_rounds(tmp_path, toy_model, 10)


def test_kill_detokenizer_shards_and_the_engine_under_load(tmp_path: Path, toy_model: Path) -> None:
    """With ``--detokenizers 2``: kill -9 each shard, a worker and the engine under the same
    load of TextClient and HTTP streams; nothing hangs, what completes is whole, and both doors
    serve again after each restart."""
    _kill_rounds(tmp_path, toy_model, 1, kinds=("detokenizer-1", "detokenizer-0", "worker-0",
                                                "engine"), extra_args=["--detokenizers", "2"])


def _kill_rounds(tmp_path: Path, toy_model: Path, rounds: int, *,
                 kinds: tuple[str, ...] = _KINDS, extra_args: tuple[str, ...] | list[str] = ()
                 ) -> None:
    reference = _reference(toy_model)
    service = Service(tmp_path / "s", toy_model, workers=2,
                      args=["--stub-arg=--step-ms=5", "--http", "127.0.0.1:0", *extra_args]).start()
    totals: dict[str, list[int]] = {}
    try:
        async def main() -> None:
            url, http_pid = http_url(service, None)
            async with await TextClient.connect(service.runtime_dir) as client, \
                    httpx.AsyncClient(timeout=httpx.Timeout(_HANG_S, connect=5)) as http:
                model = (await http.get(url + "/v1/models")).json()["data"][0]["id"]
                await asyncio.wait_for(_drive(client, 4, 2, "warm"), 30)
                for rnd in range(rounds):
                    for kind in kinds:
                        url_now = url
                        pids = service.refresh_pids()
                        key = kind.removesuffix("-sigterm")
                        pid = _pid_of(pids, key)
                        words = 12
                        t_round = time.monotonic()
                        tasks = [asyncio.ensure_future(_timed(_client_stream(client, i, words, f"{kind}{rnd}")))
                                 for i in range(60)]
                        tasks += [asyncio.ensure_future(_timed(_http_stream(http, url_now, model, i, words)))
                                  for i in range(12)]
                        # a worker while it still holds requests; the others mid-stream
                        await asyncio.sleep(0.03 if key == "worker-0" else 0.3)
                        os.kill(pid, signal.SIGTERM if kind.endswith("sigterm") else signal.SIGKILL)
                        t_kill = time.monotonic()
                        results = await asyncio.gather(*tasks)
                        ended_s = time.monotonic() - t_kill
                        hung = sum(1 for r in results if isinstance(r, str) and r == "HUNG")
                        errors = [r for r in results if isinstance(r, Exception)]
                        done = [(i % 60, r) for i, r in enumerate(results)
                                if isinstance(r, str) and r != "HUNG"]
                        for i, text in done:
                            assert text == reference(_content(i, words)), \
                                f"{kind}: request {i}: streamed text differs from the core's"
                        assert all(str(e) or isinstance(e, httpx.TransportError) for e in errors), \
                            f"an error without a message: {errors}"
                        counts = totals.setdefault(kind, [0, 0, 0])
                        counts[0] += len(done)
                        counts[1] += len(errors)
                        counts[2] += hung
                        print(f"round {rnd} kill {kind}: {len(done)} completed, {len(errors)} "
                              f"failed with an error, {hung} hung; all ended {ended_s:.1f} s after "
                              f"the kill; errors: {_error_kinds(errors)}")
                        assert hung == 0, f"{kind}: {hung} requests hung"
                        assert ended_s < 15, f"{kind}: requests took {ended_s:.1f} s to end"
                        if key == "http":
                            url, http_pid = http_url(service, http_pid)
                        else:
                            # off the event loop: the client must read the ProcessDied (and the
                            # new engine's Ready) while we wait, or it would fail the requests
                            # sent below for a death it learns of only after sending them
                            await asyncio.to_thread(_wait_restarted, service, key, pid)
                            await _until(lambda: client.engine_down is None, 30, "engine up")
                        # serves again: everything completes, through both doors
                        again = await asyncio.wait_for(asyncio.gather(
                            *(_client_stream(client, i, 3, f"after-{kind}{rnd}") for i in range(8)),
                            *(_http_stream(http, url, model, i, 3) for i in range(2))), 40)
                        assert again == [reference(_content(i, 3)) for i in [*range(8), *range(2)]]
                        print(f"  ({kind}: {time.monotonic() - t_round:.1f} s with restart and re-check)")

        run(main)
    finally:
        print("fault totals (completed / failed with an error / hung): " +
              ", ".join(f"{k} {c[0]}/{c[1]}/{c[2]}" for k, c in totals.items()))
        service.stop()


def test_stuck_worker_times_out_with_a_clear_error(tmp_path: Path, toy_model: Path) -> None:
    service = Service(tmp_path / "s", toy_model, workers=1).start()
    pid = service.refresh_pids()["workers"]["0"]
    try:
        async def main() -> None:
            async with await TextClient.connect(service.runtime_dir) as client:
                assert await client.detokenize(await client.tokenize("warm up")) == "warm up"
                os.kill(pid, signal.SIGSTOP)  # alive, but never answers
                try:
                    t0 = time.monotonic()
                    with pytest.raises(TextprocError, match=r"worker 0 .* did not answer "
                                       r"\(TokenizeResult\) .* within 0.5 s") as err:
                        await client.tokenize("hello", timeout_s=0.5)
                    assert getattr(err.value, "status") == 504 and getattr(err.value, "kind") == "timeout"
                    with pytest.raises(TextprocError, match=r"\(DetokenizeResult\)"):
                        await client.detokenize([1, 2], timeout_s=0.5)
                    with pytest.raises(TextprocError, match=r"\(Accepted for a generation request\)"):
                        async for _ in client.chat([{"role": "user", "content": "x"}], timeout_s=0.5):
                            pass
                    assert time.monotonic() - t0 < 5
                    assert client.pending() == 0
                finally:
                    os.kill(pid, signal.SIGCONT)
                # the worker catches up; late answers to given-up calls are ignored, late
                # outputs of the given-up stream are aborted; new calls work
                assert await client.tokenize("hello", timeout_s=10) == await client.tokenize("hello")
                text = "".join([ev.text async for ev in client.chat([{"role": "user", "content": "ok"}])])
                assert text == "ok"
                await asyncio.sleep(1.0)
                detok = next(s for s in await client.stats() if s.role == "detokenizer")
                assert detok.counters["live_requests"] == 0, detok.counters

        run(main)
    finally:
        service.stop()


def test_overload_answers_429_and_503_instead_of_queueing(tmp_path: Path, toy_model: Path) -> None:
    service = Service(tmp_path / "s", toy_model, workers=1,
                      args=["--stub-arg=--step-ms=20", "--max-live-per-client", "5",
                            "--max-live-requests", "8"]).start()
    try:
        async def outcome(client: TextClient, i: int, prefix: str) -> Any:
            try:
                return await _client_stream(client, i, 10, prefix)
            except TextprocError as e:
                return e

        async def main() -> None:
            async with await TextClient.connect(service.runtime_dir) as a, \
                    await TextClient.connect(service.runtime_dir) as b:
                assert await outcome(a, 0, "warm") == _reference(toy_model)(_content(0, 10))
                first = asyncio.ensure_future(asyncio.gather(*(outcome(a, i, "a") for i in range(9))))
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:  # a's five are live (the worker fair-queues
                    detok = next(s for s in await b.stats() if s.role == "detokenizer")  # clients)
                    if detok.counters["live_requests"] == 5 and detok.counters["requests_failed"] >= 4:
                        break
                    await asyncio.sleep(0.05)
                second = await asyncio.wait_for(asyncio.gather(*(outcome(b, i, "b") for i in range(5))), 60)
                got_a = await asyncio.wait_for(first, 60)
                a_429 = [r for r in got_a if isinstance(r, Exception)]
                assert len(a_429) == 4, got_a
                assert all(getattr(e, "status") == 429 and "max_live_per_client=5" in str(e)
                           for e in a_429), a_429
                b_503 = [r for r in second if isinstance(r, Exception)]
                assert len(b_503) == 2, second
                assert all(getattr(e, "status") == 503 and "max_live_requests=8" in str(e)
                           for e in b_503), b_503
                reference = _reference(toy_model)
                for results in (got_a, second):
                    for i, r in enumerate(results):
                        if isinstance(r, str):
                            assert r == reference(_content(i, 10))
                detok = next(s for s in await a.stats() if s.role == "detokenizer")
                assert detok.counters["live_requests"] == 0 and detok.counters["live_clients"] == 0
                # the caps free up: the same client is served again
                assert await outcome(a, 0, "a-again") == reference(_content(0, 10))

        run(main)
    finally:
        service.stop()
