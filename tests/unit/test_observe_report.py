"""`llmfleet report` without a Prometheus: the PromQL it builds, durations and steps, and a
window without traffic ("no data" panels, null numbers, no crash)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster import cli
from cluster.config import SLOConfig
from cluster.observe import report
from cluster.observe.prom_client import parse_duration
from contracts.metrics import ITL, TTFT

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class EmptyProm:
    """A Prometheus that has seen nothing: every query answers no series."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[float | None, ...]]] = []

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        self.calls.append((expr, (at,)))
        return []

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        self.calls.append((expr, (start, end, step)))
        return []


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("1h30m", 5400), ("2d", 172800), ("500ms", 0.5), ("15", 15)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "5 m", "3w", "-5s", "0"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_quantiles_sum_buckets_by_le_never_average() -> None:
    assert report.quantile(0.95, TTFT, "8s") == (
        "histogram_quantile(0.95, sum by (le) (rate(ray_llmfleet_request_ttft_seconds_bucket[8s])))"
    )
    assert "increase(ray_llmfleet_request_itl_seconds_bucket[120s])" in report.quantile(
        0.5, ITL, "120s", "increase"
    )


def test_goodput_counts_only_the_slo_outcomes() -> None:
    expr = report.goodput_pct("8s")
    assert 'sum(rate(ray_llmfleet_requests_total{outcome="good"}[8s]))' in expr
    assert 'outcome=~"good|slow_ttft|slow_tpot|error|rejected"' in expr
    assert "invalid" not in expr


def test_steps_and_rate_windows() -> None:
    assert report.auto_step(120, 1) == 1
    assert report.auto_step(1800, 15) == 15
    assert report.auto_step(86400, 15) == 432
    win = report.Window(end=1000.0, seconds=600, step_s=3, scrape_s=15)
    assert (win.start, win.rate_window_s) == (400.0, 60)
    assert report.Window(1000.0, 86400, 432, 15).rate_window_s == 432
    assert report.Window(1000.0, 120, 1, 1).rate_window_s == 20  # Ray exports every 10 s
    assert report.Window(1000.0, 120, 1, 1, rate_s=4).rate_window_s == 4


def test_panels_carry_the_slo_lines() -> None:
    slo = SLOConfig(ttft_s=0.5, goodput_objective=0.99)
    by_key = {p.key: p for p in report.panels(slo, "8s")}
    assert set(by_key) == {"ttft_p95", "itl_p95", "tokens", "goodput", "replicas"}
    assert [v for _, v in by_key["ttft_p95"].thresholds] == [0.5]
    assert [v for _, v in by_key["goodput"].thresholds] == [99.0]


def test_a_window_without_traffic_says_no_data(tmp_path: Path) -> None:
    prom = EmptyProm()
    win = report.Window(end=1_700_000_000.0, seconds=1800, step_s=15, scrape_s=15)
    result = report.build(prom, SLOConfig(), win, tmp_path)
    names = ["ttft_p95", "itl_p95", "tokens", "goodput", "replicas", "report"]
    for name in names:
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert saved["summary"]["requests"] is None
    assert saved["summary"]["goodput_pct"] is None
    assert saved["summary"]["ttft_p95_s"] is None
    assert all(p["series"] == [] for p in saved["panels"].values())
    page = (tmp_path / "report.html").read_text()
    assert "no data" in page
    assert 'src="report.png"' in page
    assert (
        "sum(rate(ray_llmfleet_output_tokens_total[60s]))",
        (win.start, win.end, 15),
    ) in prom.calls
    assert all(times in ((win.end,), (win.start, win.end, 15)) for _, times in prom.calls)


def test_an_unreachable_prometheus_is_exit_1(tmp_path: Path, capsys: Any) -> None:
    from cluster.observe.prometheus import free_port

    url = f"http://127.0.0.1:{free_port()}"
    argv = ["report", "--prometheus", url, "--since", "5m", "--out", str(tmp_path / "r")]
    assert cli.main(argv) == 1
    assert f"Prometheus at {url} is unreachable" in capsys.readouterr().err
