"""SLO rules: bad-event ratios as recording rules, multi-window multi-burn-rate alerts, goodput.

Three SLIs, each a per-``model`` ratio of bad to counted requests at the edge:

    ttft          1 - bucket{le=<slo.ttft_s>} / count   (edge TTFT histogram)
    tpot          1 - bucket{le=<slo.tpot_s>} / count   (edge TPOT histogram)
    availability  outcome=~"error|rejected" / outcome in SLO_OUTCOMES   (edge REQUESTS)

recorded as ``llmfleet:<sli>_bad:ratio_rate<w>`` for every window the alerts read
(5m 30m 1h 2h 6h 1d 3d), plus ``llmfleet:goodput:ratio_rate<w>`` (5m, 1h).

Burn-rate alerts (the Google SRE workbook's multi-window, multi-burn-rate recipe). The
budget is ``1 - latency_objective`` (ttft, tpot) or ``1 - availability_objective``; an alert
fires when BOTH windows burn faster than factor × budget — the long window proves it is
significant, the short one that it is still happening (so it resets within minutes):

    severity  long  short  factor  for   a 30-day budget at this rate lasts
    page      1h    5m     14.4    2m    ~2 days
    page      6h    30m    6       15m   5 days
    ticket    1d    2h     3       1h    10 days
    ticket    3d    6h     1       3h    30 days

A factor × budget of 1 or more could never be exceeded (a budget over 1/14.4, i.e. an
objective under ~93 %): the threshold is then capped at 1 and compared with ``>=``.

Zero traffic: every ratio divides by ``(denominator > 0)``, so without requests the series is
absent: no NaN, nothing fires. A numerator with no series (Ray exports a counter only once
recorded; the edge records its counters at 0 from the start, an engine or an older exporter
may not) counts as 0 while requests flow (``or 0 * denominator``): a fleet that answers
nothing good shows a goodput of 0, not a gap. ``le`` is ``promql.le_label``: Ray 2.60's
exporter writes Python's float repr ("1.0", "0.1"), checked live with a Ray Histogram.
"""

from __future__ import annotations

from dataclasses import dataclass
from textwrap import indent

from cluster.config import FleetConfig
from cluster.observe.promql import le_label
from cluster.observe.rulefile import Alert, Record
from contracts.metrics import REQUESTS, TPOT, TTFT, Metric, prom
from contracts.outcomes import SLO_OUTCOMES

RATIO_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
GOODPUT_WINDOWS = ("5m", "1h")
GOODPUT_FOR = "10m"
AVAILABILITY_BAD = ("error", "rejected")  # the fleet failed or refused it


@dataclass(frozen=True, slots=True)
class BurnWindow:
    severity: str
    long: str
    short: str
    factor: float
    for_: str
    budget_days: float  # how long a 30-day budget lasts at this burn rate


BURN_WINDOWS = (
    BurnWindow("page", "1h", "5m", 14.4, "2m", 30 / 14.4),
    BurnWindow("page", "6h", "30m", 6.0, "15m", 5.0),
    BurnWindow("ticket", "1d", "2h", 3.0, "1h", 10.0),
    BurnWindow("ticket", "3d", "6h", 1.0, "3h", 30.0),
)


@dataclass(frozen=True, slots=True)
class SLI:
    key: str  # ttft | tpot | availability
    title: str  # for annotations
    bad: str  # what a bad request is, in words
    objective: float

    @property
    def budget(self) -> float:
        return 1.0 - self.objective

    def ratio(self, window: str) -> str:
        return f"llmfleet:{self.key}_bad:ratio_rate{window}"


def num(x: float) -> str:
    """A threshold as PromQL text, without float noise (14.4 × 0.05 → 0.72)."""
    return f"{round(x, 12):.12g}"


def pct(x: float) -> str:
    return f"{round(x * 100, 10):.4g}%"


def slis(cfg: FleetConfig) -> tuple[SLI, ...]:
    s = cfg.slo
    return (
        SLI("ttft", "TTFT", f"TTFT over {s.ttft_s:g} s", s.latency_objective),
        SLI("tpot", "TPOT", f"TPOT over {s.tpot_s:g} s", s.latency_objective),
        SLI("availability", "Availability", "failed or refused", s.availability_objective),
    )


def sum_rate(metric: Metric, window: str, series: str = "", matcher: str = "") -> str:
    sel = prom(metric, series) + (f"{{{matcher}}}" if matcher else "")
    return f"sum by (model) (rate({sel}[{window}]))"


def guarded_ratio(num_expr: str, den_expr: str) -> str:
    """``num / den`` per model: absent without traffic, 0 when ``num`` has no series."""
    return f"(\n  {num_expr}\n  or\n  0 * {den_expr}\n)\n/\n({den_expr} > 0)"


def _outcomes(names: tuple[str, ...]) -> str:
    return f'outcome=~"{"|".join(names)}"'


def bad_ratio_expr(cfg: FleetConfig, key: str, window: str) -> str:
    if key == "availability":
        return guarded_ratio(
            sum_rate(REQUESTS, window, matcher=_outcomes(AVAILABILITY_BAD)),
            sum_rate(REQUESTS, window, matcher=_outcomes(SLO_OUTCOMES)),
        )
    metric, limit = (TTFT, cfg.slo.ttft_s) if key == "ttft" else (TPOT, cfg.slo.tpot_s)
    good = sum_rate(metric, window, "bucket", f'le="{le_label(limit)}"')
    total = sum_rate(metric, window, "count")
    return f"1 - (\n  {good}\n  /\n  ({total} > 0)\n)"


def goodput_expr(window: str) -> str:
    return guarded_ratio(
        sum_rate(REQUESTS, window, matcher='outcome="good"'),
        sum_rate(REQUESTS, window, matcher=_outcomes(SLO_OUTCOMES)),
    )


def recording_rules(cfg: FleetConfig) -> list[Record]:
    out = [
        Record(s.ratio(w), bad_ratio_expr(cfg, s.key, w)) for s in slis(cfg) for w in RATIO_WINDOWS
    ]
    out += [Record(f"llmfleet:goodput:ratio_rate{w}", goodput_expr(w)) for w in GOODPUT_WINDOWS]
    return out


def threshold(sli: SLI, bw: BurnWindow) -> tuple[str, str]:
    """(comparison, threshold text) for one SLI and window pair; capped at 1 (see header)."""
    t = bw.factor * sli.budget
    return (">=", "1") if t >= 1 else (">", num(t))


def burn_condition(sli: SLI, bw: BurnWindow) -> str:
    op, t = threshold(sli, bw)
    return f"{sli.ratio(bw.long)} {op} {t}\nand on (model)\n{sli.ratio(bw.short)} {op} {t}"


def page_burn_condition(cfg: FleetConfig) -> str:
    """Any latency SLI burning at a page rate, for any model (for the autoscaler alert)."""
    parts = [
        burn_condition(s, bw)
        for s in slis(cfg)
        if s.key != "availability"
        for bw in BURN_WINDOWS
        if bw.severity == "page"
    ]
    return "\nor\n".join(f"(\n{indent(p, '  ')}\n)" for p in parts)


def burn_alert(sli: SLI, bw: BurnWindow) -> Alert:
    _, t = threshold(sli, bw)
    return Alert(
        name=f"LLMFleet{sli.title}BudgetBurn",
        expr=burn_condition(sli, bw),
        for_=bw.for_,
        severity=bw.severity,
        summary=f"{sli.title} error budget burning {bw.factor:g}x ({bw.long}/{bw.short}) "
        "for {{ $labels.model }}",
        description=f"{{{{ $labels.model }}}}: {{{{ $value | humanizePercentage }}}} of "
        f"requests over {bw.long} were {sli.bad} (and over {bw.short} too), above "
        f"{bw.factor:g} x the {pct(sli.budget)} budget of the {pct(sli.objective)} objective "
        f"(threshold {pct(float(t))}). At this rate a 30-day budget lasts "
        f"{bw.budget_days:.3g} days.",
        labels=(("slo", sli.key), ("long", bw.long), ("short", bw.short)),
    )


def goodput_alert(cfg: FleetConfig) -> Alert:
    obj = cfg.slo.goodput_objective
    return Alert(
        name="LLMFleetGoodputLow",
        expr=f"llmfleet:goodput:ratio_rate5m < {num(obj)}",
        for_=GOODPUT_FOR,
        severity="ticket",
        summary="Goodput below its objective for {{ $labels.model }}",
        description="{{ $labels.model }}: {{ $value | humanizePercentage }} of requests over "
        f"5m were good (TTFT <= {cfg.slo.ttft_s:g} s, TPOT <= {cfg.slo.tpot_s:g} s, no error), "
        f"below the {pct(obj)} objective for {GOODPUT_FOR}.",
        labels=(("slo", "goodput"),),
    )


def slo_alerts(cfg: FleetConfig) -> list[Alert]:
    return [burn_alert(s, bw) for s in slis(cfg) for bw in BURN_WINDOWS] + [goodput_alert(cfg)]
