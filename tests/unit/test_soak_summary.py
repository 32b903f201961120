"""The soak study's arithmetic (``experiments/soak/soak.py``): the second-half slope in MB
per hour, and a role that grows is told from one that levels off."""

from __future__ import annotations

import pytest

from experiments.soak.soak import slope_per_hour, summarize


def test_slope_per_hour() -> None:
    assert slope_per_hour([(0.0, 100.0), (3600.0, 110.0)]) == pytest.approx(10.0)
    assert slope_per_hour([(0.0, 5.0), (60.0, 5.0), (120.0, 5.0)]) == 0.0
    assert slope_per_hour([(1.0, 5.0)]) == 0.0


def test_summary_tells_growth_from_a_plateau() -> None:
    # 600 s: "leaky" gains 0.5 MB/s throughout; "flat" rises in the warm-up, then stays
    samples = [
        {"t": float(t), "rss_mb": {"leaky": 50 + 0.5 * t, "flat": 200 + min(t, 100) * 0.3}}
        for t in range(0, 601, 10)
    ]
    s = summarize(samples, 600.0)
    assert s["leaky"]["second_half_mb_per_h"] == pytest.approx(1800.0)
    assert s["leaky"]["growth_mb"] == pytest.approx(240.0)  # from t = 120 to 600
    assert s["flat"]["second_half_mb_per_h"] == 0.0
    assert s["flat"]["growth_mb"] == 0.0
