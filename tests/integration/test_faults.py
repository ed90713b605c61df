"""Faults and transports: kill -9 a worker then the detokenizer under load; the stub over tcp.

Each test runs its own service (they kill processes or change endpoints). Every in-flight
request must end (result or error) within a few seconds of a kill, and new requests must
succeed afterwards.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.service import Service, run
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


def _wait_restarted(service: Service, key: str, old_pid: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = service.refresh_pids()
        pid = pids["workers"].get(key[len("worker-"):]) if key.startswith("worker-") else pids.get(key)
        if pid and pid != old_pid:
            return
        time.sleep(0.05)
    raise AssertionError(f"{key} was not restarted within {timeout_s} s:\n{service.log()}")


def test_kill_worker_then_detokenizer_under_load(tmp_path: Path, toy_model: Path) -> None:
    service = Service(tmp_path / "s", toy_model, workers=2,
                      args=["--stub-arg=--step-ms=5"]).start()
    try:
        async def main() -> None:
            async with await TextClient.connect(service.runtime_dir) as client:
                # warm up both workers (first render compiles the template)
                await asyncio.wait_for(_drive(client, 4, 2, "warm"), 30)
                for victim in ("worker-0", "detokenizer"):
                    pids = service.refresh_pids()
                    pid = pids["workers"]["0"] if victim == "worker-0" else pids["detokenizer"]
                    load = asyncio.ensure_future(_drive(client, 200, 60, victim))
                    # worker: kill while it still holds requests; detokenizer: mid-stream
                    await asyncio.sleep(0.03 if victim == "worker-0" else 0.5)
                    os.kill(pid, signal.SIGKILL)
                    t_kill = time.monotonic()
                    results = await asyncio.wait_for(load, 30)
                    ended_s = time.monotonic() - t_kill
                    errors = [r for r in results if isinstance(r, Exception)]
                    done = [r for r in results if isinstance(r, str)]
                    assert ended_s < 10, f"in-flight requests took {ended_s:.1f} s to end after kill"
                    assert all(isinstance(e, WorkerDied) for e in errors), errors[:3]
                    for i, text in enumerate(results):
                        if isinstance(text, str):
                            assert text == f"w{i} " * 60, f"{victim}: request {i} incomplete"
                    if victim == "detokenizer":
                        assert errors, "killing the detokenizer mid-stream failed no request"
                    print(f"kill {victim}: {len(done)} completed, {len(errors)} failed, "
                          f"all ended {ended_s:.1f} s after the kill")
                    _wait_restarted(service, victim, pid)
                    after = await asyncio.wait_for(_drive(client, 20, 5, f"after-{victim}"), 30)
                    assert after == [f"w{i} " * 5 for i in range(20)], after

        run(main)
    finally:
        service.stop()


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


def test_engine_restart_fails_in_flight_requests_then_serves(tmp_path: Path, toy_model: Path) -> None:
    service = Service(tmp_path / "s", toy_model, workers=1, args=["--stub-arg=--step-ms=5"]).start()
    try:
        async def main() -> None:
            async with await TextClient.connect(service.runtime_dir) as client:
                await asyncio.wait_for(_drive(client, 2, 2, "warm"), 30)
                old = service.refresh_pids()["engine"]
                load = asyncio.ensure_future(_drive(client, 50, 200, "engine-kill"))
                await asyncio.sleep(0.5)
                os.kill(old, signal.SIGKILL)
                t_kill = time.monotonic()
                results = await asyncio.wait_for(load, 30)
                assert time.monotonic() - t_kill < 15
                errors = [r for r in results if isinstance(r, Exception)]
                assert errors and all(isinstance(e, WorkerDied) for e in errors), results[:3]
                assert all("engine restarted" in str(e) for e in errors), errors[:3]
                _wait_restarted(service, "engine", old)
                after = await asyncio.wait_for(_drive(client, 10, 5, "after-engine"), 30)
                assert after == [f"w{i} " * 5 for i in range(10)], after

        run(main)
    finally:
        service.stop()


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
    from tests.integration.service import _alive

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
        deadline = time.monotonic() + 10
        left = dict(children)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = {k: pid for k, pid in left.items() if _alive(pid)}
        for pid in left.values():
            os.kill(pid, signal.SIGKILL)
    assert not left, f"orphans after kill -9 of the supervisor: {left}"
    assert all(isinstance(r, WorkerDied) for r in results), results[:3]
    assert ended_s < 20, f"requests took {ended_s:.1f} s to fail after the service died"


def test_external_engine_connects_to_the_printed_endpoints(tmp_path: Path, toy_model: Path) -> None:
    import json
    import subprocess
    import sys

    service = Service(tmp_path / "s", toy_model, workers=1, engine="external").start()
    engine: subprocess.Popen[bytes] | None = None
    try:
        line = next(ln for ln in service.log(tail=None).splitlines() if ln.startswith('{"engine_in"'))
        addresses = json.loads(line)
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
