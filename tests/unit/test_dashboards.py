"""Lint for the generated Grafana dashboards (``dashboards/*.json``).

Each check is a function ``dashboard -> problems``; the committed dashboards must have none,
and a mutated copy must show the problem each check is for (so a check cannot pass vacuously).

Documented exception to "every rate uses $__rate_interval": the SLO budget and burn-rate
panels (``FIXED_WINDOW_PANELS``) use fixed windows, because an objective is defined over a
period (``promql.BUDGET_WINDOW``, ``promql.BURN_WINDOWS``), not over the zoom level.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cluster.config import FleetConfig
from cluster.observe import promql
from cluster.observe.dashboards import panel_queries, render_files
from contracts import metrics as M

DIR = Path(__file__).resolve().parents[2] / "dashboards"
CFG = FleetConfig()
GENERATED = render_files(CFG)
DS = {"type": "prometheus", "uid": "${datasource}"}
REQUIRED_VARS = {
    "datasource",
    "model",
    "deployment",
    "replica",
    "ttft_slo",
    "tpot_slo",
    "replica_hour_usd",
}
BUILTIN_VARS = {"__rate_interval", "__interval", "__range"}
FIXED_WINDOW_PANELS = {
    f"Error budget left ({promql.BUDGET_WINDOW})",
    *(f"Burn rate ({w})" for w in promql.BURN_WINDOWS),
}
FIXED_WINDOWS = {promql.BUDGET_WINDOW, *promql.BURN_WINDOWS}
ALLOWED_METRICS = {"up"}  # not from the catalogue, allowed anyway
EXPORTED = {
    M.prom(m, s)
    for m in M.CATALOGUE
    for s in (("", "bucket", "sum", "count") if m.kind == "histogram" else ("",))
}
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "inf", "nan",
}  # fmt: skip
Dashboard = dict[str, Any]


def committed(name: str) -> Dashboard:
    return json.loads((DIR / name).read_text())


def query_panels(d: Dashboard) -> list[dict[str, Any]]:
    return [p for p in d["panels"] if p["type"] != "row"]


def variables(d: Dashboard) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in d["templating"]["list"]}


# ---- checks -------------------------------------------------------------------------------
def check_ids(d: Dashboard) -> list[str]:
    ids = [p["id"] for p in d["panels"]]
    return [f"duplicate panel id {i}" for i in sorted(set(ids)) if ids.count(i) > 1]


def check_grid(d: Dashboard) -> list[str]:
    out, boxes = [], []
    for p in d["panels"]:
        g = p["gridPos"]
        if g["x"] < 0 or g["x"] + g["w"] > 24:
            out.append(f"{p['title']}: outside the 24-column grid")
        for title, o in boxes:
            if g["x"] < o["x"] + o["w"] and o["x"] < g["x"] + g["w"] and g["y"] < o["y"] + o["h"] and o["y"] < g["y"] + g["h"]:  # fmt: skip
                out.append(f"{p['title']}: gridPos overlaps {title}")
        boxes.append((p["title"], g))
    return out


def check_datasources(d: Dashboard) -> list[str]:
    users = [(p["title"], p) for p in query_panels(d)]
    users += [
        (f"{p['title']} target {t.get('refId')}", t) for p in query_panels(d) for t in p["targets"]
    ]
    users += [(f"annotation {a['name']}", a) for a in d.get("annotations", {}).get("list", [])]
    users += [(f"variable {v['name']}", v) for v in d["templating"]["list"] if v["type"] == "query"]
    return [
        f"{who}: datasource is not $datasource" for who, x in users if x.get("datasource") != DS
    ]


def check_ranges(d: Dashboard) -> list[str]:
    out = []
    for title, expr in panel_queries(d):
        for window in re.findall(r"\[([^\]]+)\]", expr):
            fixed_ok = title in FIXED_WINDOW_PANELS and window in FIXED_WINDOWS
            if window != "$__rate_interval" and not fixed_ok:
                out.append(f"{title}: range [{window}] is not $__rate_interval")
    return out


def check_units_and_descriptions(d: Dashboard) -> list[str]:
    out = []
    for p in query_panels(d):
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            out.append(f"{p['title']}: no unit")
        if not p.get("description", "").strip():
            out.append(f"{p['title']}: no description")
    return out


def check_variables(d: Dashboard) -> list[str]:
    defined = set(variables(d))
    out = [f"missing variable {v}" for v in sorted(REQUIRED_VARS - defined)]
    texts = [e for _, e in panel_queries(d)] + [p["title"] for p in d["panels"]]
    texts += [t.get("legendFormat", "") for p in query_panels(d) for t in p["targets"]]
    for text in texts:
        for m in re.finditer(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", text):
            name = m.group(1) or m.group(2)
            if name not in defined | BUILTIN_VARS:
                out.append(f"undefined variable ${name} in {text[:60]}")
    return out


def check_matchers(d: Dashboard) -> list[str]:
    """A matcher on a multi-value / "All" variable must be a regex match."""
    multi = {n for n, v in variables(d).items() if v.get("includeAll") or v.get("multi")}
    out = []
    for title, expr in panel_queries(d):
        for label, op, var in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"\$\{?(\w+)', expr):
            if var in multi and op != "=~":
                out.append(f'{title}: {label}{op}"${var}" must use =~')
    return out


def metric_names(expr: str) -> set[str]:
    e = re.sub(r'"[^"]*"', "", expr)
    e = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\$\{?\w+(:\w+)?\}?", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = re.findall(r"(?<![\w.])[A-Za-z_:][\w:]*(?![\w:]|\s*\()", e)
    return {n for n in names if n.lower() not in PROMQL_WORDS}


def check_metrics(d: Dashboard) -> list[str]:
    out = []
    for title, expr in panel_queries(d):
        for name in sorted(metric_names(expr) - EXPORTED - ALLOWED_METRICS):
            out.append(f"{title}: unknown metric {name}")
    return out


def check_slo_options(d: Dashboard) -> list[str]:
    out = []
    for name, default in (("ttft_slo", CFG.slo.ttft_s), ("tpot_slo", CFG.slo.tpot_s)):
        v = variables(d).get(name, {})
        values = [o["value"] for o in v.get("options", [])] + v.get("query", "").split(",")
        for value in values:
            if float(value) not in M.LATENCY_BUCKETS_S or value != promql.le_label(float(value)):
                out.append(f"{name}: option {value!r} is not a bucket boundary as Ray writes le")
        if v.get("current", {}).get("value") != promql.le_label(default):
            out.append(f"{name}: default is not the config's {default}")
    return out


CHECKS: list[Callable[[Dashboard], list[str]]] = [
    check_ids,
    check_grid,
    check_datasources,
    check_ranges,
    check_units_and_descriptions,
    check_variables,
    check_matchers,
    check_metrics,
    check_slo_options,
]


def lint(d: Dashboard) -> list[str]:
    return [problem for check in CHECKS for problem in check(d)]


# ---- the committed files ------------------------------------------------------------------
def test_committed_dashboards_are_fresh() -> None:
    assert sorted(p.name for p in DIR.glob("*.json")) == sorted(GENERATED)
    for name, text in GENERATED.items():
        assert (DIR / name).read_text() == text, (
            f"{name} is stale: python -m cluster.observe.render"
        )
        assert text.endswith("}\n")
        assert json.loads(text)


def test_render_is_stable() -> None:
    assert render_files(CFG) == GENERATED


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_dashboard_lints_clean(name: str) -> None:
    d = committed(name)
    assert query_panels(d), "no panels"
    assert lint(d) == []


def test_dashboards_cover_the_issue() -> None:
    titles = {n: {p["title"] for p in committed(n)["panels"]} for n in GENERATED}
    assert {"Goodput", "TTFT attainment", "TPOT attainment", "Replicas up"} <= titles[
        "overview.json"
    ]
    assert {
        "TTFT heatmap",
        "TPOT heatmap",
        "ITL heatmap",
        "E2E heatmap",
        "TTFT split, mean",
    } <= titles["latency.json"]
    assert "$ per 1M output tokens" in titles["throughput.json"]
    assert {"Share of traffic by replica", "Imbalance (max / avg)"} <= titles["router.json"]
    assert committed("autoscaler.json")["annotations"]["list"][0]["expr"].startswith("sum by")
    assert "Per model" in titles["models.json"]


# ---- each check catches its problem -------------------------------------------------------
def _first_target(d: Dashboard) -> dict[str, Any]:
    return query_panels(d)[0]["targets"][0]


def _edit_expr(old: str, new: str) -> Callable[[Dashboard], None]:
    def edit(d: Dashboard) -> None:
        t = _first_target(d)
        assert old in t["expr"]
        t["expr"] = t["expr"].replace(old, new, 1)

    return edit


def _set_slo_option(d: Dashboard) -> None:
    variables(d)["ttft_slo"]["options"][0]["value"] = "0.007"


MUTATIONS: dict[str, tuple[Callable[[Dashboard], None], str]] = {
    "duplicate id": (lambda d: d["panels"][2].update(id=d["panels"][1]["id"]), "duplicate panel id"),
    "overlap": (lambda d: d["panels"][2].update(gridPos=dict(d["panels"][1]["gridPos"])), "overlaps"),
    "off grid": (lambda d: d["panels"][1]["gridPos"].update(x=20), "outside the 24-column grid"),
    "panel datasource": (lambda d: query_panels(d)[0].pop("datasource"), "datasource"),
    "target datasource": (lambda d: _first_target(d).update(datasource={"uid": "prom"}), "datasource"),
    "fixed range": (_edit_expr("$__rate_interval", "5m"), "range [5m]"),
    "unit": (lambda d: query_panels(d)[0]["fieldConfig"]["defaults"].pop("unit"), "no unit"),
    "description": (lambda d: query_panels(d)[0].update(description=" "), "no description"),
    "undefined variable": (_edit_expr("$model", "$modle"), "undefined variable $modle"),
    "missing variable": (lambda d: d["templating"]["list"].pop(3), "missing variable replica"),
    "equality on All": (_edit_expr('model=~"$model"', 'model="$model"'), "must use =~"),
    "unknown metric": (_edit_expr("ray_llmfleet_requests_total", "ray_llmfleet_request_total"), "unknown metric ray_llmfleet_request_total"),
    "slo option": (_set_slo_option, "not a bucket boundary"),
}  # fmt: skip


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_check_catches_its_problem(mutation: str) -> None:
    edit, expected = MUTATIONS[mutation]
    d = copy.deepcopy(committed("overview.json"))
    edit(d)
    problems = lint(d)
    assert any(expected in p for p in problems), problems


def test_fixed_windows_only_in_slo_panels() -> None:
    d = copy.deepcopy(committed("overview.json"))
    goodput = next(p for p in query_panels(d) if p["title"] == "Goodput")
    goodput["targets"][0]["expr"] = goodput["targets"][0]["expr"].replace("$__rate_interval", "1h")
    assert any("Goodput: range [1h]" in p for p in lint(d))


def test_slo_le_uses_rays_format() -> None:
    # Checked live against Ray 2.60: a Histogram with boundaries [0.1, 0.5, 1.0, 2.0] exports
    # le="0.1", "0.5", "1.0", "2.0", "+Inf" (Python's float repr).
    assert [promql.le_label(b) for b in (0.1, 1, 2.0, 120)] == ["0.1", "1.0", "2.0", "120.0"]
    exprs = [e for _, e in panel_queries(committed("overview.json"))]
    assert any('le="$ttft_slo"' in e for e in exprs)
    assert any('le="$tpot_slo"' in e for e in exprs)
