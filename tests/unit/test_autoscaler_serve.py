"""Serve adapter: AutoscalingContext -> MetricsSnapshot, policy class, config builder. No cluster."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from autoscaler.serve_autoscaling import (
    ServeScalingPolicy,
    build_autoscaling_config,
    lift_params,
    scaling_config_from_dict,
    scaling_config_to_dict,
    snapshot_from_context,
)
from autoscaler.types import ScalingConfig
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
    assert s.now == 1000.0 and s.current_replicas == 3 and s.pending_requests == 1.0
    a, b = s.replicas
    assert (a.replica_id, b.replica_id) == ("a", "b")
    assert a.waiting_prefill_tokens == 5600.0 and a.queue_delay_s == 5.6 and a.kv_usage == 0.5
    assert b.prefill_tokens_per_s == 1200.0 and b.queue_delay_s == 0.0
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
    assert s.replicas == () and s.pending_requests == 4.0 and s.now > 0
    own = fake_ctx(aggregated_metrics=metric_major({A: ReplicaStats(ongoing=3.0)}))
    assert snapshot_from_context(own).replicas[0].ongoing == 3.0  # no running_requests
    early = fake_ctx(aggregated_metrics={"running_requests": {A: 2.0}})  # no report yet
    (m,) = snapshot_from_context(early).replicas
    assert m.ongoing == 2.0 and m.waiting_prefill_tokens == 0.0


def test_policy_class_decides_and_filters_serve_state() -> None:
    policy = ServeScalingPolicy(policy="ttft-queue", config={"max_replicas": 8, "ttft_slo_s": 2.0})
    ctx = fake_ctx(policy_state={"__decision_counters": 3, "ttft.rate": 900.0})
    desired, state = policy(ctx)
    assert desired == 4  # 5.6 s of queued prefill / (0.7 * 2 s)
    assert "__decision_counters" not in state and state["ttft.rate"] == 1100.0
    capped = fake_ctx(capacity_adjusted_max_replicas=2)  # target_capacity respected
    assert policy(capped)[0] == 2  # target 3 > capacity-adjusted max 2: back to bounds
    with pytest.raises(ValueError):
        ServeScalingPolicy(policy="nope")


def test_scaling_config_dict_round_trip() -> None:
    cfg = ScalingConfig(min_replicas=0, max_replicas=5, params={"down_utilization": 0.4})
    assert scaling_config_from_dict(scaling_config_to_dict(cfg)) == cfg
    with pytest.raises(ValueError, match="ttft_slo"):
        scaling_config_from_dict({"ttft_slo": 1.0})


def test_build_config_per_policy() -> None:
    cfg = ScalingConfig(
        min_replicas=1, max_replicas=6, upscale_cooldown_s=3.0, target_ongoing_requests=4
    )
    ray_default = build_autoscaling_config("ongoing-requests", cfg)
    assert ray_default.policy.is_default_policy_function()
    assert ray_default.target_ongoing_requests == 4 and ray_default.upscale_delay_s == 3.0
    for name in ("ttft-queue", "utilization", "none"):
        ac = build_autoscaling_config(name, cfg, metrics_interval_s=0.5, look_back_period_s=2.0)
        assert (ac.min_replicas, ac.max_replicas, ac.look_back_period_s) == (1, 6, 2.0)
        assert ac.upscale_delay_s == 0.0 and ac.downscale_delay_s == 0.0
        assert ac.policy.policy_kwargs["policy"] == name
        assert ac.policy.get_policy() is ServeScalingPolicy
    with pytest.raises(ValueError):
        build_autoscaling_config("gpu", cfg)


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
    assert state["ttft.last_up_at"] == 100.0 and "__decision_counters" in state


def test_params_named_like_config_fields_reach_the_policy() -> None:
    params = {"downscale_stable_s": 3, "target_utilization": 0.5, "peak_hold_s": 30.0}
    cfg = ScalingConfig(min_replicas=1, max_replicas=3, params=params)
    lifted = lift_params(cfg)
    assert (lifted.downscale_stable_s, lifted.target_utilization) == (3.0, 0.5)
    assert dict(lifted.params) == {"peak_hold_s": 30.0}
    ac = build_autoscaling_config("ttft-queue", cfg)
    sent = ac.policy.policy_kwargs["config"]
    assert sent["downscale_stable_s"] == 3.0 and sent["params"] == {"peak_hold_s": 30.0}
    assert lift_params(ScalingConfig()) == ScalingConfig()
