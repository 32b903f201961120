"""TTFT-queue policy: proportional fast scale-up, slow guarded scale-down, zero, bounds."""

from __future__ import annotations

import random

import pytest

from autoscaler.registry import check_params
from autoscaler.ttft_queue import TTFTQueuePolicy, TTFTQueueState
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig
from tests.fakes import snapshot

CFG = ScalingConfig(min_replicas=1, max_replicas=8, ttft_slo_s=2.0, params={"headroom": 0.7})
POLICY = TTFTQueuePolicy()  # budget above: 0.7 x 2 s = 1.4 s
S0 = TTFTQueueState()


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
    out, _ = run(
        [
            snapshot(0.0, 1, [rep(0, 5600)]),  # -> 4
            snapshot(2.0, 4, [rep(0, 8400)]),  # 3 replicas still booting: backlog growth ignored
            snapshot(8.0, 4, [rep(i, 1300) for i in range(4)]),  # all serve; settle_s = 10 s
            snapshot(17.0, 4, [rep(i, 1300) for i in range(4)]),
            snapshot(18.5, 4, [rep(i, 2000) for i in range(4)]),  # settled, queues grow: 8 s -> 6
        ]
    )
    assert out == [4, 4, 4, 4, 6]


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
    # the backlog term stays at 2 (2 s / 1.4 s), arrivals ~1.9 replica-equivalents -> 3
    growing = [
        snapshot(t, 2, [rep(i, 100 * t, prefill_load_tokens_per_s=850.0) for i in range(2)])
        for t in range(0, 11)
    ]
    desired, state = run(growing)
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
    cfg = ScalingConfig(max_replicas=8, params={"prior_prefill_tokens_per_s": 4000.0})
    assert POLICY.decide(snapshot(0.0, 1, no_rate), cfg, S0)[0] == 1  # 1.4 s: not above budget


def _idle(n: int) -> list[ReplicaMetrics]:
    return [rep(i, 0, prefill_load_tokens_per_s=50.0, kv_usage=0.05) for i in range(n)]


def test_scales_down_exactly_once_stable() -> None:
    # idle fleet of 6: not stable before 20 s, then straight to the smallest fleet that fits
    out, _ = run([snapshot(t, 6, _idle(6)) for t in (0.0, 10.0, 21.0)])
    assert out == [6, 6, 1]
    # 2 replica-equivalents of sustained prefill: under 0.5 utilisation needs 4, not fewer
    warm = [rep(i, 0, prefill_load_tokens_per_s=2000.0 / 6) for i in range(6)]
    out, _ = run([snapshot(t, 6, warm) for t in (0.0, 10.0, 21.0)])
    assert out == [6, 6, 4]


def test_max_downscale_step_caps_each_move_and_cooldown_spaces_them() -> None:
    cfg = ScalingConfig(min_replicas=1, max_replicas=8, params={"max_downscale_step": 1})
    times = [0.0, 10.0, 21.0, 25.0, 50.0, 51.5, 82.0, 120.0]
    currents = [4, 4, 4, 3, 3, 3, 2, 1]
    out, _ = run([snapshot(t, c, _idle(c)) for t, c in zip(times, currents, strict=True)], cfg)
    # not stable before 20 s; then one replica; then wait for the 30 s down-cooldown
    assert out == [4, 4, 3, 3, 3, 2, 1, 1]


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


def test_boot_time_discounts_backlog_the_fleet_drains_before_new_replicas_serve() -> None:
    # 4 replicas hold 8 s of prefill work in total: 2 s each, drained before a 30-s boot
    reps = [rep(i, 2000) for i in range(4)]
    no_boot = ScalingConfig(min_replicas=1, max_replicas=16, ttft_slo_s=2.0)
    boot = ScalingConfig(min_replicas=1, max_replicas=16, ttft_slo_s=2.0, params={"boot_s": 30.0})
    assert POLICY.decide(snapshot(0.0, 4, reps), no_boot, S0)[0] == 6  # ceil(8 s / 1.4 s)
    assert POLICY.decide(snapshot(0.0, 4, reps), boot, S0)[0] == 4  # nothing left after 30 s


def _steady(t: float, n: int, load_per_replica: float) -> MetricsSnapshot:
    return snapshot(t, n, [rep(i, 0, prefill_load_tokens_per_s=load_per_replica) for i in range(n)])


BURST = {"burst_hold_s": 300.0, "burst_utilization": 0.5, "fast_tau_s": 0.0}


def _load(t: float, n: int, replicas_busy: float) -> MetricsSnapshot:
    """``n`` replicas sharing ``replicas_busy`` replica-equivalents of prefill work."""
    return _steady(t, n, 1000.0 * replicas_busy / n)


def _follow(
    load: list[tuple[float, float]], cfg: ScalingConfig, n: int, state: TTFTQueueState
) -> tuple[list[int], TTFTQueueState]:
    """Feed ``(t, replicas_busy)`` with the fleet at the policy's last answer."""
    out = []
    for t, busy in load:
        n, state = POLICY.decide(_load(t, n, busy), cfg, state)
        out.append(n)
    return out, state


def test_burst_reserve_holds_capacity_for_a_transient_burst_between_bursts() -> None:
    cfg = ScalingConfig(min_replicas=1, max_replicas=16, params=BURST)
    calm = [(float(t), 0.5) for t in range(0, 10)]
    out, state = _follow([*calm, (10.0, 4.0)], cfg, 2, S0)
    assert out[-1] == 8  # fast = 4 replica-equivalents at once -> ceil(4 / 0.5), in one move
    # the burst is over in seconds: the minute-scale rate never came near it, so it is held
    idle, state = _follow([(float(t), 0.0) for t in range(11, 300, 5)], cfg, 8, state)
    assert set(idle) == {8}
    later, _ = _follow([(float(t), 0.0) for t in range(311, 420, 5)], cfg, 8, state)
    assert later[-1] == 1  # older than burst_hold_s: released


def test_burst_reserve_releases_a_level_shift_once_the_rate_settles_there() -> None:
    cfg = ScalingConfig(min_replicas=1, max_replicas=16, params=BURST)
    calm = [(float(t), 0.5) for t in range(0, 10)]
    step = [(float(t), 4.0) for t in range(10, 200)]  # the rate jumps and stays
    out, state = _follow([*calm, *step], cfg, 2, S0)
    assert out[0] == 2
    assert max(out) == 8
    assert state.slow > 0.6 * 4.0  # ... until the level rate reaches 0.6 x the peak
    # released: back down to the calm load well before burst_hold_s, unlike a burst
    after, _ = _follow([(float(t), 0.5) for t in range(200, 300)], cfg, out[-1], state)
    assert after[-1] <= 2


def test_held_burst_keeps_only_peaks_the_level_rate_stayed_far_below() -> None:
    from autoscaler.ttft_signals import held_burst

    state = TTFTQueueState(bursts=((0.0, 6.0, 1.0), (5.0, 4.0, 3.5), (9.0, 1.0, 0.2)))
    assert held_burst(state, level_shift=0.6) == 6.0  # 1.0 < 3.6: transient
    state = TTFTQueueState(bursts=((0.0, 6.0, 4.0), *state.bursts[1:]))  # level reached 4.0
    assert held_burst(state, level_shift=0.6) == 1.0  # 4.0 >= 3.6 and 3.5 >= 2.4: steps


def test_knobs_arrive_only_as_typed_params() -> None:
    check_params("ttft-queue", {"burst_hold_s": 900, "max_downscale_step": 2, "headroom": 0.5})
    for removed in ("peak_hold_s", "surge_hold_s", "pending_request_tokens", "ttft_slo_s"):
        with pytest.raises(ValueError, match=r"known: .*boot_s") as err:
            check_params("ttft-queue", {removed: 1.0})
        assert removed in str(err.value)
    strict = ScalingConfig(params={"headroom": 0.35})  # halves the budget: 5.6 s / 0.7 s
    assert POLICY.decide(snapshot(0.0, 1, [rep(0, 5600)]), strict, S0)[0] == 8


def test_decide_returns_new_state_and_leaves_the_old_one() -> None:
    desired, state = POLICY.decide(snapshot(5.0, 1, [rep(0, 5600)]), CFG, S0)
    assert TTFTQueueState() == S0
    assert state is not S0
    assert (desired, state.last_up_at, state.last_scale_at, state.settling) == (4, 5.0, 5.0, True)
    assert state.prev_t == 5.0
    assert state.prev_work_s == pytest.approx(5.6)
    assert state.rate == 1000
