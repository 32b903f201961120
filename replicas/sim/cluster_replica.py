"""One replica inside the cluster simulator: an ``EngineCore`` plus the router's and the
autoscaler's view of it (in-flight count, readiness, draining, busy time)."""

from __future__ import annotations

from autoscaler.types import ReplicaMetrics
from replicas.sim.core import CoreConfig, EngineCore
from replicas.sim.kv_cache import KVEventCallback
from replicas.sim.request import SimRequest
from replicas.sim.scheduler import Batch
from router.types import ReplicaView


class SimReplica:
    __slots__ = (
        "replica_id",
        "core",
        "ongoing",
        "batch",
        "batch_start",
        "gen",
        "ready",
        "draining",
        "started_at",
        "stopped_at",
        "served",
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
        self.started_at = now
        self.stopped_at: float | None = None
        self.served = 0

    @property
    def routable(self) -> bool:
        return self.ready and not self.draining

    def finish_step(self, now: float) -> list[SimRequest]:
        assert self.batch is not None
        out = self.core.end_step(self.batch, self.batch_start, now)
        self.batch = None
        return [r for r in out if r.finish_reason is not None]

    def view(self) -> ReplicaView:
        sch = self.core.scheduler
        return ReplicaView(
            self.replica_id,
            ongoing=self.ongoing,
            waiting=len(sch.waiting),
            running=len(sch.running),
            waiting_prefill_tokens=max(0, sch.pending_prefill),
            kv_usage=self.core.kv.pool.usage(),
            kv_capacity_tokens=self.core.kv_capacity_tokens,
            block_size=self.core.block_size,
            prefill_tokens_per_s=self.core._prefill_rate,
        )

    def metrics(self, now: float) -> ReplicaMetrics:
        """What the replica would report at ``now`` (busy fraction and TTFT P95 over the
        core's sliding windows, in virtual time)."""
        return ReplicaMetrics.from_stats(self.replica_id, self.core.stats(now), self.ongoing)

    def stop(self, now: float) -> None:
        if self.stopped_at is None:
            self.stopped_at = now

    def lifetime(self, end: float) -> float:
        return (self.stopped_at if self.stopped_at is not None else end) - self.started_at
