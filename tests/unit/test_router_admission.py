"""The ledger the ingress's load shedding shares with the router (``router/admission.py``):
a request on its way to a free slot is not queued; one decided onto a full replica is."""

from __future__ import annotations

from contracts.stats import ReplicaStats
from router.admission import AdmissionLedger, ledger_for
from router.views import make_request_view
from tests.fakes import FakeReplica, pending_request, serve_router


def test_without_a_router_the_ledger_does_not_know() -> None:
    ledger = AdmissionLedger()
    ledger.sent("a")
    assert ledger.queued_with_one_more() is None
    ledger.attach(lambda: None)  # the router has no state yet
    assert ledger.queued_with_one_more() is None

    def changing() -> tuple[int, int]:
        raise RuntimeError("dictionary changed size during iteration")

    ledger.attach(changing)
    assert ledger.queued_with_one_more() is None


def test_counts_unrouted_requests_against_free_slots() -> None:
    ledger = AdmissionLedger()
    room = {"free": 8, "reserved": 0}
    ledger.attach(lambda: (room["free"], room["reserved"]))
    assert ledger.queued_with_one_more() == 0
    for i in range(8):
        ledger.sent(f"r{i}")
    assert ledger.queued_with_one_more() == 1  # 8 take the 8 slots; a 9th would wait
    room.update(free=0, reserved=8)  # the router decided all 8 onto free slots
    assert ledger.queued_with_one_more() == 1
    for i in range(8):  # accepted: the router counts them routed, the ingress done
        ledger.routed(f"r{i}")
        ledger.done(f"r{i}")
    room.update(reserved=0)
    assert ledger.unrouted == 0
    assert ledger.queued_with_one_more() == 1
    ledger.sent("late")
    ledger.done("late")  # cancelled before any replica took it
    ledger.done("late")  # a second end of the same call changes nothing
    assert ledger.unrouted == 0


def test_one_ledger_per_deployment_in_a_process() -> None:
    assert ledger_for("x-test") is ledger_for("x-test")
    assert ledger_for("x-test") is not ledger_for("y-test")


async def test_a_burst_onto_free_slots_is_not_counted_as_queued() -> None:
    """16 requests at once to 2 replicas × 4 slots: 8 are on their way to a slot, 8 queue;
    the ledger says a 17th would be the 9th queued at every step of their routing (a count
    of every unaccepted request said 16 as soon as they were sent)."""
    router = serve_router(policy="prefix")
    ledger = AdmissionLedger()
    router.admission = ledger
    ledger.attach(router.free_and_reserved)
    stats = ReplicaStats(kv_capacity_tokens=16_000).to_wire()
    reps = [FakeReplica(u, stats, max_ongoing=4) for u in "ab"]
    router.update_replicas(reps)
    requests = [
        pending_request(make_request_view(f"r{i}", [1, 2, 3, i]), f"i{i}") for i in range(16)
    ]
    for i in range(16):
        ledger.sent(f"r{i}")
    assert ledger.queued_with_one_more() == 9  # nothing decided yet: 8 free slots
    chosen = []
    for req in requests:
        tiers = await router.choose_replicas(reps, req)
        chosen.append(tiers[0][0])
        assert ledger.queued_with_one_more() == 9
    assert router.book.reserved == 8
    for req, replica in list(zip(requests, chosen, strict=True))[:8]:  # the 8 with room
        router.on_request_routed(req, replica.replica_id, None)
        ledger.done(req.args[0]["view"].request_id)
        assert ledger.queued_with_one_more() == 9
    assert router.book.reserved == 0
    first = requests[0]
    router.on_request_completed(chosen[0].replica_id, first.metadata.internal_request_id)
    assert ledger.queued_with_one_more() == 8  # a slot freed: one of the 8 will take it


async def test_a_rejected_request_frees_no_slot() -> None:
    """Serve reports a request a full replica rejected as completed, without routing it.
    Counting that as a completion made a held slot look free (an ingress then let 18
    streams through a 16-request bound) and woke a queued request for nothing."""
    router = serve_router(policy="prefix")
    router.admission = AdmissionLedger()
    router.admission.attach(router.free_and_reserved)
    rep = FakeReplica("a", ReplicaStats(kv_capacity_tokens=16_000).to_wire(), max_ongoing=1)
    router.update_replicas([rep])
    held = pending_request(make_request_view("r0", [1, 2, 3]), "i0")
    await router.choose_replicas([rep], held)
    router.on_request_routed(held, rep.replica_id, None)
    assert router.free_and_reserved() == (0, 0)
    rejected = pending_request(make_request_view("r1", [1, 2, 3]), "i1")
    await router.choose_replicas([rep], rejected)  # decided onto the full replica
    assert router.book.reserved == 0  # no room there: it is queued
    router.on_request_completed(rep.replica_id, "i1")  # Serve: the rejected send ended
    assert router.free_and_reserved() == (0, 0)
    assert router.pacer.wakes == 0
    assert router.pacer.credits == 0
    router.on_request_completed(rep.replica_id, "i0")
    assert router.free_and_reserved() == (1, 0)


def test_a_reservation_that_outlived_its_request_holds_no_slot_of_a_full_replica() -> None:
    """A request decided onto a free slot, then rejected by the replica (it filled up), keeps
    its decision until Serve gives it another round, which can wait behind other queued
    requests. It is queued meanwhile: its reservation counts only against slots the replica
    has left (else a burst let 18 streams through a 16-request bound)."""
    from router.bookkeeping import FleetBook

    book = FleetBook()
    for i in range(2):
        book.decided(f"r{i}", "a", 0, now=0.0, room=True)
    assert book.slots("a", max_ongoing=4) == (2, 2)
    for i in range(2, 6):
        book.routed(f"i{i}", make_request_view(f"r{i}", [1]), "a", now=0.0)  # took all 4
    assert book.slots("a", max_ongoing=4) == (0, 0)
    book.completed("i2")  # one slot left: one of the two will get it
    assert book.slots("a", max_ongoing=4) == (0, 1)


async def test_a_request_starting_another_round_gives_its_reservation_up() -> None:
    """A round that found no slot leaves the request queued: while it waits for the next
    round it holds no reservation (the next round decides again)."""
    import asyncio

    router = serve_router(policy="prefix")
    rep = FakeReplica("a", ReplicaStats(kv_capacity_tokens=16_000).to_wire(), max_ongoing=2)
    router.update_replicas([rep])
    req = pending_request(make_request_view("r0", [1, 2, 3]), "i0")
    await router.choose_replicas([rep], req)
    assert router.book.reserved == 1
    again = asyncio.create_task(router.choose_replicas([rep], req))  # waits 25 ms first
    await asyncio.sleep(0.005)
    assert router.book.reserved == 0
    await again
    assert router.book.reserved == 1


def test_other_callers_load_comes_from_the_replicas_reports() -> None:
    """With several ingress replicas a replica's report holds the other routers' requests;
    sends in flight (Serve's queue-length cache adds each one, and a burst of sends the
    replica will reject read as 11 on 4 slots) are not load."""
    from router.bookkeeping import FleetBook

    several = FleetBook(single_caller=False)
    several.routed("i0", make_request_view("r0", [1]), "a", now=0.0)
    several.reported("a", 3)  # ours 1, the others' 2
    assert several.slots("a", max_ongoing=4) == (1, 0)
    several.reported("a", 1)  # theirs finished
    assert several.slots("a", max_ongoing=4) == (3, 0)
    single = FleetBook(single_caller=True)
    single.reported("a", 3)  # nobody else calls: an older count of our own
    assert single.slots("a", max_ongoing=4) == (4, 0)


def test_the_ingress_has_the_router_created_before_its_first_request() -> None:
    """Without a router the ledger cannot see free slots and every unaccepted request counts
    as queued, so the ingress initializes its handle at start (Serve then creates the router).
    Where Serve cannot yet (no event loop for it), the handle stays lazy: no error."""
    import asyncio

    from cluster.relay import start_router

    class Handle:
        def __init__(self, refuse: bool = False) -> None:
            self.refuse = refuse
            self.options_calls: list[dict[str, object]] = []

        def options(self, **kw: object) -> Handle:
            if self.refuse:
                raise RuntimeError("No event loop running.")
            self.options_calls.append(kw)
            return self

    handle = Handle()
    asyncio.run(asyncio.to_thread(start_router, handle))
    assert handle.options_calls == [{"stream": True}]
    start_router(Handle(refuse=True))  # stays lazy


async def test_the_ledger_tells_the_ingress_when_the_router_has_no_replica() -> None:
    """The ingress holds a request for a starting replica while the router has none (a lone
    replica just died, or the fleet scales up from zero); the router drops a dead replica
    at once, before the status reports go stale."""
    ledger = AdmissionLedger()
    assert ledger.replicas() is None  # no router yet
    router = serve_router(policy="p2c")
    router.admission = ledger
    ledger.attach(router.free_and_reserved, router.replica_count)
    a, b = (FakeReplica(n, ReplicaStats().to_wire()) for n in "ab")
    router.update_replicas([a, b])
    assert ledger.replicas() == 2
    router.on_replica_actor_died(a.replica_id)
    assert ledger.replicas() == 1
    router.on_replica_actor_died(b.replica_id)
    assert ledger.replicas() == 0
