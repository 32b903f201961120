"""Prefill load per replica: reported value, else the slope of cumulative token counters."""

from __future__ import annotations

import pytest

from autoscaler.prefill_load import CounterBaseline, prefill_loads
from autoscaler.ttft_queue import TTFTQueuePolicy
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig


def counters(rid: str, queries: float, hits: float = 0.0, **kw: float) -> ReplicaMetrics:
    return ReplicaMetrics(rid, prefix_queries=queries, prefix_hits=hits, **kw)


def test_reported_load_wins_and_counters_give_a_windowed_slope() -> None:
    state: dict[str, CounterBaseline] = {}
    seen = []
    # counters advance in steps every 0.5 s (like Ray pushes); the policy ticks every 0.1 s
    for tick in range(0, 121):
        t = tick * 0.1
        pushed = int(t / 0.5) * 0.5
        reps = (
            counters("a", 900.0 * pushed, 100.0 * pushed),  # 800 uncached tok/s
            counters("b", 1e6, prefill_load_tokens_per_s=321.0),
        )
        loads, state = prefill_loads(MetricsSnapshot(t, 2, reps), state, window_s=5.0)
        seen.append(loads["a"])
    assert loads["b"] == 321.0
    assert seen[0] == 0.0
    assert seen[49] == 0.0
    assert all(v == pytest.approx(800.0, rel=0.05) for v in seen[50:])
    assert set(state) == {"a"}
    assert state["a"].load == pytest.approx(800.0, rel=0.05)


def test_counter_reset_and_departed_replicas() -> None:
    old = {"gone": CounterBaseline(0.0, 5.0, 9.0), "a": CounterBaseline(0.0, 10_000.0, 700.0)}
    loads, state = prefill_loads(MetricsSnapshot(6.0, 1, (counters("a", 50.0),)), old)
    assert loads == {"a": 0.0}
    assert state == {"a": CounterBaseline(6.0, 50.0, 0.0)}


def test_ttft_policy_keeps_replicas_that_counters_show_busy() -> None:
    policy, cfg = TTFTQueuePolicy(), ScalingConfig(min_replicas=1, max_replicas=8)
    state = policy.initial_state()
    for t in range(0, 120, 2):  # 3 replicas prefilling ~700 uncached tok/s each, no queue
        reps = tuple(counters(f"r{i}", 700.0 * t, prefill_tokens_per_s=1000.0) for i in range(3))
        desired, state = policy.decide(MetricsSnapshot(float(t), 3, reps), cfg, state)
        assert desired == 3  # 2.1 replica-equivalents: 2 would run at 1.05 > 0.5
