"""Prometheus metrics of the HTTP frontends, through ``prometheus_client``: vLLM's families and
textproc's own.

Owns every metric name, type, label set and bucket list, and the scrape. vLLM's families keep
vLLM's names, types, labels (``model_name``, ``engine``) and buckets (vLLM 0.32's
``vllm/v1/metrics``), so its dashboards and autoscalers read textproc as they read ``vllm serve``:
the per-request ones are measured here, where every request passes; the engine's scheduler
gauges (running, waiting, KV-cache usage) are relayed from the engine's stats file, one
``engine`` label per rank. textproc's own families go beside them under ``textproc_``.

Several frontends share one port (``serve --http-workers N``), so a scrape that lands on any one
of them must show the sum of all: prometheus_client's multi-process mode (its values in mmap
files under ``PROMETHEUS_MULTIPROC_DIR``, which the supervisor gives the frontends; it is
prometheus_client that reads it, once, when first imported). Without that directory (one
frontend alone, tests) the same families live in this process's registry. Either way the
request path only counts in this process's memory (``CounterBatch``, ``HistogramBatch``), handed
to prometheus_client every second and before a scrape (``Metrics.flush``). Values that belong
to the moment of the scrape (the service processes' counters, the engine's gauges) are added at
scrape time by the frontend that answers. Must not block or do I/O on the request path.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values as _prom_values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = ["CONTENT_TYPE", "CounterBatch", "HistogramBatch", "LAG_PROBE_S", "LATENCY_BUCKETS_S",
           "STAGES", "Metrics", "ScrapeInputs", "VLLM_FINISH_REASONS", "engine_gauges",
           "request_token_buckets", "watch_loop_lag"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
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

# vLLM's bucket lists (vllm/v1/metrics/buckets.py), by the family that uses them
_REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                              40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
_TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                   5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
# vLLM's finished_reason label values (vllm.v1.engine.FinishReason); textproc's "tool_calls"
# is the engine's "stop"
VLLM_FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
_VLLM_LABELS = ["model_name", "engine"]
# the engine label of the families measured here: one per server, as vLLM's single engine
_FRONT_ENGINE = "0"


def request_token_buckets(max_model_len: int) -> list[float]:
    """vLLM's token-count buckets: 1, 2, 5 times each power of ten, up to ``max_model_len``.

    >>> request_token_buckets(100)
    [1, 2, 5, 10, 20, 50, 100]
    """
    out: list[float] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return out
            out.append(mantissa * scale)
        scale *= 10


def _multiprocess() -> bool:
    """Whether prometheus_client keeps its values in files (PROMETHEUS_MULTIPROC_DIR was set
    when it was imported)."""
    return bool(getattr(_prom_values.ValueClass, "_multiprocess", False))


class HistogramBatch:
    """A histogram's observations in this process, counted here and added to the
    prometheus_client histogram by ``flush()`` (every second, and before a scrape).

    An observation through prometheus_client costs two locked value writes (mmap files in the
    multi-process mode, ~5 us each observation); a streamed request observes ~10 histograms
    plus one per output, which took ~200 us of the frontend's CPU per request of 18 outputs
    (bench/tracing_off.py --multiprocess). Here an observation is a bisect; a flush adds one
    write per bucket touched since the last one, and one for the sum, through the histogram's
    own values (``_buckets``, ``_sum``: checked once by ``batchable``; without them each
    observation goes through ``observe`` at once).
    """

    __slots__ = ("child", "bounds", "counts", "total", "n")

    def __init__(self, child: Any, bounds: Sequence[float]) -> None:
        self.child = child
        self.bounds = tuple(bounds)  # the finite bounds, ascending
        self.counts: list[int] | None = [0] * (len(bounds) + 1) \
            if batchable(child, bounds) else None
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        counts = self.counts
        if counts is None:
            self.child.observe(value)
            return
        # prometheus_client counts a value in the first bucket whose bound is >= it
        counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def flush(self) -> None:
        """Add what was observed since the last flush to the histogram."""
        counts = self.counts
        if not self.n or counts is None:
            return
        buckets = self.child._buckets
        for i, k in enumerate(counts):
            if k:
                buckets[i].inc(k)
                counts[i] = 0
        self.child._sum.inc(self.total)
        self.total = 0.0
        self.n = 0


class CounterBatch:
    """A counter's increments in this process, added to the prometheus_client counter by
    ``flush()`` (see HistogramBatch)."""

    __slots__ = ("child", "pending")

    def __init__(self, child: Any) -> None:
        self.child = child
        self.pending = 0.0

    def inc(self, amount: float = 1) -> None:
        self.pending += amount

    def flush(self) -> None:
        if self.pending:
            self.child.inc(self.pending)
            self.pending = 0.0


def batchable(child: Any, bounds: Sequence[float]) -> bool:
    """Whether a prometheus_client histogram child has the values HistogramBatch adds to: one
    per bucket (the finite ``bounds`` and +Inf) and the sum."""
    buckets = getattr(child, "_buckets", None)
    upper = getattr(child, "_upper_bounds", None)
    return (isinstance(buckets, list) and hasattr(getattr(child, "_sum", None), "inc")
            and upper is not None and list(upper) == [*bounds, float("inf")]
            and all(hasattr(b, "inc") for b in buckets))


class _Batches:
    """Every batch of one process, flushed together."""

    def __init__(self) -> None:
        self.batches: list[HistogramBatch | CounterBatch] = []

    def counter(self, child: Any) -> CounterBatch:
        batch = CounterBatch(child)
        self.batches.append(batch)
        return batch

    def histogram(self, child: Any, bounds: Sequence[float]) -> HistogramBatch:
        batch = HistogramBatch(child, bounds)
        self.batches.append(batch)
        return batch

    def flush(self) -> None:
        for batch in self.batches:
            batch.flush()


class _VllmFamilies:
    """vLLM's per-request families of one served model, measured by this frontend."""

    def __init__(self, model_name: str, max_model_len: int,
                 registry: CollectorRegistry | None, batches: _Batches) -> None:
        self.model_name = model_name
        labels = (model_name, _FRONT_ENGINE)

        def counter(name: str, text: str) -> CounterBatch:
            return batches.counter(Counter(name, text, _VLLM_LABELS,
                                           registry=registry).labels(*labels))

        def histogram(name: str, text: str, buckets: Sequence[float]) -> HistogramBatch:
            return batches.histogram(Histogram(name, text, _VLLM_LABELS, registry=registry,
                                               buckets=buckets).labels(*labels), buckets)

        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.")
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits",
                                   "Prefix cache hits, in terms of number of cached tokens.")
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          [*_VLLM_LABELS, "finished_reason"], registry=registry)
        self.success = {reason: batches.counter(success.labels(*labels, reason))
                        for reason in VLLM_FINISH_REASONS}
        token_buckets = request_token_buckets(max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets)
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.",
            token_buckets)
        self.ttft = histogram("vllm:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", _TTFT_BUCKETS_S)
        self.itl = histogram("vllm:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", _ITL_BUCKETS_S)
        self.e2e = histogram("vllm:e2e_request_latency_seconds",
                             "Histogram of e2e request latency in seconds.",
                             _REQUEST_LATENCY_BUCKETS_S)
        # textproc cannot see the engine's waiting queue: this is the time from the request's
        # arrival until it was handed to the engine (template, tokenize, the way to a worker)
        self.queue = histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.",
                               _REQUEST_LATENCY_BUCKETS_S)


@dataclass(slots=True)
class ScrapeInputs:
    """What a scrape adds to the families this process keeps: the moment's values."""

    model_name: str = "model"
    # (role, index, counters) of each service process (TextClient.stats())
    processes: Sequence[tuple[str, int, Mapping[str, int]]] = ()
    # the engine's stats file (engine_vllm, or the vLLM front of several engines), {} if none
    engine_stats: Mapping[str, Any] = field(default_factory=dict)


class Metrics:
    """Every family ``/metrics`` shows; the server updates it inline (one event-loop thread).

    ``running`` (generation requests in flight here) and ``finished`` (finished here) are this
    process's own plain counts as well, for the in-flight limit and the idle heap trim. Counts
    and observations reach prometheus_client at ``flush()`` (every second from the frontend's
    refresh task, and before a scrape): another frontend's part of a scrape is up to a second
    old, and a frontend killed loses its last second.
    """

    def __init__(self) -> None:
        self.multiprocess = _multiprocess()
        # single-process mode: this registry is the scrape; multi-process: the files are
        self.registry = CollectorRegistry(auto_describe=False)
        reg = None if self.multiprocess else self.registry
        self._registry_arg = reg
        self.running = 0
        self.finished = 0
        self.loop_lag_max_s = 0.0  # the worst since this process last answered a scrape
        self._vllm: _VllmFamilies | None = None
        self._batches = batches = _Batches()
        self._open_connections = 0
        self._requests = Counter("textproc_http_requests", "HTTP requests served, by endpoint "
                                 "and status code.", ["endpoint", "status"], registry=reg)
        self._frontend_requests: CounterBatch | None = None  # labelled at set_frontend
        self._frontend_family = Counter(
            "textproc_http_frontend_requests", "HTTP requests each frontend process served "
            "(serve --http-workers N; the other families sum every frontend).",
            ["frontend", "pid"], registry=reg)
        self._running = Gauge("textproc_requests_running", "Generation requests in flight now "
                              "at the HTTP frontends.", registry=reg, multiprocess_mode="livesum")
        self._open = Gauge("textproc_http_connections_open", "HTTP connections open now.",
                           registry=reg, multiprocess_mode="livesum")
        self._events = {name: batches.counter(Counter(f"textproc_{name}", text, registry=reg))
                        for name, text in _EVENT_COUNTERS.items()}
        self._stages = Histogram("textproc_stage_seconds", "Per-stage latency: template, "
                                 "tokenize, queue, detokenize (as reported by the service); "
                                 "first_token and request (measured by the HTTP frontend).",
                                 ["stage"], buckets=LATENCY_BUCKETS_S, registry=reg)
        self._stage = {stage: batches.histogram(self._stages.labels(stage), LATENCY_BUCKETS_S)
                       for stage in STAGES}
        self._request_counts: dict[tuple[str, int], CounterBatch] = {}  # (endpoint, status)
        self._lag = batches.histogram(Histogram(
            "textproc_http_loop_lag_seconds", "How late the HTTP frontend's event loop ran a "
            f"{LAG_PROBE_S:g} s timer: what every request and stream waits on top of its own "
            "work.", buckets=LATENCY_BUCKETS_S, registry=reg), LATENCY_BUCKETS_S)
        self._lag_max = Gauge("textproc_http_loop_lag_max_seconds", "The worst loop lag since "
                              "the previous scrape of /metrics (with several frontends: the "
                              "worst any of them saw since it last answered a scrape).",
                              registry=reg, multiprocess_mode="livemax")
        self._queue = Gauge("textproc_queue_depth", "Requests pending at each tokenizer worker, "
                            "as the frontends see them.", ["worker"], registry=reg,
                            multiprocess_mode="livesum")
        self._worker_requests = Counter("textproc_worker_requests", "Requests the frontends "
                                        "sent to each tokenizer worker (how the load spreads).",
                                        ["worker"], registry=reg)
        self._worker_seen: dict[int, int] = {}
        self._cpu = Counter("textproc_process_cpu_seconds", _CPU_HELP, ["role", "index"],
                            registry=reg)
        self._cpu_seen = 0.0
        self._own_cpu: Any = None

    # -- this frontend ------------------------------------------------------------------------

    def set_frontend(self, index: int, pid: int) -> None:
        """Label this process's own series as frontend ``index`` (process ``pid``)."""
        self._frontend_requests = self._batches.counter(
            self._frontend_family.labels(str(index), str(pid)))
        self._own_cpu = self._cpu.labels("http", str(index))

    def vllm(self, model_name: str, max_model_len: int | None) -> _VllmFamilies:
        """vLLM's per-request families for the served model (made on the first call: the model
        name and length are known once the backend has connected)."""
        if self._vllm is None:
            self._vllm = _VllmFamilies(model_name, max_model_len or _DEFAULT_MAX_MODEL_LEN,
                                       self._registry_arg, self._batches)
        return self._vllm

    # -- the request path ---------------------------------------------------------------------

    def count_request(self, endpoint: str, status: int) -> None:
        child = self._request_counts.get((endpoint, status))
        if child is None:  # endpoints are the routes' names: a few dozen pairs at most
            child = self._request_counts[endpoint, status] = self._batches.counter(
                self._requests.labels(endpoint, str(status)))
        child.inc()
        if self._frontend_requests is not None:
            self._frontend_requests.inc()

    def count(self, event: str) -> None:
        """One more ``event`` (a key of ``_EVENT_COUNTERS``: a refused connection, a timeout,
        a client gone...)."""
        self._events[event].inc()

    def set_running(self, running: int) -> None:
        self.running = running

    def set_open_connections(self, n: int) -> None:
        self._open_connections = n

    def observe(self, stage: str, seconds: float) -> None:
        hist = self._stage.get(stage)
        if hist is not None and seconds >= 0:
            hist.observe(seconds)

    def finish(self, vllm: _VllmFamilies | None, reason: str, *, prompt_tokens: int = 0,
               generation_tokens: int = 0, cached_tokens: int = 0,
               e2e_s: float | None = None, queue_s: float | None = None) -> None:
        """One finished request (one choice of n, as vLLM counts its child requests):
        ``reason`` is textproc's finish reason."""
        self.finished += 1
        if vllm is None:
            return
        key = "stop" if reason == "tool_calls" else reason
        vllm.success.get(key, vllm.success["error"]).inc()
        if e2e_s is None:  # aborted before an answer: no lengths, no latencies
            return
        vllm.prompt_tokens.inc(prompt_tokens)
        vllm.generation_tokens.inc(generation_tokens)
        vllm.prefix_queries.inc(prompt_tokens)
        vllm.prefix_hits.inc(cached_tokens)
        vllm.request_prompt_tokens.observe(prompt_tokens)
        vllm.request_generation_tokens.observe(generation_tokens)
        vllm.e2e.observe(e2e_s)
        if queue_s is not None:
            vllm.queue.observe(queue_s)

    def observe_lag(self, lag_s: float) -> None:
        self._lag.observe(lag_s)
        if lag_s > self.loop_lag_max_s:
            self.loop_lag_max_s = lag_s

    def start_lag_window(self) -> None:
        """Start a new "worst loop lag since the previous scrape" window (the /metrics route
        calls it once the scrape is rendered)."""
        self.loop_lag_max_s = 0.0

    def flush(self) -> None:
        """Hand this process's counts, observations and gauges to prometheus_client."""
        self._batches.flush()
        self._running.set(self.running)
        self._open.set(self._open_connections)
        self._lag_max.set(self.loop_lag_max_s)

    def refresh(self, queue_depths: Mapping[str, int], worker_requests: Sequence[int]) -> None:
        """Bring the values this process samples up to date (its tokenizer queues, its requests
        per worker, its CPU time) and flush (every second, and before a scrape it answers)."""
        for worker, depth in queue_depths.items():
            self._queue.labels(worker).set(depth)
        for index, n in enumerate(worker_requests):
            seen = self._worker_seen.get(index)
            if seen is None or n > seen:  # (the first time at 0 too: every worker listed)
                self._worker_requests.labels(str(index)).inc(n - (seen or 0))
                self._worker_seen[index] = n
        cpu = time.process_time()
        if self._own_cpu is not None and cpu > self._cpu_seen:
            self._own_cpu.inc(cpu - self._cpu_seen)
            self._cpu_seen = cpu
        self.flush()

    # -- the scrape ---------------------------------------------------------------------------

    def scrape(self, inputs: ScrapeInputs) -> bytes:
        """The text exposition of every frontend's families (this one's flushed first) plus
        ``inputs``."""
        self.flush()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(self._collect_kept, lambda: _moment_families(inputs)))
        return bytes(generate_latest(registry))

    def _collect_kept(self) -> Iterable[Metric]:
        if self.multiprocess:
            files: Any = MultiProcessCollector(None)  # type: ignore[no-untyped-call]
            families: Iterable[Metric] = files.collect()
            return families
        return self.registry.collect()


_CPU_HELP = ("CPU time (user + system) of each textproc process: the HTTP frontends, the "
             "tokenizer workers and the detokenizer, by role and index.")
_DEFAULT_MAX_MODEL_LEN = 8192  # the token buckets' top when the service does not say
_EVENT_COUNTERS = {
    "client_disconnects": "Requests aborted because the HTTP client disconnected.",
    "http_upload_disconnects": "Requests whose client disconnected before sending the whole "
                               "body.",
    "http_connections_refused": "Connections refused with 503 because --max-connections were "
                                "open.",
    "http_header_timeouts": "Connections closed because request headers took longer than "
                            "--header-timeout.",
    "http_body_timeouts": "Requests answered 408 because the body took longer than "
                          "--body-timeout.",
    "http_framing_refused": "Requests refused (400) for carrying both Transfer-Encoding and "
                            "Content-Length.",
    "http_health_on_accept": "GET /health probes answered where their connection was accepted "
                             "(also in textproc_http_requests_total).",
}


class _Merged(Collector):
    """The kept families and the moment's, one family per name (samples of a name both have,
    such as textproc_process_cpu_seconds, joined)."""

    def __init__(self, *sources: Callable[[], Iterable[Metric]]) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for source in self.sources:
            for family in source():
                have = merged.get(family.name)
                if have is None:
                    merged[family.name] = family
                else:
                    have.samples.extend(family.samples)
        return iter(merged.values())


def engine_gauges(stats: Mapping[str, Any]) -> list[tuple[str, float, float, float]]:
    """(engine, running, waiting, KV-cache usage 0..1) of each engine in an engine stats file:
    the ranks of the vLLM front of several engines, or engine_vllm's one scheduler as "0";
    [] for a stats file without them (the stub engine's)."""
    engines = stats.get("engines")
    if isinstance(engines, list):
        out = []
        for e in engines:
            if isinstance(e, dict) and isinstance(e.get("rank"), int):
                out.append((str(e["rank"]), float(e.get("engine_running") or 0),
                            float(e.get("waiting") or 0), float(e.get("kv_usage") or 0.0)))
        return out
    scheduler = stats.get("scheduler")
    if isinstance(scheduler, dict):
        return [("0", float(scheduler.get("running") or 0), float(scheduler.get("waiting") or 0),
                 float(scheduler.get("kv_cache_usage") or 0.0))]
    return []


def _moment_families(inputs: ScrapeInputs) -> list[Metric]:
    labels = _VLLM_LABELS
    running = GaugeMetricFamily("vllm:num_requests_running",
                                "Number of requests in model execution batches.", labels=labels)
    waiting = GaugeMetricFamily("vllm:num_requests_waiting",
                                "Number of requests waiting to be processed.", labels=labels)
    kv = GaugeMetricFamily("vllm:kv_cache_usage_perc",
                           "KV-cache usage. 1 means 100 percent usage.", labels=labels)
    for engine, n_running, n_waiting, usage in engine_gauges(inputs.engine_stats):
        running.add_metric([inputs.model_name, engine], n_running)
        waiting.add_metric([inputs.model_name, engine], n_waiting)
        kv.add_metric([inputs.model_name, engine], usage)
    events = CounterMetricFamily(
        "textproc_process_events", "Counters of each service process (worker, detokenizer), "
        "for all its clients; they restart from 0 when the process is restarted.",
        labels=["role", "index", "counter"])
    compiles = CounterMetricFamily(
        "textproc_constraint_compiles", "Constraint indexes each tokenizer worker compiled.",
        labels=["worker"])
    compile_time = CounterMetricFamily(
        "textproc_constraint_compile_seconds", "Wall seconds each tokenizer worker spent "
        "compiling constraints (first states on its own thread, whole indexes on its "
        "background build thread).", labels=["worker"])
    cpu = CounterMetricFamily("textproc_process_cpu_seconds", _CPU_HELP, labels=["role", "index"])
    for role, index, counters in inputs.processes:
        for name, value in sorted(counters.items()):
            if name == "cpu_ms":
                cpu.add_metric([role, str(index)], value / 1000)
            elif name != "pid":
                events.add_metric([role, str(index), name], value)
        if role == "worker" and "constraint_compiles" in counters:
            compiles.add_metric([str(index)], counters["constraint_compiles"])
        if role == "worker" and "constraint_compile_ms" in counters:
            compile_time.add_metric([str(index)], counters["constraint_compile_ms"] / 1000)
    return [running, waiting, kv, events, compiles, compile_time, cpu]


LAG_PROBE_S = 0.05  # watch_loop_lag's timer


async def watch_loop_lag(metrics: Metrics,
                         on_probe: Callable[[float], None] | None = None) -> None:
    """Until cancelled: sleep LAG_PROBE_S, observe how much later than asked the loop woke,
    and pass the lag to ``on_probe`` (the health thread's heartbeat)."""
    while True:
        start = time.perf_counter()
        await asyncio.sleep(LAG_PROBE_S)
        lag = max(0.0, time.perf_counter() - start - LAG_PROBE_S)
        metrics.observe_lag(lag)
        if on_probe is not None:
            on_probe(lag)
