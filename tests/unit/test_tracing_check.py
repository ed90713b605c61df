"""``serve --otlp-traces-endpoint`` without the OpenTelemetry SDK: refused before anything
starts, naming the missing module and the packages to install."""

from __future__ import annotations

import pytest

from textproc.errors import InvalidInput
from textproc.http import tracing


def test_a_missing_sdk_is_named_with_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    tracing.check_available("http://collector:4318/v1/traces")  # installed here: passes
    monkeypatch.setattr(tracing, "_MODULES", ("opentelemetry.sdk.trace", "no_such_otel.exporter"))
    with pytest.raises(InvalidInput, match=r"'http://c:4318/v1/traces' needs the OpenTelemetry "
                       r"SDK: no module no_such_otel\.exporter; pip install opentelemetry-sdk "
                       r"opentelemetry-exporter-otlp-proto-http"):
        tracing.check_available("http://c:4318/v1/traces")
