"""Our prefix-cache-aware policy: filters → weighted scorers → picker.

Modes
- approximate (``prefix``): after ``Routed``, assume the chosen replica now holds the
  request's blocks (insert into the index, LRU-capped at the replica's KV capacity).
- precise (``prefix-precise``): the index also follows vLLM KV events (``KVBlocksStored``
  / ``KVBlocksRemoved``), so evictions and blocks cached for requests other routers sent
  are known exactly. A routed request's blocks are still inserted at once (speculatively):
  BlockStored arrives only after the prefill, and requests for the same new prefix in that
  window would otherwise scatter (docs/results/router.md). When a replica's events stop
  (``is_stale``: requests for ``fallback_after_s`` and no event), its entries keep coming
  from routing alone, capped by the LRU — the approximate mode — until events return.
  Both modes also insert the routes other routers made (``PeerRouted``, from
  ``router/route_share.py``), so several ingress replicas learn the whole traffic.
- oracle (``oracle``, simulator only): leading cached blocks come from an exact
  ``cache_lookup(replica_id, block_hashes)``; nothing is learned.
Scoring: the registered scorer plugins with a non-zero config weight
(``scorers.weighted_scorers``, built once), each scoring all bounded replicas per
decision, summed by ``pipeline.weighted_sum``.
Reasons: ``affinity`` (chosen replica holds the longest known prefix), ``balance`` (a
replica with a longer prefix existed but load won), ``fallback`` (no replica holds any of
the prefix; load decides).
Note: ``choose`` records each replica's reported KV capacity as a hint (it does not change
the decision); ``observe`` applies it to the index's LRU cap.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

from router.config import RouterConfig
from router.index import PrefixIndex
from router.load_share import LoadShare, PrefixHeat
from router.pipeline import available, pick_best, weighted_sum, within_load_bound
from router.scorers import ScoringContext, fleet_rate, queue_depth, weighted_scorers
from router.types import (
    Completed,
    KVBlocksRemoved,
    KVBlocksStored,
    PeerRouted,
    ReplicaGone,
    ReplicaView,
    RequestView,
    Routed,
    RouterEvent,
    RoutingDecision,
)

CacheLookup = Callable[[str, tuple[int, ...]], int]
MODE_APPROXIMATE = "approximate"
MODE_PRECISE = "precise"
MODE_ORACLE = "oracle"


class PrefixAwarePolicy:
    def __init__(
        self,
        *,
        name: str = "prefix",
        mode: str = MODE_APPROXIMATE,
        config: RouterConfig | None = None,
        block_size: int = 16,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        cache_lookup: CacheLookup | None = None,
        index: PrefixIndex | None = None,
    ) -> None:
        if mode == MODE_ORACLE and cache_lookup is None:
            raise ValueError("oracle mode needs cache_lookup(replica_id, block_hashes) -> int")
        self.name = name
        self.mode = mode
        self.config = config or RouterConfig()
        self.block_size = block_size
        self.clock = clock
        self.rng = rng or random.Random(0)
        self.cache_lookup = cache_lookup
        self.index = index or PrefixIndex(self.config.default_capacity_blocks)
        self.scorers = weighted_scorers(self.config.weights)
        self._capacity_hint: dict[str, int] = {}
        self._last_kv_event: dict[str, float] = {}
        self._unacked_since: dict[str, float] = {}  # first Routed after the last KV event
        self.load_share = LoadShare(self.config.share_window_s)
        self.prefix_heat = PrefixHeat(self.config.share_window_s)
        self._last_routed: float | None = None  # event clock of the last Routed

    # ---- decide ---------------------------------------------------------------------
    def matches(self, request: RequestView, replicas: Sequence[ReplicaView]) -> dict[str, int]:
        ids = [r.replica_id for r in replicas]
        if self.cache_lookup is not None:
            return {rid: self.cache_lookup(rid, request.block_hashes) for rid in ids}
        return self.index.match(request.block_hashes, ids)

    def cache_fill(self, replicas: Sequence[ReplicaView]) -> dict[str, float]:
        if self.cache_lookup is not None:
            return {}  # oracle mode keeps no index
        return self.index.fill([r.replica_id for r in replicas])

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> RoutingDecision:
        healthy = available(replicas)
        bs = self.block_size
        self._capacity_hint.update(
            {r.replica_id: c // bs for r in healthy if (c := r.kv_capacity_tokens) > 0}
        )
        matches = self.matches(request, healthy)
        bounded = self.bounded(healthy, request, matches)
        fill = self.cache_fill(healthy) if self.config.weights.spread else {}
        rate = fleet_rate(healthy)
        best = max(matches.values(), default=0)
        share = self.relative_share(healthy) if best == 0 and self.config.weights.share else {}
        ctx = ScoringContext(matches, self.block_size, self.config, rate, fill, share)
        scores = weighted_sum(self.scorers, ctx, request, bounded)
        chosen = pick_best(scores, self.rng)
        got = matches.get(chosen, 0)
        reason = "fallback" if best == 0 else ("affinity" if got == best else "balance")
        return RoutingDecision(chosen, reason, scores, got)

    def relative_share(self, replicas: Sequence[ReplicaView]) -> dict[str, float]:
        """Each replica's share of recently routed work relative to an equal share."""
        return self.load_share.relative_shares([r.replica_id for r in replicas])

    def bounded(
        self,
        healthy: list[ReplicaView],
        request: RequestView | None = None,
        matches: dict[str, int] | None = None,
    ) -> list[ReplicaView]:
        """Bounded load, two ways. Burst guard: no replica with ``min_load_cap`` or more in
        flight may exceed ``ceil((1 + load_slack) * (in_flight + 1) / n)``. Hot-spot guard:
        a replica that took more than ``(1 + share_slack) / n`` of the work routed over the
        last ``share_window_s`` is skipped while it also holds ``min_load_cap`` or more in
        flight, so a hot prefix spreads to more replicas while a lightly loaded owner still
        serves it (at low load, stickiness is free and share estimates are noise). The
        burst guard does not move a request that would cost a whole prefill elsewhere for a
        prefix that is not hot (``keeps_sole_holder``)."""
        cfg = self.config
        within = within_load_bound(healthy, cfg.load_slack, cfg.min_load_cap)
        over = self.load_share.over_share([r.replica_id for r in healthy], cfg.share_slack)
        floor = cfg.min_load_cap
        kept = within
        if over:
            kept = [r for r in within if r.replica_id not in over or queue_depth(r) < floor]
            kept = kept or within
        if len(kept) < len(healthy):
            dropped = {r.replica_id for r in healthy} - {r.replica_id for r in kept}
            exempt = self.keeps_sole_holder(request, matches or {}, healthy, dropped) - over
            kept = [r for r in healthy if r.replica_id not in dropped or r.replica_id in exempt]
        return kept

    def keeps_sole_holder(
        self,
        request: RequestView | None,
        matches: dict[str, int],
        healthy: Sequence[ReplicaView],
        dropped: set[str],
    ) -> set[str]:
        """Of the replicas the load guards ``dropped``, those kept for this request: the
        ones holding its longest prefix, when no other replica holds even half of it and
        the prefix itself is not hot (under 1/n of the recent work).

        Why: moving such a request costs a whole prefill elsewhere, more work than it takes
        off the busy replica, so the scorers (predicted TTFT first) decide instead; the
        cold prefills this avoids are rare prefixes whose only holder the burst guard
        filtered for a moment. A hot prefix is still shed, since replicating it is what
        the guards are for. ``bounded`` applies it to the burst guard only: a replica over
        its sustained share stays filtered (exempting it there too raised the live
        imbalance). Measurements: docs/results/router.md, "Design notes moved from code"."""
        best = max(matches.values(), default=0)
        if request is None or best == 0 or not request.block_hashes:
            return set()
        others = (r.replica_id for r in healthy if r.replica_id not in dropped)
        if any(matches.get(rid, 0) * 2 >= best for rid in others):
            return set()
        ids = [r.replica_id for r in healthy]
        now = self.clock() if self._last_routed is None else self._last_routed
        total = self.load_share.total(ids, now)
        heat = self.prefix_heat.value(request.block_hashes[0], now)
        if total > 0 and heat / total >= 1.0 / len(ids):
            return set()
        return {rid for rid in dropped if matches.get(rid, 0) == best}

    # ---- observe --------------------------------------------------------------------
    def observe(self, event: RouterEvent) -> None:
        if isinstance(event, Routed):
            self._on_routed(event)
        elif isinstance(event, KVBlocksStored):
            if self.mode == MODE_PRECISE:
                self._heard_from(event.replica_id, event.now)
                self._apply_capacity(event.replica_id)
                self.index.insert(event.replica_id, event.block_hashes)
        elif isinstance(event, PeerRouted):
            if self.mode != MODE_ORACLE:
                self._apply_capacity(event.replica_id)
                self.index.insert(event.replica_id, event.block_hashes)
        elif isinstance(event, KVBlocksRemoved):
            if self.mode == MODE_PRECISE:
                self._heard_from(event.replica_id, event.now)
                self.index.remove(event.replica_id, event.block_hashes)
        elif isinstance(event, ReplicaGone):
            self.index.drop_replica(event.replica_id)
            self.load_share.drop(event.replica_id)
            for d in (self._capacity_hint, self._last_kv_event, self._unacked_since):
                d.pop(event.replica_id, None)
        elif isinstance(event, Completed):
            pass  # in-flight counts come from ReplicaView.ongoing

    def _on_routed(self, event: Routed) -> None:
        rid = event.replica_id
        weight = 1.0 + max(0, event.request.expected_output_tokens)
        self.load_share.add(rid, weight, event.now)
        self._last_routed = event.now
        if event.request.block_hashes:
            self.prefix_heat.add(event.request.block_hashes[0], weight, event.now)
        if self.mode == MODE_ORACLE:
            return
        self._apply_capacity(rid)
        # Precise mode inserts too (speculatively): the engine's BlockStored arrives only after
        # the prefill, and requests for the same new prefix meanwhile would miss it;
        # KVBlocksRemoved then takes back whatever the engine evicts.
        self.index.insert(rid, event.request.block_hashes)
        if self.mode == MODE_PRECISE:
            self._unacked_since.setdefault(rid, event.now)

    def _heard_from(self, replica_id: str, now: float) -> None:
        self._last_kv_event[replica_id] = now
        self._unacked_since.pop(replica_id, None)

    def _apply_capacity(self, replica_id: str) -> None:
        cap = self._capacity_hint.get(replica_id)
        if cap:
            self.index.set_capacity(replica_id, cap)

    def is_stale(self, replica_id: str, now: float | None = None) -> bool:
        """Precise mode only: has this replica gone quiet while receiving requests?"""
        since = self._unacked_since.get(replica_id)
        if since is None:
            return False
        t = self.clock() if now is None else now
        return t - since > self.config.fallback_after_s
