"""Serve adapter: AutoscalingContext -> MetricsSnapshot, policy class, config builder. No cluster."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from autoscaler.registry import POLICY_NAMES, make_policy
from autoscaler.serve_autoscaling import (
    ServeScalingPolicy,
    build_autoscaling_config,
    scaling_config_from_dict,
    scaling_config_to_dict,
    snapshot_from_context,
    state_from_serve,
    state_to_serve,
)
from autoscaler.ttft_queue import TTFTQueueState
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig
from contracts.stats import ReplicaStats


def metric_major(stats: dict[Any, ReplicaStats], **serve: dict[Any, float]) -> dict[str, Any]:
    """Replicas' ``ReplicaStats`` wire dicts as Serve aggregates them, plus Serve's own keys."""
    out: dict[str, dict[Any, float]] = dict(serve)
    for rid, st in stats.items():
        for name, value in st.to_wire().items():
            out.setdefault(name, {})[rid] = value
    return out


@dataclass(frozen=True)
class FakeReplicaID:
    unique_id: str


A, B = FakeReplicaID("a"), FakeReplicaID("b")


def fake_ctx(**overrides: Any) -> SimpleNamespace:
    base: dict[str, Any] = {
        "current_num_replicas": 2,
        "target_num_replicas": 3,
        "aggregated_metrics": metric_major(
            {
                A: ReplicaStats(
                    waiting_prefill_tokens=5600.0,
                    prefill_tokens_per_s=1000.0,
                    queue_delay_s=5.6,
                    kv_usage=0.5,
                    prefix_queries=9000.0,
                    prefix_hits=4000.0,
                    ongoing=1.0,  # the engine's own count: Serve's running_requests wins
                ),
                B: ReplicaStats(prefill_tokens_per_s=1200.0, kv_usage=0.25, prefix_queries=100.0),
            },
            running_requests={A: 7.0, B: 2.0},
        ),
        "total_num_requests": 9.0,
        "total_queued_requests": 1.0,
        "capacity_adjusted_min_replicas": 1,
        "capacity_adjusted_max_replicas": 8,
        "policy_state": {},
        "current_time": 1000.0,
    }
    return SimpleNamespace(**(base | overrides))


def test_context_becomes_replica_major_snapshot() -> None:
    s = snapshot_from_context(fake_ctx())
    assert s.now == 1000.0
    assert s.current_replicas == 3
    assert s.pending_requests == 1.0
    a, b = s.replicas
    assert (a.replica_id, b.replica_id) == ("a", "b")
    assert a.waiting_prefill_tokens == 5600.0
    assert a.queue_delay_s == 5.6
    assert a.kv_usage == 0.5
    assert b.prefill_tokens_per_s == 1200.0
    assert b.queue_delay_s == 0.0
    assert (a.ongoing, b.ongoing) == (7.0, 2.0)  # Serve's running_requests as ongoing
    assert (a.prefix_queries, a.prefix_hits) == (9000.0, 4000.0)


def test_context_edge_cases() -> None:
    ctx = fake_ctx(
        aggregated_metrics=None,
        total_queued_requests=None,
        current_num_replicas=0,
        target_num_replicas=0,
        total_num_requests=4.0,
        current_time=None,
    )
    s = snapshot_from_context(ctx)
    assert s.replicas == ()
    assert s.pending_requests == 4.0
    assert s.now > 0
    own = fake_ctx(aggregated_metrics=metric_major({A: ReplicaStats(ongoing=3.0)}))
    assert snapshot_from_context(own).replicas[0].ongoing == 3.0  # no running_requests
    early = fake_ctx(aggregated_metrics={"running_requests": {A: 2.0}})  # no report yet
    (m,) = snapshot_from_context(early).replicas
    assert m.ongoing == 2.0
    assert m.waiting_prefill_tokens == 0.0


def test_counters_are_read_at_their_latest_raw_sample() -> None:
    """Serve's window mean of a cumulative counter lags it; the adapter takes the newest raw
    sample for counters (``CUMULATIVE_FIELDS``), the larger of it and the mean for backlog
    gauges (``BACKLOG_FIELDS``) and the means for everything else."""
    at = lambda t, v: SimpleNamespace(timestamp=t, value=v)  # noqa: E731 - TimeStampedValue
    raw = {
        "arrived_prompt_tokens": {A: [at(998.0, 0.0), at(999.5, 9000.0), at(999.0, 4000.0)]},
        "prefix_queries": {A: [at(999.5, 9500.0)], B: []},
        "kv_usage": {A: [at(999.5, 0.9)]},  # a gauge: the mean stays
        # backlog gauges: the larger of the newest sample and the mean (A's mean: 5.6 s,
        # 5600 tokens; B's: 0)
        "queue_delay_s": {A: [at(999.5, 2.0), at(998.0, 9.0)], B: [at(999.5, 1.5)]},
        "waiting_prefill_tokens": {A: [at(999.5, 8000.0)], B: [at(999.0, 0.0)]},
    }
    s = snapshot_from_context(fake_ctx(raw_metrics=raw))
    a, b = s.replicas
    assert a.arrived_prompt_tokens == 9000.0  # the newest by timestamp, not the last listed
    assert a.prefix_queries == 9500.0
    assert b.prefix_queries == 100.0  # no raw sample: the mean
    assert a.kv_usage == 0.5
    assert (a.queue_delay_s, b.queue_delay_s) == (5.6, 1.5)  # draining: the mean; growing: now
    assert (a.waiting_prefill_tokens, b.waiting_prefill_tokens) == (8000.0, 0.0)
    ghost = fake_ctx(raw_metrics={"arrived_requests": {FakeReplicaID("gone"): [at(1.0, 5.0)]}})
    assert [m.replica_id for m in snapshot_from_context(ghost).replicas] == ["a", "b"]

    class Failing(SimpleNamespace):
        @property
        def raw_metrics(self) -> Any:
            raise RuntimeError("lazy getter failed")

    failing = Failing(**vars(fake_ctx()))
    assert snapshot_from_context(failing).replicas[0].prefix_queries == 9000.0


def test_policy_class_decides_and_filters_serve_state() -> None:
    policy = ServeScalingPolicy(policy="ttft-queue", config={"max_replicas": 8, "ttft_slo_s": 2.0})
    ctx = fake_ctx(policy_state={"__decision_counters": 3, "rate": 900.0})
    desired, state = policy(ctx)
    assert desired == 4  # 5.6 s of queued prefill / (0.7 * 2 s)
    assert "__decision_counters" not in state
    assert state["rate"] == 1100.0
    assert state_from_serve(policy.policy, state).last_up_at == 1000.0
    capped = fake_ctx(capacity_adjusted_max_replicas=2)  # target_capacity respected
    assert policy(capped)[0] == 2  # target 3 > capacity-adjusted max 2: back to bounds
    with pytest.raises(ValueError, match=r"unknown autoscaling policy"):
        ServeScalingPolicy(policy="nope")
    with pytest.raises(ValueError, match="known"):  # a typo fails when Serve builds it
        ServeScalingPolicy(config={"params": {"headrooom": 0.5}})


def test_scaling_config_dict_round_trip() -> None:
    cfg = ScalingConfig(min_replicas=0, max_replicas=5, params={"down_utilization": 0.4})
    assert scaling_config_from_dict(scaling_config_to_dict(cfg)) == cfg
    with pytest.raises(ValueError, match="ttft_slo"):
        scaling_config_from_dict({"ttft_slo": 1.0})


def test_build_config_per_policy() -> None:
    cfg = ScalingConfig(
        min_replicas=1, max_replicas=6, target_ongoing_requests=4, params={"upscale_delay_s": 3}
    )
    ray_default = build_autoscaling_config("ongoing-requests", cfg)
    assert ray_default.policy.is_default_policy_function()
    assert ray_default.target_ongoing_requests == 4
    assert ray_default.upscale_delay_s == 3.0
    assert ray_default.downscale_delay_s == 30.0  # RayDelayParams' default
    cfg = ScalingConfig(min_replicas=1, max_replicas=6)
    for name in ("ttft-queue", "utilization", "none"):
        ac = build_autoscaling_config(name, cfg, metrics_interval_s=0.5, look_back_period_s=2.0)
        assert (ac.min_replicas, ac.max_replicas, ac.look_back_period_s) == (1, 6, 2.0)
        assert ac.upscale_delay_s == 0.0
        assert ac.downscale_delay_s == 0.0
        assert ac.policy.policy_kwargs["policy"] == name
        assert ac.policy.get_policy() is ServeScalingPolicy
    with pytest.raises(ValueError, match=r"unknown autoscaling policy"):
        build_autoscaling_config("gpu", cfg)
    with pytest.raises(ValueError, match="tolerance"):  # another policy's knob
        build_autoscaling_config("ttft-queue", ScalingConfig(params={"tolerance": 0.1}))


def test_runs_inside_rays_own_policy_wrapper() -> None:
    """Ray's wrapper, real AutoscalingContext and ReplicaID: field names and state merging."""
    from ray.serve._private.autoscaling_state import _resolve_policy_callable
    from ray.serve._private.common import DeploymentID, ReplicaID
    from ray.serve.autoscaling_policy import _apply_autoscaling_config
    from ray.serve.config import AutoscalingContext

    cfg = ScalingConfig(min_replicas=1, max_replicas=8)
    ac = build_autoscaling_config("ttft-queue", cfg)
    policy = _apply_autoscaling_config(_resolve_policy_callable(ac.policy))
    dep = DeploymentID(name="llm", app_name="app")
    r1 = ReplicaID("r1", dep)

    def ctx(now: float, state: dict[str, Any]) -> AutoscalingContext:
        return AutoscalingContext(
            deployment_id=dep,
            deployment_name="llm",
            app_name="app",
            current_num_replicas=1,
            target_num_replicas=1,
            running_replicas=[r1],
            total_num_requests=lambda: 5.0,
            total_queued_requests=lambda: 0.0,
            aggregated_metrics=lambda: metric_major(
                {r1: ReplicaStats(waiting_prefill_tokens=7000.0, prefill_tokens_per_s=1000.0)}
            ),
            raw_metrics=None,
            capacity_adjusted_min_replicas=1,
            capacity_adjusted_max_replicas=8,
            policy_state=state,
            last_scale_up_time=None,
            last_scale_down_time=None,
            current_time=now,
            config=ac,
        )

    desired, state = policy(ctx(100.0, {}))
    assert desired == 5  # ceil(7 s / 1.4 s), applied at once (Ray delays are 0)
    assert state["last_up_at"] == 100.0
    assert "__decision_counters" in state
    desired, state = policy(ctx(101.0, state))  # Serve's dict back in: the state carries on
    assert desired == 1
    assert state["settling"] is True
    assert state["prev_t"] == 101.0
    assert state["last_up_at"] == 100.0


def test_params_reach_the_policy_in_the_config_serve_pickles() -> None:
    params = {"downscale_stable_s": 3, "target_attainment": 0.95}
    ac = build_autoscaling_config("ttft-queue", ScalingConfig(max_replicas=3, params=params))
    sent = ac.policy.policy_kwargs["config"]
    assert sent["params"] == params
    assert "downscale_stable_s" not in sent


def _busy_states() -> list[object]:
    """Each policy's state after a few decisions, so that most fields are set."""
    out = []
    cfg = ScalingConfig(max_replicas=8, params={})
    for name in POLICY_NAMES:
        policy = make_policy(name)
        state = policy.initial_state()
        for t in range(6):
            reps = tuple(
                ReplicaMetrics(f"r{i}", waiting_prefill_tokens=3000.0 * (t % 3),
                               prefix_queries=800.0 * t, ongoing=9.0,
                               arrived_prompt_tokens=800.0 * t, arrived_requests=2.0 * t)
                for i in range(2)
            )  # fmt: skip
            snapshot = MetricsSnapshot(float(t * 3), 2, reps)
            _, state = policy.decide(snapshot, cfg, state)
        out.append(state)
    return out


def test_state_round_trips_through_serves_dict() -> None:
    states = _busy_states()
    ttft = states[0]
    assert isinstance(ttft, TTFTQueueState)
    assert ttft.bins  # arrival bins and their requirements (tuples) survive the dict
    assert len(ttft.reqs) == len(ttft.bins)
    assert ttft.arrived
    assert ttft.prompt_s is not None
    assert ttft.counters
    assert ttft.last_up_at is not None
    assert ttft.reason
    for name, state in zip(POLICY_NAMES, states, strict=True):
        data = state_to_serve(state)
        assert not any(k.startswith("__") for k in data)
        policy = make_policy(name)
        assert state_from_serve(policy, data) == state
        assert state_from_serve(policy, {**data, "__decision_counters": 4}) == state
        assert state_from_serve(policy, {}) == policy.initial_state()
