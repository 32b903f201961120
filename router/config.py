"""Router knobs, built from a plain config dict (unknown keys are an error).

Defaults and why (the measurements behind them: docs/results/router.md, "Design notes
moved from code")
- weights (one per scorer in ``router.scorers``, same names): ttft 2.0, prefix 1.0,
  queue 0.5, kv 0.2, spread 0.5, share 1.0. Predicted TTFT (which already credits cached
  tokens) leads, so a cache hit behind a long prefill queue loses to a cold idle replica;
  prefix adds stickiness; queue depth and KV pressure break near-ties. spread: a prefix
  nobody holds goes to the replica with the least cached content, so new prefixes do not
  collide at random. share: a cold request (no replica holds any of the prompt) goes
  where the least work was routed recently; it applies to cold requests only, because
  applied to every request it fights affinity, sending shared-prefix requests away from
  owners at their fair share.
- share_slack 0.25, share_window_s 30: the hot-spot guard (``router.load_share``). A replica
  that took more than 1.25x an equal share of the work routed over the last ~30 s, and has
  ``min_load_cap`` or more requests in flight, is filtered out, which replicates a hot
  prefix to more replicas instead of queueing it behind one.
- load_slack 1.0: the burst guard, on requests in flight *now*: cap = ceil((1 + slack) *
  (in-flight + 1) / replicas). Loose, because the sustained imbalance is the share
  guard's job: with a tight cap (0.25) Poisson bursts tripped it, an owner crossing a cap
  of 2 or 3 by chance and sending a request to a replica without the prefix.
- min_load_cap 6: neither bound filters a replica with fewer than 6 requests in flight.
  At low utilisation (fewer requests than replicas) the fair-share cap is 1 and would send
  a prefix away from its owner whenever the owner holds a single request; engines batch,
  so a few more requests cost little, and under real load the fair-share cap is higher.
- queue_ref 4, ttft_ref_s 1.0: the load at which those scorers reach 0.5.
- default_prefill_tokens_per_s (``contracts.stats.PRIOR_PREFILL_TOKENS_PER_S``): used until a
  replica reports a measured rate.
- fallback_after_s 5.0: precise mode trusts Routed events again for a replica that gets
  requests but has sent no KV event for this long.
- sglang_*: SGLang router defaults (cache_threshold 0.5, abs 32, rel 1.0001).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from contracts.stats import PRIOR_PREFILL_TOKENS_PER_S
from router.index import DEFAULT_CAPACITY_BLOCKS


@dataclass(frozen=True, slots=True)
class Weights:
    prefix: float = 1.0
    ttft: float = 2.0
    queue: float = 0.5
    kv: float = 0.2
    spread: float = 0.5
    share: float = 1.0


@dataclass(frozen=True, slots=True)
class RouterConfig:
    weights: Weights = field(default_factory=Weights)
    load_slack: float = 1.0
    min_load_cap: int = 6
    share_slack: float = 0.25
    share_window_s: float = 30.0
    queue_ref: float = 4.0
    ttft_ref_s: float = 1.0
    default_prefill_tokens_per_s: float = PRIOR_PREFILL_TOKENS_PER_S
    fallback_after_s: float = 5.0
    default_capacity_blocks: int = DEFAULT_CAPACITY_BLOCKS
    hash_prefix_blocks: int = 4  # consistent-hash key: first N blocks (or session id)
    hash_virtual_nodes: int = 64
    sglang_cache_threshold: float = 0.5
    sglang_balance_abs_threshold: int = 32
    sglang_balance_rel_threshold: float = 1.0001

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RouterConfig:
        data = dict(data or {})
        weights: Weights = _build(Weights, data.pop("weights", None) or {}, "weights")
        cfg: RouterConfig = _build(cls, data, "router config")
        cfg = replace(cfg, weights=weights)
        bad = (
            min(cfg.load_slack, cfg.share_slack) < 0
            or min(cfg.queue_ref, cfg.ttft_ref_s, cfg.share_window_s) <= 0
            or cfg.min_load_cap < 1
        )
        if bad:
            raise ValueError(
                "load_slack and share_slack must be >= 0; queue_ref, ttft_ref_s and"
                " share_window_s must be > 0; min_load_cap >= 1"
            )
        return cfg


def _build(cls: Any, data: Mapping[str, Any], what: str) -> Any:
    names = {f.name for f in fields(cls)} - {"weights"}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"unknown {what} keys: {sorted(unknown)}; known: {sorted(names)}")
    kwargs = {}
    for f in fields(cls):
        if f.name in data:
            default = getattr(cls(), f.name)
            kwargs[f.name] = type(default)(data[f.name])
    return cls(**kwargs)
