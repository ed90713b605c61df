#!/usr/bin/env python3
"""What the service benchmarks share beyond ``textproc.testing``: ``textproc serve`` in a
subprocess (``Serve``), prompts cut from the mixed corpus at token boundaries, single-letter
token ids, percentiles, table printing, JSON lines, plots and a progress line.

Machine description, model lookup, the corpus, the engine side and the shared flags come from
``textproc.testing`` (the tests use the same modules).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from textproc.testing.corpus import mixed_text
from textproc.testing.machine import cpu_seconds
from textproc.testing.models import REPO_ROOT

__all__ = [
    "make_prompts",
    "letter_ids",
    "Serve",
    "pct",
    "print_table",
    "pyplot",
    "save_figure",
    "write_json",
    "Progress",
]


def make_prompts(hf_tokenizer: Any, n_tokens: int, count: int, seed: int = 0) -> list[str]:
    """``count`` different prompts of ``n_tokens`` tokens each (+-1% after re-encoding), cut at
    token boundaries (``tokenizers`` offsets) from the mixed corpus."""
    need = n_tokens * count
    n_chars = max(20_000, need * 4)
    while True:
        text = mixed_text(n_chars, seed=seed)
        enc = hf_tokenizer.encode(text, add_special_tokens=False)
        if len(enc.ids) >= need:
            break
        n_chars *= 2
    offsets = enc.offsets
    return [text[offsets[i * n_tokens][0]:offsets[(i + 1) * n_tokens - 1][1]] for i in range(count)]


def letter_ids(hf_tokenizer: Any, letters: str = "abcdefghijklmnopqrstuvwxyz") -> list[int]:
    """Token ids that decode to exactly one ASCII character each (so chars received == tokens)."""
    ids = []
    for ch in letters:
        tid = hf_tokenizer.token_to_id(ch)
        if tid is not None:
            ids.append(int(tid))
    if not ids:
        raise RuntimeError("no single-letter tokens in this vocabulary")
    return ids


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); nan for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    k = min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def print_table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> None:
    """Columns are (header, key, format spec); missing values print as '-'."""
    cells = [[h for h, _, _ in columns]]
    for r in rows:
        line = []
        for _, key, fmt in columns:
            v = r.get(key)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                line.append("-")
            else:
                line.append(format(v, fmt))
        cells.append(line)
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    for j, line in enumerate(cells):
        print("  ".join(c.rjust(w) if j else c.rjust(w) for c, w in zip(line, widths)), flush=True)


def write_json(path: Path | None, rows: list[dict[str, Any]], info: dict[str, Any], *,
               stamp: bool = False) -> None:
    """Append one JSON object per row (with the machine description) to ``path``.

    ``stamp`` adds ``"when"``: the Unix time each row is written.
    """
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        for r in rows:
            extra: dict[str, Any] = {"machine": info}
            if stamp:
                extra["when"] = time.time()
            fh.write(json.dumps({**r, **extra}) + "\n")


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or None (with a hint on stderr) without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: install the bench extra for --plot)", file=sys.stderr)
        return None
    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Lay out ``fig`` and write it to ``path`` (parents made) at 90 dpi."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


class Progress:
    """One status line on stderr at most every ``every_s`` seconds (long runs). ``msg`` may be a
    callable: it is only called when a line is printed (a costly message would otherwise be
    built on every call, inside the measured loop)."""

    def __init__(self, what: str, every_s: float = 2.0) -> None:
        self.what = what
        self.every_s = every_s
        self.next = time.monotonic() + every_s

    def __call__(self, msg: str | Callable[[], str]) -> None:
        now = time.monotonic()
        if now >= self.next:
            self.next = now + self.every_s
            text = msg() if callable(msg) else msg
            print(f"  [{self.what}] {text}", file=sys.stderr, flush=True)


def _exit_on_sigterm() -> None:
    """A benchmark stopped with SIGTERM (``timeout``, a CI runner) unwinds like one stopped with
    Ctrl-C, so its ``finally`` blocks stop the service and remove the temp dirs (the service
    also stops by itself when this process dies: ``serve --exit-with-parent``)."""
    import threading

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, on_term)


class Serve:
    """``textproc serve`` in a subprocess (runtime dir + log in a temp dir) through the one
    launcher, ``textproc.service.launcher.ServeProcess``; ``close()`` stops it and removes the dir."""

    def __init__(self, model: Path, *, workers: int, engine: str = "external",
                 endpoints: str = "ipc", max_model_len: int = 32768,
                 extra: Sequence[str] = (), timeout_s: float = 120.0) -> None:
        from textproc.service.launcher import ServeProcess

        _exit_on_sigterm()
        self.root = Path(tempfile.mkdtemp(prefix="tp-bench-"))
        env = dict(os.environ, TEXTPROC_LOG_LEVEL=os.environ.get("TEXTPROC_LOG_LEVEL", "WARNING"))
        self.serve = ServeProcess(self.root, model, workers=workers, engine=engine,
                                  args=["--endpoints", endpoints, "--max-model-len", str(max_model_len),
                                        *extra],
                                  env=env, cwd=REPO_ROOT, capture_stdout=engine == "external")
        try:
            self.serve.start(timeout_s=timeout_s)
        except Exception as e:
            self.close()
            raise RuntimeError(f"textproc serve did not start: {e}") from e
        self.runtime_dir = self.serve.runtime_dir
        self.log_path = self.serve.log_path
        self.info = self.serve.info
        # every detokenizer shard's (serve --detokenizers N), shard k's at k
        shards = self.info["endpoints"]["detokenizers"]
        self.engine_ins: list[str] = [s["engine_in"] for s in shards]
        self.engine_outs: list[str] = [s["engine_out"] for s in shards]
        self.engine_in, self.engine_out = self.engine_ins[0], self.engine_outs[0]  # one shard

    def log(self) -> str:
        return self.serve.log(tail=None)

    def exit_code(self) -> int | None:
        return self.serve.exit_code()

    def pids(self) -> dict[str, int]:
        return self.serve.pids()

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of every process, each once (``http`` and ``http-0`` name the
        same frontend: the first name wins)."""
        out: dict[str, float] = {}
        seen: set[int] = set()
        for name, pid in self.pids().items():
            if pid not in seen:
                seen.add(pid)
                out[name] = cpu_seconds(pid)
        return out

    def close(self) -> None:
        self.serve.stop(timeout_s=30)
        shutil.rmtree(self.root, ignore_errors=True)
