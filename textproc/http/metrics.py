"""Prometheus metrics of the HTTP frontend: counters, gauges and histograms, text exposition.

Owns the metric names and the text format (version 0.0.4), hand-written: a few dicts and lists,
no registry package. Must not block or do I/O; the server renders it on ``GET /metrics``.
Histograms are cumulative in the output as Prometheus requires (``le`` buckets, ``+Inf``,
``_sum``, ``_count``).
"""

from __future__ import annotations

import asyncio
import bisect
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = ["Histogram", "Metrics", "CONTENT_TYPE", "LATENCY_BUCKETS_S", "STAGES",
           "watch_loop_lag", "LAG_PROBE_S"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# 100 us .. 60 s: stage timings are sub-millisecond (tokenize) to seconds (queue, whole request)
LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)
# per-stage latency histogram labels: the first four come from TextEvent.timings (template and
# tokenize: worker time per request; queue: the rest of the way to the worker and back;
# detokenize: the detokenizer's time per step, observed once per streamed event);
# "first_token" (submit to the first text) and "request" (submit to finish) are measured here
STAGES = ("template", "tokenize", "queue", "detokenize", "first_token", "request")


class Histogram:
    """Fixed-bucket histogram; ``observe`` is O(log buckets)."""

    def __init__(self, buckets: Iterable[float] = LATENCY_BUCKETS_S) -> None:
        self.bounds = tuple(sorted(buckets))
        self.counts = [0] * (len(self.bounds) + 1)  # last slot: above every bound (+Inf only)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def add(self, counts: Sequence[int], total: float) -> None:
        """Add another process's histogram of the same buckets (``counts``, ``total``)."""
        if len(counts) == len(self.counts):
            self.counts = [a + b for a, b in zip(self.counts, counts)]
            self.total += total
            self.count += sum(counts)

    def lines(self, name: str, labels: str) -> list[str]:
        sep = "," if labels else ""
        out = []
        running = 0
        for bound, n in zip(self.bounds, self.counts):
            running += n
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound:g}"}} {running}')
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}')
        braces = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{braces} {self.total:.9g}")
        out.append(f"{name}_count{braces} {self.count}")
        return out


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Everything ``/metrics`` shows; the server updates it inline (single event loop thread)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = {}  # (endpoint, status) -> count
        self.finish_reasons: dict[str, int] = {}
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.running = 0  # requests being served now
        self.aborted_by_client = 0
        self.upload_disconnects = 0  # clients gone before their request body was read
        # connection guards (textproc.http.connections, asgi.read_body)
        self.open_connections = 0
        self.connections_refused = 0  # over --max-connections: 503 and closed
        self.header_timeouts = 0  # request headers not complete within --header-timeout
        self.body_timeouts = 0  # request body not complete within --body-timeout: 408
        self.framing_refused = 0  # Transfer-Encoding and Content-Length both: 400
        self.health_on_accept = 0  # /health probes answered on accept (textproc.http.probe)
        self.stages = {stage: Histogram() for stage in STAGES}
        # how late the event loop runs a timer (watch_loop_lag): every request waits this much
        self.loop_lag = Histogram()
        self.loop_lag_max_s = 0.0  # worst since the last /metrics scrape

    # the plain numbers a snapshot carries and add() sums (frontends sharing a port)
    _SUMMED = ("prompt_tokens", "completion_tokens", "running", "aborted_by_client",
               "upload_disconnects", "open_connections", "connections_refused",
               "header_timeouts", "body_timeouts", "framing_refused", "health_on_accept")

    def snapshot(self) -> dict[str, Any]:
        """Everything this process's ``render`` shows, as JSON-able data, for ``add``."""
        return {
            "requests": [[e, s, n] for (e, s), n in self.requests.items()],
            "finish_reasons": dict(self.finish_reasons),
            **{name: getattr(self, name) for name in self._SUMMED},
            "stages": {k: [h.counts, h.total] for k, h in self.stages.items()},
            "loop_lag": [self.loop_lag.counts, self.loop_lag.total],
            "loop_lag_max_s": self.loop_lag_max_s,
        }

    def add(self, snap: Mapping[str, Any]) -> None:
        """Add another frontend's ``snapshot()`` into this one (counters, gauges and histograms
        summed; the worst loop lag is the max). A malformed snapshot raises KeyError,
        TypeError or ValueError."""
        for endpoint, status, n in snap["requests"]:
            key = (str(endpoint), int(status))
            self.requests[key] = self.requests.get(key, 0) + int(n)
        for reason, n in snap["finish_reasons"].items():
            self.finish_reasons[reason] = self.finish_reasons.get(reason, 0) + int(n)
        for name in self._SUMMED:
            setattr(self, name, getattr(self, name) + int(snap[name]))
        for stage, (counts, total) in snap["stages"].items():
            if stage in self.stages:
                self.stages[stage].add(counts, float(total))
        self.loop_lag.add(snap["loop_lag"][0], float(snap["loop_lag"][1]))
        self.loop_lag_max_s = max(self.loop_lag_max_s, float(snap["loop_lag_max_s"]))

    def start_lag_window(self) -> None:
        """Start a new "worst loop lag since the previous scrape" window (the /metrics route
        calls it once it has the scrape's copy; ``render`` itself changes nothing)."""
        self.loop_lag_max_s = 0.0

    def count_request(self, endpoint: str, status: int) -> None:
        key = (endpoint, status)
        self.requests[key] = self.requests.get(key, 0) + 1

    def count_finish(self, reason: str) -> None:
        self.finish_reasons[reason] = self.finish_reasons.get(reason, 0) + 1

    def observe(self, stage: str, seconds: float) -> None:
        hist = self.stages.get(stage)
        if hist is not None and seconds >= 0:
            hist.observe(seconds)

    def render(
        self,
        queue_depths: Mapping[str, int] | None = None,
        processes: Sequence[tuple[str, int, Mapping[str, int]]] = (),
        worker_requests: Sequence[int] = (),
        frontends: Sequence[tuple[int, int, int]] = (),
    ) -> str:
        """The text exposition format, one metric family after another; changes nothing.

        ``processes``: (role, index, counters) of each service process (TextClient.stats()),
        exported as ``textproc_process_events_total{role, index, counter}``. ``frontends``:
        (index, pid, requests served) of each frontend process sharing the port, exported as
        ``textproc_http_frontend_requests_total{frontend, pid}``.
        """
        out: list[str] = []
        self._request_families(out, frontends)
        self._connection_families(out)
        _service_families(out, queue_depths or {}, processes, worker_requests)
        self._latency_families(out)
        return "\n".join(out) + "\n"

    def _request_families(self, out: list[str], frontends: Sequence[tuple[int, int, int]]) -> None:
        _family(out, "textproc_http_requests_total", "counter",
                "HTTP requests served, by endpoint and status code.")
        for (endpoint, status), n in sorted(self.requests.items()):
            out.append(
                f'textproc_http_requests_total{{endpoint="{_label(endpoint)}",'
                f'status="{status}"}} {n}'
            )
        _family(out, "textproc_http_frontend_requests_total", "counter",
                "HTTP requests each frontend process served (serve --http-workers N; the "
                "other families sum every frontend).")
        for index, pid, n in frontends:
            out.append(f'textproc_http_frontend_requests_total{{frontend="{index}",'
                       f'pid="{pid}"}} {n}')
        _family(out, "textproc_finished_requests_total", "counter",
                "Generation requests finished, by finish_reason (abort: client went away).")
        for reason, n in sorted(self.finish_reasons.items()):
            out.append(f'textproc_finished_requests_total{{reason="{_label(reason)}"}} {n}')
        _family(out, "textproc_prompt_tokens_total", "counter", "Prompt tokens of finished requests.")
        out.append(f"textproc_prompt_tokens_total {self.prompt_tokens}")
        _family(out, "textproc_completion_tokens_total", "counter", "Generated tokens sent to clients.")
        out.append(f"textproc_completion_tokens_total {self.completion_tokens}")
        _family(out, "textproc_requests_running", "gauge", "Generation requests in flight now.")
        out.append(f"textproc_requests_running {self.running}")
        _family(out, "textproc_client_disconnects_total", "counter",
                "Requests aborted because the HTTP client disconnected.")
        out.append(f"textproc_client_disconnects_total {self.aborted_by_client}")
        _family(out, "textproc_http_upload_disconnects_total", "counter",
                "Requests whose client disconnected before sending the whole body.")
        out.append(f"textproc_http_upload_disconnects_total {self.upload_disconnects}")

    def _connection_families(self, out: list[str]) -> None:
        _family(out, "textproc_http_connections_open", "gauge", "HTTP connections open now.")
        out.append(f"textproc_http_connections_open {self.open_connections}")
        for name, value, text in (
            ("connections_refused", self.connections_refused,
             "Connections refused with 503 because --max-connections were open."),
            ("header_timeouts", self.header_timeouts,
             "Connections closed because request headers took longer than --header-timeout."),
            ("body_timeouts", self.body_timeouts,
             "Requests answered 408 because the body took longer than --body-timeout."),
            ("framing_refused", self.framing_refused,
             "Requests refused (400) for carrying both Transfer-Encoding and Content-Length."),
            ("health_on_accept", self.health_on_accept,
             "GET /health probes answered where their connection was accepted (also in "
             "textproc_http_requests_total)."),
        ):
            _family(out, f"textproc_http_{name}_total", "counter", text)
            out.append(f"textproc_http_{name}_total {value}")

    def _latency_families(self, out: list[str]) -> None:
        _family(out, "textproc_http_loop_lag_seconds", "histogram",
                f"How late the HTTP frontend's event loop ran a {LAG_PROBE_S:g} s timer: what "
                "every request and stream waits on top of its own work.")
        out.extend(self.loop_lag.lines("textproc_http_loop_lag_seconds", ""))
        _family(out, "textproc_http_loop_lag_max_seconds", "gauge",
                "The worst loop lag since the previous scrape of /metrics (with several "
                "frontends: the worst any of them saw since it last answered a scrape).")
        out.append(f"textproc_http_loop_lag_max_seconds {self.loop_lag_max_s:.6f}")
        _family(out, "textproc_stage_seconds", "histogram",
                "Per-stage latency: template, tokenize, queue, detokenize (as reported by the "
                "service); first_token and request (measured by the HTTP frontend).")
        for stage, hist in self.stages.items():
            out.extend(hist.lines("textproc_stage_seconds", f'stage="{stage}"'))


def _family(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def _service_families(out: list[str], queue_depths: Mapping[str, int],
                      processes: Sequence[tuple[str, int, Mapping[str, int]]],
                      worker_requests: Sequence[int]) -> None:
    _family(out, "textproc_queue_depth", "gauge",
            "Requests pending at each tokenizer worker, as this frontend sees them.")
    for worker, depth in sorted(queue_depths.items()):
        out.append(f'textproc_queue_depth{{worker="{_label(worker)}"}} {depth}')
    _family(out, "textproc_worker_requests_total", "counter",
            "Requests this frontend sent to each tokenizer worker (how the load spreads).")
    for index, n in enumerate(worker_requests):
        out.append(f'textproc_worker_requests_total{{worker="{index}"}} {n}')
    _family(out, "textproc_process_events_total", "counter",
            "Counters of each service process (worker, detokenizer), for all its clients; "
            "they restart from 0 when the process is restarted.")
    for role, index, counters in processes:
        for name, value in sorted(counters.items()):
            if name != "pid":
                out.append(f'textproc_process_events_total{{role="{_label(role)}",'
                           f'index="{index}",counter="{_label(name)}"}} {value}')


LAG_PROBE_S = 0.05  # watch_loop_lag's timer


async def watch_loop_lag(metrics: Metrics,
                         on_probe: Callable[[float], None] | None = None) -> None:
    """Until cancelled: sleep LAG_PROBE_S, observe how much later than asked the loop woke,
    and pass the lag to ``on_probe`` (the health thread's heartbeat)."""
    while True:
        start = time.perf_counter()
        await asyncio.sleep(LAG_PROBE_S)
        lag = max(0.0, time.perf_counter() - start - LAG_PROBE_S)
        metrics.loop_lag.observe(lag)
        if lag > metrics.loop_lag_max_s:
            metrics.loop_lag_max_s = lag
        if on_probe is not None:
            on_probe(lag)
