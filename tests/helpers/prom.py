"""Reading a Prometheus text scrape in tests: families by name, one sample's value."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["families", "value"]


def families(text: str) -> dict[str, Any]:
    """Family name (as its TYPE line names it, less a counter's ``_total``) -> its Metric."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(text: str, sample: str, **labels: str) -> float:
    """The value of the sample named ``sample`` whose labels include ``labels`` (summed over
    the ones that match: a family left unlabelled sums its series); 0 when none matches."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total
