"""Console tables for a run and for a sweep (plain text, fixed width)."""

from __future__ import annotations

from typing import Any


def _f(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_result(result: dict[str, Any]) -> str:
    req, thr, good = result["requests"], result["throughput"], result["goodput"]
    lines = [
        f"{'metric':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p95':>10}{'p99':>10}{'p999':>10}",
    ]
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        p = result[key]
        lines.append(
            f"{key:<10}"
            + "".join(f"{_f(p[q]):>10}" for q in ("mean", "p50", "p90", "p95", "p99", "p999"))
        )
    lines += [
        f"requests   completed {req['completed']}  failed {req['failed']}  "
        f"errors {req['errors'] or '{}'}  peak concurrency {req['peak_concurrency']}",
        f"throughput {_f(thr['req_s'], 2)} req/s  {_f(thr['output_tok_s'])} out tok/s  "
        f"{_f(thr['total_tok_s'])} total tok/s  peak {_f(thr['peak_output_tok_s'])} out tok/s",
        f"per-user   {_f(result['per_user_tok_s']['mean'])} tok/s mean  "
        f"send lag p99 {_f(result['send_lag_ms']['p99'], 2)} ms  "
        f"duration {_f(result['duration_s'])} s",
    ]
    if good["slo"]:
        lines.append(
            f"goodput    {_f(good['req_s'], 2)} req/s  attainment "
            f"{_f(good['attainment'], 3)}  slo {good['slo']}"
        )
    if "cost" in result:
        c = result["cost"]
        lines.append(
            f"cost       ${_f(c['usd_per_1m_output_tokens'], 3)}/1M out tok  "
            f"${_f(c['usd_per_1m_good_output_tokens'], 3)}/1M good out tok"
        )
    lines += [f"WARNING    {w}" for w in result.get("warnings", [])]
    return "\n".join(lines)


def format_sweep(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'rate':>8}{'req/s':>9}{'out tok/s':>11}{'p95 ttft':>10}{'p95 itl':>9}"
        f"{'p95 e2e':>10}{'goodput':>9}{'attain':>8}{'failed':>8}"
    )
    lines = [head]
    for row in rows:
        r = row["result"]
        lines.append(
            f"{_f(row['rate'], 2):>8}{_f(r['throughput']['req_s'], 2):>9}"
            f"{_f(r['throughput']['output_tok_s']):>11}{_f(r['ttft_ms']['p95']):>10}"
            f"{_f(r['itl_ms']['p95']):>9}{_f(r['e2e_ms']['p95']):>10}"
            f"{_f(r['goodput']['req_s'], 2):>9}{_f(r['goodput']['attainment'], 3):>8}"
            f"{r['requests']['failed']:>8}"
        )
    return "\n".join(lines)
