"""engine_stub's settings and command line (``python -m engine_stub --help``).

Owns :class:`StubSettings`, the flags that build it and their checks (argparse reports a bad
flag with exit status 2); the loop that runs on them is :mod:`engine_stub.stub`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

__all__ = ["MODES", "SCHEDULING_POLICIES", "StubSettings", "parse_args"]

MODES = ("echo", "replay", "random")  # textproc.config.STUB_MODES offers the same (a test checks)
SCHEDULING_POLICIES = ("fcfs", "priority")  # vLLM's --scheduling-policy choices and meaning


@dataclass(frozen=True)
class StubSettings:
    engine_in: str | tuple[str, ...]  # one address per detokenizer shard
    engine_out: str | tuple[str, ...]
    model_dir: str | None = None
    mode: str = "echo"
    replay_file: str | None = None
    max_batch: int = 256
    step_ms: float = 0.0
    step_busy: bool = False
    tokens_per_step: int = 1
    seed: int = 0
    stats_file: str | None = None
    stats_interval_s: float = 0.5
    report_aborts: bool = False
    vocab_size: int | None = None  # random mode without --model-dir
    curve_client_key: str | None = None  # *.key_secret: CURVE with a service run with --curve-dir
    curve_server_key: str | None = None  # the service's server.key
    # the waiting queue's order: arrival ("fcfs"), or lower IncomingRequest.priority first,
    # arrival within one ("priority"), as vLLM's scheduler orders its waiting requests
    scheduling_policy: str = "fcfs"
    # LoRA adapters by name (vLLM's --lora-modules NAME=PATH): the stub has no weights; its
    # stats record which one each request named
    lora_modules: tuple[str, ...] = ()


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m engine_stub",
        description="A fake LLM engine on textproc.engine.EngineLink (echo / replay / random).",
    )
    p.add_argument("--engine-in", required=True, action="append",
                   help="address textproc's engine-in PUSH binds; once per detokenizer shard, "
                        "in shard order")
    p.add_argument("--engine-out", required=True, action="append",
                   help="address textproc's engine-out PULL binds; once per shard, as --engine-in")
    p.add_argument("--model-dir", help="tokenizer.json (+ tokenizer_config.json) directory")
    p.add_argument("--mode", choices=MODES, default="echo")
    p.add_argument("--replay-file", help="text file whose tokens every request replays")
    p.add_argument("--max-batch", type=_positive_int, default=256)
    p.add_argument("--step-ms", type=_non_negative_float, default=0.0)
    p.add_argument("--step-busy", action="store_true",
                   help="hold the interpreter lock for the step (fixed Python work) instead of sleeping")
    p.add_argument("--tokens-per-step", type=_positive_int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stats-file")
    p.add_argument("--stats-interval-s", type=_non_negative_float, default=0.5)
    p.add_argument("--report-aborts", action="store_true",
                   help='send (request_id, [], "abort") for aborted requests (default: drop them)')
    p.add_argument("--curve-client-key", metavar="FILE",
                   help="CURVE key pair (*.key_secret) for a service started with --curve-dir")
    p.add_argument("--curve-server-key", metavar="FILE", help="the service's public server.key")
    p.add_argument("--vocab-size", type=_positive_int,
                   help="random mode without --model-dir: draw ids from range(N)")
    p.add_argument("--scheduling-policy", choices=SCHEDULING_POLICIES, default="fcfs",
                   help="the order waiting requests are admitted in (vLLM's flag): arrival, or "
                        "lower priority first")
    p.add_argument("--lora-modules", nargs="+", action="extend", default=[],
                   metavar="NAME=PATH", help="LoRA adapters a request may name (vLLM's flag); "
                   "the stub only records which one a request named")
    return p


def parse_args(argv: Sequence[str] | None = None) -> StubSettings:
    """Command line -> settings; argparse reports bad flags (exit status 2)."""
    parser = _build_parser()
    a = parser.parse_args(argv)
    if a.mode in ("echo", "replay") and not a.model_dir:
        parser.error(f"--mode {a.mode} needs --model-dir (the tokenizer to encode answers)")
    if a.mode == "random" and not a.model_dir and not a.vocab_size:
        parser.error("--mode random needs --model-dir or --vocab-size")
    if len(a.engine_in) != len(a.engine_out):
        parser.error(f"{len(a.engine_in)} --engine-in for {len(a.engine_out)} --engine-out; "
                     "give one of each per detokenizer shard")
    if a.mode == "replay" and not a.replay_file:
        parser.error("--mode replay needs --replay-file PATH")
    if (a.curve_client_key is None) != (a.curve_server_key is None):
        parser.error("--curve-client-key and --curve-server-key go together")
    if a.replay_file and not Path(a.replay_file).is_file():
        parser.error(f"--replay-file {a.replay_file!r} is not a readable file")
    if a.model_dir and not (Path(a.model_dir) / "tokenizer.json").is_file():
        parser.error(f"--model-dir {a.model_dir!r} has no tokenizer.json")
    return StubSettings(
        engine_in=a.engine_in[0] if len(a.engine_in) == 1 else tuple(a.engine_in),
        engine_out=a.engine_out[0] if len(a.engine_out) == 1 else tuple(a.engine_out),
        model_dir=a.model_dir, mode=a.mode,
        replay_file=a.replay_file, max_batch=a.max_batch, step_ms=a.step_ms,
        step_busy=a.step_busy, tokens_per_step=a.tokens_per_step, seed=a.seed,
        stats_file=a.stats_file, stats_interval_s=a.stats_interval_s,
        report_aborts=a.report_aborts, vocab_size=a.vocab_size,
        curve_client_key=a.curve_client_key, curve_server_key=a.curve_server_key,
        scheduling_policy=a.scheduling_policy,
        lora_modules=tuple(item.partition("=")[0] for item in a.lora_modules),
    )
