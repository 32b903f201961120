"""The soak study's arithmetic (``experiments/soak/soak.py``): the second-half slope in MB
per hour, a role that grows told from one that levels off, the log directory's growth, and
the request counts of several benches summed, the wake-up probe's summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.soak.soak import dir_mb, log_growth, served_total, slope_per_hour, summarize


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


def test_log_growth_per_hour_and_per_request() -> None:
    # 1 MB per minute over 10 minutes, 6,000 requests served
    samples = [{"t": float(t), "rss_mb": {}, "logs_mb": 2.0 + t / 60} for t in range(0, 601, 30)]
    g = log_growth(samples, {"completed": 6000})
    assert g["mb_per_h"] == pytest.approx(60.0)
    assert g["end_mb"] == pytest.approx(12.0)
    assert g["bytes_per_request"] == pytest.approx(10 * 2**20 / 6000, rel=1e-3)
    assert log_growth([], {"completed": 5})["bytes_per_request"] == 0.0
    assert log_growth(samples, {})["bytes_per_request"] == 0.0


def test_dir_mb(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.log").write_bytes(b"x" * 2**20)
    (tmp_path / "y.log").write_bytes(b"y" * 2**19)
    assert dir_mb(tmp_path) == pytest.approx(1.5)
    assert dir_mb(tmp_path / "gone") == 0.0
    assert dir_mb(None) == 0.0


def test_served_total_sums_the_benches(tmp_path: Path) -> None:
    # two bare servers, one bench each: counts add up, errors merge by kind
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"requests": {"completed": 10, "failed": 1, "errors": {"timeout": 1}}}')
    b.write_text(
        '{"requests": {"completed": 7, "failed": 2, "errors": {"timeout": 1, "http_500": 1}}}'
    )
    total = served_total([a, b, tmp_path / "missing.json"])
    assert total == {"completed": 17, "failed": 3, "errors": {"timeout": 2, "http_500": 1}}
    assert served_total([]) == {}


def test_wakeup_summary_reports_the_tail_and_the_long_stops() -> None:
    from experiments.soak.wakeup import summarize as wake

    late = [0.0001] * 990 + [0.002] * 8 + [0.25, 3.4]
    got = wake(late)
    assert got["n"] == 1000
    assert got["p50_ms"] == 0.1
    assert got["p99_ms"] == 2.0
    assert got["max_ms"] == 3400.0
    assert got["over_100ms"] == 2
    assert wake([]) == {"n": 0}


def test_wakeup_measure_records_each_sleep() -> None:
    from experiments.soak.wakeup import measure

    late = measure(0.2)
    assert 1 <= len(late) <= 21  # at most 20 sleeps of 10 ms fit in 0.2 s; a busy CI has fewer
    assert all(x >= 0.0 for x in late)
