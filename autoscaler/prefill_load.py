"""Per-replica prefill load (uncached prompt tokens per second) for scaling decisions.

A replica that reports ``prefill_load_tokens_per_s`` (``LoadTracker``) is taken at its
word. Otherwise the load is the slope of its cumulative uncached-token counter
``prefix_queries - prefix_hits`` (both engines report these), measured over at least
``window_s`` so that metrics pushed in steps (Ray: every ``metrics_interval_s``) do not
read as alternating zero and spikes. The caller keeps one ``CounterBaseline`` per replica
in its policy state; replicas that disappear are dropped, a counter that goes back (the
replica restarted) starts a new baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.types import MetricsSnapshot


@dataclass(frozen=True, slots=True)
class CounterBaseline:
    t0: float  # when the current measuring window began
    uncached_at_t0: float  # the counter then
    load: float  # tokens/s measured over the last full window (0 before the first)


Baselines = Mapping[str, CounterBaseline]  # replica id -> baseline


def prefill_loads(
    snapshot: MetricsSnapshot, old: Baselines, window_s: float = 5.0
) -> tuple[dict[str, float], dict[str, CounterBaseline]]:
    """Return ``{replica_id: tokens/s}`` and the updated counter baselines."""
    baselines: dict[str, CounterBaseline] = {}
    loads: dict[str, float] = {}
    now = snapshot.now
    for m in snapshot.replicas:
        if m.prefill_load_tokens_per_s > 0:
            loads[m.replica_id] = m.prefill_load_tokens_per_s
            continue
        uncached = max(0.0, m.prefix_queries - m.prefix_hits)
        b = old.get(m.replica_id) or CounterBaseline(now, uncached, 0.0)
        if uncached < b.uncached_at_t0:  # counter reset (replica restarted)
            b = CounterBaseline(now, uncached, 0.0)
        if now - b.t0 >= window_s:
            b = CounterBaseline(now, uncached, (uncached - b.uncached_at_t0) / (now - b.t0))
        baselines[m.replica_id] = b
        loads[m.replica_id] = b.load
    return loads, baselines
