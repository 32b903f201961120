"""FleetBook on its own, and one request sequence replayed through the virtual-time twin and
through the Ray adapter driven by fake replicas: same views, same decisions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from bench.types import RequestSpec
from cluster.twin.fleet import ClusterConfig, ClusterSim
from contracts.stats import UNREPORTED, ReplicaStats
from replicas.sim.core import CoreConfig
from router.bookkeeping import PENDING_TTL_S, FleetBook
from router.registry import make_policy
from router.types import (
    Completed,
    ReplicaGone,
    ReplicaView,
    RequestView,
    Routed,
    RouterEvent,
    RoutingDecision,
    RoutingPolicy,
)
from router.views import make_request_view
from tests.fakes import FakeReplica, pending_request, serve_router

REPORT = ReplicaStats(waiting=2, running=1, waiting_prefill_tokens=300)
NONE = UNREPORTED


def test_ongoing_counts_in_flight_or_queue_len_plus_pending_decisions() -> None:
    book = FleetBook()
    book.routed("k1", None, "a", now=0.0)
    book.decided("r2", "a", 0, now=0.0)
    book.decided("r2", "a", 0, now=0.5)  # asked again: still one pending decision
    assert book.view("a", NONE, queue_len=0, now=1.0).ongoing == 2
    assert book.view("a", NONE, queue_len=5, now=1.0).ongoing == 6  # Ray's count is larger
    assert book.completed("k1") == ("k1", "a")
    assert book.completed("never-routed") is None  # a rejected request: no slot to free
    assert book.view("a", NONE, now=1.0).ongoing == 1
    book.expire(0.5 + PENDING_TTL_S + 0.1)
    assert book.view("a", NONE, now=40.0).ongoing == 0
    assert not book.decisions


def test_routed_request_adds_its_uncached_prompt_to_the_outstanding_backlog() -> None:
    book = FleetBook(block_size=16)
    book.view("a", ReplicaStats(prefill_tokens_per_s=100.0), now=0.0)  # learns the rate
    request = make_request_view("r1", list(range(640)))
    book.decided("r1", "a", matched_blocks=10, now=0.0)
    book.routed("i1", request, "a", now=0.0)  # 640 - 10 * 16 uncached
    assert (
        book.view("a", ReplicaStats(prefill_tokens_per_s=100.0), now=1.0).waiting_prefill_tokens
        == 380
    )
    book.decided("r2", "a", matched_blocks=10, now=1.0)
    book.routed("i2", make_request_view("r2", list(range(640))), "b", now=1.0)  # Ray chose b
    assert book.view("b", NONE, now=1.0).waiting_prefill_tokens == 640  # no match on b
    assert not book.pending
    assert book.completed("i2") == ("r2", "b")
    book.gone("a")
    assert book.view("a", REPORT, queue_len=1, now=1.0).waiting_prefill_tokens == 300


def test_stale_reports_are_corrected_and_fresh_ones_used_as_they_are() -> None:
    stale = FleetBook(single_caller=True)
    idle = stale.view("a", REPORT, now=0.0)  # nothing of ours in flight: the report is old
    assert (idle.waiting, idle.running, idle.waiting_prefill_tokens) == (0, 0, 0)
    busy = stale.view("a", REPORT, queue_len=1, now=0.0)
    assert (busy.waiting, busy.running, busy.waiting_prefill_tokens) == (2, 1, 300)
    shared = FleetBook(single_caller=False).view("a", REPORT, now=0.0)
    assert shared.waiting_prefill_tokens == 300
    fresh = FleetBook(fresh_reports=True)
    fresh.routed("i1", make_request_view("r1", list(range(4000))), "a", now=0.0)
    assert fresh.view("a", NONE, now=0.0).waiting_prefill_tokens == 0  # no own estimate
    assert fresh.view("a", REPORT, now=0.0).waiting == 2


# ---- the twin and the adapter on one request sequence ---------------------------------
CORE = CoreConfig(model="llama-3-8b", hardware="l4", block_size=16)
POLICY = {"name": "prefix", "seed": 7, "block_size": 16, "config": {"load_slack": 0.5}}


def _workload(n: int = 90) -> tuple[list[RequestSpec], list[float]]:
    """Three 512-token prefixes, 24 unique tokens each, every 40 ms to 4 L4s: queues build up."""
    specs = []
    for i in range(n):
        prefix = tuple(range(1000 * (i % 3), 1000 * (i % 3) + 512))
        specs.append(RequestSpec(i, prefix + tuple(range(50_000 + 24 * i, 50_024 + 24 * i)), 16))
    return specs, [0.04 * i for i in range(n)]


class Recorder:
    """Wraps a policy: logs each decision with the views and the replica reports behind it,
    and every event, in order."""

    def __init__(self, inner: RoutingPolicy, sim: ClusterSim | None = None) -> None:
        self.inner, self.sim, self.name = inner, sim, inner.name
        self.log: list[Any] = []

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> RoutingDecision:
        decision = self.inner.choose(request, replicas)
        reports = []
        if self.sim is not None:
            reps = [self.sim.replicas[v.replica_id] for v in replicas]
            period = self.sim.config.stats_period_s
            reports = [
                (r.replica_id, r.routing_report(self.sim.now, period), r.ongoing) for r in reps
            ]
            self.log.append(("choose", self.sim.now, request, reports))
        self.log.append(("decision", list(replicas), decision.replica_id))
        return decision

    def observe(self, event: RouterEvent) -> None:
        self.log.append(("event", event))
        self.inner.observe(event)


def _twin(fresh: bool) -> Recorder:
    cfg = ClusterConfig(replicas=4, core=CORE, stats_period_s=0.0 if fresh else 0.1)
    sim = ClusterSim(cfg, policy_factory=lambda s: Recorder(make_policy(**POLICY), s))
    sim.run(*_workload())
    assert isinstance(sim.policy, Recorder)
    return sim.policy


async def _replay_through_adapter(twin_log: list[Any], fresh: bool) -> Recorder:
    router = serve_router(policy="prefix", seed=7, block_size=16, config=POLICY["config"])
    if fresh:
        router.book = FleetBook(block_size=16, fresh_reports=True)
    spy = Recorder(router.policy)
    router.policy = spy
    fakes: dict[str, FakeReplica] = {}
    now = 0.0
    router.clock = lambda: now
    for entry in twin_log:
        if entry[0] == "choose":
            _, now, request, reports = entry
            for rid, stats, ongoing in reports:
                fake = fakes.setdefault(rid, FakeReplica(rid, max_ongoing=1_000_000))
                fake.routing_stats = stats.to_wire()  # what record_routing_stats returns
                router.replica_queue_len_cache.update(fake.replica_id, ongoing)
            candidates = [fakes[rid] for rid, _, _ in reports]
            await router.choose_replicas(candidates, pending_request(request, request.request_id))
        elif entry[0] == "event":
            now = entry[1].now
            _forward(router, fakes, entry[1])
    return spy


def _forward(router: Any, fakes: dict[str, FakeReplica], event: RouterEvent) -> None:
    if isinstance(event, Routed):
        pending = pending_request(event.request, event.request.request_id)
        router.on_request_routed(pending, fakes[event.replica_id].replica_id, None)
    elif isinstance(event, Completed):
        router.on_request_completed(fakes[event.replica_id].replica_id, event.request_id)
    elif isinstance(event, ReplicaGone):
        router.on_replica_actor_died(fakes[event.replica_id].replica_id)


@pytest.mark.parametrize("fresh", [True, False])
async def test_twin_and_ray_adapter_see_the_same_views_and_decide_the_same(fresh: bool) -> None:
    twin = _twin(fresh)
    adapter = await _replay_through_adapter(twin.log, fresh)
    ours = [e[1:] for e in twin.log if e[0] == "decision"]
    theirs = [e[1:] for e in adapter.log if e[0] == "decision"]
    assert len(ours) == 90
    assert len({rid for _, rid in ours}) >= 3
    assert theirs == ours  # every view (ongoing, queues, prefill backlog) and every choice
    reports = [dict(r[0:2] for r in e[3]) for e in twin.log if e[0] == "choose"]
    seen = [{v.replica_id: v.waiting_prefill_tokens for v in views} for views, _ in ours]
    corrected = sum(
        v != int(rep[rid].waiting_prefill_tokens)
        for rep, views in zip(reports, seen, strict=True)
        for rid, v in views.items()
    )
    assert (corrected == 0) if fresh else (corrected > 0)  # stale mode ran its corrections
