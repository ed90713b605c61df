"""The HTTP frontend process: ``run_http`` (entry function) and ``python -m textproc.http``.

Owns the process plumbing around the API (``server.build_app``): logging, the listening socket
(bound here, or inherited with ``--listen-fd`` from ``serve --http-workers N``, shared with the
other frontends), uvicorn on uvloop accepting in bursts (``accept``) with ``/health`` probes
answered on accept (``probe``), the TextClient's lifetime (connected on startup inside the
server's loop, closed on shutdown), the address file (the address actually bound, so
``--http 127.0.0.1:0`` works: the supervisor's ready check), the state published for the
``--health`` port's process (``health.StatePublisher``), the heap (frozen once started, glibc's
``malloc_trim`` when idle), and leaving when the parent supervisor is gone. Its settings are one
``settings.FrontendSettings``; it reads no environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import socket
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Sequence

import msgspec
import uvicorn

from textproc.errors import TextprocError
from textproc.heap import freeze_heap
from textproc.http.accept import BatchAcceptingServer
from textproc.http.client_backend import ClientBackend
from textproc.http.connections import guarded_http
from textproc.http.health import StatePublisher
from textproc.http.metrics import Metrics, watch_loop_lag
from textproc.http.probe import reply
from textproc.http.server import build_app, health_answer
from textproc.http.settings import FrontendSettings, parse
from textproc.http.tracing import Tracer
from textproc.lifecycle import ParentWatch, setup_logging
from textproc.ports import listen

__all__ = ["run_http", "GC_THRESHOLDS", "main"]

_log = logging.getLogger("textproc.http")


def run_http(settings: FrontendSettings, listener: socket.socket) -> int:
    """Serve the API on ``listener`` (a listening socket, maybe shared with other frontends)
    for the service in ``settings.runtime_dir``; returns 0.

    Blocks until SIGINT/SIGTERM (uvicorn's graceful shutdown) or until ``settings.parent_pid``
    exits. Once serving, writes ``{"host", "port", "pid", "frontend"}`` to
    ``settings.address_file`` and removes it at shutdown. With ``health_file``, publishes its
    state there every loop-lag probe for ``python -m textproc.http.health``. Without an
    ``api_key``, serving a non-loopback host logs a warning.
    """
    setup_logging("http", settings.log_level)  # a no-op when main() did it already
    index = settings.frontend[0]
    runtime = Path(settings.runtime_dir)
    metrics = Metrics()
    metrics.set_frontend(index, os.getpid())
    backend = ClientBackend(runtime, served_model_name=settings.served_model_name,
                            lora_modules=dict(settings.lora_modules),
                            connect_timeout_s=settings.connect_timeout_s,
                            curve_client_key=settings.curve_client_key,
                            curve_server_key=settings.curve_server_key,
                            engine_stats_file=settings.engine_stats_file)
    health = None if settings.health_file is None else StatePublisher(
        Path(settings.health_file), stale_after_s=settings.health_stale_after_s)
    server: uvicorn.Server | None = None
    tracer = None if settings.otlp_traces_endpoint is None else Tracer.start(
        settings.otlp_traces_endpoint, service_name=f"textproc-http-{index}")

    def beat(lag_s: float) -> None:  # every loop-lag probe: tell the health process
        if health is not None:
            serving, why = backend.health()
            health.publish(serving, why, lag_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        await backend.start()
        freeze_heap(GC_THRESHOLDS)  # see GC_THRESHOLDS
        tasks = [asyncio.ensure_future(_after_bind(settings, lambda: server)),
                 asyncio.ensure_future(watch_loop_lag(metrics, beat)),
                 asyncio.ensure_future(_return_memory_when_idle(metrics)),
                 asyncio.ensure_future(_refresh_metrics(metrics, backend))]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await backend.close()
            beat(0.0)  # "shutting down"
            settings.address_file.unlink(missing_ok=True)
            metrics.flush()  # the last second's counts
            if tracer is not None:
                tracer.close()

    host = str(listener.getsockname()[0])
    if settings.api_key is None and host not in ("127.0.0.1", "::1", "localhost"):
        _log.warning("serving the API on %s without an API key: anyone who can reach it can "
                     "use it (pass --api-key-file)", host)
    if settings.test_hooks:
        _log.warning("--test-hooks: POST /_test/block-loop can block this frontend; tests only")
    app = build_app(backend, limits=settings.limits, metrics=metrics, lifespan=lifespan,
                    api_key=settings.api_key, test_hooks=settings.test_hooks,
                    admin_routes=settings.admin_routes, tracer=tracer,
                    runtime_lora=settings.runtime_lora)
    config = _uvicorn_config(app, settings, metrics)

    def answer_probe(data: bytes) -> bytes | None:  # a /health probe, answered on accept
        got = reply(data, lambda: health_answer(backend, metrics), config.headers)
        if got is not None:
            metrics.count("http_health_on_accept")
        return got

    try:
        server = BatchAcceptingServer(config, answer=answer_probe)
        server.run(sockets=[listener])
    finally:
        if health is not None:
            health.close()
    return 0


_IDLE_CHECK_S = 2.0
# Collection thresholds while serving (CPython's default is 700, 10, 10). Under a crowd of 500
# streams the default ran 46 full (generation 2) collections in 25 s, each 45-60 ms of CPU
# and 0 objects found: the frontend's longest loop stalls (bench/crowd.py with gc.callbacks).
# (5000, 20, 50) traded them for generation-1 scans of ~100,000 young objects (30 ms each);
# with these no collection took over 16 ms of CPU in the same run.
GC_THRESHOLDS = (1000, 10, 1000)


_REFRESH_METRICS_S = 1.0


async def _refresh_metrics(metrics: Metrics, backend: ClientBackend) -> None:
    """Until cancelled: every _REFRESH_METRICS_S, the sampled values of this frontend (its
    queues, its CPU) into the families every frontend's scrape reads."""
    while True:
        await asyncio.sleep(_REFRESH_METRICS_S)
        metrics.refresh(backend.queue_depths(), backend.worker_requests())


async def _return_memory_when_idle(metrics: Any) -> None:
    """Once requests have come and gone (none running, none new for _IDLE_CHECK_S): collect
    and hand freed heap pages back to the OS (glibc ``malloc_trim``). After a crowd of 1,500
    streams the RSS stayed at 76 MB (38 MB before); with this it went back to 52 MB."""
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to do
        return

    seen = 0
    while True:
        await asyncio.sleep(_IDLE_CHECK_S)
        served = metrics.finished  # generation requests (not /health)
        if metrics.running == 0 and served != seen:
            seen = served
            gc.collect()
            trim(0)


def _uvicorn_config(app: Any, settings: FrontendSettings, metrics: Metrics) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        loop="uvloop",
        http=guarded_http(max_connections=settings.limits.max_connections,
                          header_timeout_s=settings.limits.header_timeout_s, metrics=metrics),
        lifespan="on",
        log_level=settings.log_level.lower(),
        log_config=None,  # uvicorn's loggers propagate to the root handler run_http set up
        access_log=False,
        timeout_graceful_shutdown=3,  # open streams get 3 s, then abort (supervisor kills at 5 s)
        headers=[("x-textproc-frontend", str(settings.frontend[0]))],  # which process answered
    )


async def _after_bind(settings: FrontendSettings, get_server: Callable[[], Any]) -> None:
    """Write the address file once uvicorn serves; then leave when the parent process is gone."""
    server = None
    while server is None or not server.started:
        await asyncio.sleep(0.02)
        server = get_server()
    addresses = [sock.getsockname() for srv in server.servers for sock in srv.sockets]
    host, port = addresses[0][0], addresses[0][1]
    index = settings.frontend[0]
    info: dict[str, Any] = {"host": host, "port": port, "pid": os.getpid(), "frontend": index}
    address_file = settings.address_file
    tmp = address_file.with_name(address_file.name + ".tmp")
    tmp.write_bytes(msgspec.json.encode(info))
    os.replace(tmp, address_file)
    _log.info("OpenAI API on http://%s:%d/v1 (frontend %d, runtime dir %s)", host, port,
              index, settings.runtime_dir)
    await ParentWatch(settings.parent_pid).wait_gone()
    server.should_exit = True


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m textproc.http --runtime-dir DIR [--http HOST:PORT] ...``."""
    settings = parse(argv)
    setup_logging("http", settings.log_level)
    try:  # bound here, before connecting to the service: a taken port is exit code 1 at once
        listener = (socket.socket(fileno=settings.listen_fd) if settings.listen_fd is not None
                    else listen(settings.http))
    except (TextprocError, OSError) as e:
        _log.error("%s", e)
        return 1
    return run_http(settings, listener)
