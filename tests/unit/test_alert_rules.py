"""The alert rules and scrape config against Prometheus's own tools (``promtool``): the rules
and the config load, the generated rule tests pass (for the default config and a stricter
one), the committed files are what the code generates, and a mutated rule fails its tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from cluster.config import FleetConfig, parse_config
from cluster.observe import alerts, rules, scrape, slo_rules
from cluster.observe.prometheus import PROMTOOL, available, scrape_config
from cluster.observe.render import DEFAULT_DIR

needs_promtool = pytest.mark.skipif(available() is not None, reason=str(available()))
STRICT = {
    "slo": {
        "ttft_s": 2.0,
        "tpot_s": 0.05,
        "latency_objective": 0.99,
        "availability_objective": 0.9999,
        "goodput_objective": 0.99,
    },
    "autoscaling": {"max_replicas": 8},
}


def write(out: Path, cfg: FleetConfig) -> Path:
    for module in (rules, scrape):
        for rel, text in module.render_files(cfg).items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_text(text)
    return out


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def run_rule_tests(out: Path, only: str = "") -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` on the generated test file, or on its cases named ``only*``."""
    path = out / alerts.TESTS_FILE
    if only:
        doc = yaml.safe_load(path.read_text())
        doc["tests"] = [t for t in doc["tests"] if t["name"].startswith(only)]
        assert doc["tests"], only
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return promtool("test", "rules", alerts.TESTS_FILE, cwd=out)


# ---- promtool ---------------------------------------------------------------------------
@needs_promtool
def test_rules_load(tmp_path: Path) -> None:
    r = promtool("check", "rules", alerts.RULES_FILE, cwd=write(tmp_path, FleetConfig()))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


@needs_promtool
def test_scrape_config_loads_with_its_rules(tmp_path: Path) -> None:
    r = promtool("check", "config", "prometheus.yml", cwd=write(tmp_path, FleetConfig()))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 rule files found" in r.stdout


@needs_promtool
@pytest.mark.parametrize("cfg", [{}, STRICT], ids=["default", "strict"])
def test_rule_unit_tests_pass(tmp_path: Path, cfg: dict) -> None:
    r = run_rule_tests(write(tmp_path, parse_config(cfg)))
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]


def _page_1h(cfg: FleetConfig) -> str:
    ttft = slo_rules.slis(cfg)[0]
    op, thr = slo_rules.threshold(ttft, slo_rules.BURN_WINDOWS[0])
    return f"{ttft.ratio('1h')} {op} {thr}"


PAGE_1H = _page_1h(FleetConfig())  # "llmfleet:ttft_bad:ratio_rate1h > 0.72"
MUTATIONS = {  # id: (old text, new text, the cases that must catch it)
    "page-threshold-raised": (PAGE_1H, PAGE_1H.rsplit(" ", 1)[0] + " 0.9", "ttft:"),
    "page-long-window-dropped": (f"{PAGE_1H}\n      and on (model)\n", "", "ttft: an 8-minute"),
    "zero-traffic-guard-removed": ("_count[5m])) > 0)", "_count[5m])))", "zero traffic"),
    "kv-threshold": (f"> {alerts.KV_FULL}", "> 0.995", "kv:"),
    "thrash-counts-zeros": ("[2m])) != 0", "[2m])) != 5", "autoscaler:"),
    "prefix-baseline": (f">= {alerts.PREFIX_BASELINE_MIN}", ">= 0.1", "prefix:"),
    "quota-split-for": (f"for: {alerts.QUOTA_SPLIT_FOR}\n", "for: 10m\n", "quota:"),
}


@needs_promtool
@pytest.mark.parametrize("name", list(MUTATIONS))
def test_a_mutated_rule_fails_its_tests(tmp_path: Path, name: str) -> None:
    out = write(tmp_path, FleetConfig())
    old, new, only = MUTATIONS[name]
    rules = out / alerts.RULES_FILE
    text = rules.read_text()
    assert old in text, "the mutation no longer applies: update it"
    assert run_rule_tests(out, only).returncode == 0  # the same cases pass unmutated
    rules.write_text(text.replace(old, new))
    r = run_rule_tests(out, only)
    assert r.returncode != 0, r.stdout
    assert "FAILED" in r.stderr


@needs_promtool
def test_rules_from_another_objective_fail_the_default_tests(tmp_path: Path) -> None:
    out = write(tmp_path, FleetConfig())
    other = rules.render_files(parse_config({"slo": {"latency_objective": 0.99}}))
    (out / alerts.RULES_FILE).write_text(other[alerts.RULES_FILE])
    r = run_rule_tests(out, "ttft:")
    assert r.returncode != 0, r.stdout
    assert "alertname: LLMFleetTTFTBudgetBurn" in r.stderr  # promtool names the failing alert


# ---- without promtool -------------------------------------------------------------------
def test_committed_files_are_fresh() -> None:
    cfg = FleetConfig()
    for module in (rules, scrape):
        for rel, text in module.render_files(cfg).items():
            path = DEFAULT_DIR / rel
            stale = f"dashboards/{rel} is stale: run .venv/bin/python -m cluster.observe.render"
            assert path.exists(), stale
            assert path.read_text() == text, stale


def test_rendering_is_stable() -> None:
    assert rules.render_files(FleetConfig()) == rules.render_files(FleetConfig())


def test_thresholds_follow_the_config() -> None:
    text = rules.render_files(parse_config(STRICT))[alerts.RULES_FILE]
    assert "llmfleet:ttft_bad:ratio_rate1h > 0.144\n" in text  # 14.4 x (1 - 0.99)
    assert "llmfleet:availability_bad:ratio_rate3d > 0.0001\n" in text
    assert 'ttft_seconds_bucket{le="2.0"}' in text
    assert 'tpot_seconds_bucket{le="0.05"}' in text
    assert "llmfleet:goodput:ratio_rate5m < 0.99\n" in text
    assert "ray_llmfleet_autoscaler_current_replicas) >= 8\n" in text


def test_an_unreachable_page_threshold_is_capped_at_1() -> None:
    text = rules.render_files(parse_config({"slo": {"latency_objective": 0.9}}))[alerts.RULES_FILE]
    assert "llmfleet:ttft_bad:ratio_rate1h >= 1\n" in text  # 14.4 x 0.1 > 1
    assert "llmfleet:ttft_bad:ratio_rate6h > 0.6\n" in text


def test_every_alert_is_routable_and_documented() -> None:
    burns = " ".join(f"LLMFleet{s}BudgetBurn" for s in ("TTFT", "TPOT", "Availability"))
    doc = str(alerts.__doc__).replace("LLMFleet{TTFT,TPOT,Availability}BudgetBurn", burns)
    for a in alerts.all_alerts(FleetConfig()):
        assert a.severity in ("page", "ticket"), a.name
        assert a.summary, a.name
        assert a.description, a.name
        assert a.name in doc, f"{a.name} missing from the alerts.py header table"


def test_scale_to_zero_drops_the_replica_absent_alert() -> None:
    def names(cfg: dict) -> set[str]:
        return {a.name for a in alerts.all_alerts(parse_config(cfg))}

    scale_to_zero = {"autoscaling": {"enabled": True, "min_replicas": 0}}
    assert "LLMFleetReplicaMetricsAbsent" in names({})
    assert "LLMFleetReplicaMetricsAbsent" not in names(scale_to_zero)


def test_prometheus_config() -> None:
    cfg = scrape.prometheus_config(["10.0.0.1:8080", "10.0.0.2:8080"], rule_files=["r.yaml"])
    assert cfg["global"] == {"scrape_interval": "15s", "evaluation_interval": "15s"}
    assert cfg["scrape_configs"] == [
        {
            "job_name": "llmfleet",
            "static_configs": [{"targets": ["10.0.0.1:8080", "10.0.0.2:8080"]}],
        }
    ]
    assert cfg["rule_files"] == ["r.yaml"]
    assert "rule_files" not in scrape.prometheus_config(["h:1"], rule_files=[])
    # the local harness builds its config the same way
    assert scrape_config(["h:1"], interval_s=1.0) == scrape.prometheus_config(
        ["h:1"], rule_files=[], scrape_interval_s=1.0
    )


def test_rendered_scrape_config_targets_the_metrics_port() -> None:
    text = scrape.render_files(parse_config({"server": {"metrics_export_port": 9999}}))
    body = yaml.safe_load(text["prometheus.yml"])
    assert body["scrape_configs"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9999"]
    assert body["rule_files"] == [alerts.RULES_FILE]
    assert "unauthenticated" in text["prometheus.yml"]
