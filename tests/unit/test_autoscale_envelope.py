"""The requirement-envelope rules (``experiments/autoscaling/envelope.py``): one reads the
requirement ahead (foresight), the other only the bins already closed (as seen). Which bins
each reads is the whole difference between the two cost figures, so it is pinned here."""

from __future__ import annotations

from autoscaler.types import ScalingConfig
from experiments.autoscaling.envelope import (
    AS_SEEN,
    FORESIGHT,
    Envelope,
    across,
    settings,
    summary,
)
from tests.fakes import idle, snapshot

CONFIG = ScalingConfig(min_replicas=1, max_replicas=16)
# a burst of 10 replicas at 20-22 s, 3 elsewhere
REQS = tuple(10.0 if 20 <= t < 23 else 3.0 for t in range(60))


def levels(rule: Envelope, until: int = 60) -> list[int]:
    state, out = rule.initial_state(), []
    for t in range(until):
        n, state = rule.decide(snapshot(float(t), 1, idle(1)), CONFIG, state)
        out.append(n)
    return out


def test_foresight_holds_a_burst_from_window_s_before_it_until_it_ends() -> None:
    got = levels(Envelope(REQS, k=1.0, window_s=5, foresight=True))
    assert got.index(10) == 15  # bin 20 enters the window [t, t + 5] at t = 15
    assert max(i for i, n in enumerate(got) if n == 10) == 22  # the burst's last bin
    assert set(got[23:]) == {3}


def test_as_seen_reads_closed_bins_only_and_holds_them_window_s() -> None:
    got = levels(Envelope(REQS, k=1.0, window_s=5, foresight=False))
    assert got[0] == 1  # nothing closed yet: the floor
    assert got.index(10) == 21  # bin 20 closes at 21, not while it arrives
    assert max(i for i, n in enumerate(got) if n == 10) == 27  # bin 22 read until t = 27
    assert set(got[28:]) == {3}


def test_k_scales_the_requirement_up_and_the_bounds_clamp_it() -> None:
    got = levels(Envelope(REQS, k=1.3, window_s=0, foresight=True), until=30)
    assert got[0] == 4  # ceil(1.3 * 3)
    assert got[20] == 13  # ceil(1.3 * 10)
    assert max(levels(Envelope(REQS, k=2.0, window_s=0, foresight=True))) == 16  # max_replicas


def test_the_grid_runs_foresight_without_a_pool_and_as_seen_with_each_pool() -> None:
    got = settings()
    fore = [s for s in got if s.family == "foresight"]
    seen = [s for s in got if s.family == "as seen"]
    assert {s.pool for s in fore} == {0}
    assert {s.pool for s in seen} == set(AS_SEEN[2])
    assert len(fore) == len(FORESIGHT[0]) * len(FORESIGHT[1])
    assert len(seen) == len(AS_SEEN[0]) * len(AS_SEEN[1]) * len(AS_SEEN[2])
    assert min(s.window_s for s in fore) >= 30  # a replica ordered now boots in 30 s


def test_summary_gives_the_cheapest_at_the_goal_and_the_best_within_the_cost() -> None:
    def row(family: str, pool: int, att: float, cost: float) -> dict:
        return {"family": family, "k": 1.5, "window_s": 60, "pool": pool,
                "attainment": att, "replica_s": cost, "reversals": 3}  # fmt: skip

    rows = [
        row("foresight", 0, 0.992, 40_000.0),
        row("foresight", 0, 0.995, 55_000.0),
        row("as seen", 0, 0.985, 90_000.0),
        row("as seen", 0, 0.95, 50_000.0),
    ]
    lines = summary(rows, static_replica_s=72_000.0)
    assert lines[0].startswith("foresight, pool 0: cheapest at >= 99 %: 99.20 % at 40000")
    assert lines[1].startswith("foresight, pool 0: best within 0.8x: 99.50 % at 55000")
    assert lines[2].startswith("as seen, pool 0: no setting reaches 99 % (best 98.50 % at 90000")
    assert lines[3].startswith(
        "as seen, pool 0: best within 0.8x: 95.00 % at 50000 replica-s (0.69x)"
    )


def test_across_picks_one_setting_for_every_workload() -> None:
    """The setting is judged on its worst workload: the one best on a single trace loses."""

    def data(name: str, rows: list[tuple[float, int, float, float]]) -> dict:
        return {"workload": name, "static": {"replica_s": 100.0},
                "rows": [{"family": "as seen", "k": k, "window_s": w, "pool": 0,
                          "attainment": a, "replica_s": c} for k, w, a, c in rows]}  # fmt: skip

    a = data("a", [(1.0, 60, 0.999, 50.0), (2.0, 60, 0.995, 70.0), (3.0, 60, 0.999, 120.0)])
    b = data("b", [(1.0, 60, 0.90, 40.0), (2.0, 60, 0.97, 75.0), (3.0, 60, 0.992, 110.0)])
    lines = across([a, b])
    assert lines == [
        "as seen, pool 0, one setting on a, b, best within the cost: "
        "k 2, window 60 s: 99.50 % at 0.70x; 97.00 % at 0.75x",
        "as seen, pool 0, one setting on a, b, cheapest at the goal: "
        "k 3, window 60 s: 99.90 % at 1.20x; 99.20 % at 1.10x",
    ]
