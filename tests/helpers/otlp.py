"""A tiny OTLP/HTTP traces collector in the test process: the spans a service exports to
it, decoded with ``opentelemetry-proto`` (a test dependency)."""

from __future__ import annotations

import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_pb2

__all__ = ["Collector", "span_attributes"]


class Collector:
    """An OTLP/HTTP traces endpoint on a free port: every span it is sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.lock = threading.Lock()
        spans, lock = self.spans, self.lock

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                request = trace_pb2.ExportTraceServiceRequest.FromString(body)
                with lock:
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            spans.extend(scope.spans)
                answer = trace_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def wait(self, name: str, n: int, timeout_s: float = 20) -> list[Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            with self.lock:
                got = [s for s in self.spans if s.name == name]
            if len(got) >= n or time.monotonic() > deadline:
                return got
            time.sleep(0.1)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def span_attributes(span: Any) -> dict[str, Any]:
    """A span's attributes as plain values (string arrays as lists)."""
    out: dict[str, Any] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind)
        out[kv.key] = [v.string_value for v in value.values] if kind == "array_value" else value
    return out
