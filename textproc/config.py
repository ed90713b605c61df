"""Frozen settings of the service: endpoints, limits and timeouts, validated where they are built.

Owns every tunable of the process layer. Never reads the environment or the command line (only
``cli.py`` does) and imports nothing but the standard library, ``textproc.errors``, the default
limits (``textproc.protocol``, a request's own in ``textproc.options``), ``textproc.sharding``'s
shard limit, the log levels of
``textproc.lifecycle`` and the CPU-list check of ``textproc.placement``, so every process gets its settings as one immutable value. The other
choice lists (endpoint kinds, stub modes, special tokens in content, generation config) are
written here once, the engine names too (``textproc.launchers`` loads an adapter by its name
here); the CLI offers exactly these. ``to_json`` / ``from_json`` carry a config to
a child process as JSON (never pickle); ``from_json`` validates like the constructor does.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
from dataclasses import dataclass, field
from typing import Any

from textproc.errors import InvalidInput, short
from textproc.lifecycle import LOG_LEVELS  # ServiceConfig.log_level values
from textproc.options import MAX_STOP_CHARS, MAX_STOP_STRINGS
from textproc.protocol import DEFAULT_HWM, MAX_FRAME_BYTES, MAX_MODEL_LEN
from textproc.sharding import MAX_DETOKENIZERS
from textproc.placement import check_text_cpus

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_MODEL_LEN",
    "IPC_PATH_MAX_BYTES",
    "LOG_LEVELS",
    "ENGINES",
    "ENDPOINT_KINDS",
    "STUB_MODES",
    "DataParallel",
    "CONTENT_SPECIALS",
    "GENERATION_CONFIGS",
    "Endpoints",
    "ShardEndpoints",
    "ServiceConfig",
    "ServeConfig",
    "ipc_endpoints",
    "tcp_endpoints",
    "tcp_port_count",
]

DEFAULT_MAX_FRAME_BYTES = MAX_FRAME_BYTES
# a model directory with no config.json (a tokenizer alone, for the stub engine); serve derives
# a model's own from its config.json as vLLM does (textproc.service.context_length)
DEFAULT_MAX_MODEL_LEN = 32768
# ServeConfig.engine: the adapter modules of textproc.launchers, in the order `serve --help` lists
# them (a package scan would import vllm_reference.py in every process)
ENGINES = ("stub", "vllm", "external")
ENDPOINT_KINDS = ("ipc", "tcp")  # ServeConfig.endpoints
STUB_MODES = ("echo", "replay", "random")  # ServeConfig.stub_mode (engine_stub --mode)
# ServiceConfig.special_tokens_in_content: special-token text typed in a message is the control
# token ("control", what transformers and vLLM do) or ordinary text ("text")
CONTENT_SPECIALS = ("control", "text")
# ServiceConfig.generation_config: a request's unset sampling values come from the model's
# generation_config.json ("auto", vLLM's default) or from the engine ("none", vLLM's "vllm")
GENERATION_CONFIGS = ("auto", "none")
MAX_HTTP_WORKERS = 64  # ServeConfig.http_workers
IPC_PATH_MAX_BYTES = 100  # sun_path is 108 bytes on Linux, 104 on macOS; keep a margin
_SCHEMES = ("ipc://", "tcp://")


def _check_int(name: str, value: object, *, low: int, high: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{name} must be an int, got {short(value)}")
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise InvalidInput(f"{name} must be {allowed}, got {value!r}")


def _check_float(name: str, value: object, *, low: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"{name} must be a finite number, got {short(value)}")
    if value <= low:
        raise InvalidInput(f"{name} must be > {low}, got {value!r}")


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidInput(f"{name} must be one of {', '.join(choices)}; got {short(value)}")


def _check_address(name: str, value: object) -> None:
    if not isinstance(value, str) or not value.startswith(_SCHEMES):
        raise InvalidInput(f"endpoint {name} must be an ipc:// or tcp:// address, got {short(value)}")
    if value.startswith("ipc://") and len(value[6:].encode()) > IPC_PATH_MAX_BYTES:
        raise InvalidInput(
            f"endpoint {name} path is {len(value[6:].encode())} bytes, over the "
            f"{IPC_PATH_MAX_BYTES}-byte limit of unix socket paths: {short(value)}; "
            "use a shorter --runtime-dir"
        )


_SHARD_FIELDS = ("detok_in", "detok_front", "engine_in", "engine_out")


@dataclass(frozen=True, kw_only=True)
class ShardEndpoints:
    """The four addresses one detokenizer shard binds (see :class:`Endpoints`)."""

    detok_in: str
    detok_front: str
    engine_in: str
    engine_out: str

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class Endpoints:
    """Every ZeroMQ address of one service; the role named first binds it, the others connect.

    control (supervisor PULL), events (supervisor PUB), workers[i] (worker i ROUTER), and per
    detokenizer shard k (``--detokenizers N``, :func:`textproc.sharding.shard_of`)
    ``detokenizers[k]``: detok_in (detokenizer PULL), detok_front (detokenizer ROUTER),
    engine_in (detokenizer PUSH, engine PULL), engine_out (detokenizer PULL, engine PUSH). A
    one-shard service has one entry there; there is no other spelling of those four.
    """

    control: str
    events: str
    workers: tuple[str, ...]
    detokenizers: tuple[ShardEndpoints, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.workers, tuple) or not self.workers:
            raise InvalidInput(f"endpoints.workers must be a non-empty tuple, got {short(self.workers)}")
        shards = self.detokenizers
        if not isinstance(shards, (tuple, list)) or not shards or not all(
                isinstance(d, ShardEndpoints) or (isinstance(d, dict) and set(d) == set(_SHARD_FIELDS))
                for d in shards):
            raise InvalidInput(f"endpoints.detokenizers must be a non-empty list of objects with "
                               f"keys {list(_SHARD_FIELDS)}, got {short(shards)}")
        object.__setattr__(self, "detokenizers", tuple(
            d if isinstance(d, ShardEndpoints) else ShardEndpoints(**d) for d in shards))
        named = [("control", self.control), ("events", self.events)]
        named += [(f"workers[{i}]", w) for i, w in enumerate(self.workers)]
        named += [(f"detokenizers[{k}].{name}", getattr(shard, name))
                  for k, shard in enumerate(self.detokenizers) for name in _SHARD_FIELDS]
        for name, value in named:
            _check_address(name, value)
        values = [v for _, v in named]
        if len(set(values)) != len(values):
            raise InvalidInput(f"endpoints must all differ, got {short(values, 300)}")

    @property
    def n_detokenizers(self) -> int:
        return len(self.detokenizers)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["workers"] = list(self.workers)
        out["detokenizers"] = [d.to_dict() for d in self.detokenizers]
        return out

    @classmethod
    def from_dict(cls, obj: object, *, source: str = "<endpoints>") -> Endpoints:
        if not isinstance(obj, dict):
            raise InvalidInput(f"endpoints in {source} must be an object, got {short(obj)}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(obj) - names
        missing = names - set(obj)
        if unknown or missing:
            raise InvalidInput(
                f"endpoints in {source}: unknown keys {sorted(map(str, unknown))}, "
                f"missing keys {sorted(missing)}; expected {sorted(names)}"
            )
        workers = obj["workers"]
        if not isinstance(workers, list):
            raise InvalidInput(f"endpoints.workers in {source} must be a list, got {short(workers)}")
        return cls(**{**obj, "workers": tuple(workers)})


def _shard_names(n_detokenizers: int) -> list[list[str]]:
    """Socket names of each shard: shard 0 keeps the one-shard names, shard k adds ``-k``."""
    names = ["detok-in", "detok-front", "engine-in", "engine-out"]
    return [[n if k == 0 else f"{n}-{k}" for n in names] for k in range(n_detokenizers)]


def ipc_endpoints(runtime_dir: str, n_workers: int, n_detokenizers: int = 1) -> Endpoints:
    """ipc:// endpoints as socket files inside ``runtime_dir`` (which should be mode 0700).

    >>> ipc_endpoints("/run/tp", 1).workers
    ('ipc:///run/tp/worker-0',)
    >>> ipc_endpoints("/run/tp", 1, 2).detokenizers[1].engine_out
    'ipc:///run/tp/engine-out-1'
    """
    _check_int("n_workers", n_workers, low=1, high=256)
    _check_int("n_detokenizers", n_detokenizers, low=1, high=MAX_DETOKENIZERS)
    base = "ipc://" + runtime_dir.rstrip("/")
    shards = tuple(ShardEndpoints(**{field: f"{base}/{name}" for field, name in zip(_SHARD_FIELDS, names)})
                   for names in _shard_names(n_detokenizers))
    return Endpoints(
        control=f"{base}/control",
        events=f"{base}/events",
        workers=tuple(f"{base}/worker-{i}" for i in range(n_workers)),
        detokenizers=shards,
    )


def tcp_port_count(n_workers: int, n_detokenizers: int = 1) -> int:
    """How many ports :func:`tcp_endpoints` needs."""
    return 2 + n_workers + 4 * n_detokenizers


def tcp_endpoints(host: str, ports: list[int], n_workers: int, n_detokenizers: int = 1) -> Endpoints:
    """tcp:// endpoints on ``host``; ``ports`` gives ``tcp_port_count`` distinct ports: control,
    events, shard 0's four (detok_in, detok_front, engine_in, engine_out), the workers', then
    the four of each further shard."""
    _check_int("n_workers", n_workers, low=1, high=256)
    _check_int("n_detokenizers", n_detokenizers, low=1, high=MAX_DETOKENIZERS)
    need = tcp_port_count(n_workers, n_detokenizers)
    if len(ports) != need or len(set(ports)) != len(ports):
        raise InvalidInput(f"tcp endpoints need {need} distinct ports, got {short(ports)}")
    for port in ports:
        _check_int("port", port, low=1, high=65535)
    host_part = f"[{host}]" if ":" in host else host
    addr = [f"tcp://{host_part}:{p}" for p in ports]
    extra = addr[6 + n_workers:]
    shards = (ShardEndpoints(detok_in=addr[2], detok_front=addr[3], engine_in=addr[4],
                             engine_out=addr[5]),
              *(ShardEndpoints(**dict(zip(_SHARD_FIELDS, extra[4 * k:4 * k + 4])))
                for k in range(n_detokenizers - 1)))
    return Endpoints(
        control=addr[0],
        events=addr[1],
        workers=tuple(addr[6:6 + n_workers]),
        detokenizers=shards,
    )


@dataclass(frozen=True, kw_only=True)
class ServiceConfig:
    """What every textproc child process needs: model, limits, queue sizes and timeouts."""

    model_dir: str
    n_workers: int = 2
    n_detokenizers: int = 1  # detokenizer shards, requests split by textproc.sharding.shard_of
    max_model_len: int = DEFAULT_MAX_MODEL_LEN  # prompt tokens + max_tokens must fit
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES  # ZMQ_MAXMSGSIZE on every receiving socket
    hwm: int = DEFAULT_HWM  # ZeroMQ send/receive high-water mark, in messages
    max_stops: int = MAX_STOP_STRINGS  # stop strings per request
    max_stop_chars: int = MAX_STOP_CHARS  # characters per stop string (the text core's limit)
    max_prompt_chars: int = 4_000_000  # characters of rendered prompt / completion text
    # an image with more pixels (from its header, before decoding) is a 400: vLLM's
    # VLLM_MAX_IMAGE_PIXELS default (~179 M pixels, ~0.5 GB decoded)
    max_image_pixels: int = 178_956_970
    max_live_requests: int = 65_536  # requests the detokenizer holds state for at once
    max_early_outputs: int = 10_000  # outputs buffered for requests whose Submit has not arrived
    early_output_age_s: float = 5.0  # after this, such outputs are dropped and aborted
    startup_timeout_s: float = 60.0  # how long to wait for each child's Ready
    stop_timeout_s: float = 5.0  # terminate -> kill grace period at shutdown
    log_level: str = "INFO"
    max_live_per_client: int = 16_384  # live requests of one client (routing id) at once
    curve_dir: str | None = None  # `textproc keys` directory: every bound socket is a CURVE server
    special_tokens_in_content: str = "control"  # one of CONTENT_SPECIALS
    tool_format: str = "auto"  # "auto" (from the model's files), "none" or a parsing.TOOL_FORMATS name
    reasoning_format: str = "auto"  # "auto", "none" or a parsing.REASONING_FORMATS name
    # tool_choice "auto" with tools enforces every call as if each tool were marked strict: free
    # text, but a call marker is followed by a declared tool with valid arguments
    strict_tools: bool = False
    # a text this long is shared with the peer workers (service/prompt_shares.py); 0: never. Below
    # ~30k characters (~15 ms of encoding) the extra hop pays little on a loaded box
    split_min_chars: int = 32_768
    # compiled constraint indexes kept on disk, shared by the workers and across restarts
    # (service/index_store.py); None: a directory in the runtime directory, shared by the
    # workers for the service's life
    constraint_cache_dir: str | None = None
    # wall seconds from a request's arrival at a worker its constraint's compile may take (past
    # it: a 400 naming the phase); a compile is shared by every request that needs it
    max_compile_s: float = 20.0
    # wall seconds a compile builds first states before the request goes out with a partial
    # index (its whole index follows); a constraint compiled before goes out whole at once
    first_index_s: float = 0.003
    # one of GENERATION_CONFIGS (service/sampling_defaults.py)
    generation_config: str = "auto"

    def __post_init__(self) -> None:
        if self.constraint_cache_dir is not None and (
                not isinstance(self.constraint_cache_dir, str) or not self.constraint_cache_dir):
            raise InvalidInput(f"constraint_cache_dir must be a directory path or None, "
                               f"got {short(self.constraint_cache_dir)}")
        if self.curve_dir is not None and (not isinstance(self.curve_dir, str) or not self.curve_dir):
            raise InvalidInput(f"curve_dir must be a directory path or None, got {short(self.curve_dir)}")
        _check_int("max_live_per_client", self.max_live_per_client, low=1)
        if not isinstance(self.model_dir, str) or not self.model_dir:
            raise InvalidInput(f"model_dir must be a non-empty path, got {short(self.model_dir)}")
        _check_int("n_workers", self.n_workers, low=1, high=256)
        _check_int("n_detokenizers", self.n_detokenizers, low=1, high=MAX_DETOKENIZERS)
        _check_int("max_model_len", self.max_model_len, low=2, high=MAX_MODEL_LEN)
        _check_int("max_frame_bytes", self.max_frame_bytes, low=1024, high=1 << 31)
        _check_int("hwm", self.hwm, low=1)
        _check_int("max_stops", self.max_stops, low=0)
        _check_int("max_stop_chars", self.max_stop_chars, low=1)
        _check_int("max_prompt_chars", self.max_prompt_chars, low=1)
        _check_int("max_image_pixels", self.max_image_pixels, low=1)
        _check_int("split_min_chars", self.split_min_chars, low=0)
        _check_int("max_live_requests", self.max_live_requests, low=1)
        _check_int("max_early_outputs", self.max_early_outputs, low=0)
        _check_float("early_output_age_s", self.early_output_age_s, low=0.0)
        _check_float("max_compile_s", self.max_compile_s, low=0.001)
        _check_float("first_index_s", self.first_index_s, low=-1e-9)  # 0: the first state only
        _check_float("startup_timeout_s", self.startup_timeout_s, low=0.0)
        _check_float("stop_timeout_s", self.stop_timeout_s, low=0.0)
        _check_choice("log_level", self.log_level, LOG_LEVELS)
        _check_choice("special_tokens_in_content", self.special_tokens_in_content,
                      CONTENT_SPECIALS)
        _check_choice("generation_config", self.generation_config, GENERATION_CONFIGS)
        for label, value in (("tool_format", self.tool_format), ("reasoning_format", self.reasoning_format)):
            if not isinstance(value, str) or not value:
                raise InvalidInput(f"{label} must be a format name, 'auto' or 'none', got {short(value)}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServiceConfig:
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise InvalidInput(f"service config is not JSON: {short(text)}") from e
        if not isinstance(obj, dict):
            raise InvalidInput(f"service config must be a JSON object, got {short(obj)}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(obj) - names
        if unknown:
            raise InvalidInput(f"unknown service config keys {sorted(unknown)}; allowed: {sorted(names)}")
        return cls(**obj)


@dataclass(frozen=True)
class DataParallel:
    """``serve --engine vllm --data-parallel-size N``: vLLM's own engine processes behind one
    endpoint (textproc.vllm_front). ``size_local`` -1: every rank on this machine."""

    size: int = 1
    size_local: int = -1
    address: str = "127.0.0.1"
    rpc_port: int = 0  # 0: a free port
    routing: str = "prefix"
    wire: bool = False  # vLLM's wire with one engine too

    def __post_init__(self) -> None:
        _check_int("data_parallel_size", self.size, low=1, high=1024)
        if not -1 <= self.size_local <= self.size:
            raise InvalidInput(f"data_parallel_size_local must be 0..{self.size}, got {self.size_local}")
        _check_int("data_parallel_rpc_port", self.rpc_port, low=0, high=65535)
        _check_choice("routing", self.routing, ("prefix", "round_robin", "least_loaded"))

    @property
    def engaged(self) -> bool:
        """Whether vLLM's own engine processes run behind the front (else engine_vllm)."""
        return self.wire or self.size > 1 or self.size_local >= 0 or self.rpc_port > 0


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """``textproc serve``: the service settings plus how to lay out endpoints and the engine."""

    service: ServiceConfig
    engine: str = "stub"  # one of ENGINES (textproc.launchers)
    engine_args: tuple[str, ...] = field(default=())  # extra flags for the engine's process
    engine_python: str | None = None  # the interpreter of the engine's environment (vllm)
    data_parallel: DataParallel = field(default_factory=DataParallel)
    endpoints: str = "ipc"  # one of ENDPOINT_KINDS
    runtime_dir: str | None = None  # None: a fresh private directory under the temp dir
    tcp_host: str = "127.0.0.1"
    tcp_port_base: int = 0  # 0: free ports picked at start; else ports base, base+1, ...
    stub_mode: str = "echo"  # one of STUB_MODES
    stub_args: tuple[str, ...] = field(default=())  # extra engine_stub flags, passed through
    stub_stats_file: str | None = None
    # the engine writes only its gauges there (scheduler, link), not its per-request records:
    # the supervisor's own default file, for /metrics (set by the supervisor, not a flag)
    engine_stats_brief: bool = False
    http: str | None = None  # HOST:PORT: also run the OpenAI HTTP frontend (python -m textproc.http)
    http_args: tuple[str, ...] = field(default=())  # extra flags for the HTTP frontend
    http_workers: int = 1  # HTTP frontend processes sharing the one listening socket
    health: str | None = None  # HOST:PORT: /health answered there by a process of its own
    exit_with_parent: bool = False  # stop once the process that started serve is gone
    # the CPUs of textproc's own processes: none (they float), auto (those the engine's bound
    # threads leave), or a CPU list such as 1 or 2-7 (textproc.placement)
    text_cpus: str = "none"

    def __post_init__(self) -> None:
        for name, address in (("http", self.http), ("health", self.health)):
            if address is not None and (":" not in address or not address.rsplit(":", 1)[1].isdigit()):
                raise InvalidInput(f"{name} must be HOST:PORT, e.g. 127.0.0.1:8000, got {short(address)}")
        _check_int("http_workers", self.http_workers, low=1, high=MAX_HTTP_WORKERS)
        if self.http is None and (self.http_workers != 1 or self.health is not None):
            raise InvalidInput("http_workers and health need http (serve --http HOST:PORT)")
        _check_choice("engine", self.engine, ENGINES)
        check_text_cpus(self.text_cpus)
        _check_choice("endpoints", self.endpoints, ENDPOINT_KINDS)
        _check_choice("stub_mode", self.stub_mode, STUB_MODES)
        _check_int("tcp_port_base", self.tcp_port_base, low=0, high=65535 - 300)
        if not self.tcp_host or not isinstance(self.tcp_host, str):
            raise InvalidInput(f"tcp_host must be a host name or address, got {short(self.tcp_host)}")
        if self.endpoints == "tcp" and self.service.curve_dir is None and not _is_loopback(self.tcp_host):
            raise InvalidInput(
                f"refusing to bind tcp host {self.tcp_host!r} without authentication: anyone who "
                "can reach it could submit requests and read outputs. Make CURVE keys with "
                "`textproc keys --dir DIR` and pass --curve-dir DIR (clients and the engine need "
                "DIR/client.key_secret and DIR/server.key), or bind 127.0.0.1")


def _is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1); a name that is not is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
