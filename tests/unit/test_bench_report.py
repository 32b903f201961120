from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import console
from bench.report import peak_concurrency, summarize, write_results
from bench.slo import meets, parse_slo, usd_per_million
from bench.types import RESULT_SCHEMA_VERSION, RequestRecord


def _rec(
    i: int,
    send: float,
    ttft: float,
    e2e: float,
    out: int,
    *,
    prompt: int = 10,
    error: str | None = None,
    chunks: int | None = None,
) -> RequestRecord:
    n = out if chunks is None else chunks
    step = (e2e - ttft) / max(n - 1, 1)
    times = [send + ttft + k * step for k in range(n)]
    return RequestRecord(
        index=i,
        intended_send_s=send,
        send_s=send,
        prompt_tokens=prompt,
        output_tokens=out,
        ttft_s=ttft,
        e2e_s=e2e,
        token_times_s=times,
        error=error,
    )


def test_parse_slo() -> None:
    assert parse_slo("ttft_ms=500,tpot_ms=50") == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    assert parse_slo(None) == {}
    assert parse_slo("") == {}
    for bad in ("ttft=5", "ttft_ms", "ttft_ms=-1", "e2e_ms=abc"):
        with pytest.raises(ValueError, match=r"SLO|could not convert"):
            parse_slo(bad)


def test_meets_checks_every_limit() -> None:
    slo = {"ttft_ms": 100.0, "tpot_ms": 10.0}
    assert meets(_rec(0, 0, 0.05, 0.13, 10), slo)  # tpot 8.9 ms
    assert not meets(_rec(0, 0, 0.15, 0.2, 10), slo)  # ttft too slow
    assert not meets(_rec(0, 0, 0.05, 0.3, 10), slo)  # tpot ~27.8 ms
    assert meets(_rec(0, 0, 0.05, 0.05, 1), slo)  # 1 token: tpot undefined → met
    assert not meets(_rec(0, 0, 0.01, 0.02, 2, error="http_500"), slo)


def test_goodput_and_attainment() -> None:
    records = [
        _rec(0, 0.0, 0.1, 1.0, 10),  # good
        _rec(1, 1.0, 0.1, 1.0, 10),  # good
        _rec(2, 2.0, 0.9, 1.5, 10),  # ttft fails
        _rec(3, 3.0, 0.1, 1.0, 10, error="timeout"),
    ]
    res = summarize(records, duration_s=4.0, config={}, slo={"ttft_ms": 500, "e2e_ms": 1200})
    assert res["goodput"]["req_s"] == pytest.approx(0.5)
    assert res["goodput"]["attainment"] == pytest.approx(0.5)
    assert res["goodput"]["good"] == 2
    assert res["requests"] == {
        "completed": 3,
        "failed": 1,
        "total": 4,
        "errors": {"timeout": 1},
        "peak_concurrency": 2,
    }
    assert res["throughput"]["req_s"] == pytest.approx(0.75)
    assert res["throughput"]["output_tok_s"] == pytest.approx(30 / 4)
    assert res["throughput"]["total_tok_s"] == pytest.approx(60 / 4)


def test_latency_metrics_from_usage_not_chunks() -> None:
    # 3 chunks streamed but the server's usage says 7 tokens: TPOT uses 7.
    rec = _rec(0, 0.0, 0.2, 0.8, 7, chunks=3)
    res = summarize([rec], duration_s=1.0, config={})
    assert res["schema_version"] == RESULT_SCHEMA_VERSION
    assert res["ttft_ms"]["p50"] == pytest.approx(200)
    assert res["e2e_ms"]["p99"] == pytest.approx(800)
    assert res["tpot_ms"]["mean"] == pytest.approx(100)  # (800-200)/(7-1)
    assert res["itl_ms"]["count"] == 2
    assert res["itl_ms"]["p50"] == pytest.approx(300)
    assert res["tokens"]["output"] == 7


def test_cost_and_tpot_floor() -> None:
    records = [_rec(i, i * 0.1, 0.05, 0.5, 100) for i in range(10)]  # 1000 tokens / 10 s
    cfg = {"replicas": 2, "replica_hour_cost": 3.6, "min_tpot_ms": 5.0}
    res = summarize(records, duration_s=10.0, config=cfg, slo={"ttft_ms": 10})
    # 2 × $3.6/h over 100 tok/s × 3600 s = $7.2 per 360k tokens → $20 per 1M
    assert res["cost"]["usd_per_1m_output_tokens"] == pytest.approx(20.0)
    assert res["cost"]["usd_per_1m_good_output_tokens"] is None  # no good tokens
    assert res["tpot_floor"]["below_floor"] == 10  # 4.5 ms < 5 ms
    assert res["warnings"]
    assert usd_per_million(0.0, 1, 1.0) is None


def test_peak_concurrency_and_send_lag() -> None:
    recs = [_rec(0, 0.0, 0.1, 1.0, 5), _rec(1, 0.5, 0.1, 1.0, 5), _rec(2, 2.0, 0.1, 0.5, 5)]
    recs[2].intended_send_s = 1.99
    assert peak_concurrency(recs) == 2
    res = summarize(recs, duration_s=3.0, config={})
    assert res["send_lag_ms"]["p999"] == pytest.approx(10.0, rel=0.01)


def test_write_results_json_and_jsonl(tmp_path: Path) -> None:
    recs = [_rec(0, 0.0, 0.1, 1.0, 5), _rec(1, 0.2, 0.1, 1.0, 5, error="stream_cut")]
    res = summarize(recs, duration_s=2.0, config={"dataset": "x"})
    out = tmp_path / "sub" / "run.json"
    write_results(res, recs, out)
    loaded = json.loads(out.read_text())
    for key in (
        "schema_version",
        "ttft_ms",
        "itl_ms",
        "tpot_ms",
        "e2e_ms",
        "throughput",
        "goodput",
        "requests",
        "config",
    ):
        assert key in loaded
    assert set(loaded["ttft_ms"]) >= {"p50", "p90", "p95", "p99", "p999", "mean", "std"}
    rows = [json.loads(line) for line in (tmp_path / "sub" / "run.jsonl").read_text().splitlines()]
    assert [r["error"] for r in rows] == [None, "stream_cut"]
    assert rows[0]["ttft_ms"] == pytest.approx(100)
    assert "P95" not in console.format_result(res)
    assert "ttft_ms" in console.format_result(res)


def test_plots_write_pngs(tmp_path: Path) -> None:
    from bench.plots import plot_run, plot_sweep

    recs = [_rec(i, i * 0.1, 0.05, 0.5, 8) for i in range(20)]
    recs.append(_rec(20, 2.0, 0.05, 0.5, 8, error="timeout"))
    res = summarize(recs, duration_s=3.0, config={})
    plot_run(res, recs, tmp_path / "run.png")
    plot_sweep(
        [{"rate": 1.0, "result": res}, {"rate": 2.0, "result": res}],
        tmp_path / "sweep.png",
        {"ttft_ms": 60.0},
    )
    for name in ("run.png", "sweep.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
