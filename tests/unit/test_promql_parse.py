"""Every query of every committed ``dashboards/*.json`` (panels, annotations, variables), with
the dashboard variables at ``DEFAULT_VALUES``, parsed by Prometheus's own parser: written as
recording rules into one rules file and checked with ``promtool check rules``. A failure
names the dashboard and panel of each query promtool rejects. (``test_dashboard_queries.py``
also evaluates the generated queries on synthetic series.)
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from cluster.observe.dashboards import DEFAULT_VALUES, panel_queries, substitute
from cluster.observe.prometheus import PROMTOOL, available
from cluster.observe.render import DEFAULT_DIR

needs_promtool = pytest.mark.skipif(available() is not None, reason=str(available()))
BOARDS = sorted(DEFAULT_DIR.glob("*.json"))


def queries() -> list[tuple[str, str]]:
    """(where: "board.json / panel title", expr with variables substituted)."""
    out = []
    for path in BOARDS:
        for title, expr in panel_queries(json.loads(path.read_text())):
            out.append((f"{path.name} / {title}", substitute(expr, DEFAULT_VALUES)))
    return out


def rejected(tmp_path: Path, items: list[tuple[str, str]]) -> list[str]:
    """``promtool check rules`` on one file with a recording rule per query; the queries it
    rejects, as "where: promtool's message" (empty when all parse)."""
    names = {
        f"dash:q{i}_{re.sub(r'[^A-Za-z0-9_]', '_', w)[:60]}": w for i, (w, _) in enumerate(items)
    }
    rules = [{"record": n, "expr": e} for n, (_, e) in zip(names, items, strict=True)]
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    r = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    if r.returncode == 0:
        return []
    output = r.stdout + r.stderr
    named = [
        f"{where}: {line.strip()}"
        for line in output.splitlines()
        for name, where in names.items()
        if f'"{name}"' in line
    ]
    return named or [output]  # promtool failed without naming a rule: show all of it


def test_every_dashboard_has_queries() -> None:
    assert BOARDS, f"no dashboards in {DEFAULT_DIR}"
    for path in BOARDS:
        assert panel_queries(json.loads(path.read_text())), f"{path.name} has no queries"


@needs_promtool
def test_every_panel_query_parses(tmp_path: Path) -> None:
    bad = rejected(tmp_path, queries())
    assert not bad, "promtool rejects these dashboard queries:\n" + "\n".join(bad)


@needs_promtool
def test_a_broken_query_is_reported_with_its_panel(tmp_path: Path) -> None:
    items = [*queries()[:3], ("latency.json / Broken panel", "sum(rate(x[5m])")]
    bad = rejected(tmp_path, items)
    assert len(bad) == 1, bad
    assert bad[0].startswith("latency.json / Broken panel: ")
    assert "parse" in bad[0]
