from __future__ import annotations

import itertools
import math
import random
import statistics

import numpy as np
import pytest

from bench import arrivals
from bench.report import percentiles, quantile


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1001])
def test_percentiles_match_numpy(n: int) -> None:
    rng = np.random.default_rng(n)
    values = rng.lognormal(3.0, 1.0, size=n).tolist()
    got = percentiles(values)
    for key, q in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("p999", 99.9)):
        assert got[key] == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    assert got["mean"] == pytest.approx(float(np.mean(values)))
    assert got["std"] == pytest.approx(float(np.std(values)))
    assert got["count"] == n


def test_percentiles_empty_is_null() -> None:
    got = percentiles([])
    assert got["p99"] is None
    assert got["mean"] is None
    assert got["count"] == 0


def test_quantile_interpolates() -> None:
    assert quantile([0.0, 10.0], 25) == 2.5
    assert quantile([1.0, 2.0, 3.0], 100) == 3.0


def _gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(offsets)]


def test_poisson_mean_and_cv() -> None:
    offs = arrivals.poisson(20_000, 50.0, random.Random(1))
    gaps = _gaps(offs)
    assert offs[0] == 0.0
    assert offs == sorted(offs)
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / 50.0, rel=0.03)
    assert statistics.pstdev(gaps) / mean == pytest.approx(1.0, abs=0.04)


@pytest.mark.parametrize("burstiness", [0.25, 0.5])
def test_gamma_bursty_keeps_rate_raises_cv(burstiness: float) -> None:
    gaps = _gaps(arrivals.gamma(20_000, 10.0, burstiness, random.Random(2)))
    mean = statistics.fmean(gaps)
    cv = statistics.pstdev(gaps) / mean
    assert mean == pytest.approx(0.1, rel=0.05)
    assert cv > 1.2
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.1)


def test_gamma_smooth_has_cv_below_one() -> None:
    gaps = _gaps(arrivals.gamma(5_000, 10.0, 4.0, random.Random(3)))
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) < 0.6


def test_arrivals_are_seeded() -> None:
    assert arrivals.poisson(50, 5, random.Random(7)) == arrivals.poisson(50, 5, random.Random(7))
    assert arrivals.poisson(50, 5, random.Random(7)) != arrivals.poisson(50, 5, random.Random(8))


def test_constant_and_infinite_rate() -> None:
    assert arrivals.constant(4, 2.0) == [0.0, 0.5, 1.0, 1.5]
    assert arrivals.gamma(3, math.inf, 1.0, random.Random(0)) == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"rate must be > 0"):
        arrivals.constant(3, 0)


def test_trace_replay_sorts_shifts_and_scales() -> None:
    assert arrivals.trace([10.0, 12.0, 11.0, 16.0], 0.5) == [0.0, 0.5, 1.0, 3.0]
    assert arrivals.trace([5.0, 7.0], 2.0) == [0.0, 4.0]
    with pytest.raises(ValueError, match=r"time_scale must be > 0"):
        arrivals.trace([1.0], 0)
