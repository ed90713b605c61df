"""OpenTelemetry spans of the generation requests a frontend serves (``--otlp-traces-endpoint``).

Owns the span of each request, ``llm_request`` (vLLM's name and ``gen_ai.*`` attributes), a
child of the W3C ``traceparent`` the request came with, its events (``received``,
``tokenized``, ``queued``, ``first_token``, ``finished``) and its child spans between them
(``tokenize``: received to tokenized; ``prefill``: queued in the engine to the first token;
``decode``: the first token to the end). Spans are exported over OTLP/HTTP by the SDK's
batch processor, on its own thread: nothing here waits for the collector.

Off by default and free when off: the frontend then holds no :class:`Tracer`, every request
pays one ``is None`` check, and nothing of ``opentelemetry`` is imported (the imports are in
:meth:`Tracer.start`, for that reason). Must not raise into a request: a span is built at the
request's end from the times it kept.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any, Mapping

from textproc.errors import InvalidInput

__all__ = ["RequestTrace", "Tracer", "check_available"]

_EXPORT_EVERY_MS = 1000  # the batch processor's delay: spans reach the collector within ~1 s


_PACKAGES = "opentelemetry-sdk opentelemetry-exporter-otlp-proto-http"
_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")


def check_available(endpoint: str) -> None:
    """Raise InvalidInput naming the packages when the OpenTelemetry SDK or its OTLP/HTTP
    exporter is not installed (``serve`` checks before it starts any frontend)."""
    for module in _MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            raise InvalidInput(f"--otlp-traces-endpoint {endpoint!r} needs the OpenTelemetry "
                               f"SDK: no module {module}; pip install {_PACKAGES}")


class Tracer:
    """One frontend's OpenTelemetry tracer, exporting to an OTLP/HTTP traces endpoint."""

    def __init__(self, provider: Any, tracer: Any, propagator: Any, trace_api: Any) -> None:
        self.provider = provider
        self.tracer = tracer
        self.propagator = propagator
        self.trace_api = trace_api

    @classmethod
    def start(cls, endpoint: str, *, service_name: str = "textproc") -> Tracer:
        """A tracer exporting to ``endpoint`` (``http://HOST:4318/v1/traces``).

        Raises InvalidInput naming the packages when the OpenTelemetry SDK is not installed.
        """
        try:
            # imported here, not at the top: a frontend without --otlp-traces-endpoint never
            # imports opentelemetry (an optional dependency; its import costs time and memory)
            from opentelemetry import trace as trace_api
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation import tracecontext
        except ImportError as e:
            raise InvalidInput(
                f"--otlp-traces-endpoint {endpoint!r} needs the OpenTelemetry SDK: {e}; "
                f"pip install {_PACKAGES}") from e
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint),
                                                       schedule_delay_millis=_EXPORT_EVERY_MS))
        return cls(provider, provider.get_tracer("textproc.http"),
                   tracecontext.TraceContextTextMapPropagator(), trace_api)

    def begin(self, headers: Mapping[str, str]) -> RequestTrace:
        """The trace of one request received now, under its ``traceparent`` (if any)."""
        return RequestTrace(self, self.propagator.extract(carrier=headers))

    def close(self) -> None:
        """Export what is left and stop the exporter's thread."""
        self.provider.shutdown()


class RequestTrace:
    """The times of one request, kept as it goes and made into spans at its end."""

    def __init__(self, tracer: Tracer, parent: Any) -> None:
        self.tracer = tracer
        self.parent = parent  # the context of the incoming traceparent (empty without one)
        self.received_ns = time.time_ns()
        self.tokenized_ns: int | None = None
        self.queued_ns: int | None = None
        self.first_token_ns: int | None = None

    def accepted(self, timings_s: Mapping[str, float]) -> None:
        """The service accepted the request (its first output, with the stage timings): it was
        tokenized and is queued in the engine now."""
        now = time.time_ns()
        transport_s = timings_s.get("queue", 0.0)
        work_s = timings_s.get("template", 0.0) + timings_s.get("tokenize", 0.0)
        # the worker's end of work: the round trip's transport split evenly either way
        self.tokenized_ns = min(now, self.received_ns + int((transport_s / 2 + work_s) * 1e9))
        self.queued_ns = now

    def first_token(self) -> None:
        if self.first_token_ns is None:
            self.first_token_ns = time.time_ns()

    def finish(self, *, finish_reasons: list[str], model: str, prompt_tokens: int,
               completion_tokens: int) -> None:
        """Make and end the spans: the request ended now (its choices with
        ``finish_reasons``; none: it was aborted)."""
        end_ns = time.time_ns()
        queued = self.queued_ns or self.received_ns
        first = self.first_token_ns
        attributes = {
            "gen_ai.response.model": model,
            "gen_ai.usage.prompt_tokens": prompt_tokens,
            "gen_ai.usage.completion_tokens": completion_tokens,
            "gen_ai.usage.num_sequences": len(finish_reasons),
            "gen_ai.response.finish_reasons": finish_reasons or ["abort"],
            "gen_ai.latency.e2e": (end_ns - self.received_ns) / 1e9,
            "gen_ai.latency.time_in_queue": (queued - self.received_ns) / 1e9,
        }
        if first is not None:
            attributes["gen_ai.latency.time_to_first_token"] = (first - self.received_ns) / 1e9
        api = self.tracer.trace_api
        span = self.tracer.tracer.start_span("llm_request", context=self.parent,
                                             kind=api.SpanKind.SERVER, attributes=attributes,
                                             start_time=self.received_ns)
        marks = [("received", self.received_ns), ("tokenized", self.tokenized_ns),
                 ("queued", self.queued_ns), ("first_token", first), ("finished", end_ns)]
        for name, at in marks:
            if at is not None:
                span.add_event(name, timestamp=at)
        inner = api.set_span_in_context(span)
        for name, start, end in (("tokenize", self.received_ns, self.tokenized_ns),
                                 ("prefill", self.queued_ns, first),
                                 ("decode", first, end_ns)):
            if start is not None and end is not None:
                self.tracer.tracer.start_span(name, context=inner,
                                              start_time=start).end(end_time=end)
        span.end(end_time=end_ns)
