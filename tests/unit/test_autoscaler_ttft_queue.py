"""TTFT-queue policy: proportional fast scale-up, slow guarded scale-down, zero, bounds.

The snapshots here report no ``arrived_*`` counters, so the mean prefill per request is
never measured and the budget stays ``HEADROOM x SLO``; the measured parts (boot time,
prefill per request, burst reserve) have their own tests in ``test_autoscaler_ttft_measure``.
"""

from __future__ import annotations

import random

import pytest

from autoscaler.registry import check_params
from autoscaler.ttft_queue import TTFTQueuePolicy, TTFTQueueState
from autoscaler.ttft_types import DOWN_RATIO, HEADROOM, MAX_UTILIZATION
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig
from contracts.stats import PRIOR_PREFILL_TOKENS_PER_S
from tests.fakes import snapshot

CFG = ScalingConfig(min_replicas=1, max_replicas=8, ttft_slo_s=2.0)
POLICY = TTFTQueuePolicy()  # budget HEADROOM x SLO = 0.7 x 2 s = 1.4 s (no prefill measured)
S0 = TTFTQueueState()
BOOT_6S = TTFTQueueState(boot_samples=(6.0,))  # measured: arrivals smoothed over 3 s


def test_budget_before_a_prefill_is_measured_is_headroom_times_slo() -> None:
    assert HEADROOM * CFG.ttft_slo_s == pytest.approx(1.4)  # the numbers below assume it


def rep(i: int, wpt: float = 0.0, rate: float = 1000.0, **kw: float) -> ReplicaMetrics:
    return ReplicaMetrics(f"r{i}", waiting_prefill_tokens=wpt, prefill_tokens_per_s=rate, **kw)


def run(
    snaps: list[MetricsSnapshot], cfg: ScalingConfig = CFG, state: TTFTQueueState = S0
) -> tuple[list[int], TTFTQueueState]:
    out = []
    for s in snaps:
        desired, state = POLICY.decide(s, cfg, state)
        out.append(desired)
    return out, state


def test_scales_up_in_proportion_to_queued_prefill_work() -> None:
    # 5600 tokens at 1000 tok/s = 5.6 s of prefill; budget 1.4 s -> 4 replicas, in one move
    desired, state = POLICY.decide(snapshot(0.0, 1, [rep(0, 5600)]), CFG, S0)
    assert desired == 4
    assert state.reason.startswith("up")


def test_no_change_when_queue_is_within_budget() -> None:
    assert POLICY.decide(snapshot(0.0, 1, [rep(0, 1300)]), CFG, S0)[0] == 1
    assert POLICY.decide(snapshot(0.0, 2, [rep(0, 1300), rep(1, 1300)]), CFG, S0)[0] == 2


def test_uses_each_replicas_own_queue_delay() -> None:
    fast_slow = [
        rep(0, 4000, rate=2000, queue_delay_s=2.0),
        rep(1, 500, rate=500, queue_delay_s=1.0),
    ]
    assert POLICY.decide(snapshot(0.0, 2, fast_slow), CFG, S0)[0] == 3  # ceil(3.0 / 1.4)


def test_up_is_capped_at_max() -> None:
    assert POLICY.decide(snapshot(0.0, 1, [rep(0, 100_000)]), CFG, S0)[0] == 8


def test_backlog_term_waits_for_booting_replicas_then_acts_again() -> None:
    even = [rep(i, 1300) for i in range(4)]
    # after settling, one replica falls behind by 1 s of work per second
    behind = [snapshot(t, 4, [*even[:3], rep(3, 1300 + 1000 * (t - 13))]) for t in range(14, 32, 2)]
    out, state = run(
        [
            snapshot(0.0, 1, [rep(0, 5600)]),  # -> 4
            snapshot(2.0, 4, [rep(0, 8400)]),  # 3 replicas still booting: 8.4 s / 1.4 s ignored
            snapshot(4.0, 4, even),  # all serve: boot measured, 4 s; SETTLE_S = 10 s
            snapshot(13.0, 4, even),
            *behind,
        ]
    )
    assert state.boot_samples == (4.0,)
    # the backlog beyond what 4 replicas drain in one boot (4 x 4 s) acts again: at 30 s
    # 22.2 s queued, ceil(6.2 / 1.4) = 5; arrivals (1 replica-equivalent, one blocked) ask 3
    assert out == [4, 4, 4, 4, *[4] * 8, 5]
    assert state.cause == "queue_delay"


def test_replicas_over_budget_do_not_count_as_room_for_arrivals() -> None:
    # arrivals ~2 replica-equivalents; one replica is stuck behind 3 s of backlog
    reps = [rep(0, 3000, prefill_load_tokens_per_s=1000.0)] + [
        rep(i, 300, prefill_load_tokens_per_s=500.0) for i in (1, 2)
    ]
    desired, _ = POLICY.decide(snapshot(0.0, 3, reps), CFG, S0)
    assert desired == 4  # ceil(2.0 / 0.9) = 3 unblocked + 1 blocked


def test_rate_term_scales_before_a_queue_forms() -> None:
    # 3 replicas each prefilling 950 tok/s of 1000: 2.85 replica-equivalents / 0.9 -> 4
    hot = [rep(i, 0, prefill_load_tokens_per_s=950.0) for i in range(3)]
    out, state = run([snapshot(t, 3, hot) for t in (0.0, 5.0, 10.0)])
    assert out == [4, 4, 4]
    assert state.arrival == pytest.approx(2.85)
    # 2 replicas at 0.85 prefill utilisation, queues growing by 0.1 s of work per second each:
    # the backlog (2 s at most) is within what they drain in one boot (2 x 6 s), arrivals
    # (EWMA over half a boot) reach ~1.9 replica-equivalents -> ceil(1.9 / 0.9) = 3
    growing = [
        snapshot(t, 2, [rep(i, 100 * t, prefill_load_tokens_per_s=850.0) for i in range(2)])
        for t in range(0, 11)
    ]
    desired, state = run(growing, state=BOOT_6S)
    assert desired[0] == 2
    assert desired[-1] == 3
    assert state.arrival == pytest.approx(1.9, abs=0.05)


def test_up_cooldown_applies_after_a_down_move() -> None:
    idle = _idle(3)
    state = S0
    for t, c in ((0.0, 3), (21.0, 3)):
        desired, state = POLICY.decide(snapshot(t, c, idle), CFG, state)
    assert desired == 1  # exact: one idle replica is enough
    burst = [rep(0, 3500)]  # 3.5 s / 1.4 -> 3
    assert POLICY.decide(snapshot(23.0, 1, burst), CFG, state)[0] == 1
    assert POLICY.decide(snapshot(26.5, 1, burst), CFG, state)[0] == 3


def test_starting_replicas_do_not_compound_the_target() -> None:
    # after the jump to 4, only one replica reports yet; the same backlog keeps the target at 4
    out, _ = run([snapshot(float(t), 4, [rep(0, 5600)]) for t in range(0, 60, 6)])
    assert set(out) == {4}


def test_rate_falls_back_to_remembered_then_prior() -> None:
    no_rate = [rep(0, 5600, rate=0.0)]
    assert (
        POLICY.decide(snapshot(0.0, 1, no_rate), CFG, TTFTQueueState(rate=2000.0))[0] == 2
    )  # 2.8 s
    assert PRIOR_PREFILL_TOKENS_PER_S == 500.0
    small = [rep(0, 1000, rate=0.0)]  # 2 s at the prior rate: 2 replicas; 0.5 s at 2000 tok/s
    assert POLICY.decide(snapshot(0.0, 1, small), CFG, S0)[0] == 2
    assert POLICY.decide(snapshot(0.0, 1, small), CFG, TTFTQueueState(rate=2000.0))[0] == 1


def _idle(n: int) -> list[ReplicaMetrics]:
    return [rep(i, 0, prefill_load_tokens_per_s=50.0, kv_usage=0.05) for i in range(n)]


def test_scales_down_exactly_once_stable() -> None:
    # idle fleet of 6: not stable before 20 s, then straight to the smallest fleet that fits
    out, _ = run([snapshot(t, 6, _idle(6)) for t in (0.0, 10.0, 21.0)])
    assert out == [6, 6, 1]
    # 2 replica-equivalents of sustained prefill: under 0.55 x 0.9 = 0.495 utilisation
    # needs 5, not fewer
    assert round(DOWN_RATIO * MAX_UTILIZATION, 6) == 0.495
    warm = [rep(i, 0, prefill_load_tokens_per_s=2000.0 / 6) for i in range(6)]
    out, _ = run([snapshot(t, 6, warm) for t in (0.0, 10.0, 21.0)])
    assert out == [6, 6, 5]


def test_down_cooldown_spaces_down_moves_and_the_reserve_is_a_floor() -> None:
    warm = [rep(i, 0, prefill_load_tokens_per_s=2000.0 / 6) for i in range(6)]
    out, state = run(
        [
            snapshot(0.0, 6, warm),
            snapshot(10.0, 6, warm),
            snapshot(21.0, 6, warm),  # stable 21 s: down to 5 (see above)
            snapshot(25.0, 5, _idle(5)),  # idle: 1 would fit, but the last move was 4 s ago
            snapshot(50.5, 5, _idle(5)),  # 29.5 s after it
            snapshot(51.5, 5, _idle(5)),  # 30.5 s: go, to the burst reserve, not below it
        ]
    )
    assert out == [6, 6, 5, 5, 5, 2]
    assert state.reason == "down: fewer replicas still meet the SLO with headroom"
    # the reserve the 2 replica-equivalents left: max over windows up to 30 s (prior boot)
    # of 2 L / (L + 1.4) = 60 / 31.4 -> 2
    assert state.reserve == 2


def test_no_scale_down_when_fewer_replicas_would_break_the_slo() -> None:
    busy = [rep(i, 0, prefill_load_tokens_per_s=600.0) for i in range(2)]  # 0.6 util each
    backlog = [rep(i, 450) for i in range(2)]  # 0.9 s total: 0.9 s on one replica > 0.7 s
    kv_heavy = [rep(i, 0, kv_usage=0.5) for i in range(2)]  # 1.0 on one replica > 0.75
    slow = [rep(0, 0, ttft_p95_s=2.5, running=3), rep(1, 0)]  # observed TTFT above the SLO
    for reps in (busy, backlog, kv_heavy, slow):
        out, _ = run([snapshot(float(t), 2, reps) for t in range(0, 200, 10)])
        assert set(out) == {2}, reps


def test_stale_p95_of_an_idle_replica_does_not_block_scale_down() -> None:
    idle = [rep(0, 0, ttft_p95_s=9.0), rep(1, 0)]  # P95 from a burst long gone, nothing running
    out, _ = run([snapshot(float(t), 2, idle) for t in range(0, 200, 10)])
    assert 1 in out


def test_hysteresis_holds_count_under_jittery_load() -> None:
    rng = random.Random(7)
    out, _ = run(
        [  # mean predicted delay jitters between 0.55 B and 0.95 B per replica at 3 replicas
            snapshot(
                t * 0.5,
                3,
                [rep(i, rng.uniform(770, 1330), prefill_load_tokens_per_s=550.0) for i in range(3)],
            )
            for t in range(400)
        ]
    )
    assert set(out) == {3}


def test_up_resets_pending_scale_down() -> None:
    out, _ = run(
        [
            snapshot(0.0, 3, _idle(3)),
            snapshot(15.0, 3, [rep(0, 7000), *_idle(2)]),  # burst: 7 s of work -> 5
            snapshot(25.0, 5, _idle(5)),  # idle again: a fresh 20 s stability window starts
            snapshot(40.0, 5, _idle(5)),
            snapshot(46.0, 5, _idle(5)),  # stable 21 s and 31 s after the last move
        ]
    )
    assert out == [3, 5, 5, 5, 1]


def test_scale_to_zero_and_back_on_pending_requests() -> None:
    cfg = ScalingConfig(min_replicas=0, max_replicas=4)
    out, state = run([snapshot(t, 1, [rep(0)]) for t in (0.0, 10.0, 31.0)], cfg)
    assert out == [1, 1, 0]
    busy_one = [rep(0, ongoing=1.0)]
    assert run([snapshot(t, 1, busy_one) for t in (0.0, 31.0, 62.0)], cfg)[0] == [1, 1, 1]
    assert run([snapshot(t, 1, []) for t in (0.0, 31.0, 62.0)], cfg)[0] == [1, 1, 1]  # no metrics
    desired, _ = POLICY.decide(snapshot(40.0, 0, [], pending=3), cfg, state)
    assert desired == 1


def test_bounds_are_enforced() -> None:
    assert POLICY.decide(snapshot(0.0, 0, []), CFG, S0)[0] == 1
    assert POLICY.decide(snapshot(0.0, 0, [], pending=1), CFG, TTFTQueueState(rate=1000.0))[0] == 1
    assert POLICY.decide(snapshot(0.0, 10, _idle(10)), CFG, S0)[0] == 8
    assert (
        POLICY.decide(snapshot(0.0, 0, [rep(0, 5600)]), CFG, S0)[0] == 4
    )  # below min, big backlog


def test_measured_boot_time_discounts_backlog_the_fleet_drains_before_new_replicas_serve() -> None:
    # 8.2 s of prefill work queued on 4 replicas (one of them blocked behind 4 s)
    reps = [*(rep(i, 1400) for i in range(3)), rep(3, 4000)]
    cfg = ScalingConfig(min_replicas=1, max_replicas=16, ttft_slo_s=2.0)
    # no boot measured: no credit (the prior boot only sizes the reserve's windows)
    assert POLICY.decide(snapshot(0.0, 4, reps), cfg, S0)[0] == 6  # ceil(8.2 s / 1.4 s)
    fast = TTFTQueueState(boot_samples=(0.5,))  # 8.2 - 4 x 0.5 s left: ceil(6.2 / 1.4)
    assert POLICY.decide(snapshot(0.0, 4, reps), cfg, fast)[0] == 5
    booted = TTFTQueueState(boot_samples=(20.0, 30.0, 40.0))  # median 30 s: nothing left
    desired, state = POLICY.decide(snapshot(0.0, 4, reps), cfg, booted)
    assert desired == 4
    assert state.reason == "steady"


def test_knobs_arrive_only_as_typed_params() -> None:
    knobs = {
        "target_attainment": 0.95,
        "upscale_cooldown_s": 5.0,
        "downscale_cooldown_s": 30.0,
        "downscale_stable_s": 20.0,
    }
    check_params("ttft-queue", knobs)
    removed = ("headroom", "boot_s", "burst_hold_s", "max_downscale_step", "up_utilization")
    for name in (*removed, "settle_s", "prior_prefill_tokens_per_s", "ttft_slo_s"):
        with pytest.raises(ValueError, match=r"known: .*target_attainment") as err:
            check_params("ttft-queue", {name: 1.0})
        assert name in str(err.value)
    # target_attainment reaches the policy: 2 replica-equivalents for 7 s leave a reserve of
    # 2 at 0.99; at 0 every bin may miss, so none is kept
    busy = [rep(i, 0, prefill_load_tokens_per_s=1000.0) for i in range(2)]
    for attainment, expected in ((0.99, 2), (0.0, 0)):
        cfg = ScalingConfig(max_replicas=8, params={"target_attainment": attainment})
        _, state = run([snapshot(float(t), 2, busy) for t in range(8)], cfg)
        assert state.reserve == expected


def test_decide_returns_new_state_and_leaves_the_old_one() -> None:
    desired, state = POLICY.decide(snapshot(5.0, 1, [rep(0, 5600)]), CFG, S0)
    assert TTFTQueueState() == S0
    assert state is not S0
    assert (desired, state.last_up_at, state.last_scale_at, state.settling) == (4, 5.0, 5.0, True)
    assert state.prev_t == 5.0
    assert state.prev_work_s == pytest.approx(5.6)
    assert state.rate == 1000
