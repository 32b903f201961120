"""Scorer plugins: each scores every candidate replica of one decision at once.

Contract (the Gateway API Inference Extension's scorer shape)
- ``score(ctx, request, replicas) -> list[float]``: one value in [0, 1] per replica, in
  the order given, higher is better. It is called once per decision with all candidates:
  terms that depend only on the request are computed once, then one tight pass over the
  replicas. This is the only implementation of each scorer; there is no fused copy.
- Pure: a scorer keeps no state and mutates nothing. What the policy looked up for this
  decision (cached blocks per replica, index fill, recent work shares) arrives in a
  ``ScoringContext``, built once per decision.
- Registered explicitly in ``SCORERS``; a scorer's weight is the ``router.config.Weights``
  field of the same name (``weighted_scorers``). A weight of 0 drops the scorer: it is not
  called. The policy's score for a replica is ``sum(weight * score)`` (``pipeline``).

Scorers
- prefix: fraction of the request's full blocks the replica is believed to hold.
- queue: ``queue_ref / (queue_ref + q)`` with q = max(router in-flight, engine waiting +
  running); 1.0 for an idle replica, 0.5 at ``queue_ref`` requests.
- kv: ``1 - kv_usage``: prefer replicas with free KV so new blocks do not evict hot ones.
- ttft: predicted time to first token ``(waiting_prefill_tokens + this request's uncached
  tokens) / prefill rate`` mapped to ``ttft_ref_s / (ttft_ref_s + t)``. It couples affinity
  and load: a cache hit shrinks the uncached term, a long queue grows the first. The rate
  is the fleet's median measured rate when the policy passes one (``fleet_rate``), else
  the replica's own, else ``default_prefill_tokens_per_s``.
- spread: ``1 - fill`` where fill = blocks our index attributes to the replica / its
  capacity: SGLang's "smallest tree" idea as a score, so a prefix no replica has cached goes
  where the least cached content lives and new prefixes spread evenly.
- share: ``1 - min(1, share / 2)`` with share = the replica's decayed share of recently
  routed work relative to an equal share (``LoadShare``, 1.0 = fair). The policy passes
  shares only for cold requests (no replica holds any of the prompt); with none given the
  score is 1.0 everywhere and affinity decides. Why: busy time, not request count, piles
  up when long cold requests land together, at a load too low for the load bounds to act.
Why one number per scorer in [0, 1]: weights from config then say how much each matters,
instead of a nest of ``if``s. Clamps are conditional expressions, not ``min``/``max``
calls: this code runs for every replica of every decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Protocol

from router.config import RouterConfig, Weights
from router.types import ReplicaView, RequestView


@dataclass(frozen=True, slots=True)
class ScoringContext:
    """What the policy looked up once for this decision (GIE's per-cycle state)."""

    matches: Mapping[str, int]  # replica_id -> leading cached blocks
    block_size: int
    config: RouterConfig
    fleet_prefill_tokens_per_s: float = 0.0  # > 0: used for every replica (fleet_rate)
    cache_fill: Mapping[str, float] = field(default_factory=dict)  # replica -> index fill 0..1
    # replica -> share of recently routed work / an equal share; only set for cold requests
    relative_share: Mapping[str, float] = field(default_factory=dict)


class Scorer(Protocol):
    name: str

    def score(
        self, ctx: ScoringContext, request: RequestView, replicas: Sequence[ReplicaView], /
    ) -> list[float]: ...


def fleet_rate(replicas: Sequence[ReplicaView]) -> float:
    """Median of the replicas' measured prefill rates (0 when none measured).

    Replicas of one deployment run the same engine on the same hardware, so differences
    between their smoothed rates are measurement noise. Used raw, that noise decides every
    cold request among idle replicas, always for whichever replica measured fastest (rich
    get richer). The median keeps the scorer's scale and drops the noise."""
    rates = sorted([x for r in replicas if (x := r.prefill_tokens_per_s) > 0])
    return rates[len(rates) // 2] if rates else 0.0


def queue_depth(replica: ReplicaView) -> int:
    """Requests at a replica: the larger of this router's in-flight count and the engine's
    waiting + running (each can lag the other)."""
    return max(replica.ongoing, replica.waiting + replica.running)


def queue_depths(replicas: Sequence[ReplicaView]) -> list[int]:
    """``queue_depth`` of each replica, in one pass (hot path: no call per replica)."""
    return [o if (o := r.ongoing) > (b := r.waiting + r.running) else b for r in replicas]


class PrefixScorer:
    name = "prefix"

    def score(
        self, ctx: ScoringContext, request: RequestView, replicas: Sequence[ReplicaView], /
    ) -> list[float]:
        total = len(request.block_hashes)
        if total == 0:  # no full block: nothing to match
            return [0.0] * len(replicas)
        get = ctx.matches.get
        return [m / total if (m := get(r.replica_id, 0)) < total else 1.0 for r in replicas]


class QueueScorer:
    name = "queue"

    def score(
        self, ctx: ScoringContext, _request: RequestView, replicas: Sequence[ReplicaView], /
    ) -> list[float]:
        ref = ctx.config.queue_ref
        return [ref / (ref + q) for q in queue_depths(replicas)]


class KVUsageScorer:
    name = "kv"

    def score(
        self, _ctx: ScoringContext, _request: RequestView, replicas: Sequence[ReplicaView], /
    ) -> list[float]:
        return [1.0 if (u := r.kv_usage) <= 0.0 else 0.0 if u >= 1.0 else 1.0 - u for r in replicas]


class TTFTScorer:
    name = "ttft"

    def score(
        self, ctx: ScoringContext, request: RequestView, replicas: Sequence[ReplicaView], /
    ) -> list[float]:
        ref, prompt, bs, get = (
            ctx.config.ttft_ref_s,
            request.prompt_tokens,
            ctx.block_size,
            ctx.matches.get,
        )
        fleet, default = ctx.fleet_prefill_tokens_per_s, ctx.config.default_prefill_tokens_per_s
        out: list[float] = []
        for r in replicas:
            rate = fleet or r.prefill_tokens_per_s or default
            queued = r.waiting_prefill_tokens
            uncached = prompt - get(r.replica_id, 0) * bs
            tokens = (queued if queued > 0 else 0) + (uncached if uncached > 0 else 0)
            out.append(ref / (ref + tokens / (rate if rate > 1e-9 else 1e-9)))
        return out


class SpreadScorer:
    name = "spread"

    def score(
        self, ctx: ScoringContext, _request: RequestView, replicas: Sequence[ReplicaView], /
    ) -> list[float]:
        fill = ctx.cache_fill
        if not fill:  # oracle mode keeps no index: nothing to spread by
            return [1.0] * len(replicas)
        get = fill.get
        return [
            1.0 if (f := get(r.replica_id, 0.0)) <= 0.0 else 0.0 if f >= 1.0 else 1.0 - f
            for r in replicas
        ]


class ShareScorer:
    name = "share"

    def score(
        self, ctx: ScoringContext, _request: RequestView, replicas: Sequence[ReplicaView], /
    ) -> list[float]:
        share = ctx.relative_share
        if not share:  # a warm request: affinity decides
            return [1.0] * len(replicas)
        get = share.get
        return [
            1.0 if (s := get(r.replica_id, 0.0)) <= 0.0 else 0.0 if s >= 2.0 else 1.0 - s / 2.0
            for r in replicas
        ]


SCORERS: Mapping[str, Scorer] = {
    s.name: s
    for s in (
        PrefixScorer(),
        QueueScorer(),
        KVUsageScorer(),
        TTFTScorer(),
        SpreadScorer(),
        ShareScorer(),
    )
}


def weighted_scorers(weights: Weights) -> tuple[tuple[Scorer, float], ...]:
    """The registered scorers with a non-zero weight, in registry order."""
    names = [f.name for f in fields(weights)]
    if set(names) != set(SCORERS):
        raise ValueError(f"weights {sorted(names)} != registered scorers {sorted(SCORERS)}")
    return tuple((s, w) for name, s in SCORERS.items() if (w := getattr(weights, name)) != 0.0)
