"""The dashboards' PromQL against Prometheus's own parser and evaluator (``promtool``), and
the helpers other tests use to run those queries (``panel_queries``, ``substitute``).

``promtool test rules`` evaluates every query (variables at ``DEFAULT_VALUES``) on synthetic
series for every catalogue metric, written the way Ray exports them (``ray_`` prefix,
``_total`` on counters, ``le`` as Python's float repr): with counters flat (no traffic) no
query may yield NaN or Inf; with counters rising every query must yield data.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cluster.config import FleetConfig
from cluster.observe import promql
from cluster.observe.dashboards import DEFAULT_VALUES, panel_queries, render_files, substitute
from contracts import metrics as M

GENERATED = {n: json.loads(t) for n, t in render_files(FleetConfig()).items()}
LABEL_VALUES = {
    "model": "m",
    "outcome": "good",
    "finish_reason": "stop",
    "policy": "p",
    "reason": "affinity",
    "kind": "stored",
    "deployment_name": "LLMReplica",
    "signal": "queue_delay_s",
    "direction": "up",
}
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="no promtool")


def test_substitute() -> None:
    expr = 'rate(x{a=~"$model",b=~"${replica:regex}",c=~"${deployment}",le="$ttft_slo"}[$__rate_interval])'
    assert substitute(expr, DEFAULT_VALUES) == 'rate(x{a=~".*",b=~".*",c=~".*",le="1.0"}[1m])'
    with pytest.raises(KeyError):
        substitute("$__range_s", DEFAULT_VALUES)


def test_panel_queries_cover_targets_annotations_and_variables() -> None:
    where = [w for w, _ in panel_queries(GENERATED["autoscaler.json"])]
    assert "Desired vs actual replicas" in where
    assert "annotation: Scaling decisions" in where
    assert {"variable: model", "variable: deployment", "variable: replica"} <= set(where)
    queries = dict(panel_queries(GENERATED["overview.json"]))
    assert queries["variable: model"] == "count by (model) (ray_llmfleet_replica_healthy)"


def all_queries() -> list[str]:
    return [substitute(e, DEFAULT_VALUES) for d in GENERATED.values() for _, e in panel_queries(d)]


def _line(name: str, labels: dict[str, str], step: float) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{body}}}", "values": f"5+{step}x40"}


def synthetic_series(traffic: bool) -> list[dict[str, str]]:
    """Every catalogue metric with plausible labels; counters flat or rising."""
    out = []
    for m in M.CATALOGUE:
        labels = {k: LABEL_VALUES[k] for k in m.labels}
        if m.source == "engine":  # Serve's own labels on replica metrics
            labels |= {"deployment": "LLMReplica", "replica": "r1"}
        rise = 1 if traffic else 0
        if m.kind == "histogram":
            bounds = [*map(promql.le_label, m.buckets), "+Inf"]
            for i, le in enumerate(bounds):
                out.append(_line(M.prom(m, "bucket"), labels | {"le": le}, (i + 1) * rise))
            out.append(_line(M.prom(m, "count"), labels, len(bounds) * rise))
            out.append(_line(M.prom(m, "sum"), labels, 3 * rise))
        else:
            out.append(_line(M.prom(m), labels, rise if m.kind == "counter" else 0))
    return out


def promtool_test(tmp_path: Path, queries: list[str], traffic: bool) -> str:
    """Run ``promtool test rules``; its output, or "" when every check passed."""
    rules = []
    for i, q in enumerate(queries):
        rules.append({"alert": f"NaN_{i}", "expr": f"({q}) != ({q}) or abs({q}) == Inf"})
        rules.append({"alert": f"Empty_{i}", "expr": f"absent({q})"})
    groups = {"groups": [{"name": "dash", "rules": rules}]}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(groups))
    names = [f"NaN_{i}" for i in range(len(queries))]
    names += [f"Empty_{i}" for i in range(len(queries))] if traffic else []
    expect = [{"eval_time": "9m", "alertname": a, "exp_alerts": []} for a in names]
    case = {"interval": "15s", "input_series": synthetic_series(traffic), "alert_rule_test": expect}
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": [case]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    cmd = ["promtool", "test", "rules", "test.yml"]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return "" if r.returncode == 0 else r.stdout + r.stderr


@needs_promtool
def test_queries_parse(tmp_path: Path) -> None:
    rules = [{"record": f"dash:q{i}", "expr": q} for i, q in enumerate(all_queries())]
    (tmp_path / "r.yml").write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": rules}]}))
    cmd = ["promtool", "check", "rules", str(tmp_path / "r.yml")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@needs_promtool
@pytest.mark.parametrize("traffic", [False, True], ids=["zero-traffic", "traffic"])
def test_no_nan_without_traffic_and_data_with_it(tmp_path: Path, traffic: bool) -> None:
    failed = promtool_test(tmp_path, all_queries(), traffic)
    assert not failed, failed[-3000:]


UNGUARDED = f"histogram_quantile(0.5, sum by (le) (rate({M.prom(M.TTFT, 'bucket')}[1m])))"


@needs_promtool
@pytest.mark.parametrize(
    ("query", "traffic", "alert"),
    [
        (UNGUARDED, False, "NaN_0"),
        ("sum(rate(ray_llmfleet_no_such_metric_total[1m]))", True, "Empty_0"),
        (f'sum(rate({M.prom(M.TTFT, "bucket")}{{le="1"}}[1m]))', True, "Empty_0"),
    ],
    ids=["unguarded-quantile", "unknown-metric", "le-not-in-rays-format"],
)
def test_promtool_checks_can_fail(tmp_path: Path, query: str, traffic: bool, alert: str) -> None:
    assert alert in promtool_test(tmp_path, [query], traffic)
