"""What a metric of the catalogue is (``contracts/metrics.py`` lists them): its type, the
latency buckets, the name Prometheus sees, and the exporting helper every recorder uses.

Naming and labels
- Names have no ``:`` (reserved for recording rules) and carry their unit (``_seconds``,
  ``_tokens``, ``_ratio``). Counters are named without ``_total``: Ray's exporter appends it.
  Prometheus sees every name with Ray's ``ray_`` prefix: ``prom(METRIC)`` gives it, and
  ``prom(METRIC, "bucket")`` a histogram's series.
- Serve adds ``application``, ``deployment`` and ``replica`` labels to the metrics of its
  replicas; Ray adds ``SessionName``, ``NodeAddress`` and others. The labels listed here are
  our own. Every edge and engine metric carries ``model`` (the served name).
- A gauge Ray has not seen set for ~30 s leaves the scrape, so recorders re-set them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Literal

PROM_PREFIX = "ray_"

Kind = Literal["counter", "gauge", "histogram"]
Source = Literal["edge", "engine", "router", "autoscaler"]


# Latency buckets (seconds). Every SLO threshold a user may pick is a boundary, so an
# attainment panel (a bucket ratio) is exact: ``slo`` thresholds are checked against them.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.005,
    0.01,
    0.02,
    0.025,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    2.5,
    3.0,
    4.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
    120.0,
)


@dataclass(frozen=True, slots=True)
class Metric:
    name: str  # as created in Ray (no prefix, counters without _total)
    kind: Kind
    source: Source
    unit: str  # "seconds", "tokens", "requests", "ratio", "replicas", "1"
    description: str
    labels: tuple[str, ...] = ()  # our own tag keys (Serve/Ray add theirs)
    buckets: tuple[float, ...] = ()

    @property
    def exported(self) -> str:
        """The name Prometheus sees (prefix; ``_total`` on counters)."""
        return PROM_PREFIX + self.name + ("_total" if self.kind == "counter" else "")


def prom(metric: Metric, series: str = "") -> str:
    """``prom(TTFT)`` → ``ray_llmfleet_request_ttft_seconds``; ``prom(TTFT, "bucket")`` →
    ``..._bucket``."""
    return metric.exported + (f"_{series}" if series else "")


def start_at_zero(counter: Any, tags: dict[str, str]) -> None:
    """Export a Ray counter at 0 before its first event, so ``rate()``, ``increase()`` and
    ``absent()`` see it from the start (a series first scraped at N loses those N events).
    Ray's ``inc`` refuses 0; its recorder takes it. Never raises."""
    record = getattr(counter, "_record", None)
    if record is not None:
        with contextlib.suppress(Exception):
            record(0.0, tags=tags)
