#!/usr/bin/env python3
"""Shared pieces of the service benchmarks (tokenize, detokenize, e2e, long_prompt).

Owns: machine description (nproc, CPU model, load average), the Qwen model dir lookup, the mixed
real-text prompts (``tests/corpus.py``), ``textproc serve`` in a subprocess (``Serve``), CPU time
of a process from ``/proc``, percentiles, table printing, JSON lines, and a fake engine
(``python bench/_common.py engine ...``) used with ``serve --engine external``: a step loop on
``EngineLink`` that gives every running request one token per step (a cycle of given ids),
finishes it with ``length`` at ``max_tokens``, and on SIGTERM writes when each request arrived
and when each step was sent (``time.perf_counter``: CLOCK_MONOTONIC, the same clock in every
process of the machine), so a client can subtract the engine's own time from what it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

__all__ = [
    "REPO_ROOT",
    "cpu_model",
    "machine",
    "model_dir",
    "mixed_text",
    "make_prompts",
    "letter_ids",
    "Serve",
    "FakeEngine",
    "cpu_seconds",
    "pct",
    "print_table",
    "pyplot",
    "save_figure",
    "write_json",
    "Progress",
]

FETCH_HINT = ".venv/bin/python scripts/fetch_fixtures.py"


def cpu_model(default: str) -> str:
    """The first ``model name`` in /proc/cpuinfo, else ``default``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default


def machine() -> dict[str, Any]:
    """nproc, CPU model, Python, load average and UTC time: printed and stored with each result."""
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(platform.processor() or ""),
        "python": platform.python_version(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }


def describe(info: dict[str, Any]) -> str:
    la = info["load_avg"]
    return (f"{info['utc']} UTC; nproc {info['nproc']}, {info['cpu']}, Python {info['python']}; "
            f"load average {la[0]:.1f} {la[1]:.1f} {la[2]:.1f}")


def model_dir(arg: str | None, name: str = "qwen3") -> Path:
    """The model dir given, else ``.cache/models/<name>``; exit 2 with a hint when it is missing."""
    path = Path(arg) if arg else REPO_ROOT / ".cache" / "models" / name
    if not (path / "tokenizer.json").is_file():
        print(f"{path} has no tokenizer.json; build the vocabularies with: {FETCH_HINT}",
              file=sys.stderr)
        raise SystemExit(2)
    return path


def mixed_text(n_chars: int, seed: int = 0) -> str:
    """At least ``n_chars`` of the generated mixed corpus (prose, code, 20+ scripts, emoji)."""
    from tests.helpers.corpus import fast_items

    size = max(50_000, int(n_chars * 1.3))
    while True:
        docs = [t for label, t in fast_items(size, seed=seed) if not label.startswith("edge")]
        text = "\n\n".join(docs)
        if len(text) >= n_chars:
            return text
        size *= 2


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


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (from /proc), 0.0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
        self.engine_in: str = self.info["endpoints"]["engine_in"]
        self.engine_out: str = self.info["endpoints"]["engine_out"]
        # every detokenizer shard's (serve --detokenizers N), shard k's at k
        shards = self.info["endpoints"].get("detokenizers") or [self.info["endpoints"]]
        self.engine_ins: list[str] = [s["engine_in"] for s in shards]
        self.engine_outs: list[str] = [s["engine_out"] for s in shards]

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


class FakeEngine:
    """The fake engine (``python bench/_common.py engine``) in a subprocess; ``stop()`` returns
    its timings: {"requests": {rid: [t_arrived, first_step, n_tokens]}, "steps": [t_sent...]}."""

    def __init__(self, engine_in: str | Sequence[str], engine_out: str | Sequence[str],
                 token_ids: Sequence[int], *, step_ms: float = 0.0, timings: bool = True) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tp-bench-engine-"))
        self.out = self.root / "timings.json"
        ins = [engine_in] if isinstance(engine_in, str) else list(engine_in)
        outs = [engine_out] if isinstance(engine_out, str) else list(engine_out)
        addresses = [flag for a, b in zip(ins, outs) for flag in ("--engine-in", a, "--engine-out", b)]
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "engine", *addresses,
             "--tokens", ",".join(map(str, token_ids)),
             "--step-ms", str(step_ms), *(["--timings", str(self.out)] if timings else [])],
            cwd=REPO_ROOT, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            data: dict[str, Any] = json.loads(self.out.read_text())
            return data
        except (OSError, ValueError):
            return {"requests": {}, "steps": []}
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _engine_main(argv: list[str]) -> int:
    from textproc.engine import EngineLink

    p = argparse.ArgumentParser(prog="bench/_common.py engine")
    p.add_argument("--engine-in", required=True, action="append")  # once per detokenizer shard
    p.add_argument("--engine-out", required=True, action="append")
    p.add_argument("--tokens", required=True)
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--timings")
    a = p.parse_args(argv)
    stop = [False]

    def on_term(signum: int, frame: Any) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    tokens = [int(x) for x in a.tokens.split(",")]
    n_tok = len(tokens)
    step_s = a.step_ms / 1000
    perf = time.perf_counter
    # rid -> [arrived, first step index, generated, max_tokens]
    running: dict[str, list[Any]] = {}
    record: dict[str, list[Any]] = {}
    steps: list[float] = []
    keep = a.timings is not None

    def take(link: Any) -> None:
        # requests and aborts that arrived: stamped now, they join the next step
        new = link.poll_requests()
        aborted = link.poll_aborts()
        now = perf()
        for req in new:
            entry = [now, step, 0, req.max_tokens]
            running[req.request_id] = entry
            if keep:
                record[req.request_id] = entry
        for rid in aborted:
            running.pop(rid, None)

    with EngineLink.connect(a.engine_in, a.engine_out) as link:  # lists: one per shard
        step = 0
        next_step = perf()
        while not stop[0]:
            take(link)
            if not running:
                link.wait(0.05)
                next_step = perf()
                continue
            # the step's own time; requests arriving meanwhile are stamped when they arrive
            # (to the ms), so the wait for the step boundary counts as the engine's time
            while step_s and not stop[0]:
                delay = next_step - perf()
                if delay <= 0:
                    break
                if link.wait(delay):
                    take(link)
            next_step = max(next_step + step_s, perf())
            for entry in running.values():
                entry[1] = step if entry[2] == 0 else entry[1]  # first step = this one
            outputs: list[tuple[Any, ...]] = []
            done = []
            for rid, entry in running.items():
                g = entry[2]
                entry[2] = g + 1
                if g + 1 >= entry[3]:
                    outputs.append((rid, [tokens[g % n_tok]], "length"))
                    done.append(rid)
                else:
                    outputs.append((rid, [tokens[g % n_tok]]))
            for rid in done:
                del running[rid]
            link.send_outputs(outputs)
            if keep:
                steps.append(perf())
            step += 1
    if a.timings:
        out = {"requests": {rid: e[:3] for rid, e in record.items()}, "steps": steps}
        tmp = a.timings + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(out, fh)
        os.replace(tmp, a.timings)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["engine"]:
        raise SystemExit(_engine_main(sys.argv[2:]))
    print("usage: bench/_common.py engine --engine-in A --engine-out B --tokens IDS "
          "[--step-ms X] [--timings PATH]", file=sys.stderr)
    raise SystemExit(2)
