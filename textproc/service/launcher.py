"""Run ``textproc serve`` as a child process of the caller and wait until it serves.

The one launcher used by the integration tests (``tests/helpers/service.py``) and the
benchmarks (``bench/_common.py``), and usable by an engine's own test harness: it starts the
supervisor with a runtime directory and a log file, waits for ``processes.json`` (written once
every child has sent Ready), reads ``endpoints.json``, and stops with SIGTERM (SIGKILL after a
timeout). It never changes the service's behaviour; it only starts, watches and stops it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from textproc.errors import StartupTimeout

__all__ = ["ServeProcess"]


class ServeProcess:
    """``textproc serve --model-dir M --runtime-dir ROOT/rt ...`` with its log in ``ROOT/serve.log``.

    It passes ``--exit-with-parent``: if this process dies, even by kill -9, the service stops
    too. ``args`` are more ``serve`` flags; with ``engine="stub"`` the stub's stats go to
    ``ROOT/stub-stats.json``. ``capture_stdout`` keeps the supervisor's stdout on a pipe
    (``--engine external`` prints the engine endpoints there) instead of the log.
    """

    def __init__(self, root: Path, model_dir: Path, *, workers: int = 2, engine: str = "stub",
                 args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 cwd: Path | None = None, capture_stdout: bool = False) -> None:
        self.root = root
        self.model_dir = model_dir
        self.workers = workers
        self.engine = engine
        self.args = list(args)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.capture_stdout = capture_stdout
        self.runtime_dir = root / "rt"
        self.log_path = root / "serve.log"
        self.stats_file = root / "stub-stats.json"
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}
        self._log: IO[bytes] | None = None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "textproc.cli", "serve", "--model-dir", str(self.model_dir),
               "--workers", str(self.workers), "--runtime-dir", str(self.runtime_dir),
               "--engine", self.engine, "--exit-with-parent", *self.args]
        cmd += ["--engine-stats-file", str(self.stats_file)]  # an external engine: unused
        return cmd

    def start(self, *, timeout_s: float = 60.0) -> ServeProcess:
        """Start it and wait until every process is ready; StartupTimeout (with the log's tail)
        when it exits or is not ready within ``timeout_s``."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE if self.capture_stdout else self._log,
            stderr=self._log if self.capture_stdout else subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=self.cwd, env=self.env)
        deadline = time.monotonic() + timeout_s
        while not (self.runtime_dir / "processes.json").is_file():
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop(timeout_s=5)
                raise StartupTimeout(f"textproc serve exited with {code}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop(timeout_s=5)
                raise StartupTimeout(f"textproc serve not ready after {timeout_s} s:\n{self.log()}")
            time.sleep(0.05)
        self.info = json.loads((self.runtime_dir / "endpoints.json").read_text())
        return self

    @property
    def endpoints(self) -> dict[str, Any]:
        """The ``endpoints`` object of endpoints.json (``control``, ``events``, ``workers``,
        ``detokenizers``: each shard's four addresses, shard k's at k)."""
        return dict(self.info.get("endpoints") or {})

    def processes(self) -> dict[str, Any]:
        """processes.json as written by the supervisor (pids by role)."""
        return dict(json.loads((self.runtime_dir / "processes.json").read_text()))

    def pids(self, procs: Mapping[str, Any] | None = None) -> dict[str, int]:
        """Every process's pid by name: supervisor, detokenizer (shard 0), engine, health, http
        (the first HTTP frontend), http-i (each of ``--http-workers``), worker-i, detokenizer-k (each
        shard k > 0 of ``--detokenizers``); from ``procs`` (a processes.json read earlier) or
        read now."""
        procs = self.processes() if procs is None else procs
        out = {"supervisor": int(procs.get("supervisor") or (self.proc.pid if self.proc else 0))}
        for key in ("detokenizer", "engine", "http", "health"):
            if procs.get(key):
                out[key] = int(procs[key])
        for i, pid in (procs.get("workers") or {}).items():
            out[f"worker-{i}"] = int(pid)
        for i, pid in (procs.get("http_frontends") or {}).items():
            if pid:
                out[f"http-{i}"] = int(pid)
        for k, pid in (procs.get("detokenizers") or {}).items():
            if k != "0" and pid:
                out[f"detokenizer-{k}"] = int(pid)
        return out

    def exit_code(self) -> int | None:
        """None while the supervisor runs (or was never started); its exit code once it exited."""
        return self.proc.poll() if self.proc is not None else None

    def log(self, *, tail: int | None = 6000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text if tail is None else text[-tail:]

    def stop(self, *, timeout_s: float = 20.0) -> bool:
        """SIGTERM the supervisor and wait; SIGKILL after ``timeout_s``. Returns True when it
        stopped on SIGTERM (False: it had to be killed, or was never started)."""
        proc, self.proc = self.proc, None
        clean = False
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout_s)
                    clean = True
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            else:
                clean = True
            if proc.stdout is not None:
                proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        return clean

