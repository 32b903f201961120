"""Autoscaling scorecard: what one policy did to the fleet over one run (pure, no Ray).

Inputs are a ``Timeline`` of samples ``(t, replicas, queue_delay_s)`` taken at every policy
decision (virtual time) or every poll (live), and the per-request records. Outputs:
- scale events: every change of the replica count, ``(t, before, after)``;
- reversals: consecutive events that change direction (up→down or down→up). A step
  low→high→low needs exactly one (the way down); more is flapping;
- time to react: from a load step to the first scale-up at or after it;
- replica-seconds: the integral of the replica count (starting replicas included — they
  cost money) from the first sample to ``end_s``; the simulator reports its own exact
  number (launch to retirement) which the caller may pass instead. With a warm pool the
  caller passes the cost (awake plus sleeping replica-seconds at their cost fraction), and
  the row also carries both parts (``awake_replica_s``, ``asleep_replica_s``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # seconds from run start
    replicas: int  # running + starting
    queue_delay_s: float = 0.0  # worst replica's estimated wait to first token
    desired: int | None = None  # the policy's answer, where known


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    t: float
    before: int
    after: int

    @property
    def direction(self) -> int:
        return (self.after > self.before) - (self.after < self.before)


def scale_events(samples: Sequence[Sample]) -> list[ScaleEvent]:
    out: list[ScaleEvent] = []
    for prev, cur in itertools.pairwise(samples):
        if cur.replicas != prev.replicas:
            out.append(ScaleEvent(cur.t, prev.replicas, cur.replicas))
    return out


def reversals(events: Sequence[ScaleEvent]) -> int:
    dirs = [e.direction for e in events if e.direction != 0]
    return sum(1 for a, b in itertools.pairwise(dirs) if a != b)


def reaction_s(events: Sequence[ScaleEvent], step_t: float) -> float | None:
    """Seconds from ``step_t`` to the first scale-up at or after it; None if none came."""
    ups = [e.t for e in events if e.direction > 0 and e.t >= step_t]
    return min(ups) - step_t if ups else None


def replica_seconds(samples: Sequence[Sample], end_s: float) -> float:
    """Step integral of ``replicas`` (each sample holds until the next one)."""
    total = 0.0
    for cur, nxt in zip(samples, [*samples[1:], None], strict=False):
        t_end = end_s if nxt is None else min(nxt.t, end_s)
        total += max(0.0, t_end - cur.t) * cur.replicas
    return total


def peak_replicas(samples: Sequence[Sample]) -> int:
    return max((s.replicas for s in samples), default=0)


def scorecard(
    summary: dict[str, Any],
    samples: Sequence[Sample],
    *,
    end_s: float,
    step_t: float | None = None,
    exact_replica_s: float | None = None,
) -> dict[str, Any]:
    """One row of the comparison: ``summary`` is ``bench.report.summarize``'s result."""
    events = scale_events(samples)
    ttft = summary.get("ttft_ms") or {}
    good = summary.get("goodput") or {}
    rs = exact_replica_s if exact_replica_s is not None else replica_seconds(samples, end_s)
    return {
        "attainment": good.get("attainment"),
        "ttft_p50_ms": ttft.get("p50"),
        "ttft_p95_ms": ttft.get("p95"),
        "ttft_p99_ms": ttft.get("p99"),
        "goodput_req_s": good.get("req_s"),
        "failed": (summary.get("requests") or {}).get("failed", 0),
        "replica_s": rs,
        "peak_replicas": peak_replicas(samples),
        "react_s": None if step_t is None else reaction_s(events, step_t),
        "scale_events": len(events),
        "reversals": reversals(events),
        **_pool_parts(summary),
    }


def _pool_parts(summary: dict[str, Any]) -> dict[str, Any]:
    pool = summary.get("pool") or {}
    if not pool.get("size"):
        return {}
    return {
        "awake_replica_s": summary.get("replica_seconds"),
        "asleep_replica_s": pool.get("sleeping_replica_seconds"),
        "asleep_cost_fraction": pool.get("cost_fraction"),
        "wake_s": pool.get("wake_s"),
    }


def _fmt(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows carry ``workload``, ``policy``, ``tuning`` and the scorecard keys."""
    head = (
        "| workload | policy | tuning | SLO att. | P50 TTFT ms | P95 | P99 | goodput req/s "
        "| replica-s | peak | react s | events | reversals | failed |"
    )
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        att = None if r.get("attainment") is None else 100 * r["attainment"]
        lines.append(
            f"| {r['workload']} | {r['policy']} | {r.get('tuning', '')} | {_fmt(att, '.2f')} % "
            f"| {_fmt(r.get('ttft_p50_ms'), '.0f')} | {_fmt(r.get('ttft_p95_ms'), '.0f')} "
            f"| {_fmt(r.get('ttft_p99_ms'), '.0f')} | {_fmt(r.get('goodput_req_s'), '.3f')} "
            f"| {_fmt(r.get('replica_s'), '.0f')} | {r.get('peak_replicas', '–')} "
            f"| {_fmt(r.get('react_s'), '.1f')} | {r.get('scale_events', '–')} "
            f"| {r.get('reversals', '–')} | {r.get('failed', 0)} |"
        )
    pooled = [r for r in rows if r.get("asleep_replica_s") is not None]
    if pooled:
        lines.append("")
        lines.append("Warm pool rows: replica-s = awake + asleep × cost fraction (a sleeper "
                     "holds only host memory for its weights); awake / asleep replica-s: "
                     + "; ".join(f"{r.get('tuning', '')}: {r['awake_replica_s']:.0f} / "
                                 f"{r['asleep_replica_s']:.0f} × {r['asleep_cost_fraction']:.3f}, "
                                 f"wake {r['wake_s']:.1f} s" for r in pooled) + ".")  # fmt: skip
    return "\n".join(lines)


def cheapest_reaching(rows: Sequence[dict[str, Any]], attainment: float) -> dict[str, Any] | None:
    """The lowest-cost row whose attainment is at least ``attainment``."""
    ok = [r for r in rows if (r.get("attainment") or 0.0) >= attainment - 1e-12]
    return min(ok, key=lambda r: r["replica_s"]) if ok else None


def goal_check(
    ours: dict[str, Any],
    statics: Sequence[dict[str, Any]],
    baselines: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The issue's goals: ≥ 99 % attainment at ≤ 0.8× the replica-seconds of the cheapest
    fixed fleet reaching 99 %; beside it, the ratio to the cheapest tuned baseline that
    reaches our attainment (or 99 %, whichever is lower)."""
    att = ours.get("attainment") or 0.0
    ref = cheapest_reaching(statics, 0.99)
    ratio = ours["replica_s"] / ref["replica_s"] if ref and ref["replica_s"] > 0 else None
    base = cheapest_reaching(baselines, min(att, 0.99))
    base_ratio = ours["replica_s"] / base["replica_s"] if base and base["replica_s"] > 0 else None
    return {
        "attainment_ok": att >= 0.99,
        "reference": None if ref is None else f"{ref['policy']} {ref.get('tuning', '')}".strip(),
        "cost_ratio": ratio,
        "cost_ok": None if ratio is None else ratio <= 0.8,
        "baseline": None if base is None else f"{base['policy']} {base.get('tuning', '')}".strip(),
        "baseline_ratio": base_ratio,
    }
