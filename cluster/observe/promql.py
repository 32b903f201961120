"""PromQL for the dashboards: each query family is built in one place, from the catalogue.

Selectors filter each metric by the dashboard variables its source can answer to:

    source      labels it is filtered on (always with =~, so "All" = .* works)
    edge        model                            (the ingress: its deployment/replica
                                                  labels name the ingress, not a replica)
    engine      model, deployment, replica       (Serve adds deployment and replica)
    router      (none: it labels by policy)
    autoscaler  deployment_name=~"$deployment"

Families and their zero-traffic guards (no NaN or Inf on a dashboard when nothing flows):
- ``quantile(m, q)``: ``histogram_quantile`` over ``sum by (le)`` of bucket rates, kept only
  where ``m``'s request rate is above 0 (``and on() ... > 0``).
- ``attainment(m, var)``: the share under a threshold as a bucket ratio,
  ``bucket{le="$var"} / count`` — exact because thresholds are bucket boundaries, unlike a
  quantile read back against the limit.
- ``ratio(num, den)``: ``(num or 0 * den) / (den > 0)``: empty without traffic, 0 (not
  empty) when traffic flows but ``num`` never had a series (Ray exports a counter only
  after its first increment).

Every rate uses ``$__rate_interval``; only SLO budgets and burn rates use fixed windows
(``BUDGET_WINDOW``, ``BURN_WINDOWS``), since an objective is defined over a period.
``le`` values are written the way Ray's exporter writes them: Python's float repr ("1.0",
"0.005"), checked live against Ray 2.60; ``le_label`` gives it.
"""

from __future__ import annotations

from cluster.config import SLOConfig
from contracts import metrics as M
from contracts.outcomes import SLO_OUTCOMES

RATE = "$__rate_interval"
BUDGET_WINDOW = "30d"
BURN_WINDOWS = ("1h", "6h")

_FILTERS: dict[M.Source, tuple[tuple[str, str], ...]] = {
    "edge": (("model", "model"),),
    "engine": (("model", "model"), ("deployment", "deployment"), ("replica", "replica")),
    "router": (),
    "autoscaler": (("deployment_name", "deployment"),),
}


def le_label(bound: float) -> str:
    """A bucket boundary as Ray's exporter writes the ``le`` label: ``1.0``, ``0.005``."""
    return repr(float(bound))


def sel(metric: M.Metric, *matchers: str, series: str = "") -> str:
    """``ray_llmfleet_requests_total{model=~"$model",outcome="good"}``."""
    own = [f'{label}=~"${var}"' for label, var in _FILTERS[metric.source]]
    labels = ",".join([*own, *matchers])
    return f"{M.prom(metric, series)}{{{labels}}}" if labels else M.prom(metric, series)


def _by(labels: tuple[str, ...]) -> str:
    return f" by ({', '.join(labels)})" if labels else ""


def sum_rate(
    metric: M.Metric,
    *matchers: str,
    by: tuple[str, ...] = (),
    series: str = "",
    window: str = RATE,
) -> str:
    inner = f"rate({sel(metric, *matchers, series=series)}[{window}])"
    return f"sum by ({', '.join(by)}) ({inner})" if by else f"sum({inner})"


def gauge(metric: M.Metric, agg: str = "sum", by: tuple[str, ...] = ("replica",)) -> str:
    """A gauge aggregated per replica (or ``by``), e.g. ``sum by (replica) (...)``."""
    return f"{agg}{_by(by)} ({sel(metric)})"


def across_replicas(metric: M.Metric, agg: str) -> str:
    """``max``/``avg``/``min`` over replicas of each replica's value."""
    return f"{agg}({gauge(metric, 'max', ('deployment', 'replica'))})"


def ratio(num: str, den: str) -> str:
    return f"({num} or 0 * {den}) / ({den} > 0)"


def outcome_in(outcomes: tuple[str, ...]) -> str:
    return f'outcome=~"{"|".join(outcomes)}"'


def quantile(metric: M.Metric, q: float, by: tuple[str, ...] = ()) -> str:
    buckets = sum_rate(metric, by=("le", *by), series="bucket")
    traffic = sum_rate(metric, by=by, series="count")
    return f"histogram_quantile({q}, {buckets}) and on({', '.join(by)}) {traffic} > 0"


def heatmap(metric: M.Metric) -> str:
    return sum_rate(metric, by=("le",), series="bucket")


def mean(metric: M.Metric) -> str:
    return ratio(sum_rate(metric, series="sum"), sum_rate(metric, series="count"))


def attainment(metric: M.Metric, var: str, by: tuple[str, ...] = (), window: str = RATE) -> str:
    """Share of observations ≤ the threshold variable ``var`` (a bucket boundary)."""
    under = sum_rate(metric, f'le="${var}"', by=by, series="bucket", window=window)
    return ratio(under, sum_rate(metric, by=by, series="count", window=window))


def goodput(by: tuple[str, ...] = (), window: str = RATE) -> str:
    good = sum_rate(M.REQUESTS, 'outcome="good"', by=by, window=window)
    return ratio(good, sum_rate(M.REQUESTS, outcome_in(SLO_OUTCOMES), by=by, window=window))


def availability_bad(window: str = RATE) -> str:
    bad = sum_rate(M.REQUESTS, outcome_in(("error", "rejected")), window=window)
    return ratio(bad, sum_rate(M.REQUESTS, outcome_in(SLO_OUTCOMES), window=window))


def bad_shares(slo: SLOConfig, window: str) -> list[tuple[str, str, float]]:
    """Per objective: (its name, the share of requests that missed it over ``window``, the
    objective from ``slo``)."""
    return [
        ("goodput", f"1 - ({goodput(window=window)})", slo.goodput_objective),
        ("TTFT", f"1 - ({attainment(M.TTFT, 'ttft_slo', window=window)})", slo.latency_objective),
        ("TPOT", f"1 - ({attainment(M.TPOT, 'tpot_slo', window=window)})", slo.latency_objective),
        ("availability", availability_bad(window), slo.availability_objective),
    ]


def burn_rate(bad: str, objective: float) -> str:
    """How fast the error budget burns: 1 = exactly the budget over the objective's period."""
    return f"({bad}) / {1 - objective:.6g}"


def budget_left(bad: str, objective: float) -> str:
    return f"1 - ({bad}) / {1 - objective:.6g}"


def replicas_up() -> str:
    return f"sum({gauge(M.REPLICA_HEALTHY, 'max', ('deployment', 'replica'))})"


def label_values(metric: M.Metric, label: str, *matchers: str) -> str:
    inner = f"{M.prom(metric)}{{{','.join(matchers)}}}" if matchers else M.prom(metric)
    return f"label_values({inner}, {label})"
