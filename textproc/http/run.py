"""The HTTP frontend process: ``run_http`` (entry function) and ``python -m textproc.http``.

Owns the process around the Starlette app: logging, uvicorn on uvloop, the TextClient's
lifetime (connected on startup inside the server's loop, closed on shutdown), the address file
(``http.json`` in the runtime dir, or ``--http-file``: the address actually bound, so
``--http 127.0.0.1:0`` works), publishing its state for the ``--health`` port's process
(``health.StatePublisher``, with ``--health-file``), and leaving when the parent supervisor is
gone. With ``--listen-fd`` it
serves a listening socket its parent bound and shares with other frontends (``serve
--http-workers N``) instead of binding one. Reads no environment; the caller passes every setting.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

import msgspec

from textproc.config import LOG_LEVELS
from textproc.errors import InvalidInput, TextprocError, short

__all__ = ["run_http", "GC_THRESHOLDS", "main", "build_parser", "parse_address", "listen", "frontend_file",
           "frontend_command",
           "HTTP_FILE", "DEFAULT_HTTP", "DEFAULT_HEALTH"]

_log = logging.getLogger("textproc.http")
HTTP_FILE = "http.json"  # {"host", "port", "pid"} written once the socket is bound
DEFAULT_HTTP = "127.0.0.1:8000"
DEFAULT_HEALTH = "127.0.0.1:8001"
LISTEN_BACKLOG = 2048
_PARENT_CHECK_S = 0.5


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) -> (host, port); port 0 picks a free port.

    >>> parse_address("127.0.0.1:8000")
    ('127.0.0.1', 8000)
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidInput(f"--http address {short(text)} is not HOST:PORT, e.g. {DEFAULT_HTTP}")
    return host.strip("[]"), int(port)


def listen(address: str, *, flag: str = "--http") -> socket.socket:
    """A listening TCP socket on ``HOST:PORT`` (the one way textproc binds an HTTP port: the
    supervisor for its frontends, a standalone frontend for itself); a taken or bad address is
    a TextprocError ``cannot listen on HOST:PORT (flag): reason``."""
    host, port = parse_address(address)
    try:
        return socket.create_server((host, port), backlog=LISTEN_BACKLOG,
                                    family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as e:
        raise TextprocError(f"cannot listen on {host}:{port} ({flag}): {e.strerror or e}") from e


def frontend_file(index: int) -> str:
    """The address file frontend ``index`` of ``serve --http-workers`` writes once serving."""
    return f"http-{index}.json"


def frontend_command(runtime_dir: Path, address: str, listen_fd: int, index: int, n: int,
                     health_file: Path | None) -> list[str]:
    """The command line of frontend ``index`` of ``n`` serving the inherited ``listen_fd``
    (what the supervisor starts; it appends --parent-pid, --log-level and --http-arg flags)."""
    command = [sys.executable, "-m", "textproc.http", "--runtime-dir", str(runtime_dir),
               "--http", address, "--listen-fd", str(listen_fd), "--frontend", f"{index}/{n}",
               "--http-file", str(runtime_dir / frontend_file(index))]
    if health_file is not None:
        command += ["--health-file", str(health_file)]
    return command


def run_http(
    runtime_dir: str | Path,
    *,
    listener: socket.socket,
    health_file: str | Path | None = None,
    frontend: int = 0,
    frontends: int = 1,
    served_model_name: str | None = None,
    max_body_bytes: int | None = None,
    max_running: int | None = None,
    max_connections: int | None = None,
    max_n: int | None = None,
    header_timeout_s: float | None = None,
    body_timeout_s: float | None = None,
    health_stale_after_s: float | None = None,
    connect_timeout_s: float = 60.0,
    parent_pid: int = 0,
    log_level: str = "INFO",
    http_file: str | Path | None = None,
    api_key: str | None = None,
    curve_client_key: str | Path | None = None,
    curve_server_key: str | Path | None = None,
    test_hooks: bool = False,
) -> int:
    """Serve the OpenAI API on ``listener`` (a listening socket, maybe shared with other
    frontends) for the service in ``runtime_dir``; returns 0.

    Blocks until SIGINT/SIGTERM (uvicorn's graceful shutdown) or until ``parent_pid`` exits.
    Once serving, writes ``{"host", "port", "pid", "frontend"}`` to ``http_file`` (default
    ``<runtime_dir>/http.json``) and removes it at shutdown. With ``health_file``, publishes
    its state there every 50 ms for ``python -m textproc.http.health`` (``health_stale_after_s``:
    when that process should call this frontend stuck).
    ``frontend`` of ``frontends``: this process's place among those sharing the port (their
    metrics are summed on ``/metrics``). With ``api_key`` the API needs ``Authorization: Bearer
    <api_key>`` (or ``x-api-key: <api_key>``, Anthropic's header); without one, serving a non-loopback host logs a warning. ``test_hooks`` adds
    ``POST /_test/block-loop?seconds=S`` (blocks the event loop; tests only).
    """
    import uvicorn

    from textproc.heap import freeze_heap
    from textproc.http.accept import BatchAcceptingServer
    from textproc.http.client_backend import ClientBackend
    from textproc.http.connections import guarded_http
    from textproc.http.health import STALE_AFTER_S, StatePublisher
    from textproc.http.metrics import Metrics, watch_loop_lag
    from textproc.http.frontend_peers import Peers
    from textproc.http.probe import reply
    from textproc.http.server import HttpLimits, build_app, health_answer

    logging.basicConfig(  # a no-op when main() did it already
        level=log_level,
        format="%(asctime)s http[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    runtime = Path(runtime_dir)
    address_file = Path(http_file) if http_file is not None else runtime / HTTP_FILE
    given: dict[str, Any] = {k: v for k, v in (
        ("max_body_bytes", max_body_bytes), ("max_running", max_running),
        ("max_connections", max_connections), ("max_n", max_n),
        ("header_timeout_s", header_timeout_s),
        ("body_timeout_s", body_timeout_s)) if v is not None}
    limits = HttpLimits(**given)
    metrics = Metrics()
    peers = Peers(runtime if frontends > 1 else None, frontend, frontends, metrics)
    backend = ClientBackend(runtime, served_model_name=served_model_name,
                            connect_timeout_s=connect_timeout_s,
                            curve_client_key=curve_client_key, curve_server_key=curve_server_key)
    health = None if health_file is None else StatePublisher(
        Path(health_file),
        stale_after_s=STALE_AFTER_S if health_stale_after_s is None else health_stale_after_s)
    server: uvicorn.Server | None = None

    def beat(lag_s: float) -> None:  # every loop-lag probe: tell the health process
        if health is not None:
            serving, why = backend.health()
            health.publish(serving, why, lag_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        await backend.start()
        freeze_heap(GC_THRESHOLDS)  # see GC_THRESHOLDS
        tasks = [asyncio.ensure_future(_after_bind(address_file, runtime, lambda: server,
                                                   parent_pid, frontend)),
                 asyncio.ensure_future(watch_loop_lag(metrics, beat)),
                 asyncio.ensure_future(_return_memory_when_idle(metrics))]
        if frontends > 1:
            tasks.append(asyncio.ensure_future(peers.publish(backend)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await backend.close()
            beat(0.0)  # "shutting down"
            address_file.unlink(missing_ok=True)
            peers.remove()

    host = str(listener.getsockname()[0])
    if api_key is None and host not in ("127.0.0.1", "::1", "localhost"):
        _log.warning("serving the API on %s without an API key: anyone who can reach it can "
                     "use it (pass --api-key-file)", host)
    extra = []
    if test_hooks:
        from starlette.routing import Route

        _log.warning("--test-hooks: POST /_test/block-loop can block this frontend; tests only")
        extra.append(Route("/_test/block-loop", _block_loop, methods=["POST"]))
    app = build_app(backend, limits=limits, metrics=metrics, lifespan=lifespan,
                    api_key=api_key, peers=peers, extra_routes=extra)
    config = uvicorn.Config(
        app,
        loop="uvloop",
        http=guarded_http(max_connections=limits.max_connections,
                          header_timeout_s=limits.header_timeout_s, metrics=metrics),
        lifespan="on",
        log_level=log_level.lower(),
        log_config=None,  # uvicorn's loggers propagate to the root handler set up above
        access_log=False,
        timeout_graceful_shutdown=3,  # open streams get 3 s, then abort (supervisor kills at 5 s)
        headers=[("x-textproc-frontend", str(frontend))],  # which process answered
    )
    def answer_probe(data: bytes) -> bytes | None:  # a /health probe, answered on accept
        got = reply(data, lambda: health_answer(backend, metrics), config.headers)
        if got is not None:
            metrics.health_on_accept += 1
        return got

    try:
        server = BatchAcceptingServer(config, answer=answer_probe)
        server.run(sockets=[listener])
    finally:
        if health is not None:
            health.close()
    return 0


async def _block_loop(request: Any) -> Any:
    """``POST /_test/block-loop?seconds=S`` (``--test-hooks`` only): hold the event loop for S
    seconds (at most 60), as a stuck handler would; answers afterwards."""
    import time

    from starlette.responses import JSONResponse

    seconds = min(60.0, float(request.query_params.get("seconds", "1")))
    time.sleep(seconds)  # blocking on purpose: that is the test
    return JSONResponse({"blocked_s": seconds})


_IDLE_CHECK_S = 2.0
# Collection thresholds while serving (CPython's default is 700, 10, 10). Under a crowd of 500
# streams the default ran 46 full (generation 2) collections in 25 s, each 45-60 ms of CPU
# and 0 objects found: the frontend's longest loop stalls (bench/crowd.py with gc.callbacks).
# (5000, 20, 50) traded them for generation-1 scans of ~100,000 young objects (30 ms each);
# with these no collection took over 16 ms of CPU in the same run.
GC_THRESHOLDS = (1000, 10, 1000)


async def _return_memory_when_idle(metrics: Any) -> None:
    """Once requests have come and gone (none running, none new for _IDLE_CHECK_S): collect
    and hand freed heap pages back to the OS (glibc ``malloc_trim``). After a crowd of 1,500
    streams the RSS stayed at 76 MB (38 MB before); with this it went back to 52 MB."""
    try:
        import ctypes

        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to do
        return
    import gc

    seen = 0
    while True:
        await asyncio.sleep(_IDLE_CHECK_S)
        served = sum(metrics.finish_reasons.values())  # generation requests (not /health)
        if metrics.running == 0 and served != seen:
            seen = served
            gc.collect()
            trim(0)


async def _after_bind(address_file: Path, runtime: Path, get_server: Any,
                      parent_pid: int, frontend: int) -> None:
    """Write the address file once uvicorn serves; then leave when the parent process is gone."""
    server = None
    while server is None or not server.started:
        await asyncio.sleep(0.02)
        server = get_server()
    addresses = [sock.getsockname() for srv in server.servers for sock in srv.sockets]
    host, port = addresses[0][0], addresses[0][1]
    info: dict[str, Any] = {"host": host, "port": port, "pid": os.getpid(), "frontend": frontend}
    tmp = address_file.with_name(address_file.name + ".tmp")
    tmp.write_bytes(msgspec.json.encode(info))
    os.replace(tmp, address_file)
    _log.info("OpenAI API on http://%s:%d/v1 (frontend %d, runtime dir %s)", host, port,
              frontend, runtime)
    while parent_pid:
        await asyncio.sleep(_PARENT_CHECK_S)
        if os.getppid() != parent_pid:
            _log.warning("parent process %d is gone; shutting down", parent_pid)
            server.should_exit = True
            return


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m textproc.http`` argument parser."""
    from textproc.http.server import HttpLimits

    defaults = HttpLimits()
    p = argparse.ArgumentParser(prog="python -m textproc.http",
                                description="the OpenAI-compatible HTTP frontend of textproc")
    p.add_argument("--runtime-dir", required=True, help="a running service's runtime dir")
    p.add_argument("--http", default=DEFAULT_HTTP,
                   help=f"HOST:PORT to listen on (default {DEFAULT_HTTP})")
    p.add_argument("--listen-fd", type=int, default=None, metavar="FD",
                   help="serve this inherited listening socket instead of binding --http "
                        "(what serve --http-workers passes; default: none)")
    p.add_argument("--health-file", default=None, metavar="FILE",
                   help="publish this frontend's state there every 50 ms for python -m "
                        "textproc.http.health, the --health port's process (default: none)")
    p.add_argument("--health-stale-after", type=float, default=None, metavar="SECONDS",
                   help="the health port calls this frontend stuck once its event loop has not "
                        "run for this long (default 10)")
    p.add_argument("--frontend", default="0/1", metavar="I/N",
                   help="this is frontend I of N sharing the port; /metrics sums all N "
                        "(default 0/1)")
    p.add_argument("--served-model-name", default=None,
                   help="the model name clients send (default: the model directory's name)")
    p.add_argument("--max-body-bytes", type=int, default=None,
                   help=f"larger request bodies get 413 (default {defaults.max_body_bytes})")
    p.add_argument("--max-running", type=int, default=None,
                   help=f"generation requests in flight before 429 (default {defaults.max_running})")
    p.add_argument("--max-connections", type=int, default=None,
                   help="open connections before new ones get 503 and are closed "
                        f"(default {defaults.max_connections})")
    p.add_argument("--max-n", type=int, default=None,
                   help=f"choices per request (n) before 400 (default {defaults.max_n})")
    p.add_argument("--header-timeout", type=float, default=None, metavar="SECONDS",
                   help="close a connection whose request headers are not complete by then "
                        f"(default {defaults.header_timeout_s:g})")
    p.add_argument("--body-timeout", type=float, default=None, metavar="SECONDS",
                   help="answer 408 when the request body is not complete by then "
                        f"(default {defaults.body_timeout_s:g})")
    p.add_argument("--connect-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long to wait for the service's endpoints.json and detokenizer "
                        "(default 60)")
    p.add_argument("--parent-pid", type=int, default=0,
                   help="exit when this process (the supervisor) is gone (default 0: none)")
    p.add_argument("--http-file", default=None,
                   help=f"where to write the bound address (default RUNTIME_DIR/{HTTP_FILE})")
    p.add_argument("--api-key-file", default=None,
                   help="file holding the API key clients must send as 'Authorization: Bearer' "
                        "(default: none, no key needed)")
    p.add_argument("--log-level", default="INFO", choices=LOG_LEVELS,
                   help="log level (default INFO)")
    p.add_argument("--curve-client-key", default=None, metavar="FILE",
                   help="CURVE key pair (*.key_secret) for a service started with --curve-dir "
                        "(default: the key endpoints.json names, for a frontend on the same host)")
    p.add_argument("--curve-server-key", default=None, metavar="FILE",
                   help="the service's public server.key (default: from endpoints.json)")
    p.add_argument("--test-hooks", action="store_true",
                   help="add POST /_test/block-loop?seconds=S, which blocks the event loop "
                        "(integration tests only; never in production)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m textproc.http --runtime-dir DIR [--http HOST:PORT] ...``."""
    p = build_parser()
    args = p.parse_args(argv)
    index_text, _, n_text = args.frontend.partition("/")
    if not (index_text.isdigit() and n_text.isdigit() and int(index_text) < int(n_text)):
        p.error(f"--frontend {args.frontend!r} is not I/N with 0 <= I < N, e.g. 0/2")
    try:
        parse_address(args.http)
    except InvalidInput as e:
        p.error(str(e))
    api_key = None
    if args.api_key_file:
        try:
            api_key = Path(args.api_key_file).read_text().strip()
        except OSError as e:
            p.error(f"--api-key-file {args.api_key_file}: {e.strerror}")
        if not api_key:
            p.error(f"--api-key-file {args.api_key_file} is empty")
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s http[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    try:  # bound here, before connecting to the service: a taken port is exit code 1 at once
        listener = (socket.socket(fileno=args.listen_fd) if args.listen_fd is not None
                    else listen(args.http))
    except (TextprocError, OSError) as e:
        _log.error("%s", e)
        return 1
    return run_http(
        args.runtime_dir,
        listener=listener,
        health_file=args.health_file,
        frontend=int(index_text),
        frontends=int(n_text),
        health_stale_after_s=args.health_stale_after,
        test_hooks=args.test_hooks,
        served_model_name=args.served_model_name,
        max_body_bytes=args.max_body_bytes,
        max_running=args.max_running,
        max_connections=args.max_connections,
        max_n=args.max_n,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        connect_timeout_s=args.connect_timeout,
        parent_pid=args.parent_pid,
        log_level=args.log_level,
        http_file=args.http_file,
        api_key=api_key,
        curve_client_key=args.curve_client_key,
        curve_server_key=args.curve_server_key,
    )
