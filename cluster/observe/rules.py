"""The generated Prometheus rules and their ``promtool test rules`` file, for ``render.py``:
the rules from ``alerts.py``, the tests from ``alert_tests.py`` (which reads the rules)."""

from __future__ import annotations

from cluster.config import FleetConfig
from cluster.observe import alert_tests, alerts


def render_files(cfg: FleetConfig) -> dict[str, str]:
    return {alerts.RULES_FILE: alerts.rules_text(cfg), alerts.TESTS_FILE: alert_tests.render(cfg)}
