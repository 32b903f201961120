from __future__ import annotations

import pytest

from bench.report import summarize
from bench.types import RequestRecord
from experiments.fidelity.vllm_client import _compare


def test_compare_lines_up_metric_names_and_diff() -> None:
    recs = [
        RequestRecord(
            index=i,
            intended_send_s=0,
            send_s=0,
            prompt_tokens=4,
            output_tokens=11,
            ttft_s=0.1,
            e2e_s=1.1,
            token_times_s=[0.1 + k * 0.1 for k in range(11)],
        )
        for i in range(4)
    ]
    ours = summarize(recs, duration_s=2.0, config={})
    theirs = {
        "p50_ttft_ms": 80.0,
        "p95_ttft_ms": 100.0,
        "p50_tpot_ms": 100.0,
        "p95_tpot_ms": 125.0,
        "p50_e2el_ms": 1100.0,
        "p95_e2el_ms": 1000.0,
        "output_throughput": 44.0,
    }
    rows = _compare(ours, theirs)
    assert rows["p50_ttft_ms"]["diff_pct"] == pytest.approx(25.0)
    assert rows["p95_ttft_ms"]["diff_pct"] == pytest.approx(0.0)
    assert rows["p95_tpot_ms"]["diff_pct"] == pytest.approx(-20.0)
    assert rows["p95_e2e_ms"]["diff_pct"] == pytest.approx(10.0)
    assert rows["output_tok_s"]["ours"] == pytest.approx(22.0)
    assert rows["output_tok_s"]["diff_pct"] == pytest.approx(-50.0)
