"""Ray Serve adapter: a ``RequestRouter`` that delegates to a pure ``RoutingPolicy``
(docs/routing.md, "The Ray adapter").

Serve calls ``choose_replicas(candidates, pending_request)`` per routing round, then
``on_request_routed`` once the chosen replica accepted and ``on_request_completed`` when it
finishes; ``update_replicas`` / ``on_replica_actor_died`` on fleet changes. The adapter
converts and forwards:
- a ``RunningReplica`` → ``FleetBook.view`` (``router/bookkeeping.py``: in-flight counts,
  pending decisions, outstanding prefill, stale-report correction) of its decoded
  ``routing_stats``, Ray's queue-length cache and ``max_ongoing_requests``;
- ``pending_request.args[0]``: the ingress's ``RequestView`` (``"view"``; without one,
  power of two choices) and the replicas to skip (``"avoid"``); the answer is ranked tiers
  ``[[chosen], [others by score]]``;
- hooks → policy events: Routed, Completed, ReplicaGone.
Rounds of a request no replica can take yet are paced by ``retry_pacer.py``. Nothing
blocks the event loop: ``serve_snapshot.py`` saves and restores the index in the status
actor; with ``share_routes`` (several ingress replicas), ``serve_share.py`` exchanges routes
with the other routers (``PeerRouted``; routes to unknown replicas dropped); in
``prefix-precise`` mode one ZMQ subscriber per replica (``kv_subscriber.KVSubscriptions``,
``kv_events_endpoint_template``) feeds KV events through ``loop.call_soon_threadsafe``.
Metrics: ``self.metrics`` (``serve_metrics.py``: the ``ROUTER_*`` counters and their local
mirrors; ``use_counters`` swaps the factory). Time: ``self.clock``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from contracts.stats import ReplicaStats, from_wire
from router.admission import ledger_for
from router.bookkeeping import FleetBook
from router.kv_subscriber import KVSubscriptions
from router.registry import make_policy
from router.retry_pacer import RetryPacer, is_retry
from router.route_share import SharedRoute
from router.scorers import queue_depth
from router.serve_metrics import CounterFactory, RouterCounters, serve_counter
from router.serve_share import PeerShare
from router.serve_snapshot import IndexSnapshots
from router.types import (
    Completed,
    KVBlocksStored,
    NoReplicaAvailable,
    PeerRouted,
    ReplicaGone,
    ReplicaView,
    RequestView,
    Routed,
    RouterEvent,
    RoutingDecision,
    RoutingPolicy,
)


def request_view_of(pending_request: PendingRequest | None) -> RequestView | None:
    if pending_request is None or not pending_request.args:
        return None
    payload = pending_request.args[0]
    view = payload.get("view") if isinstance(payload, dict) else None
    return view if isinstance(view, RequestView) else None


def avoided_of(pending_request: PendingRequest | None) -> frozenset[str]:
    """Replicas the ingress asks to skip (its circuit breaker, replicas that failed this
    request): ``payload["avoid"]``."""
    if pending_request is None or not pending_request.args:
        return frozenset()
    payload = pending_request.args[0]
    avoid = payload.get("avoid") if isinstance(payload, dict) else None
    return avoid if isinstance(avoid, frozenset) else frozenset()


def rank_tiers(decision: RoutingDecision, candidates: Sequence[Any]) -> list[list[Any]]:
    chosen = [r for r in candidates if r.replica_id.unique_id == decision.replica_id]
    rest = [r for r in candidates if r.replica_id.unique_id != decision.replica_id]
    rest.sort(key=lambda r: -decision.scores.get(r.replica_id.unique_id, 0.0))
    return [tier for tier in (chosen, rest) if tier]


class LLMFleetRequestRouter(RequestRouter):
    def initialize_state(  # type: ignore[override]  # Serve passes request_router_kwargs
        self,
        policy: str = "prefix",
        config: dict[str, Any] | None = None,
        block_size: int = 16,
        seed: int = 0,
        kv_events_endpoint_template: str | None = None,
        single_caller: bool = True,
        snapshot_store: str | None = None,
        snapshot_key: str = "router",
        share_routes: bool = False,
    ) -> None:
        self.policy_name = policy
        self.snapshots = IndexSnapshots(snapshot_store, snapshot_key)
        self.peers = (
            PeerShare(
                snapshot_store,
                snapshot_key,
                self._apply_peer_routes,
                on_freed=self._peer_freed,
            )
            if share_routes and snapshot_store is not None
            else None
        )
        self.peer_routes_dropped = 0
        self.policy: RoutingPolicy = make_policy(
            policy, seed=seed, block_size=block_size, config=config
        )
        self.block_size = block_size
        self.rng = random.Random(seed)
        self.clock: Callable[[], float] = time.monotonic
        self.book = FleetBook(block_size=block_size, single_caller=single_caller)
        self.pacer = RetryPacer()  # rounds of a request no replica could take yet
        deployment = getattr(getattr(self, "_deployment_id", None), "name", None)
        self.admission = ledger_for(deployment) if deployment else None
        if self.admission is not None:  # the ingress's load shedding asks us
            self.admission.attach(self.free_and_reserved, self.replica_count)
        self._decoded: dict[str, tuple[Mapping[str, Any] | None, ReplicaStats]] = {}
        template = kv_events_endpoint_template if policy == "prefix-precise" else None
        self.kv = KVSubscriptions(template, self._on_kv_event, block_size) if template else None
        self.known: set[str] = set()
        self.use_counters(serve_counter)

    def use_counters(self, make: CounterFactory) -> None:
        """(Re)create the exported counters with ``make`` (tests pass fakes)."""
        self.metrics = RouterCounters(self.policy_name, make, kv_events=self.kv is not None)

    def _state_ready(self) -> bool:
        return hasattr(self, "policy")

    # ---- conversion -----------------------------------------------------------------
    def replica_view(self, replica: RunningReplica, now: float | None = None) -> ReplicaView:
        rid = replica.replica_id.unique_id
        return self.book.view(
            rid,
            self._decode(rid, replica.routing_stats),
            queue_len=self.replica_queue_len_cache.get(replica.replica_id) or 0,
            max_ongoing=replica.max_ongoing_requests,
            now=self.clock() if now is None else now,
        )

    def _decode(self, replica_id: str, raw: Mapping[str, Any] | None) -> ReplicaStats:
        """The replica's last report as a record, decoded once per report: Serve replaces the
        dict on every poll, so an unchanged object is an unchanged report. Bad reports are
        logged and counted by ``from_wire`` and read as neutral stats."""
        last = self._decoded.get(replica_id)
        if last is not None and last[0] is raw:
            return last[1]
        stats = from_wire(raw, strict=False)
        self._decoded[replica_id] = (raw, stats)
        return stats

    def _p2c(self, views: list[ReplicaView]) -> RoutingDecision:
        pair = views if len(views) <= 2 else self.rng.sample(views, 2)
        best = min(pair, key=queue_depth)
        return RoutingDecision(best.replica_id, "fallback")

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        if not self._state_ready():
            self.initialize_state()
        if not self.snapshots.restored:
            await self.snapshots.restore(self.policy)
        if self.peers is not None and not self.peers.started:
            self.peers.start()
        fleet = getattr(self, "_replicas_list", None)  # Serve's list, replaced on a change
        context = getattr(pending_request, "routing_context", None)
        request = request_view_of(pending_request)
        if request is not None and is_retry(context):
            self.book.withdraw(request.request_id)  # not placed: queued, holding no slot
        await self.pacer.before_round(context)
        if candidate_replicas is fleet and self._replicas_list is not fleet:
            candidate_replicas = self._replicas_list  # changed while waiting: a new replica
            if not candidate_replicas:
                return []
        avoid = avoided_of(pending_request)
        if avoid:  # unless nothing else is left: a fleet of one still serves
            kept = [r for r in candidate_replicas if r.replica_id.unique_id not in avoid]
            candidate_replicas = kept or candidate_replicas
        if self.kv is not None:  # precise mode: the replicas' KV events feed the index
            ids = [r.replica_id.unique_id for r in candidate_replicas]
            self.known.update(ids)
            self.kv.ensure(ids)
        now = self.clock()
        views = [self.replica_view(r, now) for r in candidate_replicas]
        try:
            decision = self._p2c(views) if request is None else self.policy.choose(request, views)
        except NoReplicaAvailable:
            self.metrics.decision("fallback")
            return [list(candidate_replicas)]
        self.metrics.decision(decision.reason)
        if request is not None:
            chosen = next((v for v in views if v.replica_id == decision.replica_id), None)
            room = chosen is not None and chosen.ongoing < chosen.max_ongoing
            self.book.decided(
                request.request_id, decision.replica_id, decision.matched_blocks, now, room
            )
        self.snapshots.maybe_save(self.policy, now)
        return rank_tiers(decision, candidate_replicas)

    def free_and_reserved(self) -> tuple[int, int] | None:
        """For ``router.admission``: free slots over the fleet, and requests decided onto a
        free slot not yet accepted. May run on another thread (a dict changing under the
        read raises ``RuntimeError``, which the ledger reads as unknown)."""
        if not self._state_ready():
            return None
        free = reserved = 0
        for r in list(self._replicas_list):
            f, held = self.book.slots(r.replica_id.unique_id, r.max_ongoing_requests)
            free, reserved = free + f, reserved + held
        return free, reserved

    def replica_count(self) -> int | None:
        """For ``router.admission``: replicas this router can send to (Serve drops one it saw
        die at once, before the controller replaces it); None before the router has state."""
        if not self._state_ready():
            return None
        return len(self._replicas_list)

    # ---- lifecycle hooks ------------------------------------------------------------
    def _observe(self, event: RouterEvent) -> None:
        if self._state_ready():
            self.policy.observe(event)

    def _on_kv_event(self, event: RouterEvent) -> None:
        self.metrics.kv_event("stored" if isinstance(event, KVBlocksStored) else "removed")
        self._observe(event)

    def on_request_routed(
        self,
        pending_request: PendingRequest,
        replica_id: ReplicaID,
        result: Any,  # noqa: ARG002 (Serve passes it)
    ) -> None:
        request = request_view_of(pending_request)
        now = self.clock()
        key = pending_request.metadata.internal_request_id
        cached = self.book.routed(key, request, replica_id.unique_id, now)
        if request is not None:
            if self.admission is not None:
                self.admission.routed(request.request_id)
            self.metrics.tokens(request.prompt_tokens, cached)
            self._observe(Routed(request, replica_id.unique_id, now))
            if self.peers is not None:
                self.peers.record(replica_id.unique_id, request.block_hashes)

    def _apply_peer_routes(self, routes: list[SharedRoute]) -> None:
        now = self.clock()
        for route in routes:
            if route.replica_id in self.known:
                self._observe(PeerRouted(route.replica_id, route.block_hashes, now))
            else:
                self.peer_routes_dropped += 1

    def on_request_completed(
        self,
        replica_id: ReplicaID,  # noqa: ARG002 (Serve passes it; the book knows the route)
        internal_request_id: str,
    ) -> None:
        done = self.book.completed(internal_request_id)
        if done is None:  # rejected by a full replica: it never held a slot there
            return
        self._observe(Completed(done[0], done[1], self.clock()))
        self.pacer.freed()
        if self.peers is not None:
            self.peers.record_freed()  # the other routers' queued requests may take it

    def _peer_freed(self, n: int) -> None:
        if self._state_ready():
            self.pacer.freed_elsewhere(n)

    def on_new_queue_len_info(self, replica_id: ReplicaID, num_ongoing_requests: int) -> None:
        super().on_new_queue_len_info(replica_id, num_ongoing_requests)
        if self._state_ready():
            self.book.reported(replica_id.unique_id, num_ongoing_requests)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self._forget(replica_id.unique_id)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        if not self._state_ready():
            return
        alive = {r.replica_id.unique_id for r in replicas}
        for rid in self.known - alive:
            self._forget(rid)
        if alive - self.known:
            self.pacer.wake_all()  # a new replica: room for the queued requests
        self.known = alive

    def _forget(self, rid: str) -> None:
        if not self._state_ready():
            return
        self.known.discard(rid)
        self.book.gone(rid)
        self._decoded.pop(rid, None)
        if self.kv is not None:
            self.kv.drop(rid)
        self._observe(ReplicaGone(rid, self.clock()))
