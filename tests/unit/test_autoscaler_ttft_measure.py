"""TTFT-queue's measured inputs (``ttft_measure``, ``derive``): replica boot time, the mean
prefill per request, the burstiness of arrivals and the burst reserve it calls for."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import count

import pytest

from autoscaler.ttft_measure import (
    BIN_S,
    BOOT_GIVE_UP_S,
    BOOT_SAMPLES,
    HISTORY_S,
    PRIOR_BOOT_S,
    boot_estimate,
    record_arrivals,
    requirements,
    reserve,
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
from tests.fakes import snapshot

CFG = ScalingConfig(min_replicas=1, max_replicas=8, ttft_slo_s=2.0)
POLICY = TTFTQueuePolicy()
S0 = TTFTQueueState()
P = TTFTQueueParams()


def rep(i: int, wpt: float = 0.0, rate: float = 1000.0, **kw: float) -> ReplicaMetrics:
    return ReplicaMetrics(f"r{i}", waiting_prefill_tokens=wpt, prefill_tokens_per_s=rate, **kw)


def idle(n: int) -> list[ReplicaMetrics]:
    return [rep(i) for i in range(n)]


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
    # then an average over ~PROMPT_N requests: 200 requests of 1.5 s weigh 1 - e^-1
    assert PROMPT_N == 200.0
    counted = _counted(1e6 + 5000 + 300_000, 1110)
    _, state = POLICY.decide(snapshot(2.0, 1, [counted]), CFG, state)
    assert state.prompt_s == pytest.approx(0.5 + (1 - math.exp(-1)) * (1.5 - 0.5))


def test_prefix_cache_hits_do_not_count_as_prefill() -> None:
    hits = {"prefix_queries": 10_000.0, "prefix_hits": 7_500.0}  # a quarter is computed
    state = S0
    _, state = POLICY.decide(snapshot(0.0, 1, [_counted(1e6, 900, **hits)]), CFG, state)
    _, state = POLICY.decide(snapshot(1.0, 1, [_counted(1e6 + 8000, 904, **hits)]), CFG, state)
    assert state.prompt_s == pytest.approx(8000 * 0.25 / 1000 / 4)  # 0.5 s


# ---- burstiness: arrival bins and their requirements ------------------------------------


def test_record_arrivals_spreads_work_over_bins_and_conserves_it() -> None:
    # 7 replica-seconds over [0.25, 3.75): 0.75 s, 1 s, 1 s of it close three bins
    start, open_work, bins, closed = record_arrivals(0.25, 3.75, 7.0, None, 0.0, ())
    assert closed == pytest.approx([1.5, 2.0, 2.0])
    assert bins == pytest.approx((1.5, 2.0, 2.0))
    assert (start, open_work) == pytest.approx((3.0, 1.5))  # [3, 3.75) stays open
    # within the open bin: nothing closes
    start, open_work, bins, closed = record_arrivals(3.75, 3.9, 0.3, start, open_work, bins)
    assert (closed, start, open_work) == ([], 3.0, pytest.approx(1.8))
    # across one boundary: the open bin closes with what it held
    start, open_work, bins, closed = record_arrivals(3.9, 4.4, 1.0, start, open_work, bins)
    assert closed == pytest.approx([1.8 + 0.2])
    assert (start, open_work) == pytest.approx((4.0, 0.8))
    assert sum(bins) + open_work == pytest.approx(7.0 + 0.3 + 1.0)
    # a long gap: one decision closes many bins, evenly
    start, open_work, bins, closed = record_arrivals(4.4, 10.4, 6.0, start, open_work, bins)
    assert closed == pytest.approx([0.8 + 0.6, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert (start, open_work) == pytest.approx((10.0, 0.4))
    assert sum(bins) + open_work == pytest.approx(14.3)
    assert len(bins) == 10


def test_record_arrivals_keeps_the_history_only() -> None:
    keep = int(HISTORY_S / BIN_S)
    full = tuple(float(i) for i in range(keep))
    start, _, bins, closed = record_arrivals(0.0, 2.0, 4.0, 0.0, 0.0, full)
    assert closed == [2.0, 2.0]
    assert start == 2.0
    assert len(bins) == keep
    assert bins[:2] == (2.0, 3.0)  # the two oldest went
    assert bins[-2:] == (2.0, 2.0)


def test_requirements_by_hand() -> None:
    # bins [0, 0, 4, 0], boot 2 s (windows of 1 or 2 bins), budget 1 s:
    # R_2 = max(4 / (1 + 1), 4 / (2 + 1)) = 2; R_3 = max(0 / 2, (4 + 0) / 3) = 4/3
    bins = (0.0, 0.0, 4.0, 0.0)
    assert requirements(bins, 4, (), 2.0, 1.0) == pytest.approx((0.0, 0.0, 2.0, 4 / 3))
    assert requirements(bins, 4, (), 1.0, 1.0) == pytest.approx((0.0, 0.0, 2.0, 0.0))
    # windows up to ceil(boot): 2.5 s -> 3 bins; R_3 = max(0, 4/3, 4/4)
    assert requirements(bins, 4, (), 2.5, 1.0)[3] == pytest.approx(4 / 3)
    assert requirements((2.0, 2.0, 2.0), 3, (), 2.5, 1.0)[2] == pytest.approx(6 / 4)
    # a surge longer than a boot is the sustained terms' business: with 2-s windows,
    # 3 s of 2 replica-seconds per second need 4 / 3, not 6 / 4
    assert requirements((2.0, 2.0, 2.0), 3, (), 2.0, 1.0)[2] == pytest.approx(4 / 3)
    assert requirements((2.0, 2.0, 2.0), 3, (), 3.0, 1.0)[2] == pytest.approx(6 / 4)


def test_requirements_are_computed_once_per_bin_and_stay_aligned() -> None:
    bins = (0.0, 0.0, 4.0, 0.0)
    first = requirements(bins[:3], 3, (), 2.0, 1.0)
    assert requirements(bins, 1, first, 2.0, 1.0) == requirements(bins, 4, (), 2.0, 1.0)
    # old requirements are kept as they were (not recomputed with today's boot or budget)
    assert requirements(bins, 1, (9.0, 9.0, 9.0), 2.0, 1.0) == pytest.approx((9, 9, 9, 4 / 3))
    # the history truncated: the oldest requirements go with their bins, one per bin
    truncated = (0.0, 4.0, 0.0, 6.0)  # bins[1:] plus a new bin of 6
    reqs = requirements(truncated, 1, requirements(bins, 4, (), 2.0, 1.0), 2.0, 1.0)
    assert reqs == pytest.approx((0.0, 2.0, 4 / 3, 3.0))  # R = max(6 / 2, 6 / 3)
    assert len(reqs) == len(truncated)
    assert requirements((), 1, (), 2.0, 1.0) == ()


# ---- the burst reserve -------------------------------------------------------------------


def test_reserve_is_the_smallest_fleet_that_misses_at_most_risk_of_the_work() -> None:
    assert reserve((), (), 0.01) == 0
    assert reserve((0.0, 0.0), (0.0, 0.0), 0.01) == 0
    calm_bins, calm_reqs = (1.0,) * 99, (1.0,) * 99  # 99 bins of 1 replica-second, needing 1
    # a spike carrying 0.5 of 99.5 (< 1 %) buys nothing
    assert reserve((*calm_bins, 0.5), (*calm_reqs, 5.0), 0.01) == 1
    # one carrying 2 of 101 (> 1 %) does: the fleet it needs
    assert reserve((*calm_bins, 2.0), (*calm_reqs, 5.0), 0.01) == 5
    # ... unless the target allows missing that much
    assert reserve((*calm_bins, 2.0), (*calm_reqs, 5.0), 0.05) == 1
    # at most risk: a share exactly at the limit may miss (total 4, risk 1/4: 1 may miss)
    assert reserve((1.0, 1.0, 1.0, 1.0), (3.0, 1.0, 1.0, 1.0), 0.25) == 1
    assert reserve((1.0, 1.0, 1.0, 1.5), (3.0, 1.0, 1.0, 2.5), 0.25) == 3
    # requirements are rounded up to whole replicas; risk 0 is the peak
    assert reserve((1.0, 1.0), (1.2, 0.5), 0.0) == 2
    assert reserve((0.0, 0.0, 4.0, 0.0), (0.0, 0.0, 2.0, 4 / 3), 0.01) == 2
    # weighted by work, not by bins: many light bins needing much are outweighed
    assert reserve((0.01,) * 50 + (10.0,), (4.0,) * 50 + (1.0,), 0.05) == 1


@dataclass
class _Source:
    """What reaches the engines: ``per_s`` requests a second of ``tokens`` each, plus
    bursts of ``burst`` requests; all counted by replica r0 (the policy sums replicas)."""

    per_s: float = 1.0
    burst: float = 40.0
    tokens: float = 500.0  # 0.5 s of prefill at 1000 tok/s: budget 2 - 2 x 0.5 = 1 s
    requests: float = 0.0

    def advance(self, dt: float, bursts: int) -> None:
        self.requests += self.per_s * dt + self.burst * bursts


def _fleet(n: int, source: _Source) -> list[ReplicaMetrics]:
    counted = {"arrived_prompt_tokens": source.tokens * source.requests}
    counted["arrived_requests"] = source.requests
    return [rep(0, **counted), *(rep(i) for i in range(1, n))]


def _follow(
    times: list[float], bursts: set[float], source: _Source, n: int, state: TTFTQueueState
) -> tuple[list[int], list[int], TTFTQueueState]:
    """Decide at ``times``, the fleet at the policy's last answer (replicas serve from the
    next decision); a burst at ``b`` arrives just before the decision at ``b``."""
    out, reserves, prev = [], [], None
    for t in times:
        if prev is not None:
            source.advance(t - prev, sum(prev < b <= t for b in bursts))
        n, state = POLICY.decide(MetricsSnapshot(t, n, tuple(_fleet(n, source))), BURSTY, state)
        out.append(n)
        reserves.append(state.reserve)
        prev = t
    return out, reserves, state


BURSTY = ScalingConfig(min_replicas=1, max_replicas=16, ttft_slo_s=2.0)


def test_a_burst_pattern_keeps_its_reserve_between_bursts_until_it_leaves_the_history() -> None:
    source, ticks = _Source(), count()
    bursts = {30.0 + 60.0 * k for k in range(5)}  # 20 replica-seconds in one second, each minute
    times = [float(next(ticks)) for _ in range(300)]
    out, reserves, state = _follow(times, bursts, source, 1, S0)
    assert state.prompt_s == pytest.approx(0.5)
    assert state.boot_samples == (1.0,)  # the up-move was served one decision later
    # a burst's bin: (40 + 1) x 0.5 s arrived in 1 s, needing 20.5 / (1 s + budget 1 s)
    # = 10.25 -> 11 replicas; bursts carry 100 of the 5 minutes' 250 replica-seconds
    assert reserves[29] == 1  # before the first burst: the trickle's 0.5 / 2 -> 1
    assert (reserves[30], out[30]) == (11, 11)  # moved at once, for the reserve
    # between bursts the trickle (0.5 replica-equivalents) alone would need 1 or 2
    assert set(out[30:]) == {11}
    assert set(reserves[30:]) == {11}
    e = POLICY.explain(MetricsSnapshot(299.0, 11, tuple(_fleet(11, source))), BURSTY, state, 11)
    assert e.signals["burst_reserve_replicas"] == 11.0
    # quiet for an hour (decisions every 10 s): the reserve stays while a burst is in the
    # history; the last one's bin, [269 s, 270 s), leaves it at 270 s + HISTORY_S
    leaves = max(bursts) + HISTORY_S
    quiet = [300.0 + 10.0 * k for k in range(1, int((leaves - 300.0) / 10.0) + 8)]
    out, reserves, state = _follow(quiet, set(), source, 11, state)
    kept = sum(t < leaves for t in quiet)
    assert set(reserves[:kept]) == {11}
    assert set(out[:kept]) == {11}
    assert set(reserves[kept:]) == {1}
    # then the fleet goes down, once stable for downscale_stable_s (20 s), in one move, to
    # what the trickle needs: 0.5 / (0.55 x 1 / 1.5) = 1.36 -> 2
    assert out[kept:] == [11, 11, *[2] * (len(out) - kept - 2)]


@pytest.mark.parametrize(("spike", "expected"), [(20.0, 2), (40.0, 11)])
def test_one_spike_buys_a_reserve_only_if_it_carries_more_than_the_risk(
    spike: float, expected: int
) -> None:
    # 2 replica-equivalents for 15 minutes (1800 replica-seconds) on 2 / (1 / 1.5) = 3
    # replicas; with the prior boot (windows up to 30 s) the bins need 2 x 30 / 31 -> 2.
    # Then one spike at 905 s: 10 replica-seconds make a bin of 12 of the 1820 (< 1 %), 20
    # one of 22 of 1830 (> 1 %), needing 22 / (1 s + budget 1 s) = 11
    source = _Source(per_s=4.0, burst=spike)
    times = [10.0 * k for k in range(90)] + [900.0 + k for k in range(1, 31)]
    out, reserves, _ = _follow(times, {905.0}, source, 3, S0)
    assert reserves[89] == 2
    assert set(reserves[90 + 5 - 1 :]) == {expected}
    assert min(out) == 3


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
