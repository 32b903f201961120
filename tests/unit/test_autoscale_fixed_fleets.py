"""The fixed-fleet study's wait measure (``experiments/autoscaling/fixed_fleets.py``)."""

from __future__ import annotations

import pytest

from autoscaler.ttft_tail import TailCounts
from bench.types import RequestRecord
from experiments.autoscaling.fixed_fleets import quantile, tail_shares, tell_apart, waits


def rec(
    i: int, send_s: float, prompt: int, ttft: float | None, error: str | None = None
) -> RequestRecord:
    return RequestRecord(i, send_s, send_s, prompt_tokens=prompt, ttft_s=ttft, error=error)


def test_quantile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.99) == 99.0
    assert quantile(values, 0.5) == 50.0
    assert quantile([3.0], 0.99) == 3.0


def test_wait_is_ttft_less_prefill_at_the_fastest_rate_the_run_saw() -> None:
    records = [
        rec(0, 1.0, 1000, 0.5),
        rec(1, 2.0, 1000, 1.5),
        rec(2, 3.0, 100, 0.01),  # short prompt: 10,000 tokens/s of overhead, not a rate
        rec(3, 50.0, 4000, 1.0),  # outside the window: the fastest, 4,000 tokens/s
        rec(4, 2.5, 1000, None, error="timeout"),  # not served: neither
    ]
    w = waits(records, 0.0, 10.0)
    assert w is not None
    assert w.rate_tokens_per_s == pytest.approx(4000.0)
    # prefill at 4,000 tokens/s: 0.25 s for 1,000 tokens, 0.025 s for 100 (wait floored at 0)
    assert w.wait_mean_s == pytest.approx((0.25 + 1.25 + 0.0) / 3)
    assert w.wait_p99_s == pytest.approx(1.25)
    assert w.ttft_p99_s == pytest.approx(1.5)
    assert waits(records, 100.0, 200.0) is None


def test_tail_shares_between_the_window_s_first_and_last_counts() -> None:
    log = [
        (0.0, TailCounts(10, (5, 1, 1, 1, 0, 0))),  # before the window
        (10.0, TailCounts(20, (8, 2, 1, 1, 0, 0))),
        (20.0, TailCounts(70, (18, 7, 3, 2, 1, 0))),
        (30.0, TailCounts(120, (28, 12, 6, 3, 1, 0))),
        (40.0, TailCounts(500, (90, 50, 20, 9, 2, 1))),  # after it
    ]
    shares = tail_shares(log, 5.0, 35.0)
    assert shares == pytest.approx([0.2, 0.1, 0.05, 0.02, 0.01, 0.0])
    assert tail_shares(log, 5.0, 15.0) == []  # one record: no interval
    assert tail_shares([(0.0, TailCounts(5)), (1.0, TailCounts(5))], 0.0, 2.0) == []


def test_tell_apart_needs_fewer_first_tokens_for_a_larger_difference() -> None:
    # 2 % against 1 %: mean 1.5 %, 4 x 0.015 x 0.985 / 0.01^2 = 591 first tokens
    assert tell_apart(0.02, 0.01) == pytest.approx(591.0)
    assert tell_apart(0.20, 0.10) < tell_apart(0.02, 0.01)
    assert tell_apart(0.05, 0.05) == float("inf")
