"""The burst reserve of the TTFT-queue policy: arrival bins, their requirements, the quantile."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from itertools import count

import pytest

from autoscaler.ttft_measure import (
    BIN_S,
    HISTORY_S,
    record_arrivals,
    requirements,
    reserve,
)
from autoscaler.ttft_queue import TTFTQueuePolicy, TTFTQueueState
from autoscaler.ttft_types import (
    TTFTQueueParams,
)
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig
from tests.fakes import rep

CFG = ScalingConfig(min_replicas=1, max_replicas=8, ttft_slo_s=2.0)
POLICY = TTFTQueuePolicy()
S0 = TTFTQueueState()
P = TTFTQueueParams()


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


def test_a_risk_that_allows_every_miss_reserves_nothing_whatever_the_rounding() -> None:
    # Summed in need order, the bins can exceed their plain sum by one rounding step; that
    # step once held 2 replicas after the load with target attainment 0 (fake multi-node).
    rng = random.Random(1)
    for _ in range(500):
        bins = tuple(rng.random() * 3 for _ in range(rng.randint(2, 30)))
        reqs = tuple(b / 2.5 + rng.random() for b in bins)
        assert reserve(bins, reqs, 1.0) == 0, (bins, reqs)
        # needs equal to work: a risk of exactly the heaviest half's share lets that half miss
        heavy = sorted(bins, reverse=True)
        k = len(bins) // 2
        share = sum(heavy[:k]) / sum(bins)
        assert reserve(bins, bins, share) == math.ceil(heavy[k]), (bins, share)


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
