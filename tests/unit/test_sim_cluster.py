"""Virtual-time cluster simulator with tiny hand-written policies."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import pytest

from autoscaler.types import ScalingConfig
from bench.types import RequestSpec
from cluster.twin import cli
from cluster.twin.fleet import ClusterConfig, ClusterSim
from cluster.twin.results import build_result
from contracts.hashing import block_hashes
from replicas.sim.core import CoreConfig
from router.types import (
    Completed,
    KVBlocksStored,
    ReplicaView,
    RequestView,
    Routed,
    RouterEvent,
    RoutingDecision,
)
from tests.fakes import StepScaler

CORE = CoreConfig(model="llama-3-8b", hardware="h100", block_size=16, max_num_batched_tokens=512)


class RoundRobin:
    name = "test-rr"

    def __init__(self) -> None:
        self.n = 0
        self.events: list[RouterEvent] = []

    def choose(self, _request: RequestView, replicas: Sequence[ReplicaView], /) -> RoutingDecision:
        ids = sorted(r.replica_id for r in replicas)
        return RoutingDecision(ids[self.n % len(ids)], "balance")

    def observe(self, event: RouterEvent) -> None:
        self.events.append(event)
        if isinstance(event, Routed):
            self.n += 1


class Sticky(RoundRobin):
    def choose(self, _request: RequestView, replicas: Sequence[ReplicaView], /) -> RoutingDecision:
        return RoutingDecision(min(r.replica_id for r in replicas), "affinity")


def _shared_prefix(n: int, prefix: int = 256, tail: int = 40, out: int = 8) -> list[RequestSpec]:
    return [
        RequestSpec(
            i, tuple(range(prefix)) + tuple(10_000 + i * tail + j for j in range(tail)), out
        )
        for i in range(n)
    ]


def _run(policy: Any, specs: list[RequestSpec], replicas: int = 4, **kw: Any) -> ClusterSim:
    sim = ClusterSim(ClusterConfig(replicas=replicas, core=CORE, **kw), policy)
    sim.records_list = sim.run(specs, [0.05 * i for i in range(len(specs))])  # type: ignore[attr-defined]
    return sim


def test_every_request_completes_with_timings() -> None:
    specs = _shared_prefix(20)
    sim = _run(RoundRobin(), specs)
    recs = sim.records_list  # type: ignore[attr-defined]
    assert [r.index for r in recs] == list(range(20))
    for r in recs:
        assert r.error is None
        assert r.output_tokens == 8
        assert len(r.token_times_s) == 8
        assert 0 < r.ttft_s <= r.e2e_s
        assert r.prompt_tokens == 296
        assert r.token_times_s == sorted(r.token_times_s)
    assert {r.replica for r in recs} == {f"replica-{i:03d}" for i in range(4)}
    completed = [e for e in sim.policy.events if isinstance(e, Completed)]  # type: ignore[union-attr]
    assert len(completed) == 20


def test_affinity_raises_hit_rate_and_cache_lookup_agrees() -> None:
    specs = _shared_prefix(20)
    rr = build_result(_run(RoundRobin(), specs), [], {})
    sticky_sim = _run(Sticky(), specs)
    sticky = build_result(sticky_sim, [], {})
    assert sticky["cache"]["hit_rate"] > rr["cache"]["hit_rate"] > 0
    hashes = block_hashes(specs[0].prompt_token_ids, 16)
    assert sticky_sim.cache_lookup("replica-000", hashes) == len(hashes)
    assert sticky_sim.cache_lookup("replica-001", hashes) == 0


def test_kv_events_reach_the_policy() -> None:
    specs = _shared_prefix(3)
    sim = _run(RoundRobin(), specs, replicas=1, kv_events=True)
    stored = [h for e in sim.policy.events if isinstance(e, KVBlocksStored) for h in e.block_hashes]  # type: ignore[union-attr]
    expected = set()
    for s in specs:
        expected |= set(block_hashes(s.prompt_token_ids, 16))
    assert set(stored) == expected
    assert len(stored) == len(expected)


def test_kv_events_can_arrive_late() -> None:
    specs = _shared_prefix(40)  # arrivals over 2 s; events after the last request ends are moot
    now = _run(RoundRobin(), specs, replicas=1, kv_events=True)
    late = _run(RoundRobin(), specs, replicas=1, kv_events=True, kv_event_delay_s=0.25)

    def stored(sim: ClusterSim) -> list[tuple[float, tuple[int, ...]]]:
        events = sim.policy.events  # type: ignore[union-attr]
        return [(e.now, e.block_hashes) for e in events if isinstance(e, KVBlocksStored)]

    a, b = stored(now), stored(late)
    assert 0 < len(b) <= len(a)
    assert [h for _, h in b] == [h for _, h in a[: len(b)]]  # same events, same order
    assert [t + 0.25 for t, _ in a[: len(b)]] == pytest.approx([t for t, _ in b])  # 0.25 s late


def test_deterministic() -> None:
    a = _run(RoundRobin(), _shared_prefix(10)).records_list  # type: ignore[attr-defined]
    b = _run(RoundRobin(), _shared_prefix(10)).records_list  # type: ignore[attr-defined]
    assert [(r.ttft_s, r.e2e_s) for r in a] == [(r.ttft_s, r.e2e_s) for r in b]


def test_multi_turn_waits_for_previous_turn() -> None:
    specs = [RequestSpec(i, tuple(range(100 + 50 * i)), 20, session_id="s") for i in range(3)]
    sim = ClusterSim(ClusterConfig(replicas=2, core=CORE), RoundRobin())
    recs = sim.run(specs, [0.0, 0.0, 0.0])
    for prev, nxt in itertools.pairwise(recs):
        assert nxt.send_s >= prev.send_s + prev.e2e_s - 1e-9


def test_autoscaling_starts_after_startup_and_counts_replica_seconds() -> None:
    specs = [RequestSpec(i, tuple(range(i, i + 64)), 400) for i in range(40)]
    scaler = StepScaler([(0.0, 3), (6.0, 1)])
    cfg = ClusterConfig(replicas=0, core=CORE, startup_s=2.0)
    sim = ClusterSim(
        cfg, RoundRobin(), scaler=scaler, scaling=ScalingConfig(min_replicas=0, max_replicas=3)
    )
    recs = sim.run(specs, [0.1 * i for i in range(40)])
    assert all(r.error is None for r in recs)
    assert min(r.ttft_s for r in recs[:5]) >= 2.0 - 0.1 * 4  # held at the ingress until ready
    assert (0.0, 3) in sim.scale_log
    assert any(d == 1 for _, d in sim.scale_log)
    res = build_result(sim, recs, {})
    assert res["replica_seconds"] < 3 * sim.now
    assert res["replica_seconds"] > sim.now
    assert len(sim.replicas) == 1
    assert len(sim.retired) == 2
    assert any(m.busy_fraction > 0 for s in scaler.snapshots for m in s.replicas)


def test_cli_writes_result_json(tmp_path: Any) -> None:
    out = tmp_path / "r.json"
    argv = [
        "--replicas", "2", "--hardware", "l4", "--model", "llama-3-8b", "--workload",
        "shared-prefix:groups=2,prompts=6,system=256,question=16,output=8", "--router",
        "round-robin", "--rate", "5", "--slo", "ttft_ms=1000", "--out", str(out),
    ]  # fmt: skip
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["requests"]["completed"] == 12
    assert 0 < res["cache"]["hit_rate"] < 1
    assert res["replica_seconds"] > 0
    assert res["sim"]["steps_per_wall_s"] > 0
    assert res["imbalance"]["mean"] >= 1.0
    assert out.with_suffix(".jsonl").exists()


def test_cli_routes_like_the_product_unless_told(tmp_path: Any) -> None:
    """``llmfleet sim`` without ``--router`` routes as ``llmfleet up`` does (it defaulted to
    round-robin, which no deployment runs unless configured to)."""
    from cluster.config import RoutingConfig

    hits = {}
    for router in (None, "prefix", "round-robin"):
        out = tmp_path / f"{router}.json"
        argv = [
            "--replicas", "2", "--workload",
            "shared-prefix:groups=4,prompts=16,system=256,question=16,output=8",
            "--rate", "20", "--out", str(out),
        ]  # fmt: skip
        assert cli.main(argv + (["--router", router] if router else [])) == 0
        res = json.loads(out.read_text())
        hits[router] = res["cache"]["hit_rate"]
        if router is None:
            assert res["config"]["router"] == RoutingConfig().policy == "prefix"
    assert hits[None] == hits["prefix"] > hits["round-robin"]


def test_static_batching_flushes_last_partial_batch_and_rejects_oversized() -> None:
    core = CoreConfig(
        model="llama-3-8b",
        hardware="h100",
        block_size=16,
        batching="static",
        batch_size=4,
        num_gpu_blocks=64,
    )
    specs = [RequestSpec(i, tuple(range(i, i + 32)), 4) for i in range(6)]
    specs.append(RequestSpec(6, tuple(range(2000)), 4))  # 125 blocks > 64 in the pool
    sim = ClusterSim(ClusterConfig(replicas=1, core=core), RoundRobin())
    recs = sim.run(specs, [0.01 * i for i in range(7)])
    assert [r.error for r in recs] == [None] * 6 + ["kv_capacity"]
    assert recs[4].ttft_s > recs[3].ttft_s  # the tail pair ran as its own, flushed batch


def test_registry_policies_oracle_and_precise_beat_round_robin(tmp_path: Any) -> None:
    hit: dict[str, float] = {}
    for router in ("round-robin", "oracle", "prefix-precise"):
        out = tmp_path / f"{router}.json"
        argv = [
            "--replicas", "4", "--hardware", "h100", "--model", "llama-3-8b", "--workload",
            "shared-prefix:groups=4,prompts=8,system=512,question=16,output=4", "--router",
            router, "--rate", "20", "--out", str(out),
        ]  # fmt: skip
        assert cli.main(argv) == 0
        hit[router] = json.loads(out.read_text())["cache"]["hit_rate"]
    assert hit["oracle"] > hit["round-robin"]
    assert hit["prefix-precise"] > hit["round-robin"]


def test_router_book_ends_empty_and_reports_age_by_the_stats_period() -> None:
    sim = _run(RoundRobin(), _shared_prefix(12))
    assert not +sim.book.inflight
    assert not sim.book.decisions
    assert not sim.book.routes
    rep = sim.replicas["replica-000"]
    first = rep.routing_report(sim.now, period_s=0.5)
    assert rep.routing_report(sim.now + 0.4, period_s=0.5) is first  # still the held report
    assert rep.routing_report(sim.now + 0.5, period_s=0.5) is not first
    assert first.kv_capacity_tokens == rep.core.kv_capacity_tokens
