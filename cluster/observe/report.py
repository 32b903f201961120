"""``llmfleet report``: the SLA panels of a time window, from Prometheus, as PNGs + HTML + JSON.

    Prometheus ──query_range──► panels (P95 TTFT, P95 ITL, tok/s, goodput %, replicas)
              └──query (at end)─► summary (requests, goodput, TTFT P50/P95/P99 over the window)
                                   │
                                   ▼  report_figures
            OUT/<panel>.png, OUT/report.png (grid), OUT/report.html, OUT/report.json

Knobs: ``--since`` (window, ending now), ``--step`` (``auto``: about 200 points, never finer
than the scrape interval), ``--rate-window`` (``auto``: max(4 × scrape interval, step,
2 × 10 s)). A rate needs several samples and must not skip any between steps; and Ray's
processes hand their metrics to the node's exporter every ``metrics_report_interval_ms``
(10 s by default), so counters move in 10 s steps whatever the scrape interval — a shorter
window draws zeros and spikes. The scrape interval is read from the server's
``/api/v1/status/config`` (15 s when it cannot be read; ``prom_client.py``).

Percentiles come from ``histogram_quantile`` over buckets summed across replicas, never from
averaging per-replica percentiles; the summary's quantiles use ``increase`` over the whole
window. A panel with no samples (no traffic) reads "no data"; a summary number without data is
``null`` in the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster.observe.prom_client import PromAPI, PromError, PromHTTP, parse_duration
from cluster.observe.report_figures import Line, Panel, PanelData, Series, write_all
from contracts.metrics import (
    AUTOSCALER_DESIRED,
    ITL,
    OUTPUT_TOKENS,
    REPLICA_HEALTHY,
    REQUEST_OUTPUT_TOKENS,
    REQUESTS,
    TTFT,
    Metric,
    prom,
)
from contracts.outcomes import SLO_OUTCOMES

if TYPE_CHECKING:
    from cluster.config import SLOConfig

AUTO_POINTS = 200
RAY_EXPORT_S = 10.0  # Ray's default metrics_report_interval_ms


# ---- PromQL ---------------------------------------------------------------------------
def dur(seconds: float) -> str:
    return f"{max(1, math.ceil(seconds))}s"


def sel(metric: Metric, series: str = "", **match: str) -> str:
    """A selector; a value with ``|`` matches as a regex."""
    labels = ",".join(f'{k}=~"{v}"' if "|" in v else f'{k}="{v}"' for k, v in sorted(match.items()))
    return prom(metric, series) + (f"{{{labels}}}" if labels else "")


def rate_sum(metric: Metric, window: str, fn: str = "rate", **match: str) -> str:
    return f"sum({fn}({sel(metric, **match)}[{window}]))"


def quantile(q: float, metric: Metric, window: str, fn: str = "rate") -> str:
    return f"histogram_quantile({q}, sum by (le) ({fn}({sel(metric, 'bucket')}[{window}])))"


def goodput_pct(window: str, fn: str = "rate") -> str:
    good = rate_sum(REQUESTS, window, fn, outcome="good")
    slo = rate_sum(REQUESTS, window, fn, outcome="|".join(SLO_OUTCOMES))
    return f"100 * {good} / {slo}"


# ---- panels ---------------------------------------------------------------------------
def panels(slo: SLOConfig, window: str) -> list[Panel]:
    return [
        Panel(
            "ttft_p95",
            "P95 TTFT (edge)",
            "s",
            (Line("P95 TTFT", quantile(0.95, TTFT, window)),),
            ((f"slo.ttft_s {slo.ttft_s:g}s", slo.ttft_s),),
        ),
        Panel(
            "itl_p95",
            "P95 ITL (edge)",
            "s",
            (Line("P95 ITL", quantile(0.95, ITL, window)),),
            ((f"slo.tpot_s {slo.tpot_s:g}s (per-request mean)", slo.tpot_s),),
        ),
        Panel(
            "tokens",
            "Output tokens/s",
            "tok/s",
            (
                Line("all (engine)", rate_sum(OUTPUT_TOKENS, window)),
                Line("good (edge)", rate_sum(REQUEST_OUTPUT_TOKENS, window, outcome="good")),
            ),
        ),
        Panel(
            "goodput",
            "Goodput (good / SLO-counted requests)",
            "%",
            (Line("goodput", goodput_pct(window)),),
            ((f"objective {slo.goodput_objective:.1%}", 100 * slo.goodput_objective),),
        ),
        Panel(
            "replicas",
            "Replicas",
            "replicas",
            (
                Line("healthy", f"sum({sel(REPLICA_HEALTHY)})"),
                Line("desired (autoscaler)", f"sum({sel(AUTOSCALER_DESIRED)})"),
            ),
        ),
    ]


def fetch_panel(api: PromAPI, panel: Panel, start: float, end: float, step: float) -> PanelData:
    out = []
    for line in panel.lines:
        for result in api.query_range(line.expr, start, end, step):
            s = Series(line.label)
            for ts, value in result.get("values", []):
                v = float(value)
                if math.isfinite(v):
                    s.t.append(float(ts))
                    s.v.append(v)
            if s.v:
                out.append(s)
    return PanelData(panel, out)


def _scalar(api: PromAPI, expr: str, at: float) -> float | None:
    result = api.query(expr, at)
    if not result:
        return None
    v = float(result[0]["value"][1])
    return v if math.isfinite(v) else None


def summary(api: PromAPI, slo: SLOConfig, window_s: float, end: float) -> dict[str, Any]:
    w = dur(window_s)
    by_outcome: dict[str, int] = {}
    for r in api.query(f"sum by (outcome) (increase({sel(REQUESTS)}[{w}]))", end):
        by_outcome[r["metric"].get("outcome", "")] = round(float(r["value"][1]))  # extrapolated
    requests = sum(by_outcome.values()) if by_outcome else None
    out_tokens = _scalar(api, rate_sum(OUTPUT_TOKENS, w, "increase"), end)
    good_tokens = _scalar(api, rate_sum(REQUEST_OUTPUT_TOKENS, w, "increase", outcome="good"), end)
    return {
        "requests": requests,
        "requests_by_outcome": by_outcome,
        "goodput_pct": _scalar(api, goodput_pct(w, "increase"), end),
        "goodput_objective_pct": 100 * slo.goodput_objective,
        "ttft_slo_s": slo.ttft_s,
        **{
            f"ttft_p{round(q * 100)}_s": _scalar(api, quantile(q, TTFT, w, "increase"), end)
            for q in (0.5, 0.95, 0.99)
        },
        "itl_p95_s": _scalar(api, quantile(0.95, ITL, w, "increase"), end),
        "output_tokens_per_s": None if out_tokens is None else out_tokens / window_s,
        "good_tokens_per_s": None if good_tokens is None else good_tokens / window_s,
    }


def auto_step(window_s: float, scrape_s: float) -> float:
    return float(max(math.ceil(scrape_s), math.ceil(window_s / AUTO_POINTS)))


@dataclass(frozen=True, slots=True)
class Window:
    end: float  # unix seconds
    seconds: float
    step_s: float
    scrape_s: float
    rate_s: float | None = None  # None: auto

    @property
    def start(self) -> float:
        return self.end - self.seconds

    @property
    def rate_window_s(self) -> float:
        return self.rate_s or max(4 * self.scrape_s, self.step_s, 2 * RAY_EXPORT_S)


def build(api: PromAPI, slo: SLOConfig, win: Window, out: Path) -> dict[str, Any]:
    """Fetch, draw and write everything into ``out``; returns what report.json holds."""
    data = [
        fetch_panel(api, p, win.start, win.end, win.step_s)
        for p in panels(slo, dur(win.rate_window_s))
    ]
    result = {
        "window": {"start": win.start, "end": win.end, "seconds": win.seconds},
        "step_s": win.step_s,
        "scrape_interval_s": win.scrape_s,
        "rate_window_s": math.ceil(win.rate_window_s),
        "summary": summary(api, slo, win.seconds, win.end),
        "panels": {
            d.panel.key: {
                "title": d.panel.title,
                "unit": d.panel.unit,
                "queries": {line.label: line.expr for line in d.panel.lines},
                "thresholds": dict(d.panel.thresholds),
                "series": [asdict(s) for s in d.series],
            }
            for d in data
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    write_all(data, result, out)
    (out / "report.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


# ---- command --------------------------------------------------------------------------
def _duration_arg(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _step_arg(text: str) -> float | None:
    return None if text == "auto" else _duration_arg(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--prometheus", required=True, help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    a("--since", type=_duration_arg, default=1800.0, help="window ending now (default: 30m)")
    a("--out", type=Path, default=Path("report"), help="output directory (default: ./report)")
    a("--config", default=None, help="llmfleet YAML for the slo section (default: built-in)")
    a("--step", type=_step_arg, default=None, help="graph step, e.g. 15s (default: auto)")
    a(
        "--rate-window",
        type=_step_arg,
        default=None,
        help="window of each rate() on the graphs, e.g. 1m (default: auto)",
    )


def run(args: argparse.Namespace) -> int:
    from cluster.config import ConfigError, load_config

    try:
        cfg = load_config(args.config)
    except ConfigError as err:
        print(f"llmfleet: {err}", file=sys.stderr)
        return 2
    api = PromHTTP(args.prometheus)
    try:
        scrape_s = api.scrape_interval()
        step_s = args.step or auto_step(args.since, scrape_s)
        win = Window(time.time(), args.since, step_s, scrape_s, args.rate_window)
        build(api, cfg.slo, win, args.out)
    except PromError as err:
        print(f"llmfleet: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"llmfleet: cannot write the report into {args.out}: {err}", file=sys.stderr)
        return 1
    for name in ("report.html", "report.png", "report.json"):
        print(args.out / name)
    return 0
