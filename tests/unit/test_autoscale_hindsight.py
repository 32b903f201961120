"""The two-level hindsight rule (``experiments/autoscaling/hindsight.py``): a cost reference
for the step workload, so its moves must be exactly the stated ones."""

from __future__ import annotations

from autoscaler.types import ScalingConfig
from experiments.autoscaling.hindsight import (
    ACROSS_GRID,
    GRID,
    TwoLevel,
    across,
    cheapest,
    meets,
    settings,
    summary,
)
from tests.fakes import rep, snapshot

CONFIG = ScalingConfig(min_replicas=1, max_replicas=16)


def drive(rule: TwoLevel, rate_at: list[tuple[float, float]], until: float) -> list[int]:
    """Decisions once a second; ``rate_at``: (from time, req/s) arriving at the engines."""
    state, counted, out = rule.initial_state(), 0.0, []
    for t in range(int(until)):
        rate = [r for since, r in rate_at if since <= t][-1]  # the latest one begun
        counted += rate
        level, state = rule.decide(
            snapshot(float(t), 3, [rep(0, arrived_requests=counted)]), CONFIG, state
        )
        out.append(level)
    return out


def test_goes_high_at_the_threshold_and_low_only_after_the_hold() -> None:
    rule = TwoLevel(low=3, high=8, threshold=4.0, tau_s=1.0, hold_s=20.0)
    levels = drive(rule, [(0, 2.0), (30, 8.0), (60, 2.0)], until=100)
    assert set(levels[:30]) == {3}  # 2 req/s never reaches T
    up = levels.index(8)
    assert 30 <= up <= 32  # the EWMA (1 s) crosses 4 req/s within two decisions
    down = len(levels) - levels[::-1].index(8)  # first LOW after the high phase
    assert all(v == 8 for v in levels[up:60])
    # under T from ~61 s (the EWMA decays), then HOLD_S more before LOW
    assert 80 <= down <= 83, down
    assert set(levels[down:]) == {3}


def test_a_blip_under_the_threshold_does_not_take_it_down() -> None:
    rule = TwoLevel(low=3, high=8, threshold=4.0, tau_s=1.0, hold_s=20.0)
    levels = drive(rule, [(0, 8.0), (30, 2.0), (40, 8.0)], until=70)
    assert min(levels[2:]) == 8  # 10 s under T is shorter than the hold


def test_a_replica_that_wakes_with_its_old_count_is_no_burst() -> None:
    """Counts are per replica: a sleeper woken with 500 requests counted before, or a
    replica leaving with its count, moves no rate."""
    rule = TwoLevel(low=3, high=8, threshold=4.0, tau_s=1.0, hold_s=20.0)
    state, level = rule.initial_state(), 0
    for t in range(30):
        reps = [rep(0, arrived_requests=2.0 * t)]
        if 10 <= t < 20:
            reps.append(rep(1, arrived_requests=500.0 + t))  # woken at 10, gone at 20
        level, state = rule.decide(snapshot(float(t), len(reps), reps), CONFIG, state)
        assert level == 3, t
    assert abs(state.rate - 2.0) < 0.01  # r0's 2 req/s, 10 s after r1 (1 req/s) left


def test_the_grid_skips_settings_whose_low_is_not_below_high() -> None:
    grid = {**GRID, "low": (3, 8), "high": (8,)}
    assert {(s.low, s.high) for s in settings(grid)} == {(3, 8)}


def test_cheapest_reaching_the_goal_with_and_without_the_reversal_cap() -> None:
    rows = [
        {"low": 3, "high": 8, "threshold": 4.0, "tau_s": 1.0, "pool": 2, "attainment": 0.991, "replica_s": 10000.0, "reversals": 9},
        {"low": 2, "high": 8, "threshold": 4.0, "tau_s": 2.0, "pool": 2, "attainment": 0.985, "replica_s": 9000.0, "reversals": 1},
        {"low": 4, "high": 8, "threshold": 4.0, "tau_s": 2.0, "pool": 2, "attainment": 0.995, "replica_s": 11000.0, "reversals": 1},
        {"low": 2, "high": 7, "threshold": 4.0, "tau_s": 2.0, "pool": 1, "attainment": 0.97, "replica_s": 8000.0, "reversals": 1},
    ]  # fmt: skip
    assert cheapest(rows, 0.99) == rows[0]
    assert cheapest(rows, 0.99, reversals=2) == rows[2]
    assert cheapest(rows, 0.999) is None
    lines = summary(rows, static_replica_s=12500.0)
    assert lines[:2] == [
        "pool 1, any reversals: no setting reaches 99 %",
        "pool 1, <= 2 reversals: no setting reaches 99 %",
    ]
    assert lines[2].startswith("pool 2, any reversals: 99.10 % at 10000 replica-s (0.80x;")
    assert lines[3].startswith("pool 2, <= 2 reversals: 99.50 % at 11000 replica-s (0.88x;")
    assert "LOW 4, HIGH 8, T 4 req/s, tau 2 s" in lines[3]


def _row(low: int, high: int, pool: int, attainment: float, replica_s: float) -> dict:
    return {"low": low, "high": high, "threshold": 4.0, "tau_s": 2.0, "pool": pool,
            "attainment": attainment, "replica_s": replica_s, "reversals": 1}  # fmt: skip


def test_the_goal_needs_both_the_attainment_and_the_cost() -> None:
    assert meets(_row(3, 8, 2, 0.99, 800.0), static_replica_s=1000.0)
    assert not meets(_row(3, 8, 2, 0.9899, 700.0), static_replica_s=1000.0)
    assert not meets(_row(3, 8, 2, 0.999, 801.0), static_replica_s=1000.0)


def test_one_setting_is_judged_on_its_worst_step() -> None:
    """Each setting misses the goal on one of the two steps: (3, 8) the attainment on the
    high one, (3, 9) the cost on the high one, (4, 9) the cost on the low one. The cheapest
    at 99 % on both is the one whose worse ratio is lower; the best within the cost on both
    is the only one within it on both."""
    low = {"workload": "step-low", "static": {"replicas": 5, "replica_s": 1000.0},
           "rows": [_row(3, 8, 2, 0.995, 700.0), _row(3, 9, 2, 0.995, 790.0),
                    _row(4, 9, 2, 0.999, 870.0)],
           "ours": [{"pool": 2, "attainment": 0.991, "replica_s": 950.0, "reversals": 5}]}  # fmt: skip
    high = {"workload": "step-high", "static": {"replicas": 9, "replica_s": 2000.0},
            "rows": [_row(3, 8, 2, 0.97, 1400.0), _row(3, 9, 2, 0.992, 1700.0),
                     _row(4, 9, 2, 0.993, 1500.0)]}  # fmt: skip
    lines = across([low, high])
    assert lines[0].startswith("step-low (fixed 5, 1000 replica-s): 2 of 3 settings meet the goal;")
    assert "cheapest 99.50 % at 0.70x" in lines[0]
    assert "high 8" in lines[0]
    assert lines[1] == "step-low: ours, pool 2: 99.10 % at 0.95x, 5 reversals"
    assert lines[2].startswith("step-high (fixed 9, 2000 replica-s): 1 of 3 settings")
    assert "cheapest 99.30 % at 0.75x" in lines[2]
    assert "low 4, high 9" in lines[2]
    assert lines[3] == "pool 2, one setting on step-low, step-high: 0 of 3 meet the goal on all"
    assert lines[4].startswith("  cheapest at the attainment on all: low 3, high 9,")
    assert lines[4].endswith("99.50 % at 0.79x; 99.20 % at 0.85x")
    assert lines[5].startswith("  best within the cost on all: low 3, high 8,")
    assert lines[5].endswith("99.50 % at 0.70x; 97.00 % at 0.70x")


def test_the_across_grid_spans_every_steps_own_levels() -> None:
    """HIGH covers 6-10 req/s steps (a fixed fleet of 5-9 or so), T sits between the calm
    2 req/s and the lowest high load (6)."""
    grid = settings(ACROSS_GRID)
    assert {s.high for s in grid} >= set(range(5, 12))
    assert all(2.0 < s.threshold < 6.0 for s in grid)
    assert len(grid) == 3 * 7 * 3 * 2
