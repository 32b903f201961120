"""Load-only baseline policies: round-robin, least-loaded, power-of-two choices.

- round-robin: next available replica in id order; the cursor moves on ``Routed``.
- least-loaded: smallest queue depth (max of router in-flight and engine waiting+running),
  random tie-break.
- p2c: sample two available replicas with the injected rng, take the less loaded (Ray
  Serve's default idea, Mitzenmacher's power of two choices).
All ignore prefixes; reasons are ``balance``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from router.pipeline import available, pick_least_loaded
from router.scorers import queue_depth
from router.types import ReplicaView, RequestView, Routed, RouterEvent, RoutingDecision


def _load_scores(replicas: Sequence[ReplicaView]) -> dict[str, float]:
    return {r.replica_id: 1.0 / (1.0 + queue_depth(r)) for r in replicas}


class RoundRobinPolicy:
    name = "round-robin"

    def __init__(self) -> None:
        self._last: str | None = None

    def choose(self, _request: RequestView, replicas: Sequence[ReplicaView], /) -> RoutingDecision:
        ids = sorted(r.replica_id for r in available(replicas))
        nxt = next((rid for rid in ids if self._last is None or rid > self._last), ids[0])
        return RoutingDecision(nxt, "balance", {})

    def observe(self, event: RouterEvent) -> None:
        if isinstance(event, Routed):  # the cursor compares ids, so churn needs no cleanup
            self._last = event.replica_id


class LeastLoadedPolicy:
    name = "least-loaded"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random(0)

    def choose(self, _request: RequestView, replicas: Sequence[ReplicaView], /) -> RoutingDecision:
        healthy = available(replicas)
        return RoutingDecision(
            pick_least_loaded(healthy, self.rng), "balance", _load_scores(healthy)
        )

    def observe(self, _event: RouterEvent, /) -> None:
        return None


class PowerOfTwoPolicy:
    name = "p2c"

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random(0)

    def choose(self, _request: RequestView, replicas: Sequence[ReplicaView], /) -> RoutingDecision:
        healthy = available(replicas)
        pair = healthy if len(healthy) <= 2 else self.rng.sample(healthy, 2)
        return RoutingDecision(pick_least_loaded(pair, self.rng), "balance", _load_scores(pair))

    def observe(self, _event: RouterEvent, /) -> None:
        return None
