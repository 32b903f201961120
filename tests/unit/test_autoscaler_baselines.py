"""Baselines (ongoing-requests, utilization, none) and the registry."""

from __future__ import annotations

import random

import pytest

from autoscaler.common import RayDelayState
from autoscaler.registry import PARAMS, POLICY_NAMES, check_params, make_policy
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig
from tests.fakes import snapshot

CFG = ScalingConfig(min_replicas=1, max_replicas=10, target_ongoing_requests=8.0)  # delays 5/30 s


def ongoing(n: int, each: float) -> list[ReplicaMetrics]:
    return [ReplicaMetrics(f"r{i}", ongoing=each) for i in range(n)]


def run(name: str, snaps: list[MetricsSnapshot], cfg: ScalingConfig = CFG) -> list[int]:
    policy, out = make_policy(name), []
    state = policy.initial_state()
    for s in snaps:
        desired, state = policy.decide(s, cfg, state)
        out.append(desired)
    return out


def test_ongoing_requests_rule_with_ray_like_upscale_delay() -> None:
    # 2 replicas x 20 ongoing = 40 / target 8 -> 5, after 5 s of consistent up-desire
    out = run("ongoing-requests", [snapshot(t, 2, ongoing(2, 20)) for t in (0.0, 4.9, 5.0)])
    assert out == [2, 2, 5]


def test_ongoing_requests_direction_change_restarts_the_timer() -> None:
    seq = [
        snapshot(0.0, 2, ongoing(2, 20)),  # up
        snapshot(3.0, 2, ongoing(2, 0.5)),  # down: resets
        snapshot(4.0, 2, ongoing(2, 20)),  # up again from t=4
        snapshot(8.0, 2, ongoing(2, 20)),
        snapshot(9.0, 2, ongoing(2, 20)),
    ]
    assert run("ongoing-requests", seq) == [2, 2, 2, 2, 5]


def test_ongoing_requests_downscale_delay_and_queue_fallback() -> None:
    out = run("ongoing-requests", [snapshot(t, 5, ongoing(5, 1.6)) for t in (0.0, 29.0, 30.0)])
    assert out == [5, 5, 1]
    queued = [ReplicaMetrics("r0", waiting=20, running=4)]  # engine without an ongoing count
    assert run("ongoing-requests", [snapshot(t, 1, queued) for t in (0.0, 5.0)]) == [1, 3]


def test_ongoing_requests_factors_and_cold_start() -> None:
    cfg = ScalingConfig(
        max_replicas=10, target_ongoing_requests=8.0, params={"upscaling_factor": 0.5}
    )
    assert run("ongoing-requests", [snapshot(t, 2, ongoing(2, 24)) for t in (0.0, 5.0)], cfg) == [
        2,
        4,
    ]
    zero = ScalingConfig(min_replicas=0, max_replicas=10, target_ongoing_requests=8.0)
    assert run("ongoing-requests", [snapshot(0.0, 0, [], pending=3)], zero) == [1]  # immediate
    assert run("ongoing-requests", [snapshot(t, 3, ongoing(3, 0)) for t in (0.0, 30.0)], zero) == [
        3,
        1,
    ]


def test_utilization_rule_uses_busy_or_kv_with_tolerance() -> None:
    hot = [ReplicaMetrics(f"r{i}", busy_fraction=0.9) for i in range(2)]
    assert run("utilization", [snapshot(t, 2, hot) for t in (0.0, 5.0)]) == [
        2,
        3,
    ]  # ceil(2*0.9/0.7)
    kv_full = [ReplicaMetrics(f"r{i}", busy_fraction=0.2, kv_usage=0.95) for i in range(2)]
    assert run("utilization", [snapshot(t, 2, kv_full) for t in (0.0, 5.0)]) == [2, 3]
    near = [ReplicaMetrics(f"r{i}", busy_fraction=0.74) for i in range(2)]  # within 10 %
    assert run("utilization", [snapshot(t, 2, near) for t in (0.0, 50.0)]) == [2, 2]
    cold = [ReplicaMetrics(f"r{i}", busy_fraction=0.1) for i in range(4)]
    assert run("utilization", [snapshot(t, 4, cold) for t in (0.0, 30.0)]) == [4, 1]


def test_none_keeps_current_within_bounds() -> None:
    assert run("none", [snapshot(0.0, 3, ongoing(3, 100))]) == [3]
    assert run("none", [snapshot(0.0, 30, [])]) == [10]
    zero = ScalingConfig(min_replicas=0, max_replicas=4)
    assert run("none", [snapshot(0.0, 0, [], pending=2)], zero) == [1]


def test_registry_names_and_errors() -> None:
    assert POLICY_NAMES == ("ttft-queue", "ongoing-requests", "utilization", "none")
    for name in POLICY_NAMES:
        assert make_policy(name).name == name
    with pytest.raises(ValueError, match="ttft-queue"):
        make_policy("gpu-util")


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_stays_in_bounds_on_random_snapshots(name: str) -> None:
    rng = random.Random(POLICY_NAMES.index(name))
    cfg = ScalingConfig(min_replicas=1, max_replicas=6)
    policy = make_policy(name)
    state = policy.initial_state()
    current = 2
    for tick in range(300):
        reps = [
            ReplicaMetrics(
                f"r{i}",
                waiting=rng.randint(0, 30),
                running=rng.randint(0, 16),
                waiting_prefill_tokens=rng.uniform(0, 20000),
                prefill_tokens_per_s=rng.choice([0.0, 500.0, 3000.0]),
                kv_usage=rng.random(),
                busy_fraction=rng.random(),
                ongoing=rng.uniform(0, 40),
                ttft_p95_s=rng.uniform(0, 4),
            )
            for i in range(rng.randint(0, current))
        ]
        desired, state = policy.decide(snapshot(tick * 0.5, current, reps), cfg, state)
        assert cfg.min_replicas <= desired <= cfg.max_replicas
        assert type(state) is type(policy.initial_state())
        current = desired


def test_delay_state_says_what_is_pending() -> None:
    policy = make_policy("ongoing-requests")
    cfg = ScalingConfig(max_replicas=10, target_ongoing_requests=8.0)
    _, state = policy.decide(snapshot(3.0, 2, ongoing(2, 20)), cfg, policy.initial_state())
    assert state == RayDelayState(direction=1, since=3.0)
    desired, state = policy.decide(snapshot(8.0, 2, ongoing(2, 20)), cfg, state)
    assert desired == 5
    assert state == RayDelayState()


def test_each_policy_rejects_params_it_does_not_read() -> None:
    check_params("utilization", {"target_utilization": 0.5, "tolerance": 0.2})
    with pytest.raises(ValueError, match="tolerance") as err:  # utilization's, not Ray's rule's
        check_params("ongoing-requests", {"tolerance": 0.2})
    assert "upscale_delay_s" in str(err.value)  # the known keys are listed
    with pytest.raises(ValueError, match="known: \\(none\\)"):
        check_params("none", {"upscale_delay_s": 1.0})
    with pytest.raises(ValueError, match="not a number"):
        check_params("utilization", {"tolerance": "wide"})
    assert set(PARAMS) == set(POLICY_NAMES)
    with pytest.raises(ValueError, match="target_attainment"):  # decide parses the same way
        make_policy("ttft-queue").decide(
            snapshot(0.0, 1, []),
            ScalingConfig(params={"boot": 1}),
            make_policy("ttft-queue").initial_state(),
        )
