"""Pure parts of the router comparison: rows, imbalance, ratios, goals, tables, merging."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.report import summarize
from bench.types import RequestRecord
from cluster.twin import cli as twin_cli
from contracts.hashing import block_hashes
from contracts.http import ForwardedRequest
from experiments.routing.compare import (
    live_sim_setup,
    main,
    merge_scenarios,
    parse_args,
    pick_workloads,
    quick,
    sim_scenarios,
    with_earlier_rows,
    write_outputs,
)
from experiments.routing.metrics import (
    PolicyRow,
    after_warmup,
    goals,
    hit_rate,
    idle_arrival_bound,
    imbalance,
    imbalance_from_samples,
    markdown_table,
    median_run,
    p95_ratio,
    policy_row,
    scenario_result,
)
from experiments.routing.sim import SimScenario
from router.ray_compat import RoutedPayload, prompt_text
from router.registry import make_policy
from router.scorers import fleet_rate
from router.types import ReplicaView, RequestView, Routed


def rec(i: int, replica: str | None, e2e: float, ttft: float = 0.1, cached: int = 0, error=None):
    return RequestRecord(
        index=i, intended_send_s=float(i), send_s=float(i), prompt_tokens=100, output_tokens=4,
        ttft_s=None if error else ttft, e2e_s=None if error else e2e, error=error,
        replica=replica, cached_tokens=cached,
    )  # fmt: skip


def row(policy: str, p95: float | None, hit: float = 0.5, imb: float | None = 1.0) -> PolicyRow:
    return PolicyRow(policy, 1.0, p95, 2.0, 1.0, 2.0, 3.0, hit, 1.0, 10.0, 1.0, 1.0, imb, 10, 0)


def test_imbalance_is_max_over_mean_busy_time_counting_idle_replicas() -> None:
    records = [rec(0, "a", 3.0), rec(1, "a", 1.0), rec(2, "b", 2.0), rec(3, "c", 0.0)]
    # busy: a=4, b=2, c=0; 4 replicas -> mean 1.5 -> 4 / 1.5
    assert imbalance(records, 4) == pytest.approx(4 / 1.5)
    assert imbalance(records, 2) == pytest.approx(4 / 2.0)  # replicas seen win over a low count
    assert imbalance([rec(0, "a", 1.0), rec(1, "b", 1.0)], 2) == pytest.approx(1.0)


def test_imbalance_ignores_failures_and_unknown_replicas() -> None:
    records = [
        rec(0, "a", 1.0),
        rec(1, "b", 1.0),
        rec(2, "b", 9.0, error="http_500"),
        rec(3, None, 5.0),
    ]
    assert imbalance(records, 2) == pytest.approx(1.0)
    assert imbalance([], 8) is None


def test_idle_arrival_bound_fits_the_shortest_decodes_into_replica_time() -> None:
    # one request per second for 10 s, each decoding 3.9 s (E2E 4 s, TTFT 0.1 s): the run
    # spans 0..13 s, so one replica fits 3 such busy periods (11.7 s), two fit 6
    records = [rec(i, None, e2e=4.0) for i in range(10)]
    assert idle_arrival_bound(records, 1) == pytest.approx(0.3)
    assert idle_arrival_bound(records, 2) == pytest.approx(0.6)
    assert idle_arrival_bound(records, 8) == 1.0
    # shorter decodes fit first (5 x 0.5 s + one 3.9 s in a 9.6-s run); failures do not count
    short = [rec(i, None, e2e=0.6) for i in range(5, 10)]
    mixed = [*records[:5], *short, rec(10, None, 1.0, error="x")]
    assert idle_arrival_bound(mixed, 1) == pytest.approx(0.6)
    assert idle_arrival_bound([], 4) is None


def test_reach_note_for_our_live_row() -> None:
    ours = replace(row("prefix", 150.0), ttft_min_ms=76.4, idle_arrival_max=0.78)
    text = markdown_table("t", [ours, row("ray-prefix", 153.0)], [])
    assert "fastest TTFT 76 ms; at most 78 % of requests can arrive at an idle replica" in text
    assert "at least 22 % wait" in text
    assert "reach" not in markdown_table("t", [row("prefix", 150.0)], [])


def test_imbalance_from_samples() -> None:
    samples = [{"a": 2.0, "b": 0.0}, {"a": 2.0, "b": 2.0}, {}]
    assert imbalance_from_samples(samples, 2) == pytest.approx(4 / 3)
    assert imbalance_from_samples(samples, 4) == pytest.approx(4 / 1.5)
    assert imbalance_from_samples([{"a": 0.0}], 1) is None


def test_policy_row_from_summarized_records() -> None:
    records = [rec(i, f"r{i % 2}", 1.0 + i, ttft=0.1 * (i + 1), cached=50) for i in range(4)]
    records.append(rec(4, "r0", 0.0, error="timeout"))
    result = summarize(records, duration_s=10.0, config={}, slo={"ttft_ms": 250})
    r = policy_row("prefix", result, records, num_replicas=2)
    assert (r.completed, r.failed) == (4, 1)
    assert r.hit_rate == pytest.approx(0.5) == hit_rate(result)
    assert r.ttft_p50_ms == pytest.approx(250.0)
    assert r.goodput_req_s == pytest.approx(0.2)  # two of five meet 250 ms
    assert r.slo_attainment == pytest.approx(0.4)
    assert r.imbalance == pytest.approx(6.0 / 5.0)  # r0: 1+3, r1: 2+4 -> 4 vs 6
    assert r.with_imbalance(2.5).imbalance == 2.5
    assert r.with_imbalance(None) is r


def test_p95_ratio_and_goals_on_shared_prefix() -> None:
    rows = [
        row("prefix", 100.0, hit=0.60, imb=1.2),
        row("ray-prefix", 400.0),
        row("ray-p2c", 250.0),
    ]
    assert p95_ratio(rows, "prefix", "ray-prefix") == pytest.approx(0.25)
    by_name = {g.name: g for g in goals(rows, shared_prefix=True)}
    assert by_name["p95_ttft_prefix_over_ray-prefix"].met is True
    assert by_name["p95_ttft_prefix_over_ray-p2c"].value == pytest.approx(0.4)
    assert by_name["p95_ttft_prefix_over_ray-p2c"].met is False
    assert by_name["imbalance_prefix"].met is True
    assert not any(n.startswith("hit_gap") for n in by_name)  # no oracle row


def test_goals_sim_uses_p2c_and_oracle_for_each_prefix_policy() -> None:
    rows = [
        row("prefix", 100.0, hit=0.50),
        row("prefix-precise", 90.0, hit=0.56, imb=1.5),
        row("p2c", 1000.0),
        row("oracle", 80.0, hit=0.57),
    ]
    by_name = {g.name: g for g in goals(rows, shared_prefix=True)}
    assert by_name["p95_ttft_prefix_over_p2c"].value == pytest.approx(0.1)
    assert by_name["hit_gap_prefix_vs_oracle"].met is False
    assert by_name["hit_gap_prefix-precise_vs_oracle"].value == pytest.approx(0.01)
    assert by_name["imbalance_prefix-precise"].met is False
    assert not any(g.name.startswith("p95") for g in goals(rows, shared_prefix=False))


def test_missing_p95_gives_unmeasurable_goal() -> None:
    rows = [row("prefix", None), row("ray-p2c", 100.0)]
    assert p95_ratio(rows, "prefix", "ray-p2c") is None
    (g,) = [g for g in goals(rows, True) if g.name.startswith("p95")]
    assert g.met is None


def test_markdown_table_and_scenario_result() -> None:
    rows = [row("prefix", 1234.4, hit=0.5), row("ray-p2c", 5000.0, hit=0.1, imb=None)]
    text = markdown_table("demo", rows, goals(rows, True))
    assert "| prefix | 1 / 1,234 / 2 |" in text
    assert "50.0 %" in text
    assert "| ray-p2c |" in text
    assert "| – |" in text
    assert "p95_ttft_prefix_over_ray-p2c: 0.247 (target ≤ 0.3) — met" in text
    res = scenario_result("s", "d", {"k": 1}, rows, shared_prefix=True)
    assert [p["policy"] for p in res["policies"]] == ["prefix", "ray-p2c"]
    assert res["goals"][0]["met"] is True
    assert res["setup"] == {"k": 1}
    json.dumps(res)


def test_warmup_split_and_whole_run_column() -> None:
    records = [rec(i, "a", 1.0) for i in range(20)]  # scheduled at 0..19 s
    steady = after_warmup(records, 10.0)
    assert [r.index for r in steady] == list(range(10, 20))
    assert after_warmup(records, 0.0) == records
    ours = replace(row("prefix", 100.0), ttft_p95_whole_ms=400.0)
    ray = replace(row("ray-prefix", 300.0), ttft_p95_whole_ms=500.0)
    p2c = replace(row("ray-p2c", 1000.0), ttft_p95_whole_ms=2000.0)
    text = markdown_table("t", [ours, ray, p2c], goals([ours, ray, p2c], True))
    assert "TTFT p95 whole run (ms)" in text
    assert "| 400 |" in text
    assert "| 2,000 |" in text
    assert "p95_ttft_prefix_over_ray-prefix: 0.333 (target ≤ 0.5) — met" in text  # steady rows
    assert "whole run (cold start included): p95 prefix / ray-prefix = 0.800" in text
    assert "whole run (cold start included): p95 prefix / ray-p2c = 0.200" in text
    plain = markdown_table("t", [row("prefix", 1.0)], [])
    assert "whole run" not in plain
    assert plain.splitlines()[3].count("---") == 9


def test_merge_scenarios_replaces_by_name_sim_first() -> None:
    old = [{"scenario": "live-sim-a", "v": 1}, {"scenario": "sim-mooncake", "v": 1}]
    new = [{"scenario": "live-sim-a", "v": 2}, {"scenario": "live-vllm-b", "v": 2}]
    merged = merge_scenarios(old, new)
    assert [s["scenario"] for s in merged] == ["sim-mooncake", "live-sim-a", "live-vllm-b"]
    assert merged[1]["v"] == 2
    # a rerun of a mode drops that mode's scenarios it no longer produces
    old = [*old, {"scenario": "live-sim-gone", "v": 1}, {"scenario": "live-vllm-b", "v": 1}]
    merged = merge_scenarios(old, [{"scenario": "live-sim-a", "v": 3}], modes=("live-sim",))
    assert [s["scenario"] for s in merged] == ["sim-mooncake", "live-sim-a", "live-vllm-b"]


def test_write_outputs_keeps_other_modes(tmp_path: Path) -> None:
    rows = [row("prefix", 100.0), row("p2c", 400.0)]
    write_outputs(tmp_path, [scenario_result("sim-x", "d", {}, rows, True)])
    table = write_outputs(tmp_path, [scenario_result("live-sim-y", "d", {}, rows, True)])
    names = [
        s["scenario"] for s in json.loads((tmp_path / "summary.json").read_text())["scenarios"]
    ]
    assert names == ["sim-x", "live-sim-y"]
    assert "### sim-x" in table
    assert "### live-sim-y" in table
    assert (tmp_path / "router_compare.png").stat().st_size > 0


def test_scenario_builds_the_same_twin_as_the_cli() -> None:
    sc = SimScenario(num_requests=50, time_scale=0.5)
    parser = argparse.ArgumentParser()
    twin_cli.add_arguments(parser)
    argv = ["--replicas", "64", "--hardware", "h100", "--model", "llama-3-8b"]
    argv += ["--router", "prefix-precise", "--workload", "x", "--out", "x.json"]
    assert sc.twin_spec("prefix-precise") == twin_cli.spec_from_args(parser.parse_args(argv))
    assert sc.twin_spec("prefix").router == "prefix"


def test_quick_live_setup_caps_requests() -> None:
    setup = quick(live_sim_setup({}, 8231))
    assert all(w.num_requests == 24 for w in setup.workloads)
    assert setup.policies == ("prefix", "ray-p2c", "ray-prefix")
    assert setup.fleet_config("ray-prefix")["routing"] == {"policy": "ray-prefix", "params": {}}


def test_routed_payload_exposes_prompt_for_ray_routers() -> None:
    view = RequestView("r1", "m", (5, 17, 3), (), 4)
    fwd = ForwardedRequest("/v1/completions", b"{}", "r1", prompt_token_ids=(5, 17, 3))
    payload = RoutedPayload(request=fwd, view=view)
    assert payload.prompt == "5 17 3" == prompt_text((5, 17, 3))
    assert payload["view"] is view
    assert isinstance(payload, dict)
    fwd2 = ForwardedRequest("/v1/completions", b"{}", "r2", prompt_token_ids=(1, 2))
    assert RoutedPayload(request=fwd2).prompt == "1 2"
    assert not hasattr(payload, "messages")


# ---- router fixes made for this benchmark (fleet prefill rate, spread scorer) -----------
def _view(rid: str, rate: float) -> ReplicaView:
    return ReplicaView(rid, prefill_tokens_per_s=rate, kv_capacity_tokens=16 * 100)


def _request(rid: str, tokens: tuple[int, ...]) -> RequestView:
    return RequestView(rid, "m", tokens, block_hashes(tokens, 16), 4)


def test_fleet_rate_is_the_median_of_measured_rates() -> None:
    assert (
        fleet_rate([_view("a", 0.0), _view("b", 900.0), _view("c", 3000.0), _view("d", 1000.0)])
        == 1000.0
    )
    assert fleet_rate([_view("a", 0.0)]) == 0.0


def test_cold_request_is_not_steered_by_rate_noise() -> None:
    policy = make_policy("prefix", block_size=16)
    views = [_view("fast", 2100.0), _view("mid", 2000.0), _view("slow", 1900.0)]
    decision = policy.choose(_request("x", tuple(range(640))), views)
    assert len(set(decision.scores.values())) == 1  # a tie, broken by the injected rng


def test_spread_weight_sends_new_prefixes_to_the_emptiest_replica() -> None:
    policy = make_policy("prefix", block_size=16, config={"weights": {"spread": 1.0}})
    views = [_view("a", 1000.0), _view("b", 1000.0)]
    policy.observe(Routed(_request("old", tuple(range(800))), "a", 0.0))  # a holds 50 blocks
    decision = policy.choose(_request("new", tuple(range(5000, 5640))), views)
    assert decision.replica_id == "b"
    assert decision.reason == "fallback"
    off = make_policy("prefix", block_size=16, config={"weights": {"spread": 0.0, "share": 0.0}})
    off.observe(Routed(_request("old", tuple(range(800))), "a", 0.0))
    scores = off.choose(_request("new", tuple(range(5000, 5640))), views).scores
    assert scores["a"] == scores["b"]  # weight 0: no effect


def test_rerun_of_one_policy_keeps_the_other_rows_from_the_saved_run() -> None:
    saved = [row("prefix", 900.0), row("ray-p2c", 2000.0), row("ray-prefix", 1200.0)]
    old = scenario_result("live-sim-x", "d", {}, saved, shared_prefix=True)
    old = json.loads(json.dumps(old))  # as read back from summary.json
    new = [row("prefix", 500.0)]
    rows, earlier = with_earlier_rows(new, old, ("prefix", "ray-p2c", "ray-prefix"))
    assert [(r.policy, r.ttft_p95_ms) for r in rows] == [
        ("prefix", 500.0), ("ray-p2c", 2000.0), ("ray-prefix", 1200.0)
    ]  # fmt: skip
    assert earlier == ["ray-p2c", "ray-prefix"]
    assert with_earlier_rows(new, None, ()) == (new, [])  # a full run: just its rows
    assert with_earlier_rows(new, None, ("prefix", "ray-p2c"))[1] == []  # nothing saved


def test_median_run_keeps_every_seed_and_pairs_ratios_by_seed() -> None:
    ours = median_run([row("prefix", 500.0), row("prefix", 400.0), row("prefix", 450.0)], (0, 1, 2))
    assert ours.ttft_p95_ms == 450.0
    assert ours.runs == ((0, 500.0), (1, 400.0), (2, 450.0))
    ray = median_run([row("ray-prefix", 800.0), row("ray-prefix", 1000.0)], (0, 1))
    assert ray.ttft_p95_ms == 800.0  # the lower median for an even count
    single = row("prefix", 300.0)
    assert median_run([single], (7,)) is single
    with pytest.raises(ValueError, match=r"one row per seed"):
        median_run([single], (0, 1))
    result = scenario_result("live-sim-x", "d", {}, [ours, ray], shared_prefix=True)
    md = result["markdown"]
    assert "p95 per run 500 (seed 0) / 400 (seed 1) / 450 (seed 2)" in md
    # seeds 0 and 1 only (ray ran two): 500/800, 400/1000 -> median of two = mean
    assert "per seed: 0.625, 0.400; median 0.512" in md
    back = json.loads(json.dumps(result))  # runs survive the summary round trip
    rows, _ = with_earlier_rows([], back, ("prefix", "ray-prefix"))
    assert rows[0].ttft_p95_ms == 450.0
    assert dict(rows[0].runs or ()) == {
        0: 500.0,
        1: 400.0,
        2: 450.0,
    }


def test_pick_workloads_in_the_given_order_and_rejects_unknown_names() -> None:
    setup = live_sim_setup({}, 8231)
    assert [w.name for w in pick_workloads(setup, "hot-prefix-18,hot-prefix-12")] == [
        "hot-prefix-18", "hot-prefix-12"
    ]  # fmt: skip
    with pytest.raises(SystemExit, match="unknown"):
        pick_workloads(setup, "hot-prefix-99")


def test_trace_replays_report_p95_ratios_without_goals() -> None:
    rows = [row("prefix", 300.0, imb=1.1), row("ray-p2c", 400.0), row("ray-prefix", 600.0)]
    res = scenario_result("live-sim-mooncake", "d", {}, rows, shared_prefix=False)
    assert [g["name"] for g in res["goals"]] == ["imbalance_prefix"]
    assert "p95 prefix / ray-prefix = 0.500 (reported, not a goal here)" in res["markdown"]
    assert "p95 prefix / ray-p2c = 0.750 (reported" in res["markdown"]
    setup = live_sim_setup({}, 8231)
    goal_workloads = {w.name for w in setup.workloads if w.shared_prefix}
    assert goal_workloads == {"shared-prefix", "hot-prefix-12", "hot-prefix-18"}
    sims = {s.name: s.shared_prefix for s in sim_scenarios(parse_args([]))}
    assert sims == {"sim-mooncake": False, "sim-shared-prefix": True, "sim-hot-prefix": True}


def test_rescore_rebuilds_goals_from_saved_rows(tmp_path: Path) -> None:
    rows = [row("prefix", 300.0, imb=1.1), row("ray-prefix", 600.0)]
    stale = scenario_result("live-sim-mooncake", "d", {"k": 1}, rows, shared_prefix=True)
    kept = scenario_result("live-sim-gone", "d", {}, rows, shared_prefix=True)
    write_outputs(tmp_path, [stale, kept])
    assert main(["--rescore", "--out", str(tmp_path)]) == 0
    saved = {
        s["scenario"]: s for s in json.loads((tmp_path / "summary.json").read_text())["scenarios"]
    }
    assert [g["name"] for g in saved["live-sim-mooncake"]["goals"]] == ["imbalance_prefix"]
    assert saved["live-sim-mooncake"]["setup"] == {"k": 1}
    assert any(g["name"].startswith("p95_") for g in saved["live-sim-gone"]["goals"])
