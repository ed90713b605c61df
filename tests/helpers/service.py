"""Helpers for integration tests: a toy Qwen-like model dir, a running service, uvloop runs.

``wait_http(http_file, proc, log_path, timeout_s)`` waits for an HTTP frontend's address file
and returns its base URL. ``build_toy_model(dir)`` (from ``textproc.testing.models``) writes a small byte-level BPE
tokenizer.json, so tests that do not need the real vocabulary never depend on fetched files. ``Service`` runs ``textproc serve`` as a
real process tree (through ``textproc.service.launcher``) and, on ``stop()``, names every process or socket file that did not go away.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator, TypeVar

import uvloop

from textproc.errors import StartupTimeout
from textproc.http.health import pid_alive
from textproc.service.launcher import ServeProcess
from textproc.testing.models import build_toy_model

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]

def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``coro_fn()`` on a fresh uvloop loop (the loop factory, as the frontend does)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro_fn())  # type: ignore[arg-type]


def reap(pids: dict[str, int], *, timeout_s: float, poll_s: float) -> dict[str, int]:
    """Wait up to ``timeout_s`` for these processes to exit; SIGKILL the ones still alive and
    return them (name -> pid) so the caller can assert there were none."""
    deadline = time.monotonic() + timeout_s
    left = {name: pid for name, pid in pids.items() if pid and pid_alive(pid)}
    while left and time.monotonic() < deadline:
        time.sleep(poll_s)
        left = {name: pid for name, pid in left.items() if pid_alive(pid)}
    for pid in left.values():
        os.kill(pid, signal.SIGKILL)
    return left


class Service(ServeProcess):
    """``textproc serve`` in a subprocess (the one launcher, ``textproc.service.launcher``) with
    its runtime dir and log under ``root``; ``stop()`` names every process or socket file that
    did not go away."""

    def __init__(self, root: Path, model_dir: Path, *, workers: int = 2, args: list[str] | None = None,
                 engine: str = "stub") -> None:
        args = list(args or ())  # the default compile budget, as users get it
        super().__init__(root, model_dir, workers=workers, engine=engine, args=args, cwd=REPO)
        self.process_table: dict[str, Any] = {}  # processes.json as last read

    def start(self, *, timeout_s: float = 60.0) -> Service:
        try:
            super().start(timeout_s=timeout_s)
        except StartupTimeout as e:
            raise RuntimeError(str(e)) from e
        self.refresh_pids()
        return self

    def refresh_pids(self) -> dict[str, Any]:
        self.process_table = self.processes()
        return self.process_table

    def all_pids(self) -> dict[str, int]:
        """The pids of the last processes.json read (so dead processes are still named), without
        the HTTP frontends'."""
        return {k: v for k, v in self.pids(self.process_table).items()
                if k != "http" and not k.startswith("http-")}

    def engine_addresses(self, timeout_s: float = 20.0) -> dict[str, Any]:
        """``--engine external``'s printed ``{"engine_in": ..., "engine_out": ...}``: printed
        right after processes.json is written, so ``start()`` may return before it is there."""
        deadline = time.monotonic() + timeout_s
        while True:
            lines = [ln for ln in self.log(tail=None).splitlines() if ln.startswith('{"engine_in"')]
            if lines:
                return dict(json.loads(lines[0]))
            if time.monotonic() > deadline:
                raise AssertionError(f"no engine endpoints line after {timeout_s} s:\n{self.log()}")
            time.sleep(0.05)

    def stub_stats(self, timeout_s: float = 30.0) -> Any:
        """The engine's stats file (written at its start, then every interval): waited for
        when the engine has not written it yet."""
        deadline = time.monotonic() + timeout_s
        while not self.stats_file.exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"no engine stats file after {timeout_s} s:\n{self.log()}")
            time.sleep(0.05)
        return json.loads(self.stats_file.read_text())

    def stop(self, *, timeout_s: float = 20.0) -> bool:
        """SIGTERM the supervisor; fail naming any process or socket file that stayed."""
        if self.proc is None:
            return True
        if (self.runtime_dir / "processes.json").is_file():
            self.refresh_pids()
        pids = self.all_pids()
        pid = self.proc.pid
        if not super().stop(timeout_s=timeout_s):
            raise AssertionError(f"textproc serve (pid {pid}) ignored SIGTERM for "
                                 f"{timeout_s} s:\n{self.log()}")
        left = reap(pids, timeout_s=5, poll_s=0.05)
        assert not left, f"processes still running after shutdown: {left}\n{self.log()}"
        leftovers = [p.name for p in self.runtime_dir.glob("*")] if self.runtime_dir.exists() else []
        assert not leftovers, f"files left in {self.runtime_dir}: {leftovers}"
        return True


def http_url(service: Service, old_pid: int | None, timeout_s: float = 30) -> tuple[str, int]:
    """The service's HTTP frontend (``http.json``), once it answers /health, and its pid; with
    ``old_pid``, wait for a frontend other than that one (a restart)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    path = service.runtime_dir / "http.json"
    while time.monotonic() < deadline:
        try:
            info = json.loads(path.read_text())
            if info.get("pid") != old_pid:
                url = f"http://{info['host']}:{info['port']}"
                httpx.get(url + "/health", timeout=2).raise_for_status()
                return url, int(info["pid"])
        except (OSError, ValueError, KeyError, httpx.HTTPError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"no (new) HTTP frontend within {timeout_s} s:\n{service.log()}")


def wait_http(http_file: Path, proc: subprocess.Popen[bytes] | None, log_path: Path,
              timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while not http_file.is_file():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"HTTP frontend exited with {proc.returncode}:\n"
                               f"{log_path.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {http_file} after {timeout_s} s:\n"
                               f"{log_path.read_text()[-3000:]}")
        time.sleep(0.05)
    info = json.loads(http_file.read_text())
    return f"http://{info['host']}:{info['port']}"


def toy_http_fixtures(name: str, *args: str) -> tuple[Any, Any]:
    """Module-scoped pytest fixtures ``(echo, client)`` for an HTTP test module: the toy model
    served by :func:`serve_toy_http` with ``args`` (stopped after the module), and the
    official ``openai`` client of it (no retries, so a 5xx shows; 30 s timeout). Use as
    ``echo, client = toy_http_fixtures("name", ...)`` at module level."""
    import openai
    import pytest

    @pytest.fixture(scope="module")
    def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str]]:
        service, url = serve_toy_http(tmp_path_factory.mktemp(name), *args)
        try:
            yield service, url
        finally:
            service.stop()

    @pytest.fixture(scope="module")
    def client(echo: tuple[Service, str]) -> Iterator[openai.OpenAI]:
        with openai.OpenAI(base_url=echo[1] + "/v1", api_key="unused", max_retries=0,
                           timeout=30) as c:
            yield c

    return echo, client


def user(text: str) -> list[dict[str, Any]]:
    """One user message: the messages of a one-turn chat."""
    return [{"role": "user", "content": text}]


def serve_toy_http(root: Path, *args: str, name: str = "toy") -> tuple[Service, str]:
    """``textproc serve`` of the toy model (built in ``root / name``, served as ``name``) with one
    worker and the HTTP frontend on a free port: the service and its base URL."""
    model = build_toy_model(root / name)
    service = Service(root, model, workers=1, args=["--http", "127.0.0.1:0", *args]).start()
    return service, wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
