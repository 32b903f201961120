"""TTFT-queue with a warm pool of sleeping replicas (``MetricsSnapshot.warm_replicas``): it
times wakes apart from boots, and keeps awake only the reserve one wake calls for, plus
what the sleepers cannot cover of the reserve one boot calls for."""

from __future__ import annotations

import pytest

from autoscaler.ttft_measure import PRIOR_BOOT_S
from autoscaler.ttft_queue import TTFTQueuePolicy, TTFTQueueState, burst_need, derive
from autoscaler.ttft_types import MAX_TAU_S, MIN_TAU_S, TTFTQueueParams
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig

CFG = ScalingConfig(min_replicas=1, max_replicas=8, ttft_slo_s=2.0)
WIDE = ScalingConfig(min_replicas=1, max_replicas=16, ttft_slo_s=2.0)
POLICY = TTFTQueuePolicy()
P = TTFTQueueParams()


def rep(i: int, wpt: float = 0.0, **kw: float) -> ReplicaMetrics:
    return ReplicaMetrics(f"r{i}", waiting_prefill_tokens=wpt, prefill_tokens_per_s=1000.0, **kw)


def idle(n: int) -> list[ReplicaMetrics]:
    return [rep(i) for i in range(n)]


def snap(now: float, current: int, reps: list[ReplicaMetrics], warm: int) -> MetricsSnapshot:
    return MetricsSnapshot(now, current, tuple(reps), 0.0, warm)


def test_an_up_move_the_sleepers_cover_is_timed_as_a_wake() -> None:
    desired, state = POLICY.decide(snap(10.0, 1, [rep(0, 5600)], warm=4), CFG, TTFTQueueState())
    assert desired == 4  # 5.6 s queued, budget 1.4 s: three more, all from the pool
    assert (state.wake_pending, state.boot_pending) == ((10.0, 4), None)
    _, state = POLICY.decide(snap(12.5, 4, idle(4), warm=1), CFG, state)
    assert (state.wake_pending, state.wake_samples, state.boot_samples) == (None, (2.5,), ())
    d = derive(P, state, 2.0, warm=1)
    assert (d.boot_s, d.wake_s) == (PRIOR_BOOT_S, 2.5)  # no boot measured: its prior
    assert (d.drain_credit_s, d.growth_tau_s) == (2.5, MIN_TAU_S)  # the next up-move wakes
    cold = derive(P, state, 2.0, warm=0)  # pool empty: the next up-move boots
    assert (cold.wake_s, cold.drain_credit_s, cold.growth_tau_s) == (2.5, 0.0, MAX_TAU_S)
    e = POLICY.explain(snap(12.5, 4, idle(4), warm=1), CFG, state, 4)
    assert (e.signals["wake_s"], e.signals["warm_replicas"]) == (2.5, 1.0)


def test_an_up_move_beyond_the_sleepers_is_timed_as_a_boot() -> None:
    desired, state = POLICY.decide(snap(10.0, 1, [rep(0, 5600)], warm=2), CFG, TTFTQueueState())
    assert desired == 4
    assert (state.wake_pending, state.boot_pending) == (None, (10.0, 4))
    _, state = POLICY.decide(snap(40.0, 4, idle(4), warm=0), CFG, state)
    assert (state.boot_samples, state.wake_samples) == ((30.0,), ())
    assert derive(P, state, 2.0, warm=2).wake_s == 30.0  # no wake measured: the boot


def test_a_wake_never_counts_as_longer_than_a_boot() -> None:
    state = TTFTQueueState(boot_samples=(10.0,), wake_samples=(12.0,))
    assert derive(P, state, 2.0, warm=1).wake_s == 10.0


@pytest.mark.parametrize(
    ("warm", "need"),
    [(0, 5), (1, 4), (2, 3), (3, 2), (6, 2)],  # the sleepers cover the boot reserve's excess
)
def test_the_burst_reserve_counts_the_sleepers(warm: int, need: int) -> None:
    state = TTFTQueueState(reserve=5, wake_reserve=2)
    assert burst_need(state, warm) == need
    desired, new = POLICY.decide(snap(0.0, 1, idle(1), warm), CFG, state)
    assert desired == need
    assert new.cause == ("burst_reserve" if need > 1 else "")


def _feed(state: TTFTQueueState, warm: int) -> TTFTQueueState:
    """40 s of a trickle (1 request/s of 0.5 s prefill) with one burst of 40 requests at
    20 s, decided every second on a fleet of 12 (the reserve's moves do not matter here)."""
    requests = 0.0
    for t in range(41):
        requests += (1.0 + (40.0 if t == 20 else 0.0)) if t else 0.0
        counted = {"arrived_prompt_tokens": 500.0 * requests, "arrived_requests": requests}
        reps = [rep(0, **counted), *idle(12)[1:]]
        _, state = POLICY.decide(snap(float(t), 12, reps, warm), WIDE, state)
    return state


def test_bursts_within_one_wake_are_measured_beside_those_within_one_boot() -> None:
    measured = _feed(TTFTQueueState(boot_samples=(30.0,), wake_samples=(2.0,)), warm=4)
    reqs, wake_reqs = measured.reqs, measured.wake_reqs
    assert len(wake_reqs) == len(reqs) == len(measured.bins) == 40
    assert all(w <= r + 1e-12 for w, r in zip(wake_reqs, reqs, strict=True))
    # the burst bin itself needs the same (41 x 0.5 s over 1 s + budget 1 s); five bins
    # later a boot's windows still hold it, a wake's no longer do
    burst = max(range(40), key=lambda k: measured.bins[k])
    assert wake_reqs[burst] == pytest.approx(reqs[burst]) == pytest.approx(10.25)
    assert reqs[burst + 5] > 3.0 > 1.0 > wake_reqs[burst + 5]
    assert measured.wake_reserve <= measured.reserve
    # without a measured wake the two are the same and only one series is kept
    plain = _feed(TTFTQueueState(boot_samples=(30.0,)), warm=0)
    assert plain.wake_reqs == ()
    assert (plain.wake_reserve, plain.reqs) == (plain.reserve, reqs)
