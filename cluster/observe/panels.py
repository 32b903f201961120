"""Grafana building blocks on ``grafana_foundation_sdk`` (the Grafana 11.6 build), so each
dashboard module states only its panels and queries.

Contract
- Every panel and every query (targets, annotations, query variables) reads the
  ``$datasource`` variable; every panel has a title, a description and a unit.
- ``board()`` lays panels out in rows of 24 grid columns (a row's widths must sum to 24)
  and numbers every panel, rows included, from 1 in order: ids are stable across renders.
- ``to_json()`` is the committed text: sorted keys, indent 2, a trailing newline.
- The variables are the same on every dashboard (``variables()``): datasource; model,
  deployment and replica from ``label_values`` on catalogue metrics, each with "All" = ``.*``;
  ``ttft_slo`` / ``tpot_slo`` whose options are exactly the latency bucket boundaries as
  Ray writes ``le``; ``replica_hour_usd`` for cost panels.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap as hb
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import stat as sb
from grafana_foundation_sdk.builders import table as tb
from grafana_foundation_sdk.builders import timeseries as tsb
from grafana_foundation_sdk.cog import builder as cog
from grafana_foundation_sdk.cog import variants as cv
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from cluster.config import FleetConfig
from cluster.observe import promql
from contracts import metrics as M

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAG = "llmfleet"
Panel = cog.Builder[dm.Panel]


@dataclass(frozen=True, slots=True)
class Q:
    expr: str
    legend: str = ""


@dataclass(frozen=True, slots=True)
class Annotation:
    name: str
    expr: str
    title: str  # Grafana's titleFormat, e.g. "scale {{direction}}"
    tags: tuple[str, ...]  # labels shown as the annotation's tags
    color: str = "orange"


@dataclass(slots=True)
class Board:
    uid: str
    title: str
    description: str
    rows: Sequence[tuple[str, Sequence[Panel]]]
    annotations: list[Annotation] = field(default_factory=list)


def _target(q: Q, ref: str, *, instant: bool = False, fmt: str = "") -> cog.Builder[cv.Dataquery]:
    t = pb.Dataquery().expr(q.expr).ref_id(ref).datasource(DS)
    if q.legend:
        t = t.legend_format(q.legend)
    if instant:
        t = t.instant()
    if fmt:
        t = t.format(pm.PromQueryFormat(fmt))
    return t


def _refs(queries: list[Q], *, instant: bool = False) -> list[cog.Builder[cv.Dataquery]]:
    return [_target(q, chr(ord("A") + i), instant=instant) for i, q in enumerate(queries)]


def _steps(steps: list[tuple[float | None, str]]) -> db.ThresholdsConfig:
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


def timeseries(
    title: str,
    description: str,
    unit: str,
    queries: list[Q],
    *,
    w: int = 12,
    h: int = 8,
    stack: bool = False,
    lines: list[tuple[float | None, str]] | None = None,
) -> tsb.Panel:
    """``lines``: threshold steps drawn as dashed lines (e.g. an objective)."""
    p = (
        tsb.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DS)
        .span(w)
        .height(h)
        .targets(_refs(queries))
        .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST).show_legend(True))
    )
    if stack:
        p = p.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL)).fill_opacity(40)
    if lines:
        p = p.thresholds(_steps(lines)).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
        )
    return p


def stat(
    title: str,
    description: str,
    unit: str,
    queries: list[Q],
    *,
    w: int = 6,
    h: int = 5,
    steps: list[tuple[float | None, str]] | None = None,
    instant: bool = False,
) -> sb.Panel:
    """``instant``: one evaluation at the range's end, no sparkline (for long fixed windows)."""
    graph = cm.BigValueGraphMode.NONE if instant else cm.BigValueGraphMode.AREA
    p = (
        sb.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DS)
        .span(w)
        .height(h)
        .targets(_refs(queries, instant=instant))
        .graph_mode(graph)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]))
    )
    return p.thresholds(_steps(steps)) if steps else p


def heatmap(title: str, description: str, metric: M.Metric, *, w: int = 12, h: int = 8) -> hb.Panel:
    """Bucket rates of a latency histogram over time (Prometheus heatmap format)."""
    q = Q(promql.heatmap(metric), "{{le}}")
    return (
        hb.Panel()
        .title(title)
        .description(description)
        .unit("s")
        .datasource(DS)
        .span(w)
        .height(h)
        .with_target(_target(q, "A", fmt="heatmap"))
        .calculate(False)
        .y_axis(hb.YAxisConfig().unit("s"))
        .cell_values(hb.CellValues().unit("short"))
    )


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    unit: str
    expr: str


def table(
    title: str, description: str, key: str, columns: list[Column], *, h: int = 10
) -> tb.Panel:
    """One row per ``key`` label value, one instant query per column, merged on ``key``."""
    refs = [chr(ord("A") + i) for i in range(len(columns))]
    rename = {f"Value #{r}": c.name for r, c in zip(refs, columns, strict=True)}
    order = {key: 0} | {c.name: i + 1 for i, c in enumerate(columns)}
    p = (
        tb.Panel()
        .title(title)
        .description(description)
        .unit("short")
        .datasource(DS)
        .span(24)
        .height(h)
        .targets(
            [
                _target(Q(c.expr), r, instant=True, fmt="table")
                for r, c in zip(refs, columns, strict=True)
            ]
        )
        .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True},
                    "renameByName": rename,
                    "indexByName": order,
                },
            )
        )
    )
    for c in columns:
        p = p.override_by_name(c.name, [dm.DynamicConfigValue(id_val="unit", value=c.unit)])
    return p


def variables(cfg: FleetConfig) -> list[Any]:
    healthy = M.REPLICA_HEALTHY
    return [
        db.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        _query_var("model", promql.label_values(healthy, "model")),
        _query_var("deployment", promql.label_values(healthy, "deployment", 'model=~"$model"')),
        _query_var(
            "replica",
            promql.label_values(healthy, "replica", 'model=~"$model"', 'deployment=~"$deployment"'),
        ),
        _slo_var("ttft_slo", "TTFT limit (s)", cfg.slo.ttft_s),
        _slo_var("tpot_slo", "TPOT limit (s)", cfg.slo.tpot_s),
        db.TextBoxVariable("replica_hour_usd")
        .label("Replica-hour (USD)")
        .description("Cost of one replica for one hour, for the $ per 1M tokens panels.")
        .default_value("1"),
    ]


def _query_var(name: str, query: str) -> db.QueryVariable:
    return (
        db.QueryVariable(name)
        .label(name.capitalize())
        .datasource(DS)
        .query(query)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(dm.VariableOption(selected=True, text="All", value="$__all"))
    )


def _slo_var(name: str, label: str, default_s: float) -> db.CustomVariable:
    values = [promql.le_label(b) for b in M.LATENCY_BUCKETS_S]
    current = promql.le_label(default_s)
    return (
        db.CustomVariable(name)
        .label(label)
        .description("A latency bucket boundary (attainment is a bucket ratio, exact only there).")
        .values(",".join(values))
        .current(dm.VariableOption(selected=True, text=current, value=current))
        .options([dm.VariableOption(selected=v == current, text=v, value=v) for v in values])
    )


def board(b: Board, cfg: FleetConfig) -> db.Dashboard:
    d = (
        db.Dashboard(b.title)
        .uid(b.uid)
        .description(b.description)
        .tags([TAG])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .variables(variables(cfg))
        .link(
            db.DashboardLink("llmfleet")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for a in b.annotations:
        d = d.annotation(
            db.AnnotationQuery()
            .name(a.name)
            .datasource(DS)
            .enable(True)
            .icon_color(a.color)
            .expr(a.expr)
        )
    next_id = 1
    for title, panels in b.rows:
        built = [p.build() for p in panels]
        if sum(x.grid_pos.w for x in built if x.grid_pos) % 24:
            raise ValueError(f"{b.uid}/{title}: panel widths must fill lines of 24")
        d = d.with_row(db.Row(title).id(next_id))
        for i, (p, x) in enumerate(zip(panels, built, strict=True), start=next_id + 1):
            x.id_val = i  # build() hands back the builder's own object
            d = d.with_panel(p)
        next_id += len(panels) + 1
    return d


def to_json(b: Board, cfg: FleetConfig) -> str:
    data = json.loads(json.dumps(board(b, cfg).build(), cls=JSONEncoder))
    for raw, a in zip(data.get("annotations", {}).get("list", []), b.annotations, strict=True):
        # Prometheus annotation fields the SDK's AnnotationQuery does not model.
        raw |= {"titleFormat": a.title, "tagKeys": ",".join(a.tags), "useValueForTime": False}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
