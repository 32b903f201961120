"""One replica inside the cluster simulator: an ``EngineCore`` plus what it reports to the
router (``routing_stats``) and the autoscaler (``metrics``), its in-flight count, readiness,
draining and busy time. The router turns the report into its view through the same
``router.bookkeeping.FleetBook`` as the live Ray adapter."""

from __future__ import annotations

from autoscaler.types import ReplicaMetrics
from contracts.stats import ReplicaStats
from replicas.sim.core import CoreConfig, EngineCore
from replicas.sim.kv_cache import KVEventCallback
from replicas.sim.request import SimRequest
from replicas.sim.scheduler import Batch


class SimReplica:
    __slots__ = (
        "batch",
        "batch_start",
        "core",
        "draining",
        "for_pool",
        "gen",
        "ongoing",
        "ready",
        "replica_id",
        "report",
        "report_at",
        "served",
        "started_at",
        "stopped_at",
    )

    def __init__(
        self, replica_id: str, config: CoreConfig, now: float, on_kv_event: KVEventCallback | None
    ) -> None:
        self.replica_id = replica_id
        self.core = EngineCore(config, on_kv_event)
        self.ongoing = 0
        self.batch: Batch | None = None
        self.batch_start = 0.0
        self.gen = 0  # invalidates stale step events
        self.ready = False
        self.draining = False
        self.for_pool = False  # booting into the warm pool: asleep once ready, never routed
        self.started_at = now
        self.stopped_at: float | None = None
        self.served = 0
        self.report: ReplicaStats | None = None
        self.report_at = now

    @property
    def routable(self) -> bool:
        return self.ready and not self.draining

    def finish_step(self, now: float) -> list[SimRequest]:
        assert self.batch is not None
        out = self.core.end_step(self.batch, self.batch_start, now)
        self.batch = None
        return [r for r in out if r.finish_reason is not None]

    def routing_stats(self) -> ReplicaStats:
        """The replica's routing report, read now: the fields the router's view reads (see
        ``router.views``). The windowed TTFT and busy fields stay at 0 (each read costs
        O(window) and the router ignores them); the autoscaler gets them from ``metrics``."""
        sch = self.core.scheduler
        return ReplicaStats(
            waiting=len(sch.waiting),
            running=len(sch.running),
            waiting_prefill_tokens=max(0, sch.pending_prefill),
            kv_usage=self.core.kv.pool.usage(),
            kv_capacity_tokens=self.core.kv_capacity_tokens,
            block_size=self.core.block_size,
            prefill_tokens_per_s=self.core.prefill_tokens_per_s,
        )

    def routing_report(self, now: float, period_s: float) -> ReplicaStats:
        """The report the router holds at ``now``: read afresh once ``period_s`` has passed
        since the last read (always, when 0), so it is up to ``period_s`` old."""
        if self.report is None or now - self.report_at >= period_s:
            self.report, self.report_at = self.routing_stats(), now
        return self.report

    def metrics(self, now: float) -> ReplicaMetrics:
        """What the replica would report at ``now`` (busy fraction and TTFT P95 over the
        core's sliding windows, in virtual time)."""
        return ReplicaMetrics.from_stats(self.replica_id, self.core.stats(now), self.ongoing)

    def stop(self, now: float) -> None:
        if self.stopped_at is None:
            self.stopped_at = now

    def lifetime(self, end: float) -> float:
        return (self.stopped_at if self.stopped_at is not None else end) - self.started_at
