"""Per-request records → the versioned result JSON (schema in ``bench/SCHEMA.md``).

Latency metrics (ms): TTFT; ITL = every gap between consecutive streamed text chunks;
TPOT = (E2E − TTFT)/(output tokens − 1) with output tokens from the server's usage; E2E.
Each gets mean, std (population), p50, p90, p95, p99, p999 with linear interpolation
between order statistics (numpy's default method). Throughput divides by the run's wall
duration. Optional config keys: ``replicas`` and ``replica_hour_cost`` (cost per 1M output
tokens), ``min_tpot_ms`` (flags TPOT faster than a physical floor — a sign that the server
batched chunks or the usage count is wrong).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import slo as slo_mod
from bench.types import RESULT_SCHEMA_VERSION, RequestRecord

QUANTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def quantile(sorted_values: Sequence[float], q: float) -> float:
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {**dict.fromkeys(QUANTILES), "mean": None, "std": None, "count": 0}
    ordered = sorted(values)
    mean = math.fsum(ordered) / len(ordered)
    var = math.fsum((v - mean) ** 2 for v in ordered) / len(ordered)
    out: dict[str, float | None] = {k: quantile(ordered, q) for k, q in QUANTILES.items()}
    out.update(mean=mean, std=math.sqrt(var), count=len(ordered))
    return out


def _end_s(rec: RequestRecord) -> float:
    if rec.e2e_s is not None:
        return rec.send_s + rec.e2e_s
    return rec.token_times_s[-1] if rec.token_times_s else rec.send_s


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    events = [(r.send_s, 1) for r in records] + [(_end_s(r), -1) for r in records]
    peak = level = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        level += delta
        peak = max(peak, level)
    return peak


def peak_output_tok_s(records: Sequence[RequestRecord], window_s: float = 1.0) -> float:
    buckets: dict[int, float] = {}
    for r in records:
        if r.error or not r.token_times_s:
            continue
        per_chunk = r.output_tokens / len(r.token_times_s)
        for t in r.token_times_s:
            key = int(t // window_s)
            buckets[key] = buckets.get(key, 0.0) + per_chunk
    return max(buckets.values(), default=0.0) / window_s


def latency_samples(ok: Sequence[RequestRecord]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"ttft_ms": [], "itl_ms": [], "tpot_ms": [], "e2e_ms": []}
    for r in ok:
        for key, value in slo_mod.request_metrics_ms(r).items():
            if value is not None:
                out[key].append(value)
        times = r.token_times_s
        out["itl_ms"].extend((b - a) * 1000 for a, b in itertools.pairwise(times))
    return out


def _errors(records: Sequence[RequestRecord]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        if r.error:
            out[r.error] = out.get(r.error, 0) + 1
    return dict(sorted(out.items()))


def _goodput(
    records: Sequence[RequestRecord], duration_s: float, slo: dict[str, float]
) -> dict[str, Any]:
    good = [r for r in records if slo_mod.meets(r, slo)]
    return {
        "req_s": len(good) / duration_s,
        "attainment": len(good) / len(records) if records else None,
        "output_tok_s": sum(r.output_tokens for r in good) / duration_s,
        "good": len(good),
        "slo": dict(slo),
    }


def _cost(config: dict[str, Any], throughput: dict[str, Any], goodput: dict[str, Any]) -> dict:
    usd = config.get("replica_hour_cost")
    if usd is None:
        return {}
    replicas = int(config.get("replicas") or 1)
    return {
        "cost": {
            "replicas": replicas,
            "replica_hour_usd": float(usd),
            "usd_per_1m_output_tokens": slo_mod.usd_per_million(
                throughput["output_tok_s"], replicas, usd
            ),
            "usd_per_1m_good_output_tokens": slo_mod.usd_per_million(
                goodput["output_tok_s"], replicas, usd
            ),
        }
    }


def _floor(config: dict[str, Any], tpots: list[float]) -> tuple[dict, list[str]]:
    floor = config.get("min_tpot_ms")
    if floor is None:
        return {}, []
    below = sum(1 for v in tpots if v < floor)
    warn = [f"{below} requests had TPOT below the {floor} ms floor"] if below else []
    return {"tpot_floor": {"min_tpot_ms": float(floor), "below_floor": below}}, warn


def summarize(
    records: list[RequestRecord],
    *,
    duration_s: float,
    config: dict,
    slo: dict[str, float] | None = None,
) -> dict:
    duration_s = max(duration_s, 1e-9)
    ok = [r for r in records if r.error is None]
    lat = latency_samples(ok)
    out_tok = sum(r.output_tokens for r in ok)
    in_tok = sum(r.prompt_tokens for r in ok)
    throughput = {
        "req_s": len(ok) / duration_s,
        "output_tok_s": out_tok / duration_s,
        "total_tok_s": (in_tok + out_tok) / duration_s,
        "peak_output_tok_s": peak_output_tok_s(ok),
    }
    goodput = _goodput(records, duration_s, slo or {})
    floor, warnings = _floor(config, lat["tpot_ms"])
    lags = [(r.send_s - r.intended_send_s) * 1000 for r in records]
    per_user = [r.output_tokens / r.e2e_s for r in ok if r.e2e_s]
    return {
        "schema_version": RESULT_SCHEMA_VERSION,
        **{key: percentiles(values) for key, values in lat.items()},
        "throughput": throughput,
        "goodput": goodput,
        "per_user_tok_s": percentiles(per_user),
        "requests": {
            "completed": len(ok),
            "failed": len(records) - len(ok),
            "total": len(records),
            "errors": _errors(records),
            "peak_concurrency": peak_concurrency(records),
        },
        "tokens": {"input": in_tok, "output": out_tok, "cached": sum(r.cached_tokens for r in ok)},
        "send_lag_ms": percentiles(lags),
        "duration_s": duration_s,
        **_cost(config, throughput, goodput),
        **floor,
        "warnings": warnings,
        "config": dict(config),
    }


def record_row(rec: RequestRecord) -> dict[str, Any]:
    row = asdict(rec)
    row.update(slo_mod.request_metrics_ms(rec))
    return row


def jsonl_path(out: Path) -> Path:
    return out.with_suffix(".jsonl")


def write_results(result: dict, records: Sequence[RequestRecord], out: Path) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, sort_keys=False) + "\n")
    with jsonl_path(out).open("w") as f:
        for rec in records:
            f.write(json.dumps(record_row(rec)) + "\n")
