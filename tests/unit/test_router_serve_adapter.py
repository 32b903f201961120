"""The Ray Serve adapter's conversion and hook logic with fake RunningReplica-like objects
(no Ray cluster): stats → ReplicaView, view lookup, ranked tiers, observe wiring."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

from contracts.stats import UNREPORTED, ReplicaStats
from router.bookkeeping import PENDING_TTL_S
from router.serve_router import rank_tiers, request_view_of
from router.types import RoutingDecision
from router.views import make_request_view, replica_view_from_stats
from tests.fakes import FakeReplica, full_rounds, pending_request, rounds_of, serve_router

SYSTEM = list(range(1000, 1256))


def test_replica_view_from_replica_stats() -> None:
    stats = ReplicaStats(
        waiting=2,
        running=3,
        waiting_prefill_tokens=900,
        kv_usage=0.4,
        kv_capacity_tokens=46_000,
        block_size=128,
        prefill_tokens_per_s=480.0,
        healthy=False,
    )
    v = replica_view_from_stats("x", stats, ongoing=5, max_ongoing=16)
    assert (v.waiting, v.running, v.waiting_prefill_tokens, v.kv_capacity_tokens) == (
        2,
        3,
        900,
        46_000,
    )
    assert (v.kv_usage, v.block_size, v.prefill_tokens_per_s) == (0.4, 128, 480.0)
    assert (v.healthy, v.ongoing, v.max_ongoing) == (False, 5, 16)
    fresh = replica_view_from_stats("y", UNREPORTED, default_block_size=128)  # no report yet
    assert fresh.healthy
    assert fresh.waiting == 0
    assert fresh.block_size == 128


def test_request_view_lookup_and_rank_tiers() -> None:
    view = make_request_view("r1", SYSTEM)
    assert request_view_of(pending_request(view, "i1")) is view
    assert request_view_of(pending_request(None, "i2")) is None
    assert request_view_of(None) is None
    reps = [FakeReplica("a"), FakeReplica("b"), FakeReplica("c")]
    tiers = rank_tiers(RoutingDecision("b", "affinity", {"a": 0.1, "b": 2.0, "c": 0.9}), reps)
    assert [[r.replica_id.unique_id for r in t] for t in tiers] == [["b"], ["c", "a"]]


async def test_choose_observe_complete_cycle_learns_affinity() -> None:
    router = serve_router(policy="prefix", config={"load_slack": 4.0}, seed=3)
    reps = [FakeReplica(u, ReplicaStats(kv_capacity_tokens=16_000).to_wire()) for u in "abcd"]
    router.update_replicas(reps)
    first = make_request_view("r1", [*SYSTEM, 1])
    tiers = await router.choose_replicas(reps, pending_request(first, "i1"))
    chosen = tiers[0][0]
    assert len(tiers) == 2
    assert len(tiers[1]) == 3
    assert router.replica_view(chosen).ongoing == 1  # decided, not yet routed: pending
    router.on_request_routed(pending_request(first, "i1"), chosen.replica_id, None)
    assert router.replica_view(chosen).ongoing == 1
    assert not router.book.pending
    second = make_request_view("r2", SYSTEM)
    again = await router.choose_replicas(reps, pending_request(second, "i2"))
    assert again[0][0] is chosen
    assert router.replica_view(chosen).ongoing == 2
    router.on_request_routed(pending_request(second, "i2"), chosen.replica_id, None)
    router.on_request_completed(chosen.replica_id, "i1")
    router.on_request_completed(chosen.replica_id, "i2")
    assert router.replica_view(chosen).ongoing == 0
    assert router.metrics.decision_counts == {"fallback": 1, "affinity": 1}


async def test_missing_view_falls_back_to_p2c_and_gone_replica_is_forgotten() -> None:
    router = serve_router(policy="prefix", single_caller=False)  # trust reported queues as-is
    busy = FakeReplica("busy", ReplicaStats(waiting=20).to_wire())
    idle = FakeReplica("idle", ReplicaStats().to_wire())
    router.update_replicas([busy, idle])
    tiers = await router.choose_replicas([busy, idle], pending_request(None, "i1"))
    assert tiers[0] == [idle]
    assert router.metrics.decision_counts["fallback"] == 1
    view = make_request_view("r", SYSTEM)
    router.on_request_routed(pending_request(view, "i2"), idle.replica_id, None)
    assert router.policy.index.size("idle") == 16  # type: ignore[attr-defined]
    router.update_replicas([busy])  # idle left the deployment
    assert router.policy.index.size("idle") == 0  # type: ignore[attr-defined]
    router.on_replica_actor_died(busy.replica_id)
    assert "busy" not in router.known
    await asyncio.sleep(0)


async def test_all_unavailable_returns_every_candidate_as_one_tier() -> None:
    router = serve_router(policy="least-loaded")
    down = ReplicaStats(healthy=False).to_wire()
    reps = [FakeReplica("a", down), FakeReplica("b", down)]
    tiers = await router.choose_replicas(reps, pending_request(make_request_view("r", SYSTEM), "i"))
    assert tiers == [reps]
    assert router.metrics.decision_counts["fallback"] == 1
    assert await router.choose_replicas([], None) == []


async def test_single_caller_ignores_stale_queue_reports_of_idle_replicas() -> None:
    router = serve_router(policy="prefix")
    stale = FakeReplica("stale", ReplicaStats(waiting=1, waiting_prefill_tokens=544).to_wire())
    view = router.replica_view(stale)
    assert (view.waiting, view.waiting_prefill_tokens) == (0, 0)  # nothing of ours in flight there
    router.on_request_routed(
        pending_request(make_request_view("r", SYSTEM), "i1"), stale.replica_id, None
    )
    assert router.replica_view(stale).waiting_prefill_tokens == 544


async def test_burst_between_stats_reports_counts_own_outstanding_prefill() -> None:
    router = serve_router(policy="prefix")
    stats = ReplicaStats(prefill_tokens_per_s=100.0).to_wire()
    a, b = FakeReplica("a", stats), FakeReplica("b", stats)
    router.update_replicas([a, b])
    first = make_request_view("r1", list(range(5000, 5512)))
    tiers = await router.choose_replicas([a, b], pending_request(first, "i1"))
    chosen = tiers[0][0]
    router.on_request_routed(pending_request(first, "i1"), chosen.replica_id, None)
    # the replica's next stats report has not arrived, but the router knows what it sent
    assert router.replica_view(chosen).waiting_prefill_tokens >= 500
    second = make_request_view("r2", list(range(9000, 9512)))  # unrelated prompt
    tiers = await router.choose_replicas([a, b], pending_request(second, "i2"))
    assert tiers[0][0] is not chosen


async def test_precise_router_subscribes_counts_and_learns_kv_events(tmp_path: Any) -> None:
    import zmq

    from tests.unit.test_router_kv_events import CAPTURED, TOKENS, _frames

    template = f"ipc://{tmp_path}/kv-{{replica_id}}.sock"
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.bind(template.format(replica_id="a"))
    router = serve_router(policy="prefix-precise", kv_events_endpoint_template=template)
    reps = [FakeReplica("a"), FakeReplica("b")]
    try:
        await router.choose_replicas(reps, pending_request(make_request_view("r0", SYSTEM), "i0"))
        assert set(router.kv.subscribers) == {"a", "b"}  # one SUB socket per replica
        deadline = asyncio.get_running_loop().time() + 5.0
        seq = 0
        while not router.metrics.kv_event_counts and asyncio.get_running_loop().time() < deadline:
            pub.send_multipart(_frames(CAPTURED[3], seq))  # PUB/SUB slow joiner: resend
            seq += 1
            await asyncio.sleep(0.02)
    finally:
        for sub in router.kv.subscribers.values():
            sub.stop()
        pub.close(linger=0)
    assert router.metrics.kv_event_counts["stored"] >= 1
    view = make_request_view("r1", TOKENS)  # the tokens of the captured BlockStored
    assert router.policy.matches(view, [router.replica_view(r) for r in reps])["a"] == 4  # type: ignore[attr-defined]


async def test_burst_of_concurrent_decisions_counts_pending_and_respects_the_bound() -> None:
    # 32 requests with one prefix decided before Ray reports any of them routed
    router = serve_router(policy="prefix", seed=1)
    reps = [FakeReplica(u, ReplicaStats(kv_capacity_tokens=16_000).to_wire()) for u in "abcd"]
    router.update_replicas(reps)
    chosen = []
    for i in range(32):
        view = make_request_view(f"r{i}", [*SYSTEM, i])
        tiers = await router.choose_replicas(reps, pending_request(view, f"i{i}"))
        chosen.append(tiers[0][0].replica_id.unique_id)
        if i == 0:  # the first one is routed, so the index learns the prefix's owner
            router.on_request_routed(pending_request(view, "i0"), tiers[0][0].replica_id, None)
    counts = collections.Counter(chosen)
    assert len(counts) >= 3, counts
    assert max(counts.values()) <= 16, counts  # 2x fair share at most
    assert sum(router.book.pending.values()) == 31
    # a decision asked again for the same request does not count twice; stale ones expire
    view = make_request_view("r5", [*SYSTEM, 5])
    await router.choose_replicas(reps, pending_request(view, "i5"))
    assert sum(router.book.pending.values()) == 31
    router.book.expire(time.monotonic() + PENDING_TTL_S + 1)
    assert not router.book.pending
    assert not router.book.decisions


def _full_router() -> tuple[Any, list[FakeReplica]]:
    router = serve_router(policy="prefix")
    reps = [FakeReplica(u, ReplicaStats(kv_capacity_tokens=16_000).to_wire()) for u in "ab"]
    router.update_replicas(reps)
    return router, reps


async def test_a_request_no_replica_can_take_waits_between_rounds_instead_of_spinning() -> None:
    """Serve sleeps between rounds only when the routing context asks for it, which our
    router does not: it paces rounds itself (25 ms doubling). Before either, a queued
    request ran ~13,000 tiers in 0.3 s here, each one a Ray probe per replica in Serve."""
    router, _ = _full_router()
    request = pending_request(make_request_view("r1", SYSTEM), "i1")
    stop = asyncio.Event()
    task = asyncio.create_task(full_rounds(router, request, stop))
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.wait_for(task, 1.0)
    assert not request.routing_context.should_backoff  # no Serve sleep on top
    assert 3 <= rounds_of(request) <= 6, rounds_of(request)  # at 0, 25, 75, 175 ms


async def test_a_completion_wakes_the_longest_waiting_request_at_once() -> None:
    """After 1 s of waiting a request's next round is up to 0.5 s away; a request of this
    router completing (a slot freed) starts it at once, and only the oldest waiter's."""
    router, reps = _full_router()
    done = pending_request(make_request_view("r0", SYSTEM), "i0")
    router.on_request_routed(done, reps[0].replica_id, None)
    old = pending_request(make_request_view("r1", SYSTEM), "i1")
    young = pending_request(make_request_view("r2", SYSTEM), "i2")
    stop = asyncio.Event()
    tasks = [asyncio.create_task(full_rounds(router, old, stop))]
    await asyncio.sleep(1.0)  # old: rounds at 0, .025, .075, .175, .375, .775; next 1.275
    tasks.append(asyncio.create_task(full_rounds(router, young, stop)))
    await asyncio.sleep(0.1)  # young: rounds at 0, .025, .075; next .175
    n_old, n_young = rounds_of(old), rounds_of(young)
    router.on_request_completed(reps[0].replica_id, "i0")
    await asyncio.sleep(0.01)
    assert (rounds_of(old), rounds_of(young)) == (n_old + 1, n_young)  # one slot: one request
    assert router.pacer.wakes == 1
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 2.0)
    assert router.pacer.waiting == 0


async def test_a_new_replica_wakes_the_waiting_requests_with_it_among_the_candidates() -> None:
    """Serve computed the round's candidates before the wait; when a replica joins during
    it, the round that the join starts offers the new one (else it would probe the old,
    full ones again and wait once more)."""
    router, reps = _full_router()
    request = pending_request(make_request_view("r1", SYSTEM), "i1")
    seen: list[set[str]] = []
    stop = asyncio.Event()

    async def rounds() -> None:
        gen = router._choose_replicas_with_backoff(request)
        try:
            async for tier in gen:
                seen.append({r.replica_id.unique_id for r in tier})
                if stop.is_set():
                    return
                await asyncio.sleep(0)
        finally:
            await gen.aclose()

    task = asyncio.create_task(rounds())
    await asyncio.sleep(1.0)  # now in a 0.5-s wait
    new = FakeReplica("c", ReplicaStats(kv_capacity_tokens=16_000).to_wire())
    router.update_replicas([*reps, new])
    await asyncio.sleep(0.02)
    assert any("c" in tier for tier in seen), seen[-4:]
    stop.set()
    await asyncio.wait_for(task, 2.0)
