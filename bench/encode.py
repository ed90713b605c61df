#!/usr/bin/env python3
"""Tokenizer encode speed: textproc vs HF tokenizers (one thread) vs tiktoken (one thread).

    .venv/bin/python bench/encode.py [--quick] [--json PATH] [--size-bytes N] [--reps N]

One run, the same inputs for every implementation. Cases (Qwen vocabulary from
.cache/models/qwen3; build it with scripts/fetch_fixtures.py):

- ``mixed-first``: the mixed corpus (textproc/testing/corpus.py, NFC-normalized, without its
  50,000-char words, which have their own case), first pass on freshly loaded tokenizers (empty
  word caches; textproc's merge table is built by ``validate()`` before timing, as the service's
  workers do before they report Ready);
- ``mixed-warm``: the same documents again (best of ``--reps`` passes after the first);
- ``repetitive``: English prose from 20 sentences, new documents (new sentence orders) every
  pass after one warm-up pass of others (word-cache hits, no whole-document hits);
- ``unique-words``: random words never seen before (no cache hits; new words every pass);
- ``long-word``: a 50,000-character word without spaces, a new one every pass;
- ``load``: time to load the Qwen tokenizer ready to serve (textproc ``Tokenizer.from_dir``
  plus ``validate()``, which builds the lazy merge table, in a fresh interpreter, excluding
  interpreter start; HF ``Tokenizer.from_file``; tiktoken reading the
  rank file and building the ``Encoding``);
- ``gpt2-mixed-first`` and ``mistral-mixed-first`` (full run only, when those vocabularies
  exist): the mixed corpus, one pass on freshly loaded tokenizers.

Each case prints tokens/s per implementation, the ratios textproc/tokenizers and
textproc/tiktoken, and ``identical_ids`` (textproc ids == tokenizers ids == tiktoken ids).
Times are CPU seconds of this process (``time.process_time``; every implementation runs on
the calling thread), so other load on a shared machine disturbs them far less than wall time;
wall seconds are in the JSON too (``*_wall_s``). Best pass of ``--reps``.
``--json PATH`` writes one JSON object per line per case. HF runs ``Tokenizer.encode`` in a
loop with RAYON_NUM_THREADS=1; tiktoken runs ``Encoding.encode`` in a loop (no thread pool).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _common import write_json  # noqa: E402  (after the thread settings above)

from textproc.testing.bench_cli import bench_parser, model_dir_arg  # noqa: E402
from textproc.testing.machine import describe, machine  # noqa: E402
from textproc.testing.models import MODELS_DIR, REPO_ROOT  # noqa: E402

QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

Encode = Callable[[str], list[int]]


def _time_pass(encode: Encode, texts: Sequence[str]) -> tuple[float, float, list[list[int]]]:
    """(cpu seconds, wall seconds, ids). CPU time of this process is what counts on a shared
    machine: every implementation here runs on the calling thread only."""
    out: list[list[int]] = []
    append = out.append
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for text in texts:
        append(encode(text))
    return time.process_time() - cpu0, time.perf_counter() - wall0, out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _added_tokens(path: Path) -> dict[str, int]:
    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    return {v["content"]: int(k) for k, v in config["added_tokens_decoder"].items()}


class Impls:
    """The three implementations on one vocabulary, freshly loaded on demand."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = MODELS_DIR / name

    def textproc(self) -> Encode:
        from textproc.core.tokenizer import Tokenizer

        tok = Tokenizer.from_dir(self.path)
        tok.validate()  # build the lazy merge table up front, as the service's workers do
        return tok.encode

    def hf(self) -> Encode:
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(str(self.path / "tokenizer.json"))

        def encode(text: str) -> list[int]:
            return tok.encode(text, add_special_tokens=False).ids

        return encode

    def tiktoken(self) -> Encode | None:
        if self.name != "qwen3":
            return None
        import tiktoken

        from textproc.core.convert import load_tiktoken_ranks

        enc = tiktoken.Encoding("qwen3", pat_str=QWEN_PATTERN,
                                mergeable_ranks=load_tiktoken_ranks(self.path / "qwen.tiktoken"),
                                special_tokens=_added_tokens(self.path))

        def encode(text: str) -> list[int]:
            return enc.encode(text, allowed_special="all")

        return encode


def run_case(case: str, impls: dict[str, Encode | None], passes: Sequence[Sequence[str]],
             *, warmup: bool, vocab: str = "qwen3",
             warmup_texts: Sequence[str] | None = None) -> dict[str, Any]:
    """Time each implementation over ``passes`` (best pass counts); one warm-up pass first if
    ``warmup``. Ids of the first pass are compared."""
    result: dict[str, Any] = {"case": case, "vocab": vocab, "n_bytes": sum(len(t.encode()) for t in passes[0]),
                              "n_texts": len(passes[0])}
    ids: dict[str, list[list[int]]] = {}
    for name, encode in impls.items():
        if encode is None:
            continue
        if warmup:
            _time_pass(encode, passes[0])
        if warmup_texts is not None:
            _time_pass(encode, warmup_texts)
        best, best_wall = float("inf"), float("inf")
        for i, texts in enumerate(passes):
            seconds, wall, out = _time_pass(encode, texts)
            best, best_wall = min(best, seconds), min(best_wall, wall)
            if i == 0:
                ids[name] = out
        result[f"{name}_s"] = round(max(best, 1e-6), 4)
        result[f"{name}_wall_s"] = round(best_wall, 4)
    n_tokens = sum(len(x) for x in ids["tokenizers"])
    result["n_tokens"] = n_tokens
    for name in impls:
        if f"{name}_s" in result:
            result[f"{name}_tok_s"] = round(n_tokens / result[f"{name}_s"])
    result["vs_tokenizers"] = _ratio(result.get("textproc_tok_s"), result.get("tokenizers_tok_s"))
    result["vs_tiktoken"] = _ratio(result.get("textproc_tok_s"), result.get("tiktoken_tok_s"))
    result["identical_ids"] = all(v == ids["tokenizers"] for v in ids.values())
    return result


def _repetitive_text(n_bytes: int, seed: int) -> list[str]:
    from textproc.testing.corpus import PROSE_EN

    rng = random.Random(seed)
    texts, total = [], 0
    while total < n_bytes:
        text = " ".join(rng.choice(PROSE_EN) for _ in range(20))
        texts.append(text)
        total += len(text)
    return texts


def _unique_words(n_bytes: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    texts, total = [], 0
    while total < n_bytes:
        words = ["".join(rng.choice(letters) for _ in range(rng.randint(4, 12))) for _ in range(100)]
        text = " ".join(words)
        texts.append(text)
        total += len(text)
    return texts


def _mixed(size: int) -> list[str]:
    """The mixed corpus without its 50,000-character words (they have their own case); below
    1 MB the edge cases plus a prefix of the generated documents."""
    from textproc.testing.corpus import fast_items, mixed_corpus_items

    items = mixed_corpus_items(size) if size >= 1_000_000 else fast_items(size)
    return [text for label, text in items if not label.startswith("long_word:")]


def _long_word(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(50_000))


def _load_times(path: Path) -> dict[str, Any]:
    """Seconds to load the Qwen tokenizer, each in a fresh interpreter (imports excluded)."""
    snippets = {
        "textproc": (
            "from textproc.core.tokenizer import Tokenizer",
            f"Tokenizer.from_dir({str(path)!r}).validate()",  # ready to serve, as a worker
        ),
        "tokenizers": (
            "import tokenizers",
            f"tokenizers.Tokenizer.from_file({str(path / 'tokenizer.json')!r})",
        ),
        "tiktoken": (
            "import tiktoken\nfrom textproc.core.convert import load_tiktoken_ranks",
            f"tiktoken.Encoding('q', pat_str={QWEN_PATTERN!r}, "
            f"mergeable_ranks=load_tiktoken_ranks({str(path / 'qwen.tiktoken')!r}), "
            "special_tokens={})",
        ),
    }
    result: dict[str, Any] = {"case": "load", "vocab": "qwen3"}
    for name, (setup, stmt) in snippets.items():
        code = f"import time\n{setup}\nt=time.process_time()\n{stmt}\nprint(time.process_time()-t)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        if out.returncode != 0:
            result[f"{name}_s"] = None
            result[f"{name}_error"] = out.stderr.strip()[-300:]
        else:
            result[f"{name}_s"] = round(float(out.stdout.strip().splitlines()[-1]), 3)
    result["identical_ids"] = None
    return result


def _print(result: dict[str, Any]) -> None:
    case = result["case"]
    if case == "load":
        parts = [f"{n}={result.get(n + '_s')}s" for n in ("textproc", "tokenizers", "tiktoken")]
        print(f"{case:<14} " + "  ".join(parts), flush=True)
        return
    cols = []
    for name in ("textproc", "tokenizers", "tiktoken"):
        rate = result.get(f"{name}_tok_s")
        cols.append(f"{name}={rate / 1e6:.3f}M tok/s" if rate else f"{name}=-")
    print(
        f"{case:<14} {result['n_tokens']:>9,} tok  " + "  ".join(cols)
        + f"  x_tokenizers={result['vs_tokenizers']}  x_tiktoken={result['vs_tiktoken']}"
        + f"  identical_ids={result['identical_ids']}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, quick="small inputs, one pass (< 1 min)",
                          json_help="append one JSON line per case here", model=None)
    parser.add_argument("--size-bytes", type=int, help="mixed corpus size (default 4 MB, quick 300 KB)")
    parser.add_argument("--reps", type=int, help="timed passes per case (default 3, quick 1)")
    args = parser.parse_args(argv)
    size = args.size_bytes or (300_000 if args.quick else 4_000_000)
    reps = args.reps or (1 if args.quick else 3)
    small = max(20_000, size // 10)

    model_dir_arg(parser, None, "qwen3")  # the other vocabularies are optional
    info = machine()
    print(f"# {describe(info)}; corpus={size:,} bytes  reps={reps}", flush=True)
    results: list[dict[str, Any]] = []
    qwen = Impls("qwen3")
    impls = {"textproc": qwen.textproc(), "tokenizers": qwen.hf(), "tiktoken": qwen.tiktoken()}
    texts = [unicodedata.normalize("NFC", t) for t in _mixed(size)]
    results.append(run_case("mixed-first", impls, [texts], warmup=False))
    results.append(run_case("mixed-warm", impls, [texts] * reps, warmup=False))
    # the same 20 sentences in new orders: every pass has new documents but known words
    rep_passes = [_repetitive_text(small, 10 + i) for i in range(reps + 1)]
    results.append(run_case("repetitive", impls, rep_passes[1:], warmup=False,
                            warmup_texts=rep_passes[0]))
    # random 4-12 letter words: none is in any word cache yet, and every pass has new ones
    unique_passes = [_unique_words(small, 100 + i) for i in range(reps)]
    results.append(run_case("unique-words", impls, unique_passes, warmup=False))
    # a different 50,000-char word in every pass (no piece cache can hold it already)
    long_passes = [[_long_word(1000 + i)] for i in range(reps)]
    results.append(run_case("long-word", impls, long_passes, warmup=False))
    if not args.quick:
        for name in ("gpt2", "mistral"):
            if (MODELS_DIR / name / "tokenizer.json").is_file():
                other = Impls(name)
                pair = {"textproc": other.textproc(), "tokenizers": other.hf()}
                results.append(run_case(f"{name}-mixed-first", pair, [_mixed(size)],
                                        warmup=False, vocab=name))
    results.append(_load_times(qwen.path))
    for result in results:
        result["quick"] = args.quick
        _print(result)
    write_json(args.json, results, info)
    ok = all(r["identical_ids"] is not False for r in results)
    if not ok:
        print("identical_ids is False for some case", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
