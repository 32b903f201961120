"""Per-fault windows, the printed table and the plot of the chaos benchmark.

A fault's window runs from the fault to its recovery: the later of Serve's (the deployment
back to its target, ``faults.py``) and the clients' (the first request sent after the fault
from which ``RUN`` consecutive requests succeed with TTFT ≤ ``SLOW_FACTOR`` × the P95 TTFT
before the first fault), at least ``MIN_WINDOW_S``. Counted in a window: every request alive
in it (sent before its end, ended after the fault). Its P95 TTFT: the requests that waited
for their first token in it (sent in it, or sent before the fault and without a token yet).
``migrated`` / ``resumed`` / ``retried`` are the ingresses' events seen from the fault to the
next fault (``resumed``: a stream the front door, ``server.ingress: resume``, continued
after the ingress relaying it died).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.report import quantile
from experiments.chaos.load import Record

RUN = 8
COLORS = {"ok": "tab:green", "clean_error": "tab:orange", "migration_error": "tab:purple",
          "bad_200": "tab:red", "malformed": "tab:brown", "transport": "tab:pink"}  # fmt: skip
SLOW_FACTOR = 2.0
MIN_WINDOW_S = 2.0
OUTCOMES = (
    "ok",
    "clean_error",
    "migration_error",
    "bad_200",
    "malformed",
    "transport",
    "hung",
    "unfinished",
)


@dataclass
class FaultRun:
    name: str
    kind: str  # kill-replica | kill-ingress | scale
    deployment: str
    target: int  # replicas the deployment should have once recovered
    at_s: float | None = None  # None: not run (the load ended first)
    detail: str = ""
    serve_recover_s: float | None = None
    events: Counter[str] = field(default_factory=Counter)  # relay log events in its phase


def attribute(steps: list[FaultRun], timeline: list[dict[str, Any]]) -> dict[str, int]:
    """Relay events into the phase of the last fault before them; returns those before any."""
    before: dict[str, int] = {}
    ran = [f for f in steps if f.at_s is not None]
    for sample in timeline:
        owner = None
        for f in ran:
            if f.at_s is not None and f.at_s <= sample["t_s"]:
                owner = f
        for k, n in sample["events"].items():
            if owner is None:
                before[k] = before.get(k, 0) + n
            else:
                owner.events[k] += n
    return before


def p95(values: Sequence[float]) -> float | None:
    return quantile(sorted(values), 95.0) if values else None


def baseline_p95(records: Sequence[Record], first_fault: float) -> float | None:
    return p95(
        [
            r.ttft_s
            for r in records
            if r.sent_s < first_fault and r.outcome() == "ok" and r.ttft_s is not None
        ]
    )


def client_recover_s(records: Sequence[Record], at_s: float, limit_s: float) -> float | None:
    after = sorted((r for r in records if r.sent_s >= at_s), key=lambda r: r.sent_s)
    good = [r.outcome() == "ok" and r.ttft_s is not None and r.ttft_s <= limit_s for r in after]
    for i in range(len(after) - RUN + 1):
        if all(good[i : i + RUN]):
            return after[i].sent_s - at_s
    return None


def window_row(
    f: FaultRun, records: Sequence[Record], base_p95: float | None, end_s: float
) -> dict[str, Any]:
    row: dict[str, Any] = {"fault": f.name, "at_s": f.at_s, "detail": f.detail}
    if f.at_s is None:
        return row | {"skipped": True}
    at = f.at_s
    limit = SLOW_FACTOR * base_p95 if base_p95 else math.inf
    client_s = client_recover_s(records, at, limit)
    span = max(f.serve_recover_s or end_s - at, client_s or 0.0, MIN_WINDOW_S)
    stop = at + span
    alive = [r for r in records if r.sent_s < stop and (r.end_s or math.inf) > at]
    waited = [
        r.ttft_s
        for r in alive
        if r.ttft_s is not None and (r.sent_s >= at or (r.first_token_s or math.inf) > at)
    ]
    counts = Counter(r.outcome() for r in alive)
    return row | {
        "window_s": round(span, 2),
        "sent": len(alive),
        "outcomes": {k: counts.get(k, 0) for k in OUTCOMES},
        "migrated": f.events["migrated"],
        "resumed": f.events["resumed"],
        "retried": f.events["retried"],
        "ingress_failed": f.events["failed_start"] + f.events["failed_stream"],
        "ttft_p95_s": p95(waited),
        "ttft_limit_s": None if math.isinf(limit) else limit,
        "client_recover_s": client_s,
        "serve_recover_s": f.serve_recover_s,
    }


def totals(records: Sequence[Record], faults: Sequence[FaultRun]) -> dict[str, Any]:
    counts = Counter(r.outcome() for r in records)
    events: Counter[str] = Counter()
    for f in faults:
        events.update(f.events)
    ttfts = [r.ttft_s for r in records if r.ttft_s is not None]
    return {
        "sent": len(records),
        "outcomes": {k: counts.get(k, 0) for k in OUTCOMES},
        "migrated": events["migrated"],
        "resumed": events["resumed"],
        "retried": events["retried"],
        "ingress_failed": events["failed_start"] + events["failed_stream"],
        "ttft_p95_s": p95(ttfts),
    }


def goals(total: dict[str, Any], planned: int) -> dict[str, Any]:
    o = total["outcomes"]
    need = math.ceil(0.998 * planned)
    return {
        "succeeded": f"{o['ok']} / {planned} (goal >= {need})",
        "succeeded_met": o["ok"] >= need,
        "hung_met": o["hung"] == 0,
        "bad_200_met": o["bad_200"] == 0,
    }


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v * 1000:.0f}"


def _bad(o: dict[str, int]) -> str:
    return f"{o['bad_200']}" + (f" (+{o['transport']} no status)" if o["transport"] else "")


def _s(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def table(rows: Sequence[dict[str, Any]], total: dict[str, Any], base: float | None) -> str:
    head = (
        "| fault | at s | ok / sent | migrated | resumed | retried | failed clean "
        "| migration error | bad 200 | malformed | hung | P95 TTFT ms "
        "| recover s (clients / Serve) |"
    )
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        if r.get("skipped"):
            lines.append(f"| {r['fault']} | not run (load ended) |" + " |" * 11)
            continue
        o = r["outcomes"]
        lines.append(
            f"| {r['fault']} | {r['at_s']:.1f} | {o['ok']} / {r['sent']} | {r['migrated']} "
            f"| {r['resumed']} | {r['retried']} | {o['clean_error']} | {o['migration_error']} "
            f"| {_bad(o)} | {o['malformed']} | {o['hung']} "
            f"| {_ms(r['ttft_p95_s'])} | {_s(r['client_recover_s'])} / "
            f"{_s(r['serve_recover_s'])} |"
        )
    o = total["outcomes"]
    lines.append(
        f"| **whole run** | | {o['ok']} / {total['sent']} | {total['migrated']} "
        f"| {total['resumed']} | {total['retried']} | {o['clean_error']} | {o['migration_error']} "
        f"| {_bad(o)} | {o['malformed']} | {o['hung']} "
        f"| {_ms(total['ttft_p95_s'])} (before faults: {_ms(base)}) | |"
    )
    return "\n".join(lines)


def plot(records: Sequence[Record], rows: Sequence[dict[str, Any]], out_png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4))
    by: dict[str, list[Record]] = {}
    for r in records:
        by.setdefault(r.outcome(), []).append(r)
    for outcome in OUTCOMES:  # ok first, the rest drawn over it, larger
        recs = by.get(outcome, [])
        if not recs:
            continue
        ys = [r.ttft_s if r.ttft_s is not None else 0.0 for r in recs]
        big = outcome != "ok"
        ax.scatter(
            [r.sent_s for r in recs], ys, s=28 if big else 6, marker="x" if big else "o",
            color=COLORS.get(outcome, "black"), label=f"{outcome} ({len(recs)})",
        )  # fmt: skip
    for row in rows:
        if row.get("skipped"):
            continue
        at = row["at_s"]
        ax.axvline(at, color="k", ls="--", lw=0.8)
        ax.axvspan(at, at + row["window_s"], color="grey", alpha=0.15)
        ax.text(at, ax.get_ylim()[1] * 0.95, row["fault"], fontsize=7, rotation=90, va="top")
    ax.set_xlabel("request sent at (s)")
    ax.set_ylabel("TTFT (s); 0: none")
    ax.set_title("TTFT per request; dashed: fault, grey: until recovered")
    ax.legend(fontsize=7, markerscale=2)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
