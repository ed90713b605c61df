"""textproc.http.metrics in one process: vLLM's families with vLLM's types, labels and buckets,
textproc's beside them, the engine's gauges from either stats file, the lag window."""

from __future__ import annotations

import random

import pytest

from tests.helpers.prom import families, value
from textproc.http.metrics import Metrics, ScrapeInputs, engine_gauges, request_token_buckets

# vLLM 0.32's families textproc serves: name -> type (labels: model_name, engine); the real-engine test
# compares them with a running `vllm serve`
VLLM_FAMILIES = {
    "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge", "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter", "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter", "vllm:request_success": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram", "vllm:request_generation_tokens": "histogram",
}


def test_token_buckets_are_one_two_five_up_to_the_model_length() -> None:
    assert request_token_buckets(4096) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
    assert request_token_buckets(5000)[-1] == 5000
    assert request_token_buckets(1) == [1]


def test_every_vllm_family_with_its_type_and_labels() -> None:
    m = Metrics()
    vllm = m.vllm("tiny", 4096)
    m.finish(vllm, "stop", prompt_tokens=3, generation_tokens=4, cached_tokens=0, e2e_s=0.1,
             queue_s=0.01)
    vllm.ttft.observe(0.01)
    vllm.itl.observe(0.01)
    text = m.scrape(ScrapeInputs("tiny", engine_stats={"scheduler": {"running": 1}})).decode()
    fams = families(text)
    for name, kind in VLLM_FAMILIES.items():
        assert fams[name].type == kind, name
        sampled = [s for s in fams[name].samples if not s.name.endswith("_created")]
        assert sampled, name
        for s in sampled:
            extra = {"le"} if s.name.endswith("_bucket") else set()
            if name == "vllm:request_success":
                extra = {"finished_reason"}
            assert set(s.labels) == {"model_name", "engine"} | extra, (name, s.labels)
            assert s.labels["model_name"] == "tiny" and s.labels["engine"] == "0"
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    bounds = [s.labels["le"] for s in fams["vllm:request_prompt_tokens"].samples
              if s.name.endswith("_bucket")]
    assert bounds[-3:] == ["1000.0", "2000.0", "+Inf"]
    for line in text.splitlines():  # every family is vLLM's or textproc's
        if line.startswith("# TYPE"):
            assert line.split()[2].startswith(("vllm:", "textproc_")), line


def test_finish_reasons_map_to_vllms() -> None:
    m = Metrics()
    vllm = m.vllm("tiny", 64)
    m.finish(vllm, "tool_calls", prompt_tokens=2, generation_tokens=1, e2e_s=0.1)
    m.finish(vllm, "abort")  # a client gone before the end: no lengths, no latency
    m.finish(vllm, "something-new", prompt_tokens=1, e2e_s=0.1)
    text = m.scrape(ScrapeInputs("tiny")).decode()
    assert value(text, "vllm:request_success_total", finished_reason="stop") == 1
    assert value(text, "vllm:request_success_total", finished_reason="abort") == 1
    assert value(text, "vllm:request_success_total", finished_reason="error") == 1
    assert value(text, "vllm:prompt_tokens_total") == 3
    assert value(text, "vllm:e2e_request_latency_seconds_count") == 2
    assert m.finished == 3


def test_engine_gauges_from_either_stats_file() -> None:
    one = {"engine": "vllm", "scheduler": {"requests": 3, "running": 2, "waiting": 1,
                                           "free_kv_blocks": 10, "kv_blocks": 20,
                                           "kv_cache_usage": 0.5}}
    assert engine_gauges(one) == [("0", 2.0, 1.0, 0.5)]
    front = {"front": True, "engines": [
        {"rank": 0, "state": "ready", "engine_running": 4, "waiting": 0, "kv_usage": 0.1},
        {"rank": 1, "state": "dead", "engine_running": 0, "waiting": 2, "kv_usage": 0.0}]}
    assert engine_gauges(front) == [("0", 4.0, 0.0, 0.1), ("1", 0.0, 2.0, 0.0)]
    assert engine_gauges({"mode": "echo", "running": 3}) == []  # the stub engine's: no scheduler
    text = Metrics().scrape(ScrapeInputs("m", engine_stats=front)).decode()
    assert value(text, "vllm:num_requests_waiting", model_name="m", engine="1") == 2
    assert value(text, "vllm:kv_cache_usage_perc", engine="0") == 0.1


def test_the_moments_values_join_the_kept_families() -> None:
    m = Metrics()
    m.set_frontend(0, 4242)
    m.refresh({"worker-0": 2, "worker-1": 0}, [5, 0])
    processes = [("worker", 0, {"requests": 5, "cpu_ms": 1500, "constraint_compiles": 2,
                                "constraint_compile_ms": 2250, "pid": 11}),
                 ("detokenizer", 0, {"tokens_in": 9, "cpu_ms": 250, "pid": 12})]
    text = m.scrape(ScrapeInputs("m", processes)).decode()
    fams = families(text)
    cpu = {(s.labels["role"], s.labels["index"]): s.value
           for s in fams["textproc_process_cpu_seconds"].samples if s.name.endswith("_total")}
    assert cpu[("worker", "0")] == 1.5 and cpu[("detokenizer", "0")] == 0.25
    assert ("http", "0") in cpu  # this frontend's own, kept by prometheus_client
    assert text.count("# TYPE textproc_process_cpu_seconds_total counter") == 1
    assert value(text, "textproc_process_events_total", role="worker", counter="requests") == 5
    assert 'counter="pid"' not in text and 'counter="cpu_ms"' not in text
    assert value(text, "textproc_constraint_compiles_total", worker="0") == 2
    assert value(text, "textproc_constraint_compile_seconds_total", worker="0") == 2.25
    assert value(text, "textproc_queue_depth", worker="worker-0") == 2
    assert value(text, "textproc_worker_requests_total", worker="1") == 0
    assert 'textproc_worker_requests_total{worker="1"}' in text  # listed at 0


def test_the_lag_window_restarts_when_a_scrape_is_answered() -> None:
    m = Metrics()
    m.observe_lag(0.25)
    m.observe_lag(0.125)
    text = m.scrape(ScrapeInputs()).decode()
    assert value(text, "textproc_http_loop_lag_max_seconds") == 0.25
    # a scrape changes nothing (the route restarts the window once it has answered)
    assert value(m.scrape(ScrapeInputs()).decode(), "textproc_http_loop_lag_max_seconds") == 0.25
    m.start_lag_window()
    text = m.scrape(ScrapeInputs()).decode()
    assert value(text, "textproc_http_loop_lag_max_seconds") == 0
    assert value(text, "textproc_http_loop_lag_seconds_count") == 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_batch_adds_what_observing_each_value_adds(seed: int) -> None:
    """Values below, on, between and above the bounds: the histogram a batch flushed into
    reads as the one every value was observed into directly."""
    rng = random.Random(seed)
    values = [rng.choice([0.0, 0.01, 0.025, 0.0251, 79.9, 80.0, 80.5, 1e9])
              if rng.random() < 0.5 else rng.uniform(0, 100) for _ in range(200)]
    each, batched = Metrics(), Metrics()
    direct = each.vllm("tiny", 64).itl.child  # prometheus_client's own histogram
    batch = batched.vllm("tiny", 64).itl
    assert batch.counts is not None  # prometheus_client's histogram has the values it adds to
    for i, v in enumerate(values):
        direct.observe(v)
        batch.observe(v)
        if i == 100:
            batched.flush()
    assert batch.n == 99
    expected = [s for s in families(each.scrape(ScrapeInputs("tiny")).decode())[
        "vllm:inter_token_latency_seconds"].samples if not s.name.endswith("_created")]
    got = [s for s in families(batched.scrape(ScrapeInputs("tiny")).decode())[
        "vllm:inter_token_latency_seconds"].samples if not s.name.endswith("_created")]
    assert [(s.name, s.labels, s.value) for s in got] == \
        [(s.name, s.labels, pytest.approx(s.value)) for s in expected]
    assert batch.n == 0
