"""The ``textproc`` command: parse arguments into frozen settings and start the processes.

Owns argument parsing, the only environment reads (``TEXTPROC_LOG_LEVEL``) and the exit codes;
it is the only module that exits the interpreter. Subcommands: ``serve`` (the service),
``text`` (the text core on the command line, ``textproc.core.demo``), ``bench`` (runs
``bench/<name>.py`` by path, ``-`` in NAME read as ``_``; textproc never imports ``bench``),
``keys`` (ZeroMQ CURVE key pairs for ``serve --curve-dir``), and the
internal ``_child`` that the supervisor uses to start a worker or the detokenizer.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import runpy
import sys
from pathlib import Path
from typing import Sequence

from textproc.config import (
    CONTENT_SPECIALS,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_MODEL_LEN,
    ENDPOINT_KINDS,
    ENGINES,
    GENERATION_CONFIGS,
    STUB_MODES,
    DataParallel,
    Endpoints,
    ServeConfig,
    ServiceConfig,
)
from textproc.core.parsing.formats import REASONING_FORMATS, TOOL_FORMATS
from textproc.launchers import engine_adapter
from textproc.errors import InvalidInput, StartupTimeout, TextprocError, WorkerDied
from textproc.lifecycle import LOG_LEVELS, add_child_arguments, setup_logging
from textproc.protocol import DEFAULT_HWM, MAX_FRAME_BYTES
from textproc.service.context_length import model_context_length
from textproc.service.sampling_defaults import GENERATION_CONFIG_FILE, load_generation_config

__all__ = ["main", "build_parser", "DEFAULT_MODEL_DIR", "FETCH_HINT"]

DEFAULT_MODEL_DIR = Path(".cache") / "models" / "qwen3"
FETCH_HINT = ".venv/bin/python scripts/fetch_fixtures.py"
_log = logging.getLogger("textproc.cli")


def _default_model_dir() -> Path:
    """``.cache/models/qwen3`` under the current directory, else under the repository."""
    here = Path.cwd() / DEFAULT_MODEL_DIR
    if here.is_dir():
        return here
    repo = Path(__file__).resolve().parent.parent / DEFAULT_MODEL_DIR
    return repo if repo.is_dir() else here


_DESCRIPTION = ("textproc: the text side of an LLM server (chat templates, tokenizing, "
                "detokenizing, stop strings, tool-call and reasoning parsing) in its own processes "
                "beside the engine, with an OpenAI-compatible HTTP API.")


def _service_default(name: str) -> object:
    """The default of a ServiceConfig field, for --help."""
    return next(f.default for f in dataclasses.fields(ServiceConfig) if f.name == name)


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the service: tokenizer workers, the detokenizer, the "
                                     "stub engine (or wait for yours) and, with --http, the API",
                       description="Run the service until SIGINT or SIGTERM.")
    p.add_argument("--model-dir", help=f"tokenizer.json + tokenizer_config.json (default {DEFAULT_MODEL_DIR})")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help=f"tokenizer worker processes (default: the number of cores, "
                        f"{os.cpu_count() or 1} here)")
    p.add_argument("--detokenizers", type=int, default=1, metavar="N",
                   help="detokenizer processes; requests are split among them by a hash of the "
                        "request id (textproc.sharding.shard_of) and the engine's EngineLink "
                        "connects to each (default 1)")
    p.add_argument("--engine", choices=ENGINES, default="stub",
                   help="; ".join(f"{name}: {engine_adapter(name).summary}" for name in ENGINES)
                        + " (default stub)")
    p.add_argument("--engine-arg", action="append", default=[], metavar="FLAG",
                   help="extra flag for the engine's process, repeatable (e.g. "
                        "--engine-arg=--kv-cache-gib=2 with --engine vllm)")
    p.add_argument("--lora-modules", nargs="+", action="extend", default=[], metavar="NAME=PATH",
                   help="LoRA adapters (peft directories) a request's model may name, as vllm "
                        "serve's flag: /v1/models lists them and the engine serves a request "
                        "naming one with it (--engine vllm with one engine, or the stub)")
    p.add_argument("--engine-python", metavar="PATH",
                   help="the Python of the engine's own environment (--engine vllm; default: "
                        "the .venv-vllm beside this checkout when it exists)")
    dp = p.add_argument_group(
        "many vLLM engines (--engine vllm)",
        "vLLM's own engine processes behind one endpoint, over vLLM's own wire: the ranks of "
        "this machine are started here, the others join from their machines with `textproc "
        "engine --headless` (or `vllm serve MODEL --headless`) and the same --data-parallel "
        "flags; --engine-arg flags then go to `vllm serve`")
    dp.add_argument("--data-parallel-size", type=int, default=1, metavar="N",
                    help="engines in all (default 1: one engine, in-process with EngineLink)")
    dp.add_argument("--data-parallel-size-local", type=int, default=None, metavar="K",
                    help="engines started on this machine, ranks 0..K-1 (default: all N)")
    dp.add_argument("--data-parallel-address", default="127.0.0.1", metavar="A",
                    help="the address engines dial: this machine's, reachable from theirs "
                         "(default 127.0.0.1: engines on this machine only)")
    dp.add_argument("--data-parallel-rpc-port", type=int, default=0, metavar="P",
                    help="the handshake port engines dial (default: a free one)")
    dp.add_argument("--routing", choices=("prefix", "round_robin", "least_loaded"),
                    default="prefix", help="which engine takes a request: the one holding the "
                    "longest cached prefix of its prompt unless overloaded (default prefix)")
    dp.add_argument("--vllm-wire", action="store_true",
                    help="with one engine too: vLLM's own engine process over vLLM's wire "
                         "instead of engine_vllm (implied by the flags above)")
    p.add_argument("--text-cpus", default="none", metavar="none|auto|LIST",
                   help="the CPUs of textproc's own processes (workers, detokenizers, HTTP): "
                        "none = they float; auto = the ones the engine's bound threads leave "
                        "(vLLM binds its model threads and reserves the rest; the stub binds "
                        "none, so nothing moves); or a list such as 1 or 2-7 (default none)")
    p.add_argument("--endpoints", choices=ENDPOINT_KINDS, default="ipc",
                   help="ipc: socket files in the runtime dir; tcp: loopback ports, for "
                        "processes on other machines (default ipc)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="prompt tokens + max_tokens must fit in this many tokens; the engine is "
                        "asked for the same (default: the model's own context length as `vllm "
                        "serve` derives it from config.json: max_position_embeddings, RoPE "
                        f"scaling, ...; {DEFAULT_MAX_MODEL_LEN} for a directory without one)")
    p.add_argument("--stub-mode", choices=STUB_MODES, default="echo",
                   help="what engine_stub answers: echo the last user message, replay a file "
                        "(--stub-arg=--replay-file=F), or random ids (default echo)")
    p.add_argument("--stub-arg", action="append", default=[], metavar="FLAG",
                   help="extra flag for engine_stub, repeatable (e.g. --stub-arg=--step-ms=5)")
    p.add_argument("--engine-stats-file", "--stub-stats-file", dest="stub_stats_file",
                   metavar="FILE", help="the engine (stub or vllm) writes its per-request stats "
                                        "here (default: none with the stub; with --engine vllm, "
                                        "engine-stats.json in the runtime dir with its gauges "
                                        "only, for /metrics)")
    p.add_argument("--runtime-dir", help="directory for ipc sockets and endpoints.json (default: a new private temp dir)")
    p.add_argument("--tcp-host", default="127.0.0.1",
                   help="host for --endpoints tcp (default 127.0.0.1); any other than loopback "
                        "needs --curve-dir")
    p.add_argument("--curve-dir", metavar="DIR",
                   help="CURVE keys made by `textproc keys --dir DIR`: every socket the service "
                        "binds is a CURVE server and admits only DIR/authorized_clients/* keys "
                        "(default: none, no authentication; loopback only)")
    p.add_argument("--constraint-cache-dir", metavar="DIR",
                   help="keep compiled structured-output constraints in DIR (created private), "
                        "shared by the workers and across restarts: a schema compiled before "
                        "costs a file read (default: none, each worker caches in memory only)")
    p.add_argument("--max-compile-s", type=float, default=None, metavar="S",
                   help="wall seconds one structured-output compile may take on a worker; past it "
                        f"the request gets a 400 naming the phase (default "
                        f"{_service_default('max_compile_s'):g})")
    p.add_argument("--first-index-ms", type=float, default=None, metavar="MS",
                   help="a structured-output compile builds the first states of its index for MS "
                        "milliseconds, then the request starts on that partial index while the "
                        f"whole one is compiled (default {1e3 * float(str(_service_default('first_index_s'))):g})")
    p.add_argument("--max-live-requests", type=int, default=None,
                   help="requests the detokenizer holds at once; more are refused with 503 "
                        f"(default {_service_default('max_live_requests')})")
    p.add_argument("--max-live-per-client", type=int, default=None,
                   help="live requests of one client (e.g. the HTTP frontend) at once; more are "
                        f"refused with 429 (default {_service_default('max_live_per_client')})")
    p.add_argument("--hwm", type=int, default=None,
                   help="ZeroMQ send/receive high-water mark of every socket, in messages "
                        f"(default {DEFAULT_HWM})")
    p.add_argument("--tcp-port-base", type=int, default=0,
                   help="with --endpoints tcp: ports BASE, BASE+1, ... (default 0: free ports)")
    p.add_argument("--max-frame-bytes", type=int, default=None,
                   help="larger frames are dropped by ZeroMQ and their sender disconnected "
                        f"(default {MAX_FRAME_BYTES} = 64 MiB)")
    p.add_argument("--startup-timeout", type=float, default=_service_default("startup_timeout_s"),
                   metavar="SECONDS", help="how long to wait for each process to be ready "
                   f"(default {_service_default('startup_timeout_s'):g})")
    _text_and_front_flags(p)


def _text_and_front_flags(p: argparse.ArgumentParser) -> None:
    """``serve``'s flags for the text side (formats, special tokens, long prompts), the HTTP
    frontends and the run's lifetime."""
    p.add_argument("--http", nargs="?", const="127.0.0.1:8000", default=None, metavar="HOST:PORT",
                   help="also serve the OpenAI HTTP API (python -m textproc.http) on HOST:PORT "
                        "(default 127.0.0.1:8000 when given without a value)")
    p.add_argument("--http-arg", action="append", default=[], metavar="FLAG",
                   help="extra flag for the HTTP frontend, repeatable (e.g. "
                        "--http-arg=--max-running=512; see python -m textproc.http --help)")
    p.add_argument("--otlp-traces-endpoint", default=None, metavar="URL",
                   help="the HTTP frontends export an OpenTelemetry span of each generation "
                        "request to this OTLP/HTTP traces URL, as vllm serve's flag (e.g. "
                        "http://collector:4318/v1/traces; default: off)")
    p.add_argument("--http-workers", type=int, default=1, metavar="N",
                   help="HTTP frontend processes sharing the --http port, each its own client "
                        "of the service, supervised and restarted like the others (default 1)")
    p.add_argument("--health", nargs="?", const="127.0.0.1:8001", default=None, metavar="HOST:PORT",
                   help="also answer GET /health on HOST:PORT from a process of its own that "
                        "does not wait behind the API's connections: what a load balancer "
                        "should probe (default: none; 127.0.0.1:8001 when given without a value)")
    p.add_argument("--tool-format", default="auto", choices=["auto", "none", *TOOL_FORMATS],
                   help="tool-call format to parse (default auto: chosen from the chat template and "
                        "added tokens, logged at startup; none: tool calls stay plain content)")
    p.add_argument("--reasoning-format", default="auto", choices=["auto", "none", *REASONING_FORMATS],
                   help="reasoning format to parse (default auto, like --tool-format)")
    p.add_argument("--strict-tools", action="store_true",
                   help="with tool_choice auto, enforce every tool call (a declared tool, arguments "
                        "valid for its schema) as if each tool had strict: true; text stays free")
    p.add_argument("--special-tokens-in-content", choices=CONTENT_SPECIALS, default="control",
                   help="special-token text a client types into a message (<|im_end|>...): "
                        "control = the real control token, as transformers and vLLM do (a user "
                        "can forge turns); text = encoded as ordinary text (default control; "
                        "see docs/operations.md)")
    p.add_argument("--generation-config", choices=GENERATION_CONFIGS, default="auto",
                   help="where a request's unset temperature, top_p, top_k, min_p, penalties "
                        "and max_tokens come from: auto = the model's generation_config.json, "
                        "as vllm serve does by default; none = the engine's own defaults "
                        "(vllm serve --generation-config vllm). Its eos_token_id ends requests "
                        "either way, as in vLLM (default auto)")
    p.add_argument("--split-min-chars", type=int, default=_service_default("split_min_chars"),
                   metavar="N", help="a prompt of at least N characters is encoded by the worker "
                   "that got it and its peers together, exactly (0: never; default "
                   f"{_service_default('split_min_chars')})")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="stop after this many seconds (default: run until SIGINT/SIGTERM)")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="stop, with every child, once the process that started serve is gone, "
                   "even if it was killed with -9 (launchers pass it: the benchmarks, the "
                   "tests; default: keep running)")


def build_parser() -> argparse.ArgumentParser:
    """The ``textproc`` argument parser (``text`` and ``bench`` pass their arguments on)."""
    parser = argparse.ArgumentParser(prog="textproc", description=_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    sub.add_parser("text", help="the text core on the command line (tokenize, render, "
                                "detokenize); textproc text --help for its commands")
    sub.add_parser("bench", help="run a benchmark from bench/ (textproc bench --help lists them)")
    engine = sub.add_parser(
        "engine", help="run vLLM's own engine process(es) of a --data-parallel-size deployment "
                       "on this machine, dialling the `textproc serve` of rank 0's machine",
        description="Runs vLLM's headless command (`vllm serve MODEL --headless ...`) from the "
                    "engine's environment with textproc's extension flags (its CPU worker); more "
                    "`vllm serve` flags after the ones below pass through.")
    engine.add_argument("--model-dir", required=True)
    engine.add_argument("--headless", action="store_true", required=True,
                        help="(required) no API server here: the engines serve `textproc serve`")
    engine.add_argument("--data-parallel-size", type=int, required=True, metavar="N")
    engine.add_argument("--data-parallel-size-local", type=int, default=1, metavar="K",
                        help="ranks started here, from the start rank (default 1)")
    engine.add_argument("--data-parallel-start-rank", type=int, required=True, metavar="R")
    engine.add_argument("--data-parallel-address", required=True, metavar="A",
                        help="the address `textproc serve --data-parallel-address` binds")
    engine.add_argument("--data-parallel-rpc-port", type=int, required=True, metavar="P")
    engine.add_argument("--engine-python", metavar="PATH",
                        help="the Python of vLLM's environment (default: the .venv-vllm beside "
                             "this checkout)")
    keys = sub.add_parser("keys", help="make ZeroMQ CURVE key pairs (server + client) for --curve-dir")
    keys.add_argument("--dir", default="textproc-keys",
                      help="directory to write the keys into (default ./textproc-keys, mode 0700)")
    keys.add_argument("--force", action="store_true", help="overwrite existing key files")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``textproc``; returns the exit code (0 ok, 1 failure, 2 bad arguments)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["_child"]:
        return _child(args_list[1:])
    if args_list[:1] == ["text"]:
        demo = importlib.import_module("textproc.core.demo")  # the STREAM helper's module
        return int(demo.main(args_list[1:]))
    if args_list[:1] == ["bench"]:
        return _bench(args_list[1:])
    if args_list[:1] == ["engine"]:
        args, vllm_args = build_parser().parse_known_args(args_list)
        return _engine(args, vllm_args)
    args = build_parser().parse_args(args_list)
    if args.command == "keys":
        return _keys(args)
    return _serve(args)


def _engine(args: argparse.Namespace, vllm_args: list[str]) -> int:
    """``textproc engine``: replace this process with vLLM's headless engine command."""
    # here, like each command's own modules: a command loads only what it runs
    from textproc.launchers.vllm import check_dense_ranks, default_python
    from textproc.vllm_front.launch import headless_command

    try:
        check_dense_ranks(args.model_dir, args.data_parallel_size)
        command = headless_command(args.engine_python or default_python(), args.model_dir,
                                   size=args.data_parallel_size, rank=args.data_parallel_start_rank,
                                   local=args.data_parallel_size_local,
                                   address=args.data_parallel_address,
                                   rpc_port=args.data_parallel_rpc_port, args=vllm_args)
    except InvalidInput as e:
        print(f"textproc engine: {e}", file=sys.stderr)
        return 2
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    print("textproc engine: " + " ".join(command), file=sys.stderr, flush=True)
    try:
        os.execve(command[0], command, env)
    except OSError as e:
        print(f"textproc engine: cannot run {command[0]}: {e}", file=sys.stderr)
    return 1


def _keys(args: argparse.Namespace) -> int:
    # here, like each command's own modules below: a command loads only what it runs
    # (textproc.curve loads zmq.auth)
    from textproc.curve import write_curve_keys

    try:
        paths = write_curve_keys(args.dir, overwrite=args.force)
    except (InvalidInput, OSError) as e:
        print(f"textproc keys: {e}", file=sys.stderr)
        return 1
    print(f"wrote CURVE keys (ZeroMQ certificate format, mode 0600) to {args.dir}:\n"
          f"  service:  textproc serve --curve-dir {args.dir} ...  (uses {paths['server_secret'].name}"
          f" and {paths['authorized_client'].parent.name}/)\n"
          f"  clients and engines need: {paths['client_secret']} and {paths['server_public']}\n"
          f"  more clients: put their public *.key files into {paths['authorized_client'].parent}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from textproc.service.supervisor import Supervisor  # zmq: only serve needs it

    level = os.environ.get("TEXTPROC_LOG_LEVEL", "INFO").upper()
    if level not in LOG_LEVELS:
        level = "INFO"
    setup_logging("supervisor", level)
    model_dir = Path(args.model_dir) if args.model_dir else _default_model_dir()
    if not (model_dir / "tokenizer.json").is_file():
        print(f"textproc serve: no tokenizer.json in {model_dir}"
              + ("" if args.model_dir else f"; build the default Qwen vocabulary with: {FETCH_HINT}"),
              file=sys.stderr)
        return 2
    try:
        config = _serve_config(args, model_dir, level)
        if args.otlp_traces_endpoint:
            from textproc.http.tracing import check_available  # (only with the flag)

            check_available(args.otlp_traces_endpoint)
        if config.engine == "vllm" and config.data_parallel.engaged:
            from textproc.launchers.vllm import check_dense_ranks  # (vLLM ranks only)
            from textproc.vllm_front.launch import engine_flags  # (what the command runs)

            engine_flags(config.engine_args)  # vLLM's headless command takes them (checked now)
            check_dense_ranks(model_dir, config.data_parallel.size)
        _log_sampling_defaults(config.service)
        if args.max_model_len is None:
            _log.info("max_model_len %d: %s (set --max-model-len to change it)",
                      config.service.max_model_len, _context_length(model_dir)[1])
    except InvalidInput as e:
        print(f"textproc serve: {e}", file=sys.stderr)
        return 2
    supervisor = Supervisor(config)
    supervisor.install_signal_handlers()
    try:
        try:
            supervisor.start()
        except InvalidInput as e:  # bad key files, CURVE with an engine that cannot use it
            print(f"textproc serve: {e}", file=sys.stderr)
            return 2
        ep = supervisor.endpoints
        assert ep is not None
        shards = ep.detokenizers
        engine_in: object = shards[0].engine_in if len(shards) == 1 else [d.engine_in for d in shards]
        engine_out: object = (shards[0].engine_out if len(shards) == 1
                              else [d.engine_out for d in shards])
        _log.info("textproc ready: runtime dir %s (endpoints.json), %d workers, %d detokenizers, "
                  "detok-front %s, engine-in %s, engine-out %s", supervisor.runtime_dir,
                  config.service.n_workers, len(shards), [d.detok_front for d in shards], engine_in,
                  engine_out)
        if not supervisor.runs_engine:  # with N shards: N addresses each, shard k's at k
            print(json.dumps({"engine_in": engine_in, "engine_out": engine_out}), flush=True)
        supervisor.run(duration_s=args.duration)
        return 0
    except (StartupTimeout, WorkerDied) as e:
        _log.error("textproc serve failed to start: %s", e)
        return 1
    except TextprocError as e:
        _log.error("textproc serve: %s", e)
        return 1
    finally:
        supervisor.close()
        _log.info("textproc stopped")


def _log_sampling_defaults(service: ServiceConfig) -> None:
    """Say once which defaults and EOS ids the model's generation config gives (each worker
    loads them too); a malformed file stops serve here, before any process starts
    (InvalidInput). Its eos_token_id is read with either --generation-config, as vLLM reads it."""
    generation = load_generation_config(service.model_dir,
                                        sampling=service.generation_config == "auto")
    if not generation.defaults.is_empty:
        _log.info("a request's unset sampling values come from the model's %s: %s (serve with "
                  "--generation-config none to ignore them)", GENERATION_CONFIG_FILE,
                  generation.defaults.describe())
    if generation.eos_token_ids:
        _log.info("requests also end at eos_token_id %s of %s (besides the tokenizer's EOS)",
                  list(generation.eos_token_ids), generation.eos_source)


def _lora_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """``--lora-modules`` as the flag the HTTP frontends and the engine each take."""
    modules = list(args.lora_modules)
    if not modules:
        return ()
    for item in modules:
        name, sep, path = item.partition("=")
        if not sep or not name or not path or "," in item:
            raise InvalidInput(f"--lora-modules takes NAME=PATH items (no comma), got {item!r}")
    if args.data_parallel_size > 1 or args.vllm_wire:
        raise InvalidInput("--lora-modules is served by --engine vllm with one engine; vLLM's "
                           "own engine processes (--data-parallel-size, --vllm-wire) do not "
                           "get adapters from textproc yet")
    return tuple(f"--lora-modules={item}" for item in modules)


def _runtime_lora_flags() -> tuple[str, ...]:
    """``--runtime-lora-updating`` for the HTTP frontends when vLLM's
    ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` is true ("1" or "true", as vLLM reads it)."""
    value = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0").strip().lower()
    return ("--runtime-lora-updating",) if value in ("1", "true") else ()


def _dev_mode_flags() -> tuple[str, ...]:
    """``--admin-routes`` for the HTTP frontends when ``VLLM_SERVER_DEV_MODE`` is set, as
    vLLM's server then serves its admin routes (vLLM's reading: an int, 0 by default)."""
    value = os.environ.get("VLLM_SERVER_DEV_MODE", "0").strip()
    return ("--admin-routes",) if value.lstrip("-").isdigit() and int(value) else ()


def _context_length(model_dir: Path) -> tuple[int, str]:
    """The model's context length as ``vllm serve`` derives it, and where it came from."""
    derived = model_context_length(model_dir)
    if derived is None:
        return DEFAULT_MAX_MODEL_LEN, f"textproc's default, no config.json in {model_dir}"
    return derived.tokens, derived.source


def _serve_config(args: argparse.Namespace, model_dir: Path, level: str) -> ServeConfig:
    """The settings ``serve``'s flags give (InvalidInput when they do not fit together)."""
    return ServeConfig(
        service=ServiceConfig(
            model_dir=str(model_dir.absolute()),
            n_workers=args.workers,
            n_detokenizers=args.detokenizers,
            max_model_len=(args.max_model_len if args.max_model_len is not None
                           else _context_length(model_dir)[0]),
            max_frame_bytes=args.max_frame_bytes or DEFAULT_MAX_FRAME_BYTES,
            startup_timeout_s=args.startup_timeout,
            log_level=level,
            curve_dir=str(Path(args.curve_dir).absolute()) if args.curve_dir else None,
            special_tokens_in_content=args.special_tokens_in_content,
            tool_format=args.tool_format,
            reasoning_format=args.reasoning_format,
            strict_tools=args.strict_tools,
            generation_config=args.generation_config,
            split_min_chars=args.split_min_chars,
            constraint_cache_dir=(str(Path(args.constraint_cache_dir).absolute())
                                  if args.constraint_cache_dir else None),
            **{name: value for name, value in (
                ("max_live_requests", args.max_live_requests),
                ("max_live_per_client", args.max_live_per_client),
                ("max_compile_s", args.max_compile_s),
                ("first_index_s", None if args.first_index_ms is None else args.first_index_ms / 1e3),
                ("hwm", args.hwm)) if value is not None},
        ),
        engine=args.engine,
        engine_args=(*args.engine_arg, *_lora_flags(args)),
        engine_python=args.engine_python,
        data_parallel=DataParallel(
            size=args.data_parallel_size,
            size_local=-1 if args.data_parallel_size_local is None else args.data_parallel_size_local,
            address=args.data_parallel_address, rpc_port=args.data_parallel_rpc_port,
            routing=args.routing, wire=args.vllm_wire),
        endpoints=args.endpoints,
        runtime_dir=args.runtime_dir,
        tcp_host=args.tcp_host,
        tcp_port_base=args.tcp_port_base,
        stub_mode=args.stub_mode,
        stub_args=tuple(args.stub_arg),
        stub_stats_file=args.stub_stats_file,
        http=args.http,
        http_args=(*args.http_arg, *_dev_mode_flags(), *_lora_flags(args),
                   *_runtime_lora_flags(),
                   *([f"--otlp-traces-endpoint={args.otlp_traces_endpoint}"]
                     if args.otlp_traces_endpoint else [])),
        http_workers=args.http_workers,
        health=args.health,
        exit_with_parent=args.exit_with_parent,
        text_cpus=args.text_cpus,
    )


def _child(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="textproc _child")
    p.add_argument("role", choices=["worker", "detokenizer"])
    p.add_argument("index", type=int)
    p.add_argument("--config", required=True)
    p.add_argument("--endpoints", required=True)
    add_child_arguments(p, log_level=False)  # the level is in --config
    args = p.parse_args(argv)
    config = ServiceConfig.from_json(args.config)
    endpoints = Endpoints.from_dict(json.loads(args.endpoints), source="--endpoints")
    if args.role == "worker":
        # each child loads only its own role's modules (start-up time)
        from textproc.service.worker import run_worker

        return run_worker(config, endpoints, args.index, parent_pid=args.parent_pid)
    from textproc.service.detokenizer_process import run_detokenizer  # as run_worker above

    return run_detokenizer(config, endpoints, args.index, parent_pid=args.parent_pid)


def _bench(argv: list[str]) -> int:
    bench_dir = Path(__file__).resolve().parent.parent / "bench"
    # the names as the README writes them (long-prompt); bench/long_prompt.py is the file
    names = sorted(p.stem.replace("_", "-") for p in bench_dir.glob("*.py")
                   if not p.stem.startswith("_")) if bench_dir.is_dir() else []
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: textproc bench NAME [ARGS...] (NAME: one of the benchmarks below, each "
              "bench/NAME.py with - as _; NAME --help for its flags)\nbenchmarks: "
              + (", ".join(names) or "none yet"))
        return 0 if argv else 2
    script = bench_dir / f"{argv[0].replace('-', '_')}.py"
    if not script.is_file():
        print(f"textproc bench: unknown benchmark {argv[0]!r}; available: {', '.join(names) or 'none'}",
              file=sys.stderr)
        return 2
    # as ``python bench/NAME.py`` would: its folder first on sys.path (``from _common import``)
    saved, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *argv[1:]]
    sys.path.insert(0, str(bench_dir))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved
        sys.path[:] = saved_path
    return 0


if __name__ == "__main__":
    sys.exit(main())
