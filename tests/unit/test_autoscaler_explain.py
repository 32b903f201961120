"""Decision explanations (signals, targets, reason) and their export as metrics (fakes)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from autoscaler.decision_metrics import Decision, export_decision
from autoscaler.explain import GENERIC_SIGNALS, direction, explain
from autoscaler.registry import POLICY_NAMES, make_policy
from autoscaler.serve_autoscaling import ServeScalingPolicy
from autoscaler.ttft_measure import PRIOR_BOOT_S
from autoscaler.ttft_queue import TTFTQueuePolicy, TTFTQueueState
from autoscaler.types import Explanation, MetricsSnapshot, ReplicaMetrics, ScalingConfig
from contracts.metrics import (
    AUTOSCALER_CURRENT,
    AUTOSCALER_DECISIONS,
    AUTOSCALER_DESIRED,
    AUTOSCALER_SIGNAL,
    AUTOSCALER_TARGET,
)
from contracts.stats import ReplicaStats
from tests.fakes import FakeMetrics, snapshot

CFG = ScalingConfig(min_replicas=1, max_replicas=8, ttft_slo_s=2.0)
TTFT = TTFTQueuePolicy()  # budget HEADROOM x SLO = 1.4 s until a request's prefill is measured


def rep(i: int, wpt: float = 0.0, **kw: float) -> ReplicaMetrics:
    return ReplicaMetrics(f"r{i}", waiting_prefill_tokens=wpt, prefill_tokens_per_s=1000.0, **kw)


def _decide(policy: Any, snap: MetricsSnapshot, cfg: ScalingConfig, state: Any) -> Any:
    desired, new = policy.decide(snap, cfg, state)
    return desired, new, explain(policy, snap, cfg, new, desired)


OWN_SIGNALS = {
    "ttft-queue": {
        "prefill_backlog_s",
        "prefill_arrival_ratio",
        "burst_reserve_replicas",
        "boot_s",
        "wake_s",
        "warm_replicas",
        "ttft_over_slo_ratio",
    },
    "ongoing-requests": set(),
    "utilization": {"utilization_ratio"},
    "none": set(),
}


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_gives_generic_and_own_signals_with_targets(name: str) -> None:
    policy = make_policy(name)
    busy = [
        rep(0, 3000, ongoing=6, kv_usage=0.4, busy_fraction=0.9, queue_delay_s=3.0, ttft_p95_s=1.5)
    ]
    snap = snapshot(0.0, 2, busy, pending=2.0)
    cfg = ScalingConfig(params={}, target_ongoing_requests=4.0)
    _, _, e = _decide(policy, snap, cfg, policy.initial_state())
    assert set(e.signals) == set(GENERIC_SIGNALS) | OWN_SIGNALS[name]
    assert set(e.targets) <= set(e.signals)  # a target bounds a signal of the same name
    assert all(k.islower() and " " not in k for k in e.signals)
    assert e.signals["queue_delay_max_s"] == 3.0
    assert e.signals["ongoing_requests_per_replica"] == 4.0  # (6 + 2 held) / 2 replicas
    assert e.signals["pending_requests"] == 2.0
    assert e.signals["kv_usage_ratio"] == 0.4
    assert e.signals["ttft_p95_s"] == 1.5
    if name == "ongoing-requests":
        assert e.targets == {"ongoing_requests_per_replica": 4.0}
    if name == "utilization":
        assert e.signals["utilization_ratio"] == 0.9
        assert e.targets["utilization_ratio"] == 0.7


def test_ttft_queue_explains_its_up_move_by_the_term_that_drove_it() -> None:
    # 5600 tokens at 1000 tok/s: 5.6 s of prefill, budget 1.4 s -> 4 replicas
    desired, _, e = _decide(TTFT, snapshot(0.0, 1, [rep(0, 5600)]), CFG, TTFTQueueState())
    assert desired == 4
    assert e.reason == "queue_delay"
    assert e.signals["prefill_backlog_s"] == pytest.approx(5.6)
    assert e.targets["prefill_backlog_s"] == pytest.approx(1.4)
    assert e.targets["prefill_arrival_ratio"] == 0.9
    assert e.targets["ttft_p95_s"] == 2.0
    # arrivals: 3 replicas prefilling 950 tok/s of 1000 -> 2.85 / 0.9 -> 4
    hot = [rep(i, prefill_load_tokens_per_s=950.0) for i in range(3)]
    desired, _, e = _decide(TTFT, snapshot(0.0, 3, hot), CFG, TTFTQueueState())
    assert (desired, e.reason) == (4, "arrival_rate")
    assert e.signals["prefill_arrival_ratio"] == pytest.approx(0.95)
    # nothing measured yet: no burst reserve, the prior boot time
    assert e.signals["burst_reserve_replicas"] == 0.0
    assert e.targets["burst_reserve_replicas"] == 3.0  # the fleet it is held against
    assert e.signals["boot_s"] == PRIOR_BOOT_S
    # a burst reserve above the other terms drives the move; boot is the measured median
    measured = TTFTQueueState(reserve=6, boot_samples=(12.0, 20.0, 16.0))
    desired, _, e = _decide(TTFT, snapshot(0.0, 3, hot), CFG, measured)
    assert (desired, e.reason) == (6, "burst_reserve")
    assert e.signals["burst_reserve_replicas"] == 6.0
    assert e.signals["boot_s"] == 16.0
    # a measured prefill of 0.5 s per request: budget 2 - 2 x 0.5 = 1 s, up to 1 / 1.5 busy
    _, _, e = _decide(TTFT, snapshot(0.0, 3, hot), CFG, TTFTQueueState(prompt_s=0.5))
    assert e.targets["prefill_backlog_s"] == pytest.approx(1.0)
    assert e.targets["prefill_arrival_ratio"] == pytest.approx(2 / 3)


def test_ttft_queue_explains_the_measured_share_over_the_slo_against_the_risk() -> None:
    def counted(first: float, over_2s: float) -> list[ReplicaMetrics]:
        return [
            rep(i, first_tokens=first, ttft_over_2s=over_2s, ttft_over_1s=over_2s) for i in (0, 1)
        ]

    state = TTFTQueueState()
    _, state, e = _decide(TTFT, snapshot(0.0, 2, counted(500, 40)), CFG, state)
    assert e.signals["ttft_over_slo_ratio"] == 0.0  # first reports: baselines only
    assert e.targets["ttft_over_slo_ratio"] == pytest.approx(0.01)  # 1 - target attainment
    # each replica: 100 more first tokens, 3 more over 2 s -> 6 of 200
    _, state, e = _decide(TTFT, snapshot(1.0, 2, counted(600, 43)), CFG, state)
    assert e.signals["ttft_over_slo_ratio"] == pytest.approx(0.03)
    _, _, e = _decide(TTFT, snapshot(200.0, 2, counted(600, 43)), CFG, state)
    assert e.signals["ttft_over_slo_ratio"] == 0.0  # out of the 120-s window


def test_ttft_queue_down_steady_bounds_and_pending_reasons() -> None:
    idle = [rep(i, prefill_load_tokens_per_s=50.0, kv_usage=0.05) for i in range(3)]
    state = TTFTQueueState()
    reasons = []
    for t in (0.0, 21.0):
        desired, state, e = _decide(TTFT, snapshot(t, 3, idle), CFG, state)
        reasons.append((desired, e.reason))
    assert reasons == [(3, "steady"), (1, "slo_headroom")]
    _, _, e = _decide(TTFT, snapshot(0.0, 9, [rep(0)]), CFG, TTFTQueueState())
    assert e.reason == "bounds"
    zero = ScalingConfig(min_replicas=0, max_replicas=4)
    desired, _, e = _decide(TTFT, snapshot(0.0, 0, [], pending=3.0), zero, TTFTQueueState())
    assert (desired, e.reason) == (1, "pending_requests")


def test_baselines_reasons() -> None:
    cfg = ScalingConfig(min_replicas=1, max_replicas=8, params={"upscale_delay_s": 0.0})
    ongoing = make_policy("ongoing-requests")
    desired, _, e = _decide(
        ongoing, snapshot(0.0, 1, [rep(0, ongoing=32)]), cfg, ongoing.initial_state()
    )
    assert (desired, e.reason) == (4, "ongoing_requests")
    none, plain = make_policy("none"), ScalingConfig(min_replicas=1, max_replicas=8)
    desired, _, e = _decide(none, snapshot(0.0, 12, [rep(0)]), plain, none.initial_state())
    assert (desired, e.reason) == (8, "bounds")
    desired, _, e = _decide(none, snapshot(0.0, 3, [rep(0)]), plain, none.initial_state())
    assert (desired, e.reason) == (3, "steady")


def test_a_policy_without_explain_gets_the_generic_signals() -> None:
    class Bare:
        name = "bare"

    e = explain(Bare(), snapshot(0.0, 2, [rep(0, queue_delay_s=0.5)]), CFG, None, 3)  # type: ignore[arg-type]
    assert set(e.signals) == set(GENERIC_SIGNALS)
    assert (e.targets, e.reason) == ({}, "policy")
    assert direction(2, 3) == "up"
    assert direction(3, 2) == "down"
    assert direction(2, 2) is None


def test_export_sets_gauges_and_counts_only_changes() -> None:
    metrics = FakeMetrics()
    e = Explanation(
        {"queue_delay_max_s": 2.5, "prefill_backlog_s": 1.0},
        {"prefill_backlog_s": 1.4},
        "queue_delay",
    )
    base = {"deployment_name": "llm", "policy": "ttft-queue"}
    export_decision(
        metrics, Decision("llm", "ttft-queue", current=2, previous=2, desired=4, explanation=e)
    )
    assert metrics[AUTOSCALER_DESIRED].get(**base) == 4.0
    assert metrics[AUTOSCALER_CURRENT].get(**base) == 2.0
    assert metrics[AUTOSCALER_SIGNAL].by("signal") == {
        "queue_delay_max_s": 2.5,
        "prefill_backlog_s": 1.0,
    }
    assert metrics[AUTOSCALER_TARGET].get(**base, signal="prefill_backlog_s") == 1.4
    decisions = metrics[AUTOSCALER_DECISIONS]
    assert decisions.values == {
        tuple(sorted({**base, "direction": "up", "reason": "queue_delay"}.items())): 1.0
    }
    steady = Explanation({"queue_delay_max_s": 0.1}, {}, "steady")
    export_decision(
        metrics, Decision("llm", "ttft-queue", current=4, previous=4, desired=4, explanation=steady)
    )
    assert decisions.calls == 1  # unchanged: no decision counted, gauges re-set
    assert metrics[AUTOSCALER_DESIRED].calls == 2
    assert metrics[AUTOSCALER_SIGNAL].get(**base, signal="queue_delay_max_s") == 0.1
    down = Explanation({}, {}, "slo_headroom")
    export_decision(
        metrics, Decision("llm", "ttft-queue", current=4, previous=4, desired=1, explanation=down)
    )
    assert decisions.get(**base, direction="down", reason="slo_headroom") == 1.0


def _ctx(target: int, queued_tokens: float, state: dict[str, Any] | None = None) -> SimpleNamespace:
    stats = ReplicaStats(waiting_prefill_tokens=queued_tokens, prefill_tokens_per_s=1000.0)
    wire = {k: {"a": v} for k, v in stats.to_wire().items()}
    return SimpleNamespace(
        deployment_name="LLMReplica",
        current_num_replicas=1,
        target_num_replicas=target,
        aggregated_metrics=wire,
        total_num_requests=1.0,
        total_queued_requests=0.0,
        capacity_adjusted_min_replicas=1,
        capacity_adjusted_max_replicas=8,
        policy_state=state or {},
        current_time=1000.0,
    )


def test_serve_policy_exports_each_call_and_counts_a_move_once() -> None:
    policy = ServeScalingPolicy(policy="ttft-queue", config={"ttft_slo_s": 2.0})
    metrics = FakeMetrics()
    policy.metric = metrics
    desired, state = policy(_ctx(target=1, queued_tokens=5600.0))
    assert desired == 4
    again, _ = policy(_ctx(target=4, queued_tokens=5600.0, state=state))
    assert again == 4
    tags = {"deployment_name": "LLMReplica", "policy": "ttft-queue"}
    assert metrics[AUTOSCALER_DESIRED].get(**tags) == 4.0
    assert metrics[AUTOSCALER_CURRENT].get(**tags) == 1.0
    assert metrics[AUTOSCALER_SIGNAL].get(**tags, signal="prefill_backlog_s") == pytest.approx(
        5.6 / 4
    )
    assert metrics[AUTOSCALER_DECISIONS].values == {
        tuple(sorted({**tags, "direction": "up", "reason": "queue_delay"}.items())): 1.0
    }


def test_metrics_errors_never_stop_scaling() -> None:
    policy = ServeScalingPolicy(policy="ttft-queue", config={"ttft_slo_s": 2.0})
    calls = []

    def broken(metric: Any) -> Any:
        calls.append(metric.name)
        raise RuntimeError("no metrics here")

    policy.metric = broken
    assert policy(_ctx(target=1, queued_tokens=5600.0))[0] == 4
    assert policy(_ctx(target=1, queued_tokens=5600.0))[0] == 4
    assert len(calls) == 2
