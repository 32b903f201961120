"""Filters and picker shared by the policies.

Filters (in order): healthy → not draining → below max ongoing → bounded load. The
bounded-load cap is ``ceil((1 + slack) * (in_flight_total + 1) / n)`` (consistent hashing
with bounded loads, Mirrokni et al.): no replica may take a request that would push it above
its fair share by more than ``slack``, so a hot prefix overflows to the next-best replica —
which then learns the prefix — instead of queueing behind one. The cap is at least
``min_cap``: with fewer requests in flight than replicas the fair-share cap is 1, which would
filter out every replica holding even one request and send a prefix away from its owner.
Scores: ``weighted_sum`` adds each plugin's weight x score (``router.scorers``), one
whole-candidate-list call per scorer.
Picker: highest score, ties broken by an injected ``random.Random``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from operator import add

from router.scorers import Scorer, ScoringContext, queue_depth, queue_depths
from router.types import NoReplicaAvailable, ReplicaView, RequestView


def available(replicas: Sequence[ReplicaView]) -> list[ReplicaView]:
    """Healthy, not draining, below max ongoing; raises if none is left."""
    out = [r for r in replicas if r.healthy and not r.draining and r.ongoing < r.max_ongoing]
    if not out:
        raise NoReplicaAvailable(f"all {len(replicas)} replicas unhealthy, draining or full")
    return out


def load_cap(replicas: Sequence[ReplicaView], slack: float) -> int:
    return _cap(sum(queue_depths(replicas)), len(replicas), slack)


def _cap(total_depth: int, n: int, slack: float) -> int:
    return math.ceil((1.0 + slack) * (total_depth + 1) / max(1, n))


def within_load_bound(
    replicas: list[ReplicaView], slack: float, min_cap: int = 1
) -> list[ReplicaView]:
    depths = queue_depths(replicas)
    cap = max(min_cap, _cap(sum(depths), len(replicas), slack)) - 1
    kept = [r for r, d in zip(replicas, depths, strict=True) if d <= cap]
    return kept or replicas


def weighted_sum(
    scorers: Sequence[tuple[Scorer, float]],
    ctx: ScoringContext,
    request: RequestView,
    replicas: Sequence[ReplicaView],
) -> dict[str, float]:
    """replica_id -> sum of weight x score over ``scorers`` (see ``weighted_scorers``)."""
    totals: list[float] | None = None
    for scorer, w in scorers:
        values = scorer.score(ctx, request, replicas)
        if totals is None:
            totals = values if w == 1.0 else [w * v for v in values]
        elif w == 1.0:
            totals = list(map(add, totals, values))
        else:
            totals = [t + w * v for t, v in zip(totals, values, strict=True)]
    return dict(zip([r.replica_id for r in replicas], totals or [0.0] * len(replicas), strict=True))


def pick_best(scores: Mapping[str, float], rng: random.Random, eps: float = 1e-9) -> str:
    best = max(scores.values())
    top = [rid for rid, s in scores.items() if s >= best - eps]
    return top[0] if len(top) == 1 else rng.choice(top)


def pick_least_loaded(replicas: Sequence[ReplicaView], rng: random.Random) -> str:
    low = min(queue_depth(r) for r in replicas)
    top = [r.replica_id for r in replicas if queue_depth(r) == low]
    return top[0] if len(top) == 1 else rng.choice(top)
