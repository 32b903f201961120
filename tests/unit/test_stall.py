"""StallWatch: work without steps is a stall; idle or progressing is not. A replica that failed
over (stalled or dead engine) reports itself unhealthy."""

from __future__ import annotations

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
    assert from_wire(replica.record_routing_stats()).healthy
    replica._failed = "engine stalled: 2 requests unfinished and no step for 30 s"
    for read in (replica.record_routing_stats, replica.record_autoscaling_stats, replica.stats):
        assert not from_wire(read()).healthy
