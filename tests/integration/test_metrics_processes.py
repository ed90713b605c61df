"""``/metrics`` across several frontend processes: prometheus_client's multi-process mode as
the frontends use it (``PROMETHEUS_MULTIPROC_DIR``, given by the supervisor).

Two processes count requests, tokens and latencies with ``textproc.http.metrics.Metrics`` and
a third scrapes: it sees the sums of both; a live gauge (requests running) of a process marked
dead leaves the sum while its counters stay; a scrape while both are alive sees both gauges.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.multiprocess import mark_process_dead

from tests.helpers.models import REPO_ROOT
from tests.helpers.prom import families, value

pytestmark = pytest.mark.timeout(60)

# one frontend's share of the traffic: argv = index, requests, running, tokens; stays alive until
# its stdin closes (a live gauge is summed only while its process lives)
_FRONTEND = """
import sys
from textproc.http.metrics import Metrics
index, requests, running, tokens = (int(a) for a in sys.argv[1:5])
m = Metrics()
assert m.multiprocess
m.set_frontend(index, 1000 + index)
vllm = m.vllm("tiny", 4096)
for _ in range(requests):
    m.count_request("/v1/chat/completions", 200)
    vllm.ttft.observe(0.03)
    assert vllm.itl.counts is not None  # batched: added to the files at the next flush
    vllm.itl.observe(0.02)
    vllm.itl.observe(100.0)
    m.finish(vllm, "stop", prompt_tokens=tokens, generation_tokens=2 * tokens, cached_tokens=1,
             e2e_s=0.4, queue_s=0.001)
m.set_running(running)
m.refresh({"worker-0": running}, [requests])  # (and flush, as every second)
print("ready", flush=True)
sys.stdin.read()
"""

_SCRAPE = """
import json, sys
from textproc.http.metrics import Metrics, ScrapeInputs
m = Metrics()
procs = [("worker", 0, {"requests": 7, "cpu_ms": 2500})]
sys.stdout.write(m.scrape(ScrapeInputs("tiny", procs, json.loads(sys.argv[1]))).decode())
"""


def _env(metrics_dir: Path) -> dict[str, str]:
    return {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
            "PYTHONPATH": str(REPO_ROOT)}


def _scrape(metrics_dir: Path, engine_stats: dict[str, object]) -> str:
    out = subprocess.run([sys.executable, "-c", _SCRAPE, json.dumps(engine_stats)],
                         env=_env(metrics_dir), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_one_scrape_sums_every_frontend_process(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    frontends = [subprocess.Popen([sys.executable, "-c", _FRONTEND, str(i), *args],
                                  env=_env(metrics_dir), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
                 for i, args in enumerate([("3", "2", "10"), ("5", "1", "4")])]
    try:
        for proc in frontends:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        dp_stats = {"engines": [
            {"rank": 0, "state": "ready", "engine_running": 2, "waiting": 1, "kv_usage": 0.5},
            {"rank": 1, "state": "ready", "engine_running": 0, "waiting": 0, "kv_usage": 0.0}]}
        text = _scrape(metrics_dir, dp_stats)
        fams = families(text)
        assert value(text, "textproc_http_requests_total", endpoint="/v1/chat/completions") == 8
        assert value(text, "vllm:request_success_total", finished_reason="stop") == 8
        assert value(text, "vllm:prompt_tokens_total") == 3 * 10 + 5 * 4
        assert value(text, "vllm:generation_tokens_total") == 2 * (3 * 10 + 5 * 4)
        assert value(text, "vllm:prefix_cache_hits_total") == 8
        assert value(text, "vllm:time_to_first_token_seconds_count") == 8
        assert value(text, "vllm:inter_token_latency_seconds_count") == 16
        assert value(text, "vllm:inter_token_latency_seconds_bucket", le="0.025") == 8
        assert value(text, "vllm:inter_token_latency_seconds_bucket", le="80.0") == 8
        assert value(text, "vllm:inter_token_latency_seconds_sum") == pytest.approx(8 * 100.02)
        assert value(text, "vllm:request_prompt_tokens_bucket", le="5.0") == 5  # the 4-token ones
        assert value(text, "textproc_requests_running") == 3
        assert value(text, "textproc_queue_depth", worker="worker-0") == 3
        assert value(text, "textproc_worker_requests_total", worker="0") == 8
        for i in (0, 1):
            assert value(text, "textproc_http_frontend_requests_total", frontend=str(i)) \
                == (3, 5)[i]
        # the moment's values beside the kept ones, one family per name
        assert fams["textproc_process_cpu_seconds"].type == "counter"
        roles = {s.labels["role"] for s in fams["textproc_process_cpu_seconds"].samples}
        assert roles == {"http", "worker"}, roles
        assert value(text, "vllm:num_requests_running", engine="0", model_name="tiny") == 2
        assert value(text, "vllm:num_requests_waiting", engine="0") == 1
        assert value(text, "vllm:kv_cache_usage_perc", engine="0") == 0.5
        assert {s.labels["engine"] for s in fams["vllm:kv_cache_usage_perc"].samples} == {"0", "1"}

        # frontend 1 exits and is marked dead (the supervisor's part): its running requests
        # leave the sum, its counters stay (no counter reset when a frontend is restarted)
        proc = frontends[1]
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)
        mark_process_dead(proc.pid, str(metrics_dir))
        text = _scrape(metrics_dir, {})
        assert value(text, "textproc_requests_running") == 2
        assert value(text, "textproc_http_requests_total", endpoint="/v1/chat/completions") == 8
        assert "vllm:num_requests_running" in families(text)  # the family, with no engine
    finally:
        for proc in frontends:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
            proc.wait(timeout=10)
            proc.stdout.close()
