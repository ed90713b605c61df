"""Helpers for integration tests: a toy Qwen-like model dir, a running service, uvloop runs.

``wait_http(http_file, proc, log_path, timeout_s)`` waits for an HTTP frontend's address file
and returns its base URL. ``build_toy_model(dir)`` writes a small byte-level BPE tokenizer.json trained with HF
``tokenizers`` plus Qwen-like added tokens and textproc's ChatML template, so tests that do not
need the real vocabulary never depend on fetched files. ``Service`` runs ``textproc serve`` as a
real process tree and, on ``stop()``, names every process or socket file that did not go away.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import uvloop

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NON_SPECIAL = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
TRAIN_TEXT = [
    "Hello world! The quick brown fox jumps over the lazy dog. " * 4,
    "def add(a, b):\n    return a + b\n\n" * 3,
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    "你好，世界。今天天气很好。我们去公园散步吧。",
    "Emoji: 😀 👍🏽 👨‍👩‍👧 🎉 — naïve café résumé",
    "user assistant system tool think reasoning answer stop STOP END",
]


# the toy template refuses unknown roles, so tests see a template raise_exception end a request
TOY_TEMPLATE_GUARD = (
    "{%- for m in messages %}{%- if m.role not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{- raise_exception('unknown role ' + m.role) }}{%- endif %}{%- endfor %}"
)


def build_toy_model(path: Path) -> Path:
    """A Qwen-like toy tokenizer dir (tokenizer.json + tokenizer_config.json), built in ~0.1 s."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    from textproc.core.chat.template import CHATML_TEMPLATE

    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_TEXT, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL])
    tok.save(str(path / "tokenizer.json"))
    config = {
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "chat_template": TOY_TEMPLATE_GUARD + CHATML_TEMPLATE,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``coro_fn()`` on a fresh uvloop loop (the loop factory, as the frontend does)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro_fn())  # type: ignore[arg-type]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def reap(pids: dict[str, int], *, timeout_s: float, poll_s: float) -> dict[str, int]:
    """Wait up to ``timeout_s`` for these processes to exit; SIGKILL the ones still alive and
    return them (name -> pid) so the caller can assert there were none."""
    deadline = time.monotonic() + timeout_s
    left = {name: pid for name, pid in pids.items() if pid and _alive(pid)}
    while left and time.monotonic() < deadline:
        time.sleep(poll_s)
        left = {name: pid for name, pid in left.items() if _alive(pid)}
    for pid in left.values():
        os.kill(pid, signal.SIGKILL)
    return left


class Service:
    """``textproc serve`` in a subprocess with its runtime dir and log file under ``root``."""

    def __init__(self, root: Path, model_dir: Path, *, workers: int = 2, args: list[str] | None = None,
                 engine: str = "stub") -> None:
        self.root = root
        self.runtime_dir = root / "rt"
        self.log_path = root / "serve.log"
        self.stats_file = root / "stub-stats.json"
        self.model_dir = model_dir
        self.workers = workers
        self.args = list(args or [])
        self.engine = engine
        self.proc: subprocess.Popen[bytes] | None = None
        self.pids: dict[str, Any] = {}

    def start(self, *, timeout_s: float = 60.0) -> Service:
        self.root.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "textproc.cli", "serve", "--model-dir", str(self.model_dir),
               "--workers", str(self.workers), "--runtime-dir", str(self.runtime_dir),
               "--engine", self.engine, *self.args]
        if self.engine == "stub":
            cmd += ["--stub-stats-file", str(self.stats_file)]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while not (self.runtime_dir / "processes.json").is_file():
            if self.proc.poll() is not None:
                raise RuntimeError(f"textproc serve exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"textproc serve not ready after {timeout_s} s:\n{self.log()}")
            time.sleep(0.05)
        self.refresh_pids()
        return self

    def refresh_pids(self) -> dict[str, Any]:
        self.pids = json.loads((self.runtime_dir / "processes.json").read_text())
        return self.pids

    def all_pids(self) -> dict[str, int]:
        out = {"supervisor": self.pids.get("supervisor", 0)}
        for key in ("detokenizer", "engine"):
            if self.pids.get(key):
                out[key] = self.pids[key]
        for i, pid in self.pids.get("workers", {}).items():
            out[f"worker-{i}"] = pid
        return out

    def log(self, *, tail: int | None = 6000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
            return text if tail is None else text[-tail:]
        except OSError:
            return ""

    def stub_stats(self) -> Any:
        return json.loads(self.stats_file.read_text())

    def stop(self, *, timeout_s: float = 20.0) -> None:
        """SIGTERM the supervisor; fail naming any process or socket file that stayed."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if (self.runtime_dir / "processes.json").is_file():
            self.refresh_pids()
        pids = self.all_pids()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
                raise AssertionError(f"textproc serve (pid {proc.pid}) ignored SIGTERM for "
                                     f"{timeout_s} s:\n{self.log()}")
        self._log.close()
        left = reap(pids, timeout_s=5, poll_s=0.05)
        assert not left, f"processes still running after shutdown: {left}\n{self.log()}"
        leftovers = [p.name for p in self.runtime_dir.glob("*")] if self.runtime_dir.exists() else []
        assert not leftovers, f"files left in {self.runtime_dir}: {leftovers}"


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
