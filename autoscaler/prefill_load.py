"""Per-replica prefill load (uncached prompt tokens per second) for scaling decisions.

A replica that reports ``prefill_load_tokens_per_s`` (``LoadTracker``) is taken at its
word. Otherwise the load is the slope of its cumulative uncached-token counter
``prefix_queries - prefix_hits`` (both engines report these), measured over at least
``window_s`` so that metrics pushed in steps (Ray: every ``metrics_interval_s``) do not
read as alternating zero and spikes. Baselines live in the policy state under ``key``:
``{replica_id: [t0, uncached_at_t0, last_load]}``; replicas that disappear are dropped.
"""

from __future__ import annotations

from autoscaler.types import MetricsSnapshot, State


def prefill_loads(
    snapshot: MetricsSnapshot, state: State, key: str, window_s: float = 5.0
) -> tuple[dict[str, float], State]:
    """Return ``{replica_id: tokens/s}`` and the state with updated counter baselines."""
    old = state.get(key) or {}
    baselines: dict[str, list[float]] = {}
    loads: dict[str, float] = {}
    for m in snapshot.replicas:
        if m.prefill_load_tokens_per_s > 0:
            loads[m.replica_id] = m.prefill_load_tokens_per_s
            continue
        uncached = max(0.0, m.prefix_queries - m.prefix_hits)
        t0, u0, last = old.get(m.replica_id, (snapshot.now, uncached, 0.0))
        if uncached < u0:  # counter reset (replica restarted)
            t0, u0, last = snapshot.now, uncached, 0.0
        if snapshot.now - t0 >= window_s:
            last = (uncached - u0) / (snapshot.now - t0)
            t0, u0 = snapshot.now, uncached
        baselines[m.replica_id] = [t0, u0, last]
        loads[m.replica_id] = last
    return loads, {**state, key: baselines}
