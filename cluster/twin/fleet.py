"""Discrete-event cluster simulator: N simulated engines + a routing policy (+ autoscaler)
on a virtual clock, no sleeping.

Events on one heap, ordered by virtual time:
  arrival (merged from the sorted workload) -> views from the router's bookkeeping
  (``router.bookkeeping.FleetBook``, shared with the live Ray adapter, fed each replica's
  routing report read now) -> policy.choose -> engine.add; an idle
  engine starts a step at once;  step end -> apply the batch, stream tokens, retire
  finished requests, start the next step;  tick (every ``tick_s``) -> sample imbalance,
  build a MetricsSnapshot, ask the scaling policy, start replicas (ready after
  ``startup_s``) or drain the least busy ones; with a warm pool (``warm_pool.py``) wake
  sleeping replicas first and put drained ones to sleep.
Multi-turn sessions are closed loops: a turn is sent at max(its arrival, previous turn's
end). Requests nobody can take (no ready replica) wait at the ingress.
"""

from __future__ import annotations

import heapq
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.types import ScalingConfig, ScalingPolicy
from bench.types import RequestRecord, RequestSpec
from cluster.twin.config import ClusterConfig
from cluster.twin.lifecycle import READY, ReplicaLifecycle
from cluster.twin.replica import SimReplica
from cluster.twin.scaling import imbalance
from cluster.twin.warm_pool import WarmPool
from replicas.sim import profiles
from replicas.sim.request import SimRequest
from router.bookkeeping import FleetBook
from router.types import (
    Completed,
    NoReplicaAvailable,
    ReplicaView,
    Routed,
    RoutingPolicy,
)
from router.views import make_request_view

STEP, TICK, ARRIVE, DRAIN, KV_EVENT = 0, 1, 3, 4, 5  # event kinds (READY = 2: lifecycle)
STUCK_AFTER_S = 3600.0  # virtual seconds without progress before giving up


@dataclass(slots=True)
class _Pending:
    spec: RequestSpec
    send_s: float


class ClusterSim(ReplicaLifecycle):
    def __init__(
        self,
        config: ClusterConfig,
        policy: RoutingPolicy | None = None,
        scaler: ScalingPolicy | None = None,
        scaling: ScalingConfig | None = None,
        policy_factory: Callable[[ClusterSim], RoutingPolicy] | None = None,
    ) -> None:
        self.config = config
        self.now = 0.0
        self.replicas: dict[str, SimReplica] = {}
        self.retired: list[SimReplica] = []
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._next_id = 0
        self.ingress: deque[_Pending] = deque()
        self.records: dict[int, RequestRecord] = {}
        self.imbalance_samples: list[float] = []
        self.scaler, self.scaling = scaler, scaling or ScalingConfig()
        self.scale_state: Any = scaler.initial_state() if scaler is not None else None
        self.scale_log: list[tuple[float, int]] = []
        for _ in range(config.replicas):
            self._launch(ready_at=0.0)
        self.pool = WarmPool.full(config.pool)
        hw = profiles.hardware(config.core.hardware)
        self.block_size = config.core.block_size or hw.default_block_size
        fresh = config.stats_period_s <= 0
        self.book = FleetBook(block_size=self.block_size, fresh_reports=fresh)
        self.policy = policy_factory(self) if policy_factory else policy
        if self.policy is None:
            raise ValueError("need a routing policy")

    # ---- public helpers -------------------------------------------------------------
    def cache_lookup(self, replica_id: str, hashes: Sequence[int]) -> int:
        rep = self.replicas.get(replica_id)
        if rep is None:
            return 0
        return rep.core.kv.pool.lookup(hashes, len(hashes))

    def run(self, specs: Sequence[RequestSpec], arrivals: Sequence[float]) -> list[RequestRecord]:
        order = sorted(range(len(specs)), key=lambda i: arrivals[i])
        sessions: dict[str, deque[tuple[RequestSpec, float]]] = defaultdict(deque)
        first: list[tuple[float, RequestSpec]] = []
        for i in order:
            spec, t = specs[i], arrivals[i]
            if spec.session_id is not None:
                sessions[spec.session_id].append((spec, t))
                if len(sessions[spec.session_id]) > 1:
                    continue
            first.append((t, spec))
        self._sessions = sessions
        self._total = len(specs)
        self._done = 0
        self._last_progress = 0.0
        self._arrivals_left = len(first)
        self._push(0.0, TICK, None)
        wall, cpu = time.perf_counter(), time.process_time()
        i = 0
        heap = self._heap
        while self._done < self._total:
            t_arr = first[i][0] if i < len(first) else float("inf")
            if heap and heap[0][0] < t_arr:
                t, _, kind, obj = heapq.heappop(heap)
                self.now = t
                self._dispatch(kind, obj)
            elif i < len(first):
                self.now = t_arr
                self._arrive(first[i][1], t_arr)
                i += 1
                self._arrivals_left -= 1
            else:
                break  # stuck (no replica can ever take the rest): mark it below
        for j, spec in enumerate(specs):
            if spec.index not in self.records:
                self.records[spec.index] = RequestRecord(spec.index, arrivals[j], arrivals[j])
        for rec in self.records.values():
            if rec.error is None and rec.e2e_s is None:
                rec.error = "unfinished"
        self.wall_s = time.perf_counter() - wall
        self.cpu_s = time.process_time() - cpu  # robust to other processes sharing the cores
        for rep in self.replicas.values():
            rep.stop(self.now)
        self.pool.filling = 0  # replicas still booting into the pool: stopped above
        return [self.records[k] for k in sorted(self.records)]

    # ---- events ---------------------------------------------------------------------
    def _push(self, t: float, kind: int, obj: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, obj))

    def _dispatch(self, kind: int, obj: Any) -> None:
        if kind == STEP:
            rep, gen = obj
            if gen == rep.gen:
                self._step(rep)
        elif kind == ARRIVE:
            spec, intended = obj
            self._arrive(spec, intended)
        elif kind == TICK:
            self._tick()
        elif kind == READY:
            obj.ready = True
            if obj.for_pool:  # booted into the warm pool: straight to sleep
                self.pool.filling -= 1
                self._sleep(obj)
            self._drain_ingress()
        elif kind == DRAIN:
            self._drain_ingress()
        elif kind == KV_EVENT and self.policy is not None:
            cls, rid, hashes = obj
            self.policy.observe(cls(rid, hashes, self.now))

    def _arrive(self, spec: RequestSpec, intended: float) -> None:
        self.records[spec.index] = RequestRecord(spec.index, intended, self.now)
        self.ingress.append(_Pending(spec, self.now))
        self._drain_ingress()

    def _drain_ingress(self) -> None:
        while self.ingress:
            views = [self._view(r) for r in self.replicas.values() if r.routable]
            if not views:
                return
            pending = self.ingress.popleft()
            if not self._route(pending, views):
                self.ingress.appendleft(pending)
                return

    def _view(self, rep: SimReplica) -> ReplicaView:
        stats = rep.routing_report(self.now, self.config.stats_period_s)
        return self.book.view(rep.replica_id, stats, queue_len=rep.ongoing, now=self.now)

    def _route(self, pending: _Pending, views: list[ReplicaView]) -> bool:
        spec = pending.spec
        view = make_request_view(
            str(spec.index),
            spec.prompt_token_ids,
            block_size=self.block_size,
            expected_output_tokens=spec.output_tokens,
            model=self.config.model_name,
            session_id=spec.session_id,
        )
        assert self.policy is not None
        try:
            decision = self.policy.choose(view, views)
        except NoReplicaAvailable:
            return False
        self.book.decided(view.request_id, decision.replica_id, decision.matched_blocks, self.now)
        rep = self.replicas[decision.replica_id]
        req = SimRequest(
            view.request_id,
            len(view.token_ids),
            view.block_hashes,
            spec.output_tokens,
            payload=spec,
        )
        rec = self.records[spec.index]
        rec.replica = rep.replica_id
        try:
            rep.core.add(req, self.now)
        except ValueError as exc:
            self.book.withdraw(view.request_id)
            rec.error = "kv_capacity" if "KV cache" in str(exc) else "prompt_too_long"
            self._done += 1
            self._finish_session(spec)
            return True
        self.book.routed(view.request_id, view, rep.replica_id, self.now)
        self.policy.observe(Routed(view, rep.replica_id, self.now))
        rep.ongoing += 1
        if rep.batch is None:
            self._step(rep)
        return True

    def _step(self, rep: SimReplica) -> None:
        now = self._last_progress = self.now
        if rep.batch is not None:
            done = rep.finish_step(now)
            for req in done:
                self._complete(rep, req)
        batch, dt = rep.core.begin_step(now)
        rep.gen += 1
        if batch is not None:
            rep.batch, rep.batch_start = batch, now
            self._push(now + dt, STEP, (rep, rep.gen))
            return
        rep.batch = None
        wake = rep.core.scheduler.next_wakeup()
        if wake is not None:
            self._push(max(wake, now), STEP, (rep, rep.gen))
        if rep.draining and rep.ongoing == 0:
            self._release(rep)

    def _complete(self, rep: SimReplica, req: SimRequest) -> None:
        spec: RequestSpec = req.payload  # type: ignore[assignment]
        rec = self.records[spec.index]
        t0 = rec.send_s
        rec.prompt_tokens = req.prompt_len
        rec.output_tokens = req.num_output
        rec.cached_tokens = req.cached_tokens
        rec.ttft_s = (req.first_token_time or self.now) - t0
        rec.e2e_s = self.now - t0
        rec.token_times_s = req.token_times
        rep.ongoing -= 1
        self._done += 1
        if self.ingress:  # a slot freed: retry held requests after this step completes
            self._push(self.now, DRAIN, None)
        assert self.policy is not None
        done = self.book.completed(req.request_id)
        if done is not None:
            self.policy.observe(Completed(done[0], done[1], self.now))
        self._finish_session(spec)

    def _finish_session(self, spec: RequestSpec) -> None:
        if spec.session_id is None:
            return
        queue = self._sessions[spec.session_id]
        queue.popleft()
        if queue:
            nxt, t = queue[0]
            self._push(max(t, self.now), ARRIVE, (nxt, t))

    # ---- replicas and autoscaling -----------------------------------------------------
    def _kv_callback(self, rid: str) -> Callable[[str, tuple[int, ...]], None] | None:
        if not self.config.kv_events:
            return None
        from router.types import KVBlocksRemoved, KVBlocksStored

        delay = self.config.kv_event_delay_s

        def emit(kind: str, hashes: tuple[int, ...]) -> None:
            cls = KVBlocksStored if kind == "stored" else KVBlocksRemoved
            if self.policy is None:
                return
            if delay > 0:  # delivered later, stamped with the delivery time like a subscriber
                self._push(self.now + delay, KV_EVENT, (cls, rid, hashes))
            else:
                self.policy.observe(cls(rid, hashes, self.now))

        return emit

    def _tick(self) -> None:
        ratio = imbalance([r.ongoing for r in self.replicas.values() if r.routable])
        if ratio is not None:
            self.imbalance_samples.append(ratio)
        if self.scaler is not None:
            self._scale()
        if self._arrivals_left == 0 and all(len(q) <= 1 for q in self._sessions.values()):
            self._flush_partial_batches()
        if self._done < self._total and self.now - self._last_progress < STUCK_AFTER_S:
            self._push(self.now + self.config.tick_s, TICK, None)

    def _flush_partial_batches(self) -> None:
        """Static batching would wait forever for a full last batch: release it."""
        for rep in list(self.replicas.values()):
            if rep.batch is None and rep.core.scheduler.waiting:
                rep.core.scheduler.flush()
                self._step(rep)
