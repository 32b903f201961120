"""The vocabulary of a ``promtool test rules`` case, as ``alert_tests.py`` builds them.

A case's series are sampled once a minute from t = 0. Counters are written as segments of
(increase a minute, minutes) from 0; gauges as (value, samples). An SLI's traffic is
``SLISeries``: ``N`` requests a minute split by (bad fraction, minutes) segments into the
histogram's ``le=<limit>`` bucket and count (TTFT, TPOT) or good/error outcomes
(availability); ``ratio(t, window)`` is the bad share a window ending at minute t sees.
Prometheus 2.x ranges include both ends and a counter starting at 0 is not extrapolated
before it, so that share is exact: Δbad / Δtotal between the window's two end samples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cluster.config import FleetConfig
from cluster.observe.promql import le_label
from cluster.observe.rulefile import Alert
from contracts.metrics import REQUESTS, TPOT, TTFT, Metric, prom

MODEL = "tiny"
DEPLOYMENT = "LLMReplica"
N = 100_000  # requests a minute in SLI cases: bad fractions of 1e-5 stay integers

Lookup = Callable[..., Alert]  # (alert name, **some static labels) -> the one rule


@dataclass(frozen=True, slots=True)
class Firing:
    alert: Alert
    labels: dict[str, str]  # the labels the expression gives (model, deployment_name, ...)
    value: float  # the expression's value, for {{ $value }}


@dataclass(frozen=True, slots=True)
class Fires:
    at: int  # minute
    alertname: str
    firing: tuple[Firing, ...]  # exactly these fire (empty: none)


@dataclass(frozen=True, slots=True)
class Expr:
    at: int
    expr: str
    samples: tuple[tuple[str, float], ...]  # (labels as text, value)


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    series: tuple[tuple[str, str], ...]  # (series, promtool values)
    checks: tuple[Fires | Expr, ...]


def lookup(rules: list[Alert]) -> Lookup:
    def get(name: str, **labels: str) -> Alert:
        found = [a for a in rules if a.name == name and labels.items() <= dict(a.labels).items()]
        if len(found) != 1:
            raise KeyError(f"{len(found)} rules match {name} {labels}")
        return found[0]

    return get


def series(metric: Metric, part: str = "", **labels: str) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{prom(metric, part)}{{{inner}}}"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def counter(segments: Sequence[tuple[float, int]]) -> str:
    parts, cur = ["0"], 0.0
    for inc, n in segments:
        if n > 0:
            parts.append(f"{_num(cur + inc)}+{_num(inc)}x{n - 1}")
            cur += inc * n
    return " ".join(parts)


def gauge(segments: Sequence[tuple[float, int]]) -> str:
    return " ".join(f"{_num(v)}+0x{n - 1}" for v, n in segments if n > 0)


def minutes_to_w(window: str) -> int:
    unit = {"m": 1, "h": 60, "d": 1440}[window[-1]]
    return int(window[:-1]) * unit


class SLISeries:
    def __init__(
        self,
        cfg: FleetConfig,
        key: str,
        segments: Sequence[tuple[float, int]],
        per_minute: int = N,
    ) -> None:
        self.cfg, self.key = cfg, key
        self.segments = [(round(f * per_minute), per_minute, n) for f, n in segments]

    def _cumulative(self, t: int) -> tuple[int, int]:
        bad = total = 0
        left = t
        for b, tot, n in self.segments:
            k = min(n, left)
            bad, total, left = bad + b * k, total + tot * k, left - k
        return bad, total

    def ratio(self, t: int, window: str) -> float:
        b1, t1 = self._cumulative(t)
        b0, t0 = self._cumulative(max(0, t - minutes_to_w(window)))
        if self.key == "availability":
            return (b1 - b0) / (t1 - t0)
        return 1 - ((t1 - t0) - (b1 - b0)) / (t1 - t0)

    def series(self) -> tuple[tuple[str, str], ...]:
        good = [(tot - b, n) for b, tot, n in self.segments]
        bad = [(b, n) for b, _, n in self.segments]
        total = [(tot, n) for _, tot, n in self.segments]
        if self.key == "availability":
            return (
                (series(REQUESTS, model=MODEL, outcome="good"), counter(good)),
                (series(REQUESTS, model=MODEL, outcome="error"), counter(bad)),
            )
        metric = TTFT if self.key == "ttft" else TPOT
        limit = self.cfg.slo.ttft_s if self.key == "ttft" else self.cfg.slo.tpot_s
        return (
            (series(metric, "bucket", model=MODEL, le=le_label(limit)), counter(good)),
            (series(metric, "count", model=MODEL), counter(total)),
        )
