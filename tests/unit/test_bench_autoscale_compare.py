"""Pure parts of the autoscaling benchmark: scorecard maths, step workload, look-back
averaging, best-tuned baseline choice, goal check, and one tiny virtual-time run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig
from bench.types import RequestRecord
from experiments.autoscaling.compare import Variant
from experiments.autoscaling.metrics import (
    Sample,
    goal_check,
    markdown_table,
    replica_seconds,
    reversals,
    scale_events,
    scorecard,
)
from experiments.autoscaling.plot import ttft_buckets
from experiments.autoscaling.report import pick_best
from experiments.autoscaling.workloads import (
    LookBackRecorder,
    StepLoad,
    average_metrics,
    step_arrivals,
    step_specs,
)


def _samples(counts: list[int], dt: float = 1.0) -> list[Sample]:
    return [Sample(i * dt, n) for i, n in enumerate(counts)]


def test_scale_events_and_reversals() -> None:
    s = _samples([1, 1, 3, 3, 4, 2, 2, 3, 1])
    ev = scale_events(s)
    assert [(e.t, e.before, e.after) for e in ev] == [
        (2.0, 1, 3), (4.0, 3, 4), (5.0, 4, 2), (7.0, 2, 3), (8.0, 3, 1),
    ]  # fmt: skip
    assert reversals(ev) == 3  # up,up | down | up | down
    assert reversals(scale_events(_samples([1, 2, 4, 4, 2, 1]))) == 1  # a clean step


def test_replica_seconds_is_the_step_integral() -> None:
    s = [Sample(0.0, 1), Sample(10.0, 3), Sample(15.0, 2)]
    assert replica_seconds(s, end_s=20.0) == pytest.approx(10 * 1 + 5 * 3 + 5 * 2)
    assert replica_seconds(s, end_s=12.0) == pytest.approx(10 + 2 * 3)


def test_scorecard_reaction_time_and_exact_cost() -> None:
    summary = {"ttft_ms": {"p50": 100.0, "p95": 900.0, "p99": 1500.0},
               "goodput": {"attainment": 0.995, "req_s": 2.0}, "requests": {"failed": 0}}  # fmt: skip
    s = [Sample(0.0, 1), Sample(61.5, 3), Sample(130.0, 1)]
    row = scorecard(summary, s, end_s=200.0, step_t=60.0)
    assert row["react_s"] == pytest.approx(1.5)
    assert row["replica_s"] == pytest.approx(61.5 + 68.5 * 3 + 70.0)
    assert (row["scale_events"], row["reversals"], row["peak_replicas"]) == (2, 1, 3)
    assert scorecard(summary, s, end_s=200.0, exact_replica_s=42.0)["replica_s"] == 42.0
    assert scorecard(summary, s[:1], end_s=200.0, step_t=60.0)["react_s"] is None
    assert "| 99.50 % |" in markdown_table([{**row, "workload": "w", "policy": "p"}])


def _row(policy: str, att: float, cost: float, tuning: str = "") -> dict:
    return {"policy": policy, "tuning": tuning, "attainment": att, "replica_s": cost}


def test_goal_check_compares_with_the_cheapest_baseline_reaching_our_attainment() -> None:
    ours = _row("ttft-queue", 0.995, 70.0)
    base = [_row("a", 0.999, 100.0, "t1"), _row("a", 0.991, 90.0, "t2"), _row("b", 0.9, 10.0)]
    g = goal_check(ours, base)
    assert g["reference"] == "a t2"
    assert g["cost_ratio"] == pytest.approx(70 / 90)
    assert g["attainment_ok"]
    assert g["cost_ok"] is True
    assert goal_check(_row("ttft-queue", 0.995, 80.0), base)["cost_ok"] is False
    assert goal_check(_row("x", 0.5, 1.0), [_row("a", 0.4, 5.0)])["reference"] is None
    runs = [{"row": r} for r in base]
    assert pick_best(runs, 0.99)["row"]["tuning"] == "t2"
    assert pick_best(runs, 0.9999)["row"]["tuning"] == "t1"  # none reaches: most attaining


def test_step_arrivals_follow_the_rates() -> None:
    load = StepLoad(rate=2.0, factor=4.0, phases=(500.0, 500.0, 500.0))
    t = step_arrivals(load, random.Random(1))
    counts = [sum(1 for x in t if 500 * k <= x < 500 * (k + 1)) for k in range(3)]
    assert counts[0] == pytest.approx(1000, rel=0.1)
    assert counts[2] == pytest.approx(1000, rel=0.1)
    assert counts[1] == pytest.approx(4000, rel=0.06)
    specs = step_specs(StepLoad(1.0, phases=(5.0, 5.0, 5.0)), [(100, 10)], length_scale=0.5)
    assert all(len(s.prompt_token_ids) == 50 and s.output_tokens == 5 for s in specs)
    assert specs == step_specs(StepLoad(1.0, phases=(5.0, 5.0, 5.0)), [(100, 10)], length_scale=0.5)


class _Echo:
    name = "echo"

    def __init__(self) -> None:
        self.seen: list[float] = []

    def initial_state(self) -> None:
        return None

    def decide(self, s: MetricsSnapshot, _c: ScalingConfig, st: None) -> tuple[int, None]:
        self.seen.append(s.replicas[0].busy_fraction)
        return s.current_replicas + 1, st


def test_look_back_recorder_averages_per_replica_and_records() -> None:
    inner = _Echo()
    rec = LookBackRecorder(inner, look_back_s=2.0)
    cfg = ScalingConfig(min_replicas=1, max_replicas=2)
    for t, busy in enumerate([1.0, 0.0, 1.0, 0.0]):
        m = ReplicaMetrics("r0", busy_fraction=busy, queue_delay_s=busy * 3)
        rec.decide(MetricsSnapshot(float(t), 2, (m,)), cfg, rec.initial_state())
    assert inner.seen == pytest.approx([1.0, 0.5, 2 / 3, 1 / 3])  # window = last 3 ticks
    assert [(s.replicas, s.desired, s.queue_delay_s) for s in rec.samples][:2] == [
        (2, 3, 3.0), (2, 3, 0.0),
    ]  # clamped to max; queue delay is the raw worst  # fmt: skip


class _Arrived(_Echo):
    def decide(self, s: MetricsSnapshot, _c: ScalingConfig, st: None) -> tuple[int, None]:
        self.seen.append(s.replicas[0].arrived_prompt_tokens)
        return 1, st


def test_look_back_recorder_reads_counters_at_their_latest_value() -> None:
    """A cumulative counter's window mean lags it by half the window and spreads a burst:
    the recorder hands the policy the latest value, as the Serve adapter does."""
    inner = _Arrived()
    rec = LookBackRecorder(inner, look_back_s=2.0)
    cfg = ScalingConfig(min_replicas=1, max_replicas=2)
    for t, arrived in enumerate([0.0, 0.0, 9000.0]):
        m = ReplicaMetrics("r0", busy_fraction=1.0, arrived_prompt_tokens=arrived)
        rec.decide(MetricsSnapshot(float(t), 1, (m,)), cfg, rec.initial_state())
    assert inner.seen == [0.0, 0.0, 9000.0]  # the mean would read 3000 at t = 2


def test_look_back_recorder_reads_a_growing_backlog_now_and_a_draining_one_as_its_mean() -> None:
    window = [ReplicaMetrics("r0", queue_delay_s=q, waiting_prefill_tokens=10 * q, kv_usage=q / 8)
              for q in (0.0, 1.0, 5.0)]  # fmt: skip
    growing = average_metrics(window)
    assert (growing.queue_delay_s, growing.waiting_prefill_tokens) == (5.0, 50.0)
    assert growing.kv_usage == pytest.approx(0.25)  # other gauges: the window mean
    draining = average_metrics(window[::-1])
    assert (draining.queue_delay_s, draining.waiting_prefill_tokens) == (2.0, 20.0)


def test_variant_splits_config_fields_from_params() -> None:
    overrides = {"target_ongoing_requests": 2.0, "upscale_delay_s": 2.0}
    cfg = Variant("ongoing-requests", "x", overrides).scaling(1, 9)
    assert cfg.target_ongoing_requests == 2.0
    assert dict(cfg.params) == {"upscale_delay_s": 2.0}
    assert (cfg.min_replicas, cfg.max_replicas) == (1, 9)


def test_ttft_buckets_take_p95_of_each_bucket_and_skip_failures() -> None:
    recs = [RequestRecord(i, i * 0.1, i * 0.1, ttft_s=0.01 * i) for i in range(100)]
    recs.append(RequestRecord(100, 1.0, 1.0, error="timeout"))
    xs, ys = ttft_buckets(recs, 5.0)
    assert xs == [2.5, 7.5]
    assert ys == pytest.approx([0.47, 0.97])


def test_tiny_virtual_time_run_scales_up_on_a_step() -> None:
    from experiments.autoscaling.metrics import scorecard as card
    from experiments.autoscaling.sim import SimSetup, run_sim

    load = StepLoad(rate=2.0, factor=4.0, phases=(60.0, 60.0, 60.0))
    specs = step_specs(load, [(2000, 20)], seed=2)
    setup = SimSetup(max_replicas=8, startup_s=10.0)
    run = run_sim(specs, "ttft-queue", ScalingConfig(1, 8, ttft_slo_s=2.0), setup)
    row = card(
        run.summary, run.samples, end_s=run.end_s, step_t=60.0, exact_replica_s=run.replica_s
    )
    assert row["failed"] == 0
    assert row["peak_replicas"] >= 2
    assert row["react_s"] is not None
    assert row["react_s"] < 30.0


def test_queue_buckets_keep_the_worst_sample() -> None:
    from experiments.autoscaling.plot import queue_buckets

    s = [Sample(0.1, 1, 0.0), Sample(0.6, 1, 2.0), Sample(1.2, 1, 0.5), Sample(3.0, 1, 0.0)]
    assert queue_buckets(s, 1.0) == ([0.5, 1.5, 3.5], [2.0, 0.5, 0.0])


def test_trace_window_rebases_and_compresses() -> None:
    from bench.types import RequestSpec
    from experiments.autoscaling.workloads import trace_window

    specs = [RequestSpec(i, (1,), 1, arrival_s=float(t)) for i, t in enumerate([5, 10, 12, 20])]
    out = trace_window(specs, 10.0, 20.0, time_scale=0.5)
    assert [(s.index, s.arrival_s) for s in out] == [(0, 0.0), (1, 1.0)]


def test_live_model_run_keeps_the_clock_going_for_the_tail_without_counting_the_probe() -> None:
    from experiments.autoscaling.sim import LIVE_MODEL, run_sim

    specs = step_specs(StepLoad(1.0, phases=(5.0, 5.0, 5.0)), [(200, 10)], seed=3)
    last = max(float(s.arrival_s or 0.0) for s in specs)
    run = run_sim(specs, "ttft-queue", ScalingConfig(1, 6), LIVE_MODEL, tail_s=20.0)
    assert len(run.records) == len(specs)
    assert run.summary["requests"]["total"] == len(specs)
    assert run.end_s >= last + 20.0
    assert run.samples[-1].t >= last + 19.0


def test_live_workloads_include_a_step_that_needs_two_replicas() -> None:
    from experiments.autoscaling.compare import LIVE_STEP_HEAVY, WORKLOADS, live_variants, workload

    assert WORKLOADS["live"] == WORKLOADS["livesim"] == ("step", "azure", "step-heavy")
    specs, load = workload("live", "step-heavy")
    assert load is LIVE_STEP_HEAVY
    assert load.rate * load.factor == 10.0
    low, high, tail = LIVE_STEP_HEAVY.phases
    sent = [s.arrival_s or 0.0 for s in specs]
    assert max(sent) < low + high + tail
    in_high = sum(1 for t in sent if low <= t < low + high) / high
    assert in_high == pytest.approx(10.0, rel=0.2)  # req/s in the high phase
    names = {f"{v.policy} {v.tuning}" for v in live_variants()}
    assert "ongoing-requests target=2, delays 2/10 s" in names  # cheapest at 100 % (livesim)
    assert "utilization target=0.3, down delay 5 s" in names  # utilization reaching 99 %


def test_floor_applies_to_every_autoscaled_variant_and_drops_smaller_fixed_fleets() -> None:
    from experiments.autoscaling.compare import livesim_variants, with_floor

    base = livesim_variants()
    assert with_floor(base, None) is base
    floored = with_floor(base, 2)
    statics = [v for v in floored if v.policy == "static"]
    assert [v.tuning for v in statics] == ["2 replicas"]
    scaled = [v for v in floored if v.policy != "static"]
    assert len(scaled) == len([v for v in base if v.policy != "static"])
    for v in scaled:
        assert v.tuning.endswith(", floor 2")
        assert v.scaling(1, 6).min_replicas == 2
    ours = next(v for v in scaled if v.policy == "ttft-queue")
    assert (
        ours.scaling(1, 6).params
        == next(v for v in base if v.policy == "ttft-queue").scaling(1, 6).params
    )  # same knobs, only the floor differs


def test_live_variant_floor_is_the_deployments_min_replicas_not_a_policy_param() -> None:
    from cluster.config import parse_config
    from experiments.autoscaling.live import LiveSetup, fleet_config, split_overrides

    overrides = {"min_replicas": 2, "target_ongoing_requests": 2.0, "upscale_delay_s": 2.0}
    setup, params, top = split_overrides(LiveSetup(), overrides)
    assert setup.min_replicas == 2
    assert params == {"upscale_delay_s": 2.0}
    assert top == {"target_ongoing_requests": 2.0}
    cfg = parse_config(fleet_config("ongoing-requests", setup, params, top))
    assert cfg.autoscaling.min_replicas == 2
    assert cfg.replicas.num_replicas == 2
    assert split_overrides(LiveSetup(), {})[0].min_replicas == 1


def test_router_option_routes_every_simulated_run_and_the_reach_with_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from experiments.autoscaling import compare, sim

    load = StepLoad(rate=1.0, factor=2.0, phases=(10.0, 10.0, 10.0))
    specs = step_specs(load, [(500, 5)], seed=3)
    routers: list[str] = []
    real = sim.run_sim

    def recording_run_sim(specs, policy, scaling, setup, **kw):  # type: ignore[no-untyped-def]
        routers.append(setup.router)
        return real(specs, policy, scaling, setup, **kw)

    monkeypatch.setattr(compare, "workload", lambda *_: (specs, load))
    monkeypatch.setattr(compare, "write_reach", lambda *a: routers.append(a[3].router))
    monkeypatch.setattr(sim, "run_sim", recording_run_sim)
    compare.run_sim_mode(tmp_path, ["step"], only="static 5,static 6", router="prefix")
    assert routers == ["prefix", "prefix", "prefix"]  # the reach, then the two fixed fleets
    assert len(list((tmp_path / "runs").glob("sim-step-static-*.json"))) == 2
    routers.clear()
    compare.run_sim_mode(tmp_path, ["step"], only="static 5")
    assert routers == ["least-loaded", "least-loaded"]


@pytest.mark.parametrize(
    "argv", [["--router", "fastest"], ["--mode", "live", "--router", "prefix"]]
)
def test_router_option_rejects_an_unknown_policy_and_the_live_mode(argv: list[str]) -> None:
    from experiments.autoscaling import compare

    with pytest.raises(SystemExit):
        compare.main([*argv, "--report-only"])
