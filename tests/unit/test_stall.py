"""StallWatch: work without steps is a stall; idle or progressing is not. A replica that failed
over (stalled or dead engine) reports itself unhealthy."""

from __future__ import annotations

import asyncio

from replicas.stall import StallWatch


def test_stall_needs_work_and_no_steps() -> None:
    w = StallWatch(timeout_s=5.0)
    assert w.observe(ongoing=0, steps=10, now=0.0) == 0.0
    assert w.observe(ongoing=0, steps=10, now=100.0) == 0.0  # idle is not stuck
    assert w.observe(ongoing=2, steps=10, now=100.0) == 0.0  # work arrives
    assert w.observe(ongoing=2, steps=11, now=103.0) == 0.0  # and it steps
    assert w.observe(ongoing=2, steps=11, now=106.0) == 3.0
    assert not w.stalled(ongoing=2, steps=11, now=107.0)
    assert w.stalled(ongoing=2, steps=11, now=108.5)
    assert not w.stalled(ongoing=2, steps=12, now=109.0)  # progress resets it


def test_a_replica_that_failed_over_reports_itself_unhealthy() -> None:
    """Once the replica gives its requests up (stall or dead engine), the stats the routers
    and the status actor read say unhealthy, so new requests stay off it while Serve still
    routes to it (until its health checks have failed three times)."""
    from contracts.stats import from_wire
    from replicas.null_engine import NullEngine
    from replicas.replica import LLMReplica

    replica = object.__new__(LLMReplica)  # no Serve context: only what _stats reads
    replica.engine = NullEngine(step_s=0.01)
    replica._failed = None
    assert from_wire(asyncio.run(replica.record_routing_stats())).healthy
    replica._failed = "engine stalled: 2 requests unfinished and no step for 30 s"
    for read in (replica.record_routing_stats, replica.record_autoscaling_stats, replica.stats):
        assert not from_wire(asyncio.run(read())).healthy


def test_serve_reads_the_stats_on_the_replicas_event_loop() -> None:
    """Serve hands a replica's plain (sync) methods to a worker thread; the stats it polls
    twice a second per replica must not cost a thread hop, nor block the loop when a new
    worker thread is slow to start (a 4-s stall of every stream, seen under py-spy)."""
    import inspect

    from replicas.replica import LLMReplica

    for name in ("record_routing_stats", "record_autoscaling_stats", "stats"):
        assert inspect.iscoroutinefunction(getattr(LLMReplica, name)), name


def test_an_idle_engine_that_stops_answering_fails_the_replica_over() -> None:
    """The stall watch needs unfinished work; an idle engine is pinged instead (found by
    hand: a SIGSTOPped vLLM engine core on an idle replica passed every health check, and
    the requests routed to it each waited the stall timeout). Busy engines are not pinged;
    an answering one is left alone."""
    import asyncio

    from replicas.null_engine import NullEngine
    from replicas.replica import LLMReplica

    async def run() -> tuple[str | None, str | None, bool]:
        replica = object.__new__(LLMReplica)
        replica.engine = NullEngine(step_s=0.01)
        replica._stall = StallWatch(timeout_s=0.2)
        replica._failed = None
        replica._handlers = set()
        replica._probe, replica._probed_at = None, 0.0
        await replica.engine.start()
        replica._maybe_probe(ongoing=0)
        assert replica._probe is not None
        await replica._probe
        answered = replica._failed
        replica.engine.hang()
        replica._probed_at = 0.0
        replica._maybe_probe(ongoing=2)  # busy: the stall watch's to judge
        busy = replica._probe.done()
        replica._maybe_probe(ongoing=0)
        await asyncio.sleep(0.4)
        hung = replica._failed
        await replica.engine.shutdown()
        return answered, hung, busy

    answered, hung, busy = asyncio.run(run())
    assert answered is None
    assert busy is True  # no new probe was started for a busy engine
    assert hung is not None
    assert "not answering" in hung
