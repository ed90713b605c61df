"""The HTTP frontend's settings: one frozen struct, each setting declared once with its flag.

Owns :class:`FrontendSettings` (where the frontend serves, how it finds the service, its
place among the frontends sharing a port) and :class:`HttpLimits` (what a request may cost).
Each field that ``python -m textproc.http`` takes as a flag carries the flag, its help and its
metavar beside its default (:func:`_flag`), and :func:`build_parser` / :func:`from_args` are
written from those declarations: a new setting is one field. ``--parent-pid`` and
``--log-level`` are every child's (``textproc.lifecycle``). Reads no environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from textproc.errors import InvalidInput
from textproc.http.health import STALE_AFTER_S
from textproc.http.media import MediaLimits
from textproc.lifecycle import add_child_arguments
from textproc.ports import DEFAULT_HTTP, HTTP_FILE, parse_address

__all__ = ["FrontendSettings", "HttpLimits", "build_parser", "from_args", "parse"]



def _flag(default: Any, flag: str, help: str, *, metavar: str | None = None,
          parse: Any = None, action: str | None = None) -> Any:
    """A field that is also a flag of ``python -m textproc.http`` (``default`` MISSING: a
    required flag). ``help`` says what it does; ``(default X)`` is added unless it already
    names its default. ``parse``: turns the flag's text into the field's value; ``action``
    "append": a repeatable flag, its values a tuple."""
    return field(default=default, metadata={"flag": flag, "help": help, "metavar": metavar,
                                            "parse": parse, "action": action})


def _lora_module(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"takes NAME=PATH, got {text!r}")
    return name, path


def _images_limit(text: str) -> int:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not N or {{\"image\": N}}") from e
    if isinstance(value, dict):
        value = value.get("image", MediaLimits.max_images)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the image limit must be an integer >= 0")
    return value


def _domains(text: str) -> tuple[str, ...]:
    return tuple(d.strip().lower() for d in text.replace(" ", ",").split(",") if d.strip())


@dataclass(frozen=True)
class HttpLimits:
    """Request limits of the HTTP frontend."""

    max_body_bytes: int = _flag(16 * 1024 * 1024, "--max-body-bytes",
                                "larger request bodies get 413", parse=int)
    max_running: int = _flag(4096, "--max-running",
                             "generation requests in flight before 429", parse=int)
    max_connections: int = _flag(4096, "--max-connections", "open connections before new ones "
                                 "get 503 and are closed", parse=int)
    max_n: int = _flag(16, "--max-n", "choices per request (n) before 400",
                       parse=int)
    header_timeout_s: float = _flag(10.0, "--header-timeout", "close a connection whose "
                                    "request headers are not complete by then",
                                    metavar="SECONDS", parse=float)
    body_timeout_s: float = _flag(30.0, "--body-timeout", "answer 408 when the request body is "
                                  "not complete by then", metavar="SECONDS",
                                  parse=float)
    max_images: int = _flag(MediaLimits.max_images, "--limit-mm-per-prompt", "images per "
                            "request before 400: N, or vLLM's JSON form '{\"image\": N}'",
                            metavar="N", parse=_images_limit)
    max_image_bytes: int = _flag(MediaLimits.max_image_bytes, "--max-image-bytes", "an image "
                                 "(decoded data: URL or fetched body) larger than this is a 400",
                                 parse=int)
    media_fetch_timeout_s: float = _flag(MediaLimits.fetch_timeout_s, "--media-fetch-timeout",
                                         "an image URL not fetched by then is a 400",
                                         metavar="SECONDS", parse=float)
    allowed_media_domains: tuple[str, ...] = _flag(
        (), "--allowed-media-domains", "image URLs only from these hosts, comma-separated "
        "(default: any host with a public address)", metavar="HOST,...", parse=_domains)
    allow_private_media: bool = _flag(False, "--allow-private-media", "let image URLs reach "
                                      "private, loopback and link-local addresses")
    handlers_per_turn: int = 16  # request handlers started per event-loop iteration (Pacer)

    @property
    def media(self) -> MediaLimits:
        """What loading a request's images may cost (``textproc.http.media``)."""
        return MediaLimits(max_images=self.max_images, max_image_bytes=self.max_image_bytes,
                           fetch_timeout_s=self.media_fetch_timeout_s,
                           allowed_domains=self.allowed_media_domains,
                           allow_private=self.allow_private_media)


def _frontend(text: str) -> tuple[int, int]:
    index, _, n = text.partition("/")
    if not (index.isdigit() and n.isdigit() and int(index) < int(n)):
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N with 0 <= I < N, e.g. 0/2")
    return int(index), int(n)


def _address(text: str) -> str:
    try:
        parse_address(text)
    except InvalidInput as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


def _api_key(path: str) -> str:
    try:
        key = Path(path).read_text().strip()
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{path}: {e.strerror}") from e
    if not key:
        raise argparse.ArgumentTypeError(f"{path} is empty")
    return key


@dataclass(frozen=True)
class FrontendSettings:
    """Everything one HTTP frontend process needs (``run_http``'s one argument)."""

    runtime_dir: str = _flag(dataclasses.MISSING, "--runtime-dir", "a running service's runtime dir")
    http: str = _flag(DEFAULT_HTTP, "--http", "HOST:PORT to listen on",
                      parse=_address)
    listen_fd: int | None = _flag(None, "--listen-fd", "serve this inherited listening socket "
                                  "instead of binding --http (what serve --http-workers passes; "
                                  "default: none)", metavar="FD", parse=int)
    health_file: str | None = _flag(None, "--health-file", "publish this frontend's state there "
                                    "every 50 ms for python -m textproc.http.health, the "
                                    "--health port's process (default: none)", metavar="FILE")
    health_stale_after_s: float = _flag(STALE_AFTER_S, "--health-stale-after", "the health "
                                        "port calls this frontend stuck once its event loop has "
                                        "not run for this long", metavar="SECONDS",
                                        parse=float)
    frontend: tuple[int, int] = _flag((0, 1), "--frontend", "this is frontend I of N sharing the "
                                      "port; /metrics sums all N (default 0/1)", metavar="I/N",
                                      parse=_frontend)
    served_model_name: str | None = _flag(None, "--served-model-name", "the model name clients "
                                          "send (default: the model directory's name)", metavar="NAME")
    engine_stats_file: str | None = _flag(None, "--engine-stats-file", "the engine's stats "
                                          "file; where it names its ranks (several engines), "
                                          "/health names those not ready (default: none)",
                                          metavar="FILE")
    otlp_traces_endpoint: str | None = _flag(None, "--otlp-traces-endpoint", "export an "
                                             "OpenTelemetry span of each generation request "
                                             "to this OTLP/HTTP traces URL, e.g. "
                                             "http://collector:4318/v1/traces (needs "
                                             "opentelemetry-sdk and "
                                             "opentelemetry-exporter-otlp-proto-http; "
                                             "default: off)", metavar="URL")
    limits: HttpLimits = HttpLimits()  # its fields are flags too
    connect_timeout_s: float = _flag(60.0, "--connect-timeout", "how long to wait for the "
                                     "service's endpoints.json and detokenizer",
                                     metavar="SECONDS", parse=float)
    http_file: str | None = _flag(None, "--http-file", "where to write the bound address "
                                  f"(default RUNTIME_DIR/{HTTP_FILE})", metavar="FILE")
    api_key: str | None = _flag(None, "--api-key-file", "file holding the API key clients must "
                                "send as 'Authorization: Bearer' (default: none, no key needed)",
                                metavar="FILE", parse=_api_key)
    curve_client_key: str | None = _flag(None, "--curve-client-key", "CURVE key pair "
                                         "(*.key_secret) for a service started with --curve-dir "
                                         "(default: the key endpoints.json names, for a frontend "
                                         "on the same host)", metavar="FILE")
    curve_server_key: str | None = _flag(None, "--curve-server-key", "the service's public "
                                         "server.key (default: from endpoints.json)",
                                         metavar="FILE")
    lora_modules: tuple[tuple[str, str], ...] = _flag(
        (), "--lora-modules", "LoRA adapters a request's model may name, NAME=PATH, repeatable "
        "(vLLM's flag; the engine holds the weights): /v1/models lists them",
        metavar="NAME=PATH", parse=_lora_module, action="append")
    runtime_lora: bool = _flag(False, "--runtime-lora-updating", "serve vLLM's "
                               "/v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM serves "
                               "them with VLLM_ALLOW_RUNTIME_LORA_UPDATING=true; one frontend: "
                               "the others do not learn of an adapter loaded through it)")
    admin_routes: bool = _flag(False, "--admin-routes", "serve vLLM's admin routes "
                               "(/reset_prefix_cache, /sleep, /wake_up, /is_sleeping, /pause, "
                               "/resume, /is_paused; vLLM serves them with "
                               "VLLM_SERVER_DEV_MODE=1): each can stop the server serving")
    test_hooks: bool = _flag(False, "--test-hooks", "add POST /_test/block-loop?seconds=S, which "
                             "blocks the event loop (integration tests only; never in "
                             "production)")
    parent_pid: int = 0  # --parent-pid and --log-level: every child's (textproc.lifecycle)
    log_level: str = "INFO"

    def __repr__(self) -> str:  # never log the API key
        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        shown["api_key"] = None if self.api_key is None else "***"
        return f"FrontendSettings({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    @property
    def address_file(self) -> Path:
        """Where the bound address goes once serving."""
        return Path(self.http_file) if self.http_file else Path(self.runtime_dir) / HTTP_FILE


def _value(f: dataclasses.Field[Any], value: Any) -> Any:
    """A parsed flag's value as its field holds it (a repeatable flag's: a tuple)."""
    return tuple(value or ()) if f.metadata.get("action") == "append" else value


def _flag_fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if "flag" in f.metadata]


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m textproc.http`` argument parser, one flag per declared field."""
    p = argparse.ArgumentParser(prog="python -m textproc.http",
                                description="the OpenAI-compatible HTTP frontend of textproc")
    for f in _flag_fields(FrontendSettings) + _flag_fields(HttpLimits):
        meta = f.metadata
        if f.type == "bool":
            p.add_argument(meta["flag"], dest=f.name, action="store_true", help=meta["help"])
            continue
        if meta.get("action") == "append":
            p.add_argument(meta["flag"], dest=f.name, action="append", help=meta["help"],
                           metavar=meta["metavar"], type=meta["parse"] or str)
            continue
        required = f.default is dataclasses.MISSING
        text = meta["help"]
        if not required and "default" not in text:
            text += f" (default {f.default:g})" if isinstance(f.default, float) \
                else f" (default {f.default})"
        p.add_argument(meta["flag"], dest=f.name, default=None if required else f.default,
                       help=text, metavar=meta["metavar"], type=meta["parse"] or str,
                       required=required)
    add_child_arguments(p)
    return p


def from_args(args: argparse.Namespace) -> FrontendSettings:
    """The settings a parsed command line gives."""
    values = vars(args)
    limits = HttpLimits(**{f.name: values[f.name] for f in _flag_fields(HttpLimits)})
    return FrontendSettings(limits=limits, parent_pid=args.parent_pid, log_level=args.log_level,
                            **{f.name: _value(f, values[f.name])
                               for f in _flag_fields(FrontendSettings)})


def parse(argv: Sequence[str] | None = None) -> FrontendSettings:
    """``from_args(build_parser().parse_args(argv))``."""
    return from_args(build_parser().parse_args(argv))
