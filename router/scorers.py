"""Weighted scorers for the routing pipeline; each maps (request, replica) to [0, 1].

- prefix: fraction of the request's full blocks the replica is believed to hold.
- queue: ``queue_ref / (queue_ref + q)`` with q = max(router in-flight, engine waiting +
  running); 1.0 for an idle replica, 0.5 at ``queue_ref`` requests.
- kv: ``1 - kv_usage`` — prefer replicas with free KV so new blocks do not evict hot ones.
- spread: ``1 - fill`` where fill = blocks our index attributes to the replica / its
  capacity — SGLang's "smallest tree" idea as a score: a request no replica has cached goes
  where the least cached content lives, so new prefixes (conversations) spread evenly.
- share (cold requests only): ``1 - min(1, share / 2)`` with share = the replica's decayed
  share of recently routed work relative to an equal share (``LoadShare``, 1.0 = fair), so
  a request no replica holds any of goes where the least recent work went; for a request
  with any cached prefix somewhere it is 1.0 everywhere and affinity decides. Busy time,
  not request count, is what piles up: on the 64-replica Mooncake simulation the busiest
  replica's time-averaged in-flight load was 1.56x the mean with only ~0.07 requests in
  flight per replica (nothing for a load bound to act on), because long cold requests
  landed together; with this scorer (weight 1.0) it is 1.21, hit rate and P95 unchanged.
- ttft: predicted time to first token ``(waiting_prefill_tokens + this request's uncached
  tokens) / prefill_tokens_per_s`` (the fleet's median measured rate when the policy passes
  one, see ``fleet_rate``), mapped to ``ttft_ref_s / (ttft_ref_s + t)``. It couples
  affinity and load: a cache hit shrinks the uncached term, a long queue grows the first.
Why one number per scorer in [0, 1]: weights from config then say how much each matters,
instead of a nest of ``if``s (llm-d / Gateway API Inference Extension style).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from router.config import RouterConfig
from router.types import ReplicaView, RequestView


@dataclass(frozen=True, slots=True)
class ScoringContext:
    request: RequestView
    matches: Mapping[str, int]  # replica_id -> leading cached blocks
    block_size: int
    config: RouterConfig
    fleet_prefill_tokens_per_s: float = 0.0  # > 0: used for every replica (fleet_rate)
    cache_fill: Mapping[str, float] = field(default_factory=dict)  # replica -> index fill 0..1
    # replica -> share of recently routed work / an equal share; only set for cold requests
    relative_share: Mapping[str, float] = field(default_factory=dict)


def fleet_rate(replicas: Sequence[ReplicaView]) -> float:
    """Median of the replicas' measured prefill rates (0 when none measured).

    Replicas of one deployment run the same engine on the same hardware, so differences
    between their smoothed rates are measurement noise. Used raw, that noise decides every
    cold request among idle replicas, always for whichever replica measured fastest (rich
    get richer: in the 64-replica Mooncake simulation one replica got 165 requests and
    another 6). The median keeps the scorer's scale and drops the noise."""
    rates = sorted(r.prefill_tokens_per_s for r in replicas if r.prefill_tokens_per_s > 0)
    return rates[len(rates) // 2] if rates else 0.0


def _rate(ctx: ScoringContext, replica: ReplicaView) -> float:
    return (
        ctx.fleet_prefill_tokens_per_s
        or replica.prefill_tokens_per_s
        or ctx.config.default_prefill_tokens_per_s
    )


class Scorer(Protocol):
    name: str

    def score(self, ctx: ScoringContext, replica: ReplicaView) -> float: ...


def uncached_tokens(ctx: ScoringContext, replica: ReplicaView) -> int:
    cached = ctx.matches.get(replica.replica_id, 0) * ctx.block_size
    return max(0, ctx.request.prompt_tokens - cached)


def predicted_ttft_s(ctx: ScoringContext, replica: ReplicaView) -> float:
    rate = _rate(ctx, replica)
    queued = max(0, replica.waiting_prefill_tokens)
    return (queued + uncached_tokens(ctx, replica)) / max(rate, 1e-9)


def queue_depth(replica: ReplicaView) -> int:
    return max(replica.ongoing, replica.waiting + replica.running)


class PrefixScorer:
    name = "prefix"

    def score(self, ctx: ScoringContext, replica: ReplicaView) -> float:
        total = len(ctx.request.block_hashes)
        if total == 0:
            return 0.0
        return min(1.0, ctx.matches.get(replica.replica_id, 0) / total)


class QueueScorer:
    name = "queue"

    def score(self, ctx: ScoringContext, replica: ReplicaView) -> float:
        ref = ctx.config.queue_ref
        return ref / (ref + queue_depth(replica))


class KVUsageScorer:
    name = "kv"

    def score(self, ctx: ScoringContext, replica: ReplicaView) -> float:
        return 1.0 - min(1.0, max(0.0, replica.kv_usage))


class TTFTScorer:
    name = "ttft"

    def score(self, ctx: ScoringContext, replica: ReplicaView) -> float:
        ref = ctx.config.ttft_ref_s
        return ref / (ref + predicted_ttft_s(ctx, replica))


class SpreadScorer:
    name = "spread"

    def score(self, ctx: ScoringContext, replica: ReplicaView) -> float:
        return 1.0 - min(1.0, max(0.0, ctx.cache_fill.get(replica.replica_id, 0.0)))


class ShareScorer:
    name = "share"

    def score(self, ctx: ScoringContext, replica: ReplicaView) -> float:
        return _share_score(ctx.relative_share.get(replica.replica_id, 0.0))


def _share_score(relative_share: float) -> float:
    return 1.0 - min(1.0, max(0.0, relative_share) / 2.0)


ALL_SCORERS: tuple[Scorer, ...] = (
    PrefixScorer(),
    QueueScorer(),
    KVUsageScorer(),
    TTFTScorer(),
    SpreadScorer(),
    ShareScorer(),
)


def weighted_scores(
    ctx: ScoringContext, replicas: list[ReplicaView], scorers: tuple[Scorer, ...] = ALL_SCORERS
) -> dict[str, float]:
    w = ctx.config.weights
    weights: Mapping[str, float] = {
        "prefix": w.prefix,
        "queue": w.queue,
        "kv": w.kv,
        "ttft": w.ttft,
        "spread": w.spread,
        "share": w.share,
    }
    if scorers is ALL_SCORERS:
        return fused_scores(ctx, replicas)
    active = [(s, weights[s.name]) for s in scorers if weights.get(s.name, 0.0) != 0.0]
    return {r.replica_id: sum(wt * s.score(ctx, r) for s, wt in active) for r in replicas}


def fused_scores(ctx: ScoringContext, replicas: list[ReplicaView]) -> dict[str, float]:
    """The built-in scorers in one loop (hot path; equal to the generic sum, tested).

    Terms that do not depend on the replica are added once, weights of 0 skip their term,
    and clamps are conditionals rather than ``min``/``max`` calls: with 64 replicas this
    loop was most of a decision's time (``python -m experiments.routing.microbench``)."""
    cfg, w = ctx.config, ctx.config.weights
    total_blocks = len(ctx.request.block_hashes)
    prompt, bs, matches = ctx.request.prompt_tokens, ctx.block_size, ctx.matches
    q_ref, t_ref, default_rate = cfg.queue_ref, cfg.ttft_ref_s, cfg.default_prefill_tokens_per_s
    fleet, fill, share = ctx.fleet_prefill_tokens_per_s, ctx.cache_fill, ctx.relative_share
    w_prefix = w.prefix / total_blocks if total_blocks else 0.0
    w_queue, w_kv, w_spread, w_share = w.queue * q_ref, w.kv, w.spread, w.share
    w_ttft = w.ttft * t_ref
    # replica-independent parts: an empty fill/share map scores 1.0 for every replica
    base = (w_spread if not fill else 0.0) + (w_share if not share else 0.0)
    out: dict[str, float] = {}
    for r in replicas:
        rid = r.replica_id
        m = matches.get(rid, 0)
        total = base
        if w_prefix:
            total += w_prefix * m if m < total_blocks else w.prefix
        if w_queue:
            busy = r.waiting + r.running
            total += w_queue / (q_ref + (r.ongoing if r.ongoing > busy else busy))
        if w_kv:
            u = r.kv_usage
            total += w_kv * (1.0 if u <= 0.0 else 0.0 if u >= 1.0 else 1.0 - u)
        if w_ttft:
            rate = fleet or r.prefill_tokens_per_s or default_rate
            queued = r.waiting_prefill_tokens
            uncached = prompt - m * bs
            tokens = (queued if queued > 0 else 0) + (uncached if uncached > 0 else 0)
            total += w_ttft / (t_ref + tokens / (rate if rate > 1e-9 else 1e-9))
        if fill and w_spread:
            f = fill.get(rid, 0.0)
            total += w_spread * (1.0 if f <= 0.0 else 0.0 if f >= 1.0 else 1.0 - f)
        if share and w_share:
            total += w_share * _share_score(share.get(rid, 0.0))
        out[rid] = total
    return out
