"""The told rule (``experiments/autoscaling/told.py``): a bound on what a step needs on
hand, so its moves and its reading of the runs must be exactly the stated ones."""

from __future__ import annotations

from typing import Any

from autoscaler.types import ScalingConfig
from experiments.autoscaling.told import POOLS, REACT_S, STEPS, Told, needed, summary
from tests.fakes import snapshot

CONFIG = ScalingConfig(min_replicas=1, max_replicas=32)


def test_moves_one_decision_after_each_change_and_only_then() -> None:
    rule = Told(before=5, high=9, after=3, up_s=300.0, down_s=900.0)
    state = rule.initial_state()
    levels = {}
    for t in range(0, 1200):
        levels[t], state = rule.decide(snapshot(float(t), 5, []), CONFIG, state)
    assert REACT_S == 1.0
    assert {levels[t] for t in range(0, 301)} == {5}  # the step at 300 s is not seen yet
    assert {levels[t] for t in range(301, 901)} == {9}
    assert {levels[t] for t in range(901, 1200)} == {3}


def _row(
    name: str, pool: int, before: int, att: float, replica_s: float = 0.0, **kw: Any
) -> dict[str, Any]:
    return {"workload": name, "pool": pool, "before": before, "attainment": att,
            "replica_s": replica_s, "high": kw.get("high", 8), "after": kw.get("after", 3),
            "reversals": 1}  # fmt: skip


def test_needed_is_the_smallest_before_reaching_the_attainment() -> None:
    rows = [_row("step", 0, b, a) for b, a in ((3, 0.97), (4, 0.9865), (5, 0.9951), (6, 0.998))]
    assert needed(rows) == 5
    assert needed(rows[:2]) is None  # the search has not reached it
    assert needed([_row("step", 0, 4, None)]) is None  # type: ignore[arg-type]  # no requests


def test_summary_prices_every_step_with_the_largest_before() -> None:
    """One step needing more on hand than the others sets what all three must hold: a
    step that meets the goal with its own BEFORE can miss it with the shared one."""
    need = {"step-x3": 4, "step": 5, "step-x5": 7}
    ref = {"step-x3": (6, 10_000.0), "step": (7, 12_000.0), "step-x5": (9, 16_000.0)}
    data: dict[str, Any] = {
        "fixed": {n: {"replicas": r, "replica_s": s} for n, (r, s) in ref.items()},
        "needed": [{"workload": n, "pool": p, "before": need[n]} for n in STEPS for p in POOLS],
        "ceilings": [_row(n, p, need[n] - 1, 0.985) for n in STEPS for p in POOLS],
        "priced": [],
        "ours": [{"workload": "step-x3", "pool": 0, "awake_at_step": 3, "attainment": 0.9868}],
    }
    for p in POOLS:
        data["priced"] += [
            _row("step-x3", p, 4, 0.992, 7_500.0),  # own: 0.75x, meets
            _row("step-x3", p, 7, 0.995, 9_000.0),  # shared: 0.90x, misses
            _row("step-x3", p, 7, 0.980, 8_000.0),  # cheaper, under 99 %: not counted
            _row("step-x3", p, 7, 0.996, 11_000.0, after=7),  # the calm phases alike
            _row("step", p, 5, 0.991, 9_500.0),
            _row("step", p, 7, 0.993, 10_200.0),
            _row("step-x5", p, 7, 0.990, 12_000.0),
        ]
    lines = summary(data)
    assert lines[0] == "pool 0: on hand at the step for 99 % on all three steps: 7 awake"
    x3 = lines[1]
    assert "needs 4 (with 3: at most 98.50 %); ours holds 3: 98.68 %" in x3
    assert "own 4: 99.20 % at 0.75x (HIGH 8, AFTER 3; meets the goal)" in x3
    assert "shared 7: 99.50 % at 0.90x (HIGH 8, AFTER 3; misses the goal)" in x3
    assert "shared, AFTER = BEFORE 7: 99.60 % at 1.10x (HIGH 8, AFTER 7; misses" in x3
    assert "own, AFTER = BEFORE: none at 99 %" in x3  # no run with AFTER 4
    assert "shared 7: 99.00 % at 0.75x (HIGH 8, AFTER 3; meets the goal)" in lines[3]
