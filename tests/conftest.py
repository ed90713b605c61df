"""Shared test settings: hypothesis profile (TEXTPROC_MAX_EXAMPLES) and fixture paths."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "textproc",
    max_examples=int(os.environ.get("TEXTPROC_MAX_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("textproc")
