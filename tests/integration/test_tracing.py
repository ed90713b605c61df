"""``serve --otlp-traces-endpoint``: each generation request's OpenTelemetry spans reach an
OTLP/HTTP collector (here a tiny one in the test process, decoding the protobuf with
``opentelemetry-proto``), under the ``traceparent`` the request came with; without the flag
the frontend never imports opentelemetry."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2",
                    reason="pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http")

from tests.helpers.models import REPO_ROOT  # noqa: E402 (after the skip: it imports the proto)
from tests.helpers.otlp import Collector, span_attributes  # noqa: E402
from tests.helpers.service import Service, wait_http  # noqa: E402

pytestmark = pytest.mark.timeout(120)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory,
           toy_model: Path) -> Iterator[tuple[Collector, str]]:
    collector = Collector()
    collector.thread.start()
    root = tmp_path_factory.mktemp("traced")
    service = Service(root, toy_model, workers=1, args=[
        "--http", "127.0.0.1:0", "--otlp-traces-endpoint", collector.url]).start()
    try:
        yield collector, wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
    finally:
        service.stop()
        collector.close()


def test_spans_of_a_request_under_its_traceparent(traced: tuple[Collector, str]) -> None:
    collector, url = traced
    model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    body = {"model": model, "messages": [{"role": "user", "content": "one two three"}]}
    with httpx.stream("POST", url + "/v1/chat/completions", timeout=30,
                      json={**body, "stream": True, "stream_options": {"include_usage": True}},
                      headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}) as resp:
        assert resp.status_code == 200
        chunks = [json.loads(line[6:]) for line in resp.iter_lines()
                  if line.startswith("data: {")]
    usage = chunks[-1]["usage"]
    answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)  # no traceparent
    assert answer.status_code == 200

    requests = collector.wait("llm_request", 2)
    assert len(requests) == 2, collector.spans
    ours = [s for s in requests if s.trace_id.hex() == TRACE_ID]
    assert len(ours) == 1, [s.trace_id.hex() for s in requests]
    span = ours[0]
    assert span.parent_span_id.hex() == PARENT_ID
    assert span.kind == span.SPAN_KIND_SERVER
    events = [(e.name, e.time_unix_nano) for e in span.events]
    assert [name for name, _ in events] == ["received", "tokenized", "queued", "first_token",
                                            "finished"]
    times = [t for _, t in events]
    assert times == sorted(times) and times[0] == span.start_time_unix_nano \
        and times[-1] == span.end_time_unix_nano
    attrs = span_attributes(span)
    assert attrs["gen_ai.usage.prompt_tokens"] == usage["prompt_tokens"]
    assert attrs["gen_ai.usage.completion_tokens"] == usage["completion_tokens"]
    assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
    assert attrs["gen_ai.response.model"] == model
    assert 0 < attrs["gen_ai.latency.time_to_first_token"] <= attrs["gen_ai.latency.e2e"]
    children = {s.name: s for s in collector.wait("decode", 2)
                + collector.wait("tokenize", 2) + collector.wait("prefill", 2)
                if s.parent_span_id == span.span_id}
    assert set(children) == {"tokenize", "prefill", "decode"}, children
    for child in children.values():
        assert child.trace_id == span.trace_id
        assert span.start_time_unix_nano <= child.start_time_unix_nano \
            <= child.end_time_unix_nano <= span.end_time_unix_nano
    (other,) = [s for s in requests if s is not span]
    assert not other.parent_span_id  # a request without traceparent starts its own trace


def test_without_the_flag_opentelemetry_is_never_imported() -> None:
    code = ("import sys; import textproc.http.run, textproc.http.server, textproc.cli; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
