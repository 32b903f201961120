"""SGLang-style cache-aware routing over an approximate per-replica prefix tree.

Algorithm (after SGLang's router ``cache_aware`` policy): each replica's tree is the set of
chained block hashes routed to it (a chain of hashes is a root-to-node path), LRU-capped at
the replica's KV capacity. Per request:
1. If the load is imbalanced — ``max - min > balance_abs_threshold`` and
   ``max > min * balance_rel_threshold`` — send it to the least loaded replica (``balance``).
2. Else take the replica with the longest prefix match; if match / prompt blocks exceeds
   ``cache_threshold`` route there (``affinity``).
3. Else route to the replica with the smallest tree, i.e. most free cache (``fallback``).
The chosen replica's tree then learns the request's blocks (on ``Routed``, and on
``PeerRouted`` for the routes other ingress replicas' routers made).
Knobs (RouterConfig): sglang_cache_threshold 0.5, sglang_balance_abs_threshold 32,
sglang_balance_rel_threshold 1.0001 — SGLang's defaults.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from router.config import RouterConfig
from router.index import PrefixIndex
from router.pipeline import available, pick_best, pick_least_loaded
from router.scorers import queue_depth
from router.types import (
    PeerRouted,
    ReplicaGone,
    ReplicaView,
    RequestView,
    Routed,
    RouterEvent,
    RoutingDecision,
)


class SGLangTreePolicy:
    name = "sglang-tree"

    def __init__(
        self,
        config: RouterConfig | None = None,
        block_size: int = 16,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config or RouterConfig()
        self.block_size = block_size
        self.rng = rng or random.Random(0)
        self.index = PrefixIndex(self.config.default_capacity_blocks)
        self._capacity_hint: dict[str, int] = {}

    def _imbalanced(self, replicas: Sequence[ReplicaView]) -> bool:
        loads = [queue_depth(r) for r in replicas]
        hi, lo = max(loads), min(loads)
        cfg = self.config
        return (
            hi - lo > cfg.sglang_balance_abs_threshold
            and hi > lo * cfg.sglang_balance_rel_threshold
        )

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> RoutingDecision:
        healthy = available(replicas)
        for r in healthy:
            if r.kv_capacity_tokens > 0:
                self._capacity_hint[r.replica_id] = r.kv_capacity_tokens // self.block_size
        if self._imbalanced(healthy):
            return RoutingDecision(pick_least_loaded(healthy, self.rng), "balance", {})
        ids = [r.replica_id for r in healthy]
        matches = self.index.match(request.block_hashes, ids)
        total = len(request.block_hashes)
        rates = {rid: (m / total if total else 0.0) for rid, m in matches.items()}
        best = pick_best(rates, self.rng)
        if rates[best] > self.config.sglang_cache_threshold:
            return RoutingDecision(best, "affinity", rates, matches[best])
        sizes = {rid: -float(self.index.size(rid)) for rid in ids}
        smallest = pick_best(sizes, self.rng)
        return RoutingDecision(smallest, "fallback", rates, matches[smallest])

    def observe(self, event: RouterEvent) -> None:
        if isinstance(event, Routed | PeerRouted):
            cap = self._capacity_hint.get(event.replica_id)
            if cap:
                self.index.set_capacity(event.replica_id, cap)
            hashes = event.request.block_hashes if isinstance(event, Routed) else event.block_hashes
            self.index.insert(event.replica_id, hashes)
        elif isinstance(event, ReplicaGone):
            self.index.drop_replica(event.replica_id)
            self._capacity_hint.pop(event.replica_id, None)
