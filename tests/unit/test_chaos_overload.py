"""The overload study's bookkeeping (``experiments/chaos/overload.py``)."""

from __future__ import annotations

import pytest

from experiments.chaos.overload import round_row, summarize, table


def test_a_round_splits_the_overload_burst_by_outcome_and_keeps_the_floor_apart() -> None:
    floor = [(200, 0.1), (200, 0.3), (200, 0.2)]
    over = [(200, 2.0), (429, 0.4), (429, 0.6), (503, 0.1)]
    row = round_row(floor, over)
    assert (row["admitted"], row["refused_429"], row["other"]) == (1, 2, [503])
    assert row["shed_max_s"] == 0.6  # the 200 at 2 s is not a refusal
    assert row["shed_p50_s"] == pytest.approx(0.5)
    assert (row["floor_max_s"], row["floor_p50_s"]) == (0.3, 0.2)


def test_the_summary_is_medians_over_rounds_and_the_worst_round_is_kept() -> None:
    rows = [
        round_row([(200, 0.5)], [(429, 0.6)]),
        round_row([(200, 0.4)], [(429, 1.2), (200, 3.0)]),
        round_row([(200, 0.3)], [(429, 0.3)]),
    ]
    s = summarize(rows)
    assert (s["shed_max_s"], s["floor_max_s"]) == (0.6, 0.4)
    assert s["shed_over_floor_max"] == pytest.approx(1.2)  # median of 1.2, 3.0, 1.0
    assert (s["worst_shed_max_s"], s["most_admitted"]) == (1.2, 1)
    assert "worst 429 1.20 s (goal < 1 s)" in table(rows, s)


def test_a_round_with_no_refusal_has_no_shed_times() -> None:
    row = round_row([(200, 0.1)], [(200, 1.0)])
    assert row["refused_429"] == 0
    assert row["shed_max_s"] is None
    assert summarize([row])["shed_over_floor_max"] is None
