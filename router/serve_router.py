"""Ray Serve adapter: a ``RequestRouter`` that delegates to a pure ``RoutingPolicy``.

Per request ``choose_replicas`` converts each ``RunningReplica`` into a ``ReplicaView``
(its ``routing_stats`` is ``ReplicaStats.to_wire()``; ``ongoing`` = this router's own
in-flight count, or Ray's queue-length cache when that is larger), reads the ingress's
``RequestView`` from ``pending_request.args[0]["view"]``, asks the policy and returns ranked
tiers ``[[chosen], [others by score]]`` so Serve can back off to the rest when the chosen one
is full. Without a view it falls back to power-of-two choices. Hooks feed ``observe``:
``on_request_routed`` → Routed, ``on_request_completed`` → Completed,
``on_replica_actor_died`` / a replica leaving ``update_replicas`` → ReplicaGone.
Nothing blocks the event loop: the index lives in this process. With policy
``prefix-precise`` and ``kv_events_endpoint_template`` (e.g.
``"ipc:///tmp/llmfleet-kv-{replica_id}"``), one ZMQ subscriber per replica feeds KV events
to the policy through ``loop.call_soon_threadsafe``.
Decisions are counted by reason in the Serve counter ``ROUTER_DECISIONS``; KV events applied
to the index by kind in ``ROUTER_KV_EVENTS`` (both also in ``decision_counts`` /
``kv_event_counts``).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from contracts.stats import from_wire
from router.kv_subscriber import KVEventSubscriber
from router.outstanding import OutstandingPrefill
from router.registry import make_policy
from router.types import (
    Completed,
    KVBlocksStored,
    NoReplicaAvailable,
    ReplicaGone,
    ReplicaView,
    RequestView,
    Routed,
    RouterEvent,
    RoutingDecision,
    RoutingPolicy,
)
from router.views import replica_view_from_stats

log = logging.getLogger(__name__)
ROUTER_DECISIONS = "llmfleet_router_decisions"
ROUTER_KV_EVENTS = "llmfleet_router_kv_events"
PENDING_TTL_S = 30.0


def request_view_of(pending_request: PendingRequest | None) -> RequestView | None:
    if pending_request is None or not pending_request.args:
        return None
    payload = pending_request.args[0]
    view = payload.get("view") if isinstance(payload, dict) else None
    return view if isinstance(view, RequestView) else None


def rank_tiers(decision: RoutingDecision, candidates: Sequence[Any]) -> list[list[Any]]:
    chosen = [r for r in candidates if r.replica_id.unique_id == decision.replica_id]
    rest = [r for r in candidates if r.replica_id.unique_id != decision.replica_id]
    rest.sort(key=lambda r: -decision.scores.get(r.replica_id.unique_id, 0.0))
    return [tier for tier in (chosen, rest) if tier]


def _make_counter(name: str, description: str, tag_keys: tuple[str, ...]) -> Any:
    try:
        from ray.serve.metrics import Counter

        # Ray annotates tag_keys as tuple[str] (one element)
        return Counter(name, description=description, tag_keys=tag_keys)  # type: ignore[arg-type]
    except Exception as exc:  # metrics need a Ray worker; unit tests have none
        log.debug("router counter %s disabled: %s", name, exc)
        return None


def _hand_over(loop: asyncio.AbstractEventLoop, fn: Any, ev: RouterEvent) -> None:
    if not loop.is_closed():
        loop.call_soon_threadsafe(fn, ev)


class LLMFleetRequestRouter(RequestRouter):
    def initialize_state(  # type: ignore[override]  # Serve passes request_router_kwargs
        self,
        policy: str = "prefix",
        config: dict[str, Any] | None = None,
        block_size: int = 16,
        seed: int = 0,
        kv_events_endpoint_template: str | None = None,
        single_caller: bool = True,
    ) -> None:
        self.policy_name = policy
        self.policy: RoutingPolicy = make_policy(
            policy, seed=seed, block_size=block_size, config=config
        )
        self.block_size = block_size
        self.rng = random.Random(seed)
        self.inflight: collections.Counter[str] = collections.Counter()
        self.routed: dict[str, tuple[str, str]] = {}  # internal id -> (request id, replica)
        self.decision_counts: collections.Counter[str] = collections.Counter()
        self.single_caller = single_caller
        self.outstanding = OutstandingPrefill()
        self.rates: dict[str, float] = {}  # replica -> last reported prefill tokens/s
        # request id -> (chosen replica, matched blocks, decided at): decided, not yet routed.
        # Ray awaits the replica's acceptance between choose_replicas and on_request_routed,
        # so a burst of concurrent requests would all see the same in-flight counts; these
        # pending decisions count as in flight on their chosen replica until routed (or
        # PENDING_TTL_S, for requests that never get routed).
        self.matched: dict[str, tuple[str, int, float]] = {}
        self.pending: collections.Counter[str] = collections.Counter()
        self.kv_template = kv_events_endpoint_template if policy == "prefix-precise" else None
        self.subscribers: dict[str, KVEventSubscriber] = {}
        self.known: set[str] = set()
        self._counter = _make_counter(
            ROUTER_DECISIONS,
            "Routing decisions by policy and reason (affinity, balance, fallback).",
            ("policy", "reason"),
        )
        self.kv_event_counts: collections.Counter[str] = collections.Counter()
        self._kv_counter = (
            _make_counter(
                ROUTER_KV_EVENTS,
                "vLLM KV cache events applied to the prefix index, by kind (stored, removed).",
                ("kind",),
            )
            if self.kv_template
            else None
        )

    def _state_ready(self) -> bool:
        return hasattr(self, "policy")

    # ---- conversion -----------------------------------------------------------------
    def replica_view(self, replica: RunningReplica) -> ReplicaView:
        rid = replica.replica_id.unique_id
        cached = self.replica_queue_len_cache.get(replica.replica_id) or 0
        stats = from_wire(replica.routing_stats, strict=False)  # bad report: logged, counted
        if self.single_caller and max(self.inflight[rid], cached) == 0:
            # Stats are polled periodically: a replica this (only) router has nothing in
            # flight at is idle, whatever its last report said about queued work.
            stats = dataclasses.replace(stats, waiting=0, running=0, waiting_prefill_tokens=0)
        view = replica_view_from_stats(
            rid,
            stats,
            ongoing=max(self.inflight[rid], cached) + self.pending[rid],
            max_ongoing=replica.max_ongoing_requests,
            default_block_size=self.block_size,
        )
        self.rates[rid] = view.prefill_tokens_per_s
        own = self.outstanding.get(rid, view.prefill_tokens_per_s)
        if own > view.waiting_prefill_tokens:
            view = dataclasses.replace(view, waiting_prefill_tokens=own)
        return view

    def _count(self, reason: str) -> None:
        self.decision_counts[reason] += 1
        if self._counter is not None:
            self._counter.inc(tags={"policy": self.policy_name, "reason": reason})

    def _p2c(self, views: list[ReplicaView]) -> RoutingDecision:
        pair = views if len(views) <= 2 else self.rng.sample(views, 2)
        best = min(pair, key=lambda v: max(v.ongoing, v.waiting + v.running))
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
        self._ensure_subscribers(candidate_replicas)
        views = [self.replica_view(r) for r in candidate_replicas]
        request = request_view_of(pending_request)
        try:
            decision = self._p2c(views) if request is None else self.policy.choose(request, views)
        except NoReplicaAvailable:
            self._count("fallback")
            return [list(candidate_replicas)]
        self._count(decision.reason)
        if request is not None:
            self._expire_pending(time.monotonic())
            self._unpend(request.request_id)  # Ray may ask again for the same request
            now = time.monotonic()
            self.matched[request.request_id] = (decision.replica_id, decision.matched_blocks, now)
            self.pending[decision.replica_id] += 1
        return rank_tiers(decision, candidate_replicas)

    def _unpend(self, request_id: str) -> tuple[str, int] | None:
        entry = self.matched.pop(request_id, None)
        if entry is None:
            return None
        rid, blocks, _ = entry
        if self.pending[rid] > 1:
            self.pending[rid] -= 1
        else:
            self.pending.pop(rid, None)
        return rid, blocks

    def _expire_pending(self, now: float) -> None:
        while self.matched:  # insertion order = decision order
            request_id, (_, _, at) = next(iter(self.matched.items()))
            if now - at <= PENDING_TTL_S:
                break
            self._unpend(request_id)

    # ---- lifecycle hooks ------------------------------------------------------------
    def _observe(self, event: RouterEvent) -> None:
        if self._state_ready():
            self.policy.observe(event)

    def _on_kv_event(self, event: RouterEvent) -> None:
        kind = "stored" if isinstance(event, KVBlocksStored) else "removed"
        self.kv_event_counts[kind] += 1
        if self._kv_counter is not None:
            self._kv_counter.inc(tags={"kind": kind})
        self._observe(event)

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        rid = replica_id.unique_id
        self.inflight[rid] += 1
        request = request_view_of(pending_request)
        internal_id = pending_request.metadata.internal_request_id
        self.routed[internal_id] = (request.request_id if request else internal_id, rid)
        if request is not None:
            chosen, blocks = self._unpend(request.request_id) or (rid, 0)
            cached = blocks * self.block_size if chosen == rid else 0
            self.outstanding.add(rid, request.prompt_tokens - cached, self.rates.get(rid, 0.0))
            self._observe(Routed(request, rid, time.monotonic()))

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        request_id, rid = self.routed.pop(
            internal_request_id, (internal_request_id, replica_id.unique_id)
        )
        if self.inflight[rid] > 0:
            self.inflight[rid] -= 1
        self._observe(Completed(request_id, rid, time.monotonic()))

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
        self.known = alive

    def _forget(self, rid: str) -> None:
        self.known.discard(rid)
        if self._state_ready():
            self.outstanding.forget(rid)
        self.inflight.pop(rid, None)
        sub = self.subscribers.pop(rid, None) if self._state_ready() else None
        if sub is not None:
            sub.stop(timeout=0)
        self._observe(ReplicaGone(rid, time.monotonic()))

    # ---- precise mode: KV event subscribers -----------------------------------------
    def _ensure_subscribers(self, replicas: Sequence[RunningReplica]) -> None:
        if self.kv_template is None:
            return
        loop = asyncio.get_running_loop()
        for r in replicas:
            rid = r.replica_id.unique_id
            self.known.add(rid)
            if rid not in self.subscribers:
                endpoint = self.kv_template.format(replica_id=rid)
                self.subscribers[rid] = KVEventSubscriber(
                    endpoint,
                    rid,
                    lambda ev: _hand_over(loop, self._on_kv_event, ev),
                    block_size=self.block_size,
                ).start()
