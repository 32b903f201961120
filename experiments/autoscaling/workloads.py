"""Workloads and the metrics pipeline shared by the virtual-time and live autoscaling runs.

- ``step_specs``: Poisson arrivals at ``rate`` for ``phases[0]`` s, ``factor``×rate for
  ``phases[1]`` s, ``rate`` again for ``phases[2]`` s. Prompt/output lengths are drawn (seeded)
  from the Azure code trace's own length pairs, times ``length_scale``, so the step and the
  trace replay ask for the same kind of work.
- ``LookBackRecorder``: wraps a pure ``ScalingPolicy`` the way Ray Serve feeds a policy —
  each replica's metrics averaged over ``look_back_s`` (Ray's ``look_back_period_s``), its
  cumulative counters at their latest value and its backlog gauges at the larger of that
  and the mean (as our Serve adapter reads them from Serve's raw series) — and
  records one ``Sample`` per decision (replicas after the decision, worst queue delay).
  Without the window a baseline sees raw 1-s samples; the simulator's busy fraction, which
  accrues only when a (possibly > 1 s) step ends, then flips 0 ↔ 1 and resets Ray-style
  delay timers forever.
"""

from __future__ import annotations

import csv
import random
from collections import deque
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig, ScalingPolicy
from bench.tokens import TokenSource
from bench.types import RequestSpec
from contracts.stats import BACKLOG_FIELDS, CUMULATIVE_FIELDS
from experiments.autoscaling.metrics import Sample
from experiments.traces import AZURE_TRACE


@dataclass(frozen=True, slots=True)
class StepLoad:
    rate: float  # req/s in the low phases
    factor: float = 4.0
    phases: tuple[float, float, float] = (60.0, 60.0, 120.0)  # low, high, low (seconds)

    @property
    def step_up_s(self) -> float:
        return self.phases[0]

    @property
    def step_down_s(self) -> float:
        return self.phases[0] + self.phases[1]

    @property
    def duration_s(self) -> float:
        return sum(self.phases)


def trace_lengths(path: Path = AZURE_TRACE) -> list[tuple[int, int]]:
    with open(path, newline="") as f:
        return [(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in csv.DictReader(f)]


def step_arrivals(load: StepLoad, rng: random.Random) -> list[float]:
    out: list[float] = []
    start = 0.0
    for i, length in enumerate(load.phases):
        rate = load.rate * (load.factor if i == 1 else 1.0)
        t = start + rng.expovariate(rate)
        while t < start + length:
            out.append(t)
            t += rng.expovariate(rate)
        start += length
    return out


def step_specs(
    load: StepLoad,
    lengths: list[tuple[int, int]],
    *,
    length_scale: float = 1.0,
    seed: int = 0,
    src: TokenSource | None = None,
) -> list[RequestSpec]:
    rng = random.Random(seed)
    src = src or TokenSource(None, seed)
    out = []
    for i, t in enumerate(step_arrivals(load, rng)):
        n_in, n_out = lengths[rng.randrange(len(lengths))]
        n_in = max(1, round(n_in * length_scale))
        n_out = max(1, round(n_out * length_scale))
        out.append(RequestSpec(i, tuple(src.fresh(rng, n_in)), n_out, arrival_s=t))
    return out


_FIELDS = tuple(f.name for f in fields(ReplicaMetrics) if f.name != "replica_id")
_LATEST = tuple(k for k in _FIELDS if k in CUMULATIVE_FIELDS)
_AVERAGED = tuple(k for k in _FIELDS if k not in CUMULATIVE_FIELDS)


def average_metrics(window: list[ReplicaMetrics]) -> ReplicaMetrics:
    """The replica's metrics as our Serve adapter hands them to a policy: gauges averaged
    over the window, cumulative counters at their latest value, backlog gauges at the
    larger of the two (``serve_autoscaling.latest_samples``)."""
    n = len(window)
    means = {k: sum(getattr(m, k) for m in window) / n for k in _AVERAGED}
    latest = {k: getattr(window[-1], k) for k in _LATEST}
    for k in BACKLOG_FIELDS:
        means[k] = max(means[k], getattr(window[-1], k))
    return ReplicaMetrics(window[-1].replica_id, **means, **latest)


class LookBackRecorder:
    """A ``ScalingPolicy`` that averages metrics over a window, then asks ``inner``."""

    def __init__(self, inner: ScalingPolicy[Any], look_back_s: float, t0: float = 0.0) -> None:
        self.inner = inner
        self.name = inner.name
        self.look_back_s = look_back_s
        self.t0 = t0
        self.samples: list[Sample] = []
        self._history: deque[tuple[float, tuple[ReplicaMetrics, ...]]] = deque()

    def smoothed(self, snapshot: MetricsSnapshot) -> MetricsSnapshot:
        self._history.append((snapshot.now, snapshot.replicas))
        while self._history and snapshot.now - self._history[0][0] > self.look_back_s:
            self._history.popleft()
        per: dict[str, list[ReplicaMetrics]] = {}
        for _, reps in self._history:
            for m in reps:
                per.setdefault(m.replica_id, []).append(m)
        live = [m.replica_id for m in snapshot.replicas]
        return replace(snapshot, replicas=tuple(average_metrics(per[r]) for r in live))

    def initial_state(self) -> Any:
        return self.inner.initial_state()

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: Any
    ) -> tuple[int, Any]:
        smooth = self.smoothed(snapshot)
        desired, new = self.inner.decide(smooth, config, state)
        after = max(config.min_replicas, min(config.max_replicas, int(desired)))
        worst = max((m.queue_delay_s for m in snapshot.replicas), default=0.0)
        self.samples.append(Sample(snapshot.now - self.t0, after, worst, int(desired)))
        return desired, new


def trace_window(
    specs: list[RequestSpec], start_s: float, end_s: float, time_scale: float = 1.0
) -> list[RequestSpec]:
    """Requests arriving in ``[start_s, end_s)``, re-based to 0, times ``time_scale``."""
    out = [s for s in specs if s.arrival_s is not None and start_s <= s.arrival_s < end_s]
    return [
        replace(s, index=i, arrival_s=(float(s.arrival_s or 0.0) - start_s) * time_scale)
        for i, s in enumerate(out)
    ]
