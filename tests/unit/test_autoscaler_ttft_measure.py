"""TTFT-queue's measured inputs (``ttft_measure``, ``derive``): replica boot time, the mean
prefill per request, the arrival counters (the burst reserve: test_autoscaler_burst_reserve)."""

from __future__ import annotations

import math

import pytest

from autoscaler.ttft_measure import (
    BIN_S,
    BOOT_GIVE_UP_S,
    BOOT_SAMPLES,
    PRIOR_BOOT_S,
    boot_estimate,
    track_boot,
)
from autoscaler.ttft_queue import TTFTQueuePolicy, TTFTQueueState, derive
from autoscaler.ttft_types import (
    DOWN_RATIO,
    HEADROOM,
    MAX_TAU_S,
    MAX_UTILIZATION,
    MIN_BUDGET,
    MIN_GRACE_S,
    MIN_TAU_S,
    OWN_PREFILLS,
    PROMPT_N,
    TTFTQueueParams,
)
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig
from tests.fakes import idle, rep, snapshot

CFG = ScalingConfig(min_replicas=1, max_replicas=8, ttft_slo_s=2.0)
POLICY = TTFTQueuePolicy()
S0 = TTFTQueueState()
P = TTFTQueueParams()


def test_the_rule_constants_these_tests_assume() -> None:
    assert (HEADROOM, OWN_PREFILLS, MIN_BUDGET, MAX_UTILIZATION) == (0.7, 2.0, 0.25, 0.9)
    assert (DOWN_RATIO, MIN_TAU_S, MAX_TAU_S, MIN_GRACE_S) == (0.55, 3.0, 15.0, 60.0)
    assert (BIN_S, PRIOR_BOOT_S, BOOT_SAMPLES) == (1.0, 30.0, 5)
    assert P.target_attainment == 0.99


# ---- boot time ------------------------------------------------------------------------


def test_an_up_move_is_timed_until_its_target_reports() -> None:
    pending = (10.0, 3)
    assert track_boot(snapshot(25.0, 3, idle(2)), pending, ()) == (pending, ())  # 2 of 3
    assert track_boot(snapshot(40.0, 3, idle(3)), pending, ()) == (None, (30.0,))
    assert track_boot(snapshot(41.0, 4, idle(4)), pending, (12.0,)) == (None, (12.0, 31.0))
    assert track_boot(snapshot(40.0, 3, idle(3)), None, (12.0,)) == (None, (12.0,))  # none


def test_a_boot_not_seen_complete_is_given_up() -> None:
    pending = (10.0, 3)
    at_limit = snapshot(10.0 + BOOT_GIVE_UP_S, 3, idle(2))
    assert track_boot(at_limit, pending, (5.0,)) == (pending, (5.0,))
    late = snapshot(10.0 + BOOT_GIVE_UP_S + 1.0, 3, idle(2))
    assert track_boot(late, pending, (5.0,)) == (None, (5.0,))  # dropped, not a sample


def test_boot_estimate_is_the_median_of_the_latest_samples() -> None:
    assert boot_estimate(()) is None
    assert boot_estimate((30.0, 10.0, 20.0)) == 20.0
    assert boot_estimate((10.0, 40.0)) == 25.0
    samples: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0, 5.0)
    pending = (0.0, 1)
    _, samples = track_boot(snapshot(100.0, 1, idle(1)), pending, samples)
    assert samples == (2.0, 3.0, 4.0, 5.0, 100.0)  # the oldest goes
    assert boot_estimate(samples) == 4.0


def test_a_later_up_move_replaces_the_pending_measurement_a_down_move_cancels_it() -> None:
    booting = TTFTQueueState(boot_pending=(10.0, 3))
    up = ScalingConfig(min_replicas=5, max_replicas=8)  # e.g. min_replicas raised: an up-move
    desired, state = POLICY.decide(snapshot(15.0, 3, idle(1)), up, booting)
    assert desired == 5
    assert state.boot_pending == (15.0, 5)  # its replicas are the last to come
    down = ScalingConfig(min_replicas=1, max_replicas=2)  # starting replicas go first
    desired, state = POLICY.decide(snapshot(20.0, 5, idle(1)), down, state)
    assert desired == 2
    assert state.boot_pending is None
    assert state.boot_samples == ()


def test_decide_measures_boot_from_its_own_up_move() -> None:
    state = S0
    desired, state = POLICY.decide(snapshot(10.0, 1, [rep(0, 5600)]), CFG, state)
    assert desired == 4
    assert state.boot_pending == (10.0, 4)
    _, state = POLICY.decide(snapshot(25.0, 4, idle(2)), CFG, state)  # 2 of 4 serve
    assert (state.boot_pending, state.boot_samples) == ((10.0, 4), ())
    assert derive(P, state, 2.0).boot_s == PRIOR_BOOT_S
    desired, state = POLICY.decide(snapshot(40.0, 4, idle(4)), CFG, state)
    assert desired == 4
    assert (state.boot_pending, state.boot_samples) == (None, (30.0,))
    assert derive(P, state, 2.0).boot_s == 30.0
    e = POLICY.explain(snapshot(40.0, 4, idle(4)), CFG, state, desired)
    assert e.signals["boot_s"] == 30.0


def test_derived_values_follow_the_measured_boot() -> None:
    prior = derive(P, S0, 2.0)  # nothing measured: the prior for the windows, no drain credit
    assert (prior.boot_s, prior.drain_credit_s) == (30.0, 0.0)
    assert (prior.growth_tau_s, prior.startup_grace_s) == (15.0, 90.0)
    d = derive(P, TTFTQueueState(boot_samples=(10.0, 50.0, 20.0)), 2.0)
    assert (d.boot_s, d.drain_credit_s, d.growth_tau_s, d.startup_grace_s) == (20, 20, 10, 60)
    fast = derive(P, TTFTQueueState(boot_samples=(2.0,)), 2.0)
    assert (fast.growth_tau_s, fast.startup_grace_s) == (MIN_TAU_S, MIN_GRACE_S)  # clamped
    slow = derive(P, TTFTQueueState(boot_samples=(40.0,)), 2.0)
    assert (slow.growth_tau_s, slow.startup_grace_s) == (MAX_TAU_S, 120.0)


# ---- budget and utilisation from the mean prefill ----------------------------------------


def test_budget_and_utilisation_before_the_prefill_is_measured() -> None:
    d = derive(P, S0, 2.0)
    assert d.budget == pytest.approx(1.4)  # HEADROOM x SLO
    assert (d.up_utilization, d.down_utilization) == pytest.approx((0.9, 0.495))
    assert d.risk == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("prompt_s", "budget", "up"),
    [
        (0.5, 1.0, 1.0 / 1.5),  # B = 2 - 2 x 0.5; rho = B / (B + s)
        (0.25, 1.5, 1.5 / 1.75),
        (0.1, 1.8, 0.9),  # 1.8 / 1.9 = 0.947: capped at MAX_UTILIZATION
        (0.0, 2.0, 0.9),
        (0.9, 0.5, 0.5 / 1.4),  # 2 - 1.8 = 0.2 < MIN_BUDGET x SLO = 0.5
    ],
)
def test_budget_and_utilisation_from_the_measured_prefill(
    prompt_s: float, budget: float, up: float
) -> None:
    d = derive(P, TTFTQueueState(prompt_s=prompt_s), 2.0)
    assert d.budget == pytest.approx(budget)
    assert d.up_utilization == pytest.approx(up)
    assert d.down_utilization == pytest.approx(0.55 * up)


def test_risk_is_what_the_target_attainment_leaves() -> None:
    assert derive(TTFTQueueParams(target_attainment=0.9), S0, 2.0).risk == pytest.approx(0.1)
    assert derive(TTFTQueueParams(target_attainment=1.0), S0, 2.0).risk == 0.0
    assert derive(TTFTQueueParams(target_attainment=1.5), S0, 2.0).risk == 0.0


def _counted(tokens: float, requests: float, **kw: float) -> ReplicaMetrics:
    return rep(0, arrived_prompt_tokens=tokens, arrived_requests=requests, **kw)


def test_decide_measures_the_mean_prefill_from_the_arrival_counters() -> None:
    state = S0
    _, state = POLICY.decide(snapshot(0.0, 1, [_counted(1e6, 900)]), CFG, state)
    assert state.prompt_s is None  # the first decision is the baseline
    # 10 requests of 5000 tokens in all at 1000 tok/s: 0.5 s each (the first: taken as is)
    _, state = POLICY.decide(snapshot(1.0, 1, [_counted(1e6 + 5000, 910)]), CFG, state)
    assert state.prompt_s == pytest.approx(0.5)
    assert derive(P, state, 2.0).budget == pytest.approx(1.0)
    # the plain mean of the first ~PROMPT_N requests: 200 requests of 1.5 s after those 10
    assert PROMPT_N == 200.0
    counted = _counted(1e6 + 5000 + 300_000, 1110)
    _, state = POLICY.decide(snapshot(2.0, 1, [counted]), CFG, state)
    assert state.prompt_s == pytest.approx((10 * 0.5 + 200 * 1.5) / 210)
    assert state.prompt_n == PROMPT_N
    # then an average over ~PROMPT_N requests: 200 requests of 0.5 s weigh 1 - e^-1
    before = state.prompt_s
    counted = _counted(1e6 + 5000 + 300_000 + 100_000, 1310)
    _, state = POLICY.decide(snapshot(3.0, 1, [counted]), CFG, state)
    assert state.prompt_s == pytest.approx(before + (1 - math.exp(-1)) * (0.5 - before))


def test_a_few_heavy_first_requests_do_not_set_the_mean_prefill_for_minutes() -> None:
    # Heavy-tailed prompts: the first decision counts 2 requests of 2 s, then 1 request of
    # 0.4 s a second. An EWMA started from the first 2 kept them at e^-(n/200) of its
    # weight (0.74 after 60 requests: 0.4 + 0.74 x 1.6 = 1.58 s, a budget of
    # max(0.5, 2 - 3.2) = 0.5 s instead of 1.2 s); the plain mean is what was seen.
    state = S0
    tokens, requests = 1e6, 900.0
    _, state = POLICY.decide(snapshot(0.0, 1, [_counted(tokens, requests)]), CFG, state)
    tokens, requests = tokens + 4000, requests + 2  # 2 s each at 1000 tok/s
    _, state = POLICY.decide(snapshot(1.0, 1, [_counted(tokens, requests)]), CFG, state)
    assert state.prompt_s == pytest.approx(2.0)
    for k in range(60):
        tokens, requests = tokens + 400, requests + 1
        now = snapshot(2.0 + k, 1, [_counted(tokens, requests)])
        _, state = POLICY.decide(now, CFG, state)
    assert state.prompt_s == pytest.approx((2 * 2.0 + 60 * 0.4) / 62)
    assert derive(P, state, 2.0).budget == pytest.approx(2.0 - 2 * (28.0 / 62))


def test_prefix_cache_hits_do_not_count_as_prefill() -> None:
    hits = {"prefix_queries": 10_000.0, "prefix_hits": 7_500.0}  # a quarter is computed
    state = S0
    _, state = POLICY.decide(snapshot(0.0, 1, [_counted(1e6, 900, **hits)]), CFG, state)
    _, state = POLICY.decide(snapshot(1.0, 1, [_counted(1e6 + 8000, 904, **hits)]), CFG, state)
    assert state.prompt_s == pytest.approx(8000 * 0.25 / 1000 / 4)  # 0.5 s


# ---- arrival counters: gaps and bad reports ------------------------------------------------
def _steady(i: int, t: float, neutral: bool = False) -> ReplicaMetrics:
    """Replica ``i`` receiving one 500-token request per second since an hour before t=0."""
    if neutral:  # a report decoded as neutral: counters read 0
        return ReplicaMetrics(f"r{i}", prefill_tokens_per_s=1000.0)
    n = t + 3600.0
    return ReplicaMetrics(
        f"r{i}", prefill_tokens_per_s=1000.0, prefill_load_tokens_per_s=500.0,
        arrived_prompt_tokens=500.0 * n, arrived_requests=n,
    )  # fmt: skip


@pytest.mark.parametrize("fault", ["missing", "neutral"])
def test_a_replica_missing_or_misreported_once_does_not_read_as_a_burst(fault: str) -> None:
    policy = TTFTQueuePolicy()
    cfg = ScalingConfig(min_replicas=1, max_replicas=16, ttft_slo_s=2.0)
    state, n = TTFTQueueState(), 2
    for t in range(120):
        if t == 60:
            reps = (_steady(1, t),) if fault == "missing" else (_steady(0, t, True), _steady(1, t))
        else:
            reps = (_steady(0, t), _steady(1, t))
        n, state = policy.decide(MetricsSnapshot(float(t), n, reps), cfg, state)
    # before the fix: one bin of ~1,800 replica-seconds, reserve 916, desired 16
    assert max(state.bins) < 2.0
    assert state.reserve == 1
    assert n == 2


def test_an_idle_fleet_goes_to_zero_once_the_arrival_rate_has_decayed() -> None:
    """The sustained arrival rate is an EWMA that never reaches 0 by itself; without the
    burst reserve (target_attainment 0) an idle fleet with min_replicas 0 goes to zero."""
    policy = TTFTQueuePolicy()
    cfg = ScalingConfig(min_replicas=0, max_replicas=4, ttft_slo_s=2.0,
                        params={"target_attainment": 0.0})  # fmt: skip
    state, n = TTFTQueueState(), 1
    for t in range(180):
        busy = 0.0 if t < 5 else 400.0  # one 400-token request at t=5, then nothing
        rep = ReplicaMetrics("r0", prefill_tokens_per_s=1000.0,
                             arrived_prompt_tokens=busy, arrived_requests=busy / 400.0)  # fmt: skip
        n, state = policy.decide(MetricsSnapshot(float(t), n, (rep,) if n else ()), cfg, state)
        if n == 0:
            break
    assert n == 0
    assert state.arrival == 0.0
