"""One scaling decision as metrics: the ``AUTOSCALER_*`` entries of ``contracts.metrics``.

Per decision (every controller tick), tagged ``deployment_name`` and ``policy``:
- gauges ``AUTOSCALER_DESIRED`` (what the policy asks for) and ``AUTOSCALER_CURRENT``
  (replicas running when it decided);
- gauges ``AUTOSCALER_SIGNAL`` / ``AUTOSCALER_TARGET`` per ``signal`` of the decision's
  ``Explanation`` (``autoscaler.explain``);
- counter ``AUTOSCALER_DECISIONS`` +1 with ``direction`` (up, down) and ``reason`` when the
  desired count differs from the previous decision.
Every gauge is set on every call: Ray drops a gauge from the scrape ~30 s after its last
set. Pure: metric objects come from ``metric(Metric)``, an injected factory returning
objects with Ray's ``set(value, tags=)`` / ``inc(value, tags=)`` (the Serve adapter passes
one that creates ``ray.util.metrics`` objects once per process; tests pass fakes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autoscaler.explain import direction
from autoscaler.types import Explanation
from contracts.metrics import (
    AUTOSCALER_CURRENT,
    AUTOSCALER_DECISIONS,
    AUTOSCALER_DESIRED,
    AUTOSCALER_SIGNAL,
    AUTOSCALER_TARGET,
    Metric,
)

MetricFactory = Callable[[Metric], Any]


@dataclass(frozen=True, slots=True)
class Decision:
    deployment_name: str
    policy: str
    current: int  # replicas running
    previous: int  # the previous decision (Serve's target when the policy was called)
    desired: int
    explanation: Explanation


def export_decision(metric: MetricFactory, d: Decision) -> None:
    base = {"deployment_name": d.deployment_name, "policy": d.policy}
    metric(AUTOSCALER_DESIRED).set(float(d.desired), tags=base)
    metric(AUTOSCALER_CURRENT).set(float(d.current), tags=base)
    for gauge, values in (
        (AUTOSCALER_SIGNAL, d.explanation.signals),
        (AUTOSCALER_TARGET, d.explanation.targets),
    ):
        g = metric(gauge)
        for name, value in values.items():
            g.set(float(value), tags={**base, "signal": name})
    moved = direction(d.previous, d.desired)
    if moved is not None:
        tags = {**base, "direction": moved, "reason": d.explanation.reason}
        metric(AUTOSCALER_DECISIONS).inc(1.0, tags=tags)
