"""The twin's replica lifecycle: launch, retire, and a scaling tick (ask the policy, then
start, wake, drain or put replicas to sleep). ``ClusterSim`` inherits it; the state it works
on (replicas, the event heap, the warm pool) is the simulator's, declared below.

A scale-up wakes sleepers of the warm pool first (``warm_pool.py``), then takes over
replicas booting into the pool, then boots new ones (ready after ``startup_s``). A
scale-down cancels starting replicas first, then drains the least busy (``scaling.py``); a
replica that leaves goes to sleep while the pool is short, else it is retired. The pool
refills itself on every tick. Replica-seconds count from launch to retirement (or sleep).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autoscaler.common import clamp
from autoscaler.types import MetricsSnapshot, ScalingConfig, ScalingPolicy
from cluster.twin.config import ClusterConfig
from cluster.twin.replica import SimReplica
from cluster.twin.scaling import plan_scaling
from cluster.twin.warm_pool import WarmPool
from router.bookkeeping import FleetBook
from router.types import RoutingPolicy

READY = 2  # the event kind ``fleet`` dispatches when a started replica can serve


class ReplicaLifecycle:
    config: ClusterConfig
    now: float
    replicas: dict[str, SimReplica]
    retired: list[SimReplica]
    pool: WarmPool
    book: FleetBook
    policy: RoutingPolicy | None
    scaler: ScalingPolicy[Any] | None
    scaling: ScalingConfig
    scale_state: Any
    scale_log: list[tuple[float, int]]
    ingress: deque[Any]
    _next_id: int
    if TYPE_CHECKING:  # the simulator's, used here

        def _push(self, t: float, kind: int, obj: Any) -> None: ...
        def _kv_callback(self, rid: str) -> Callable[[str, tuple[int, ...]], None] | None: ...

    def _launch(self, ready_at: float, for_pool: bool = False) -> SimReplica:
        rid = f"replica-{self._next_id:03d}"
        self._next_id += 1
        rep = SimReplica(rid, self.config.core, self.now, self._kv_callback(rid))
        rep.for_pool = for_pool
        self.replicas[rid] = rep
        if ready_at <= self.now:
            rep.ready = True
        else:
            self._push(ready_at, READY, rep)
        return rep

    def _retire(self, rep: SimReplica) -> None:
        from router.types import ReplicaGone

        rep.stop(self.now)
        self.retired.append(self.replicas.pop(rep.replica_id))
        assert self.policy is not None
        self.book.gone(rep.replica_id)
        self.policy.observe(ReplicaGone(rep.replica_id, self.now))

    def _grow(self) -> None:
        """One more serving replica: wake a sleeper, else take over one booting into the
        pool, else boot a new one."""
        if self.pool.take(self.now):
            self._launch(ready_at=self.now + self.config.pool.wake_s)
            return
        filler = self._filler()
        if filler is not None:
            filler.for_pool = False
            self.pool.filling -= 1
            return
        self._launch(ready_at=self.now + self.config.startup_s)

    def _filler(self) -> SimReplica | None:
        """A replica booting into the warm pool, the one launched last."""
        fillers = [r for r in self.replicas.values() if r.for_pool]
        return max(fillers, key=lambda r: r.started_at, default=None)

    def _release(self, rep: SimReplica) -> None:
        """A replica leaving the fleet (drained, or cancelled while starting): into the warm
        pool while it is short (one still starting finishes booting into it), else retired.
        A loaded replica takes the place of one still booting into the pool."""
        filler = self._filler() if rep.ready and self.pool.shortfall() == 0 else None
        if filler is not None:
            filler.for_pool = False
            self.pool.filling -= 1
            self._retire(filler)
        if self.pool.shortfall() == 0:
            self._retire(rep)
        elif not rep.ready:
            rep.draining, rep.for_pool = False, True
            self.pool.filling += 1
        else:
            self._sleep(rep)

    def _sleep(self, rep: SimReplica) -> None:
        """Offload the weights (``sleep_s``, counted awake) and join the sleepers: the
        replica's GPU memory, KV cache included, is free; waking it is a new replica."""
        asleep_at = self.now + self.config.pool.sleep_s
        rep.stop(asleep_at)
        self._retire(rep)
        self.pool.put(asleep_at)

    def _scale(self) -> None:
        assert self.scaler is not None
        cfg = self.scaling
        live = [r for r in self.replicas.values() if not r.draining and not r.for_pool]
        snapshot = MetricsSnapshot(
            now=self.now,
            current_replicas=len(live),
            replicas=tuple(r.metrics(self.now) for r in live if r.ready),
            pending_requests=float(len(self.ingress)),
            warm_replicas=len(self.pool.asleep),
        )
        desired, self.scale_state = self.scaler.decide(snapshot, cfg, self.scale_state)
        desired = clamp(int(desired), cfg)
        if desired != len(live):
            self.scale_log.append((self.now, desired))
            plan = plan_scaling(desired, live)
            for _ in range(plan.launch):
                self._grow()
            for rep in plan.cancel:
                rep.draining = True
                self._release(rep)
            for rep in plan.drain:
                rep.draining = True
                if rep.ongoing == 0 and rep.batch is None:
                    self._release(rep)
        for _ in range(self.pool.shortfall()):  # refill the warm pool
            self.pool.filling += 1
            self._launch(ready_at=self.now + self.config.startup_s, for_pool=True)
