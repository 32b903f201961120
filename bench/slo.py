"""SLOs, goodput and cost.

An SLO is a set of per-request limits in milliseconds: ``ttft_ms``, ``tpot_ms``, ``e2e_ms``
(parse_slo("ttft_ms=500,tpot_ms=50")). A request is *good* when it succeeded and meets every
limit given (TPOT is undefined for a 1-token answer and counts as met). Goodput = good
requests per second of run; attainment = good / all requests sent (failures count against
it). Cost: ``replicas × $/replica-hour`` spread over the output tokens produced per hour →
$ per 1M output tokens, for all output (throughput) and for good requests' output (goodput).
"""

from __future__ import annotations

from bench.types import RequestRecord

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


def parse_slo(text: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in SLO_KEYS:
            raise ValueError(f"bad SLO item {item!r}; use {', '.join(k + '=MS' for k in SLO_KEYS)}")
        limit = float(value)
        if limit <= 0:
            raise ValueError(f"SLO {key} must be > 0")
        out[key] = limit
    return out


def tpot_s(rec: RequestRecord) -> float | None:
    if rec.error or rec.e2e_s is None or rec.ttft_s is None or rec.output_tokens < 2:
        return None
    return (rec.e2e_s - rec.ttft_s) / (rec.output_tokens - 1)


def request_metrics_ms(rec: RequestRecord) -> dict[str, float | None]:
    tpot = tpot_s(rec)
    return {
        "ttft_ms": None if rec.ttft_s is None else rec.ttft_s * 1000,
        "tpot_ms": None if tpot is None else tpot * 1000,
        "e2e_ms": None if rec.e2e_s is None else rec.e2e_s * 1000,
    }


def meets(rec: RequestRecord, slo: dict[str, float]) -> bool:
    if rec.error is not None or rec.e2e_s is None:
        return False
    values = request_metrics_ms(rec)
    for key, limit in slo.items():
        value = values[key]
        if value is None:
            if key == "tpot_ms":
                continue
            return False
        if value > limit:
            return False
    return True


def usd_per_million(tokens_per_s: float, replicas: int, replica_hour_usd: float) -> float | None:
    if tokens_per_s <= 0:
        return None
    return replicas * replica_hour_usd / (tokens_per_s * 3600.0) * 1e6
