"""autoscaler.ttft_tail: the fleet's share of first tokens over the SLO from the engines'
cumulative tail counters (bins, baselines, restarts, the window, interpolation)."""

from __future__ import annotations

import pytest

from autoscaler.ttft_tail import BIN_S, WINDOW_S, TailCounts, TailWindow, track_tail
from autoscaler.types import MetricsSnapshot, ReplicaMetrics
from contracts.stats import TTFT_TAIL_EDGES_S, TTFT_TAIL_FIELDS


def rep(rid: str, first: float, over: tuple[float, ...]) -> ReplicaMetrics:
    return ReplicaMetrics(rid, first_tokens=first, **dict(zip(TTFT_TAIL_FIELDS, over, strict=True)))


def snap(now: float, *reps: ReplicaMetrics) -> MetricsSnapshot:
    return MetricsSnapshot(now=now, current_replicas=len(reps), replicas=reps)


def test_share_exact_at_an_edge_linear_between_and_bounded_outside() -> None:
    assert TTFT_TAIL_EDGES_S == (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    c = TailCounts(200.0, (100.0, 40.0, 20.0, 4.0, 2.0, 1.0))
    assert c.share_over(2.0) == pytest.approx(0.02)  # the default SLO is an edge: exact
    assert c.share_over(1.0) == pytest.approx(0.10)
    assert c.share_over(1.5) == pytest.approx(0.06)  # halfway from 10 % to 2 %
    assert c.share_over(3.0) == pytest.approx(0.015)
    assert c.share_over(0.125) == pytest.approx(0.75)  # from 1 at 0 s to 0.5 at 0.25 s
    assert c.share_over(20.0) == pytest.approx(0.005)  # the last edge's share
    assert TailCounts().share_over(2.0) is None


def test_increments_are_summed_over_replicas_after_a_baseline() -> None:
    w = track_tail(snap(0.0, rep("a", 50, (9, 5, 3, 2, 1, 0)), rep("b", 7, (1,) * 6)), TailWindow())
    assert w.counts(0.0) == TailCounts()  # first reports are baselines, not first tokens
    w = track_tail(snap(1.0, rep("a", 150, (19, 9, 5, 4, 1, 0)), rep("b", 17, (2,) * 6)), w)
    c = w.counts(1.0)
    assert c.first_tokens == 110
    assert c.over == (11, 5, 3, 3, 1, 1)
    assert c.share_over(2.0) == pytest.approx(3 / 110)


def test_restart_rebaselines_a_gone_replica_is_dropped() -> None:
    w = track_tail(snap(0.0, rep("a", 100, (10,) * 6)), TailWindow())
    w = track_tail(snap(1.0, rep("a", 5, (1,) * 6), rep("b", 3, (0,) * 6)), w)  # a restarted
    assert w.counts(1.0).first_tokens == 0
    w = track_tail(snap(2.0, rep("a", 15, (2,) * 6)), w)  # b gone
    assert set(w.last) == {"a"}
    assert w.counts(2.0) == TailCounts(10, (1.0,) * 6)


def test_counts_leave_the_window_in_whole_bins() -> None:
    w = track_tail(snap(0.0, rep("a", 0, (0,) * 6)), TailWindow())
    total = 0
    for k in range(1, 41):  # 40 s of 10 first tokens a second, one of them over 2 s
        total += 10
        late = k
        w = track_tail(snap(float(k), rep("a", total, (late, late, late, late, 0, 0))), w)
    assert w.counts(40.0).first_tokens == 400
    assert w.counts(40.0).share_over(2.0) == pytest.approx(0.1)
    assert len(w.bins) == 4  # bins of BIN_S
    t = 40.0 + WINDOW_S + BIN_S
    w = track_tail(snap(t, rep("a", total, (late, late, late, late, 0, 0))), w)
    assert w.counts(t).first_tokens == 0  # nothing in the last two minutes
    assert len(w.bins) <= int(WINDOW_S / BIN_S) + 2  # bounded: old bins are dropped


def test_idle_fleet_keeps_no_bins() -> None:
    w = TailWindow()
    for k in range(100):
        w = track_tail(snap(float(k), rep("a", 0, (0,) * 6)), w)
    assert w.bins == ()
