"""Grafana dashboards generated from the metric catalogue and the fleet config.

``render_files(cfg)`` gives ``{"<name>.json": text}`` for ``dashboards/`` (written and
checked by ``cluster.observe.render``); the dashboards themselves live in
``service_boards.py`` (what clients get: overview, latency, throughput, models) and
``fleet_boards.py`` (why: saturation, router, autoscaler), their queries in ``promql.py``
and the Grafana building blocks in ``panels.py``.

For tests that run the dashboards' queries:
- ``panel_queries(dashboard)`` lists (where, PromQL) for every panel target, annotation and
  query variable (``label_values(sel, label)`` becomes ``count by (label) (sel)``);
- ``substitute(expr, values)`` fills in Grafana variables (``$v``, ``${v}``, ``${v:fmt}``,
  ``$__rate_interval``, ...); an unknown variable raises ``KeyError``;
- ``DEFAULT_VALUES``: "All" for model/deployment/replica, the default SLO limits as Ray
  writes ``le``, a 1m rate interval.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from cluster.config import FleetConfig, SLOConfig
from cluster.observe import fleet_boards, service_boards
from cluster.observe.panels import Board, to_json
from cluster.observe.promql import le_label

BOARDS: dict[str, Callable[[FleetConfig], Board]] = {
    "overview": lambda cfg: service_boards.overview(cfg.slo),
    "latency": lambda _: service_boards.latency(),
    "throughput": lambda _: service_boards.throughput(),
    "models": lambda _: service_boards.models(),
    "saturation": lambda _: fleet_boards.saturation(),
    "router": lambda _: fleet_boards.router(),
    "autoscaler": lambda _: fleet_boards.autoscaler(),
}

DEFAULT_VALUES: dict[str, str] = {
    "datasource": "prometheus",
    "model": ".*",
    "deployment": ".*",
    "replica": ".*",
    "ttft_slo": le_label(SLOConfig().ttft_s),
    "tpot_slo": le_label(SLOConfig().tpot_s),
    "replica_hour_usd": "1",
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
}

VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
_LABEL_VALUES = re.compile(r"^label_values\((.+),\s*(\w+)\)$")


def render_files(cfg: FleetConfig) -> dict[str, str]:
    return {f"{name}.json": to_json(build(cfg), cfg) for name, build in BOARDS.items()}


def substitute(expr: str, values: dict[str, str]) -> str:
    return VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], expr)


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    out = [
        (p.get("title", ""), t["expr"])
        for p in _panels(dashboard.get("panels", []))
        for t in p.get("targets", [])
        if "expr" in t
    ]
    for a in dashboard.get("annotations", {}).get("list", []):
        if a.get("expr"):
            out.append((f"annotation: {a['name']}", a["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            out.append((f"variable: {v['name']}", _variable_promql(v["query"])))
    return out


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Panels, with those nested in collapsed rows."""
    return [q for p in panels for q in [p, *_panels(p.get("panels", []))]]


def _variable_promql(query: str | dict[str, Any]) -> str:
    text = query if isinstance(query, str) else str(query.get("query", ""))
    m = _LABEL_VALUES.match(text.strip())
    return f"count by ({m.group(2)}) ({m.group(1)})" if m else text
