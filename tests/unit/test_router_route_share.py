"""Routes shared between the routers of several ingress replicas: the status actor's log
(``replicas/route_log.py``), the router's buffer and cursor (``router/route_share.py``),
the policies' ``PeerRouted`` and the Ray adapter (``router/serve_share.py``) against an
in-process store (no Ray cluster)."""

from __future__ import annotations

import asyncio
from typing import Any

from contracts.stats import ReplicaStats
from replicas.route_log import RouteLog
from router.prefix_policy import MODE_ORACLE, PrefixAwarePolicy
from router.route_share import RouteShare, SharedRoute, decode, encode, read
from router.sglang_tree import SGLangTreePolicy
from router.types import PeerRouted, ReplicaView, Routed
from router.views import make_request_view
from tests.fakes import FakeReplica, full_rounds, pending_request, rounds_of, serve_router

SYSTEM = list(range(1000, 1256))  # 16 blocks of 16 tokens


def _batch(*routes: tuple[str, list[int]]) -> bytes:
    return encode(SharedRoute(rid, tuple(h)) for rid, h in routes)


# ---- the log ------------------------------------------------------------------------
def test_log_returns_other_origins_batches_in_order_and_moves_the_cursor() -> None:
    log = RouteLog(epoch="e1")
    assert log.since("c", "", 0, "B") == ("e1", 0, [])
    assert [log.append("c", o, b) for o, b in (("A", b"1"), ("B", b"2"), ("A", b"3"))] == [0, 1, 2]
    log.append("other", "A", b"x")  # channels are apart
    assert log.since("c", "e1", 0, "B") == ("e1", 3, [("A", b"1"), ("A", b"3")])
    assert log.since("c", "e1", 2, "B") == ("e1", 3, [("A", b"3")])
    assert log.since("c", "e1", 3, "B") == ("e1", 3, [])
    assert log.since("c", "e1", 0, "A") == ("e1", 3, [("B", b"2")])


def test_log_of_a_new_epoch_or_an_unknown_seq_is_read_from_the_start() -> None:
    log = RouteLog(epoch="e2")
    log.append("c", "A", b"1")
    assert log.since("c", "e1", 7, "B") == ("e2", 1, [("A", b"1")])  # actor restarted
    assert log.since("c", "e2", 9, "B") == ("e2", 1, [("A", b"1")])  # seq past the end


def test_log_is_bounded_by_batches_and_bytes_and_pages_its_replies() -> None:
    log = RouteLog(max_batches=10, max_bytes=1000, max_reply=4, epoch="e")
    for i in range(10_000):
        log.append("c", "A", bytes(60 + i % 7))
    assert log.nbytes("c") <= 1000
    assert log.next_seq("c") == 10_000
    epoch, nxt, got = log.since("c", "e", 0, "B")  # the dropped ones are skipped silently
    assert len(got) == 4
    assert nxt == 10_000 - 10 + 4  # paged: the cursor stops after the 4th
    rest = log.since("c", epoch, nxt, "B")[2]
    assert 0 < len(rest) <= 4
    big = RouteLog(max_bytes=10, epoch="e")
    big.append("c", "A", bytes(100))  # one batch over the byte cap is still kept
    assert big.since("c", "e", 0, "B")[2] == [("A", bytes(100))]


# ---- the router's side ---------------------------------------------------------------
def test_share_buffers_truncates_and_bounds_its_own_routes() -> None:
    s = RouteShare("A", max_routes=3, max_blocks=4)
    assert s.take() is None
    s.record("r1", [])  # nothing to share
    for i in range(5):
        s.record(f"r{i}", list(range(10)))
    assert s.pending() == 3
    assert s.dropped == 2
    batch = s.take()
    assert batch is not None
    assert decode(batch) == [SharedRoute(f"r{i}", (0, 1, 2, 3)) for i in (2, 3, 4)]
    assert s.pending() == 0
    assert s.sent == 3


def test_share_accepts_others_skips_own_and_bad_batches_and_follows_the_cursor() -> None:
    s = RouteShare("B")
    batches = [
        ("A", _batch(("r1", [1, 2]), ("r2", [3]))),
        ("B", _batch(("r9", [9]))),  # its own: never applied
        ("A", b"not json"),
        ("A", b'{"v": 99, "routes": []}'),
        ("C", _batch(("r1", [4]))),
    ]
    routes = s.accept("e1", 12, batches)
    assert routes == [SharedRoute("r1", (1, 2)), SharedRoute("r2", (3,)), SharedRoute("r1", (4,))]
    assert (s.epoch, s.seq, s.bad, s.received) == ("e1", 12, 2, 3)


def test_freed_slots_travel_with_the_routes_and_only_to_the_others() -> None:
    a, b = RouteShare("A"), RouteShare("B")
    a.record_freed()
    a.record_freed()
    assert a.pending() == 2
    batch = a.take()
    assert batch is not None
    assert read(batch) == ([], 2)
    assert a.take() is None
    assert read(_batch(("r1", [1]))) == ([SharedRoute("r1", (1,))], 0)  # an older router's
    batches = [("A", batch), ("B", encode([], 5)), ("C", _batch(("r1", [1])))]
    assert b.accept("e", 3, batches) == [SharedRoute("r1", (1,))]
    assert b.take_peer_freed() == 2  # its own 5 are not news to it
    assert b.take_peer_freed() == 0


def test_two_routers_through_the_log_learn_each_others_prefixes() -> None:
    log = RouteLog()
    routers = {name: (PrefixAwarePolicy(), RouteShare(name)) for name in "AB"}
    views = [ReplicaView(rid, kv_capacity_tokens=16_000) for rid in ("x", "y", "z")]
    policy_a, share_a = routers["A"]
    first = make_request_view("r1", [*SYSTEM, 1])
    chosen = policy_a.choose(first, views).replica_id
    policy_a.observe(Routed(first, chosen, 1.0))
    share_a.record(chosen, first.block_hashes)
    batch = share_a.take()
    assert batch is not None
    log.append("c", "A", batch)
    policy_b, share_b = routers["B"]
    for rid, hashes in share_b.accept(*log.since("c", share_b.epoch, share_b.seq, "B")):
        policy_b.observe(PeerRouted(rid, hashes, 2.0))
    second = make_request_view("r2", [*SYSTEM, 2])
    decision = policy_b.choose(second, views)
    assert (decision.replica_id, decision.reason, decision.matched_blocks) == (
        chosen,
        "affinity",
        16,
    )
    assert share_a.accept(*log.since("c", share_a.epoch, share_a.seq, "A")) == []


def test_peer_routes_feed_each_learning_policy_and_not_the_oracle() -> None:
    hashes = make_request_view("r", SYSTEM).block_hashes
    prefix = PrefixAwarePolicy()
    prefix.observe(PeerRouted("x", hashes, 0.0))
    assert prefix.index.match(hashes, ["x", "y"]) == {"x": 16, "y": 0}
    tree = SGLangTreePolicy()
    tree.observe(PeerRouted("y", hashes, 0.0))
    assert tree.index.match(hashes, ["x", "y"]) == {"x": 0, "y": 16}
    oracle = PrefixAwarePolicy(mode=MODE_ORACLE, cache_lookup=lambda _r, _h: 0)
    oracle.observe(PeerRouted("x", hashes, 0.0))
    assert oracle.index.size() == 0


# ---- the Ray adapter, against an in-process store -------------------------------------
class _Remote:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def remote(self, *args: Any) -> Any:
        return self.fn(*args)


class FakeStatusActor:
    """``append_routes`` / ``routes_since`` of the status actor (a short poll, not a long one)."""

    def __init__(self, fail: bool = False) -> None:
        self.log = RouteLog()
        self.fail = fail
        self.append_routes = _Remote(self._append)
        self.routes_since = _Remote(self._since)

    async def _append(self, channel: str, origin: str, batch: bytes) -> int:
        if self.fail:
            raise ConnectionError("status actor gone")
        return self.log.append(channel, origin, batch)

    async def _since(self, channel: str, epoch: str, seq: int, origin: str, _wait: float) -> Any:
        if self.fail:
            raise ConnectionError("status actor gone")
        got = self.log.since(channel, epoch, seq, origin)
        if not got[2]:
            await asyncio.sleep(0.005)
        return got


def _sharing_router(store: Any) -> Any:
    router = serve_router(policy="prefix", snapshot_store="status", share_routes=True)
    router.snapshots.restored = True  # no snapshot to restore here
    router.peers._actor = lambda: store
    router.peers.retry_s = 0.01
    return router


async def _settle(until: Any, timeout_s: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while not until() and loop.time() < end:
        await asyncio.sleep(0.005)


async def test_adapters_share_routes_and_drop_those_to_unknown_replicas() -> None:
    store = FakeStatusActor()
    a, b = _sharing_router(store), _sharing_router(store)
    reps = [FakeReplica(u, ReplicaStats(kv_capacity_tokens=16_000).to_wire()) for u in "xyz"]
    for router in (a, b):
        router.update_replicas(reps)
    first = make_request_view("r1", [*SYSTEM, 1])
    chosen = (await a.choose_replicas(reps, pending_request(first, "i1")))[0][0]
    a.on_request_routed(pending_request(first, "i1"), chosen.replica_id, None)
    await b.choose_replicas(reps, pending_request(None, "j0"))  # starts B's sharing tasks
    await _settle(lambda: b.peers.share.received >= 1)
    second = make_request_view("r2", [*SYSTEM, 2])
    again = await b.choose_replicas(reps, pending_request(second, "j1"))
    assert again[0][0].replica_id == chosen.replica_id
    assert b.metrics.decision_counts["affinity"] == 1
    assert a.peers.share.received == 0  # its own routes never come back
    b.update_replicas([r for r in reps if r is not chosen])  # the replica left B's view
    a.on_request_routed(pending_request(second, "i2"), chosen.replica_id, None)
    await _settle(lambda: b.peer_routes_dropped >= 1)
    assert chosen.replica_id.unique_id not in b.policy.index.replicas()  # not resurrected
    for router in (a, b):
        router.peers.stop()


async def test_adapter_routes_on_when_the_store_is_missing_or_failing() -> None:
    reps = [FakeReplica(u, ReplicaStats(kv_capacity_tokens=16_000).to_wire()) for u in "xy"]
    for store in (None, FakeStatusActor(fail=True)):
        router = _sharing_router(store)
        router.update_replicas(reps)
        for i in range(3):
            view = make_request_view(f"r{i}", [*SYSTEM, i])
            tiers = await router.choose_replicas(reps, pending_request(view, f"i{i}"))
            router.on_request_routed(pending_request(view, f"i{i}"), tiers[0][0].replica_id, None)
            await asyncio.sleep(0.02)
        assert router.metrics.decision_counts["affinity"] == 2  # its own index still learns
        if store is not None:
            assert router.peers.errors >= 1
        router.peers.stop()


async def test_a_completion_behind_one_ingress_wakes_a_request_queued_behind_the_other() -> None:
    """Router B's requests wait for a slot; one of A's requests completes: B's
    longest-waiting request starts its next round within milliseconds, not at its next
    timeout (up to 0.5 s), and B keeps no credit for it."""
    store = FakeStatusActor()
    a, b = _sharing_router(store), _sharing_router(store)
    reps = [FakeReplica(u, ReplicaStats(kv_capacity_tokens=16_000).to_wire()) for u in "xy"]
    for router in (a, b):
        router.update_replicas(reps)
    held = pending_request(make_request_view("r0", SYSTEM), "i0")
    await a.choose_replicas(reps, held)  # starts A's sharing tasks
    a.on_request_routed(held, reps[0].replica_id, None)
    queued = pending_request(make_request_view("r1", SYSTEM), "j1")
    stop = asyncio.Event()
    task = asyncio.create_task(full_rounds(b, queued, stop))
    await asyncio.sleep(1.0)  # rounds at 0, .025, .075, .175, .375, .775; next at 1.275
    before = rounds_of(queued)
    a.on_request_completed(reps[0].replica_id, "i0")
    await _settle(lambda: rounds_of(queued) > before, 0.2)
    assert rounds_of(queued) == before + 1
    assert b.pacer.wakes == 1
    assert b.pacer.credits == 0
    stop.set()
    await asyncio.wait_for(task, 2.0)
    for router in (a, b):
        router.peers.stop()
