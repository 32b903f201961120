"""Sustained load share per replica, for the bounded-load filter.

Why: the instantaneous bound (``pipeline.within_load_bound``) compares requests in flight
*now*. With Poisson arrivals a prefix's owner crosses a fair-share cap of a few requests by
chance, and every such moment sends a request to a replica without the prefix — one full
prefill each (the 8-replica shared-prefix runs lost 3–5 points of hit rate and their P95
to exactly these). What makes a hot spot is a replica that *keeps* taking more than its
share. So each replica accumulates the work routed to it (a request weighs 1 + its
expected output tokens: in-flight time is mostly decode) with exponential decay over
``window_s``; a replica whose decayed share exceeds ``(1 + slack) / n`` is over its fair
share. State changes only in ``add`` (called from ``observe(Routed)``); time is the
events' own clock, so the same event sequence gives the same shares.
"""

from __future__ import annotations

import math
from collections import OrderedDict


class LoadShare:
    """Values are kept scaled to a common reference time (``v * exp((at - ref) / window)``):
    decay multiplies every replica by the same factor, so shares need no ``exp`` per replica
    (this ran on every decision, for every replica). ``ref`` moves forward, rescaling the
    values, before the factor could overflow."""

    REBASE_WINDOWS = 50.0  # exp(50) ~ 5e21: far from float overflow, rebased long before

    def __init__(self, window_s: float = 30.0) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be > 0")
        self.window_s = window_s
        self._scaled: dict[str, float] = {}
        self._ref: float | None = None
        self._now = -math.inf

    def add(self, replica_id: str, weight: float, now: float) -> None:
        self._now = max(self._now, now)
        if self._ref is None:
            self._ref = self._now
        elif (self._now - self._ref) / self.window_s > self.REBASE_WINDOWS:
            factor = math.exp(-(self._now - self._ref) / self.window_s)
            self._scaled = {rid: v * factor for rid, v in self._scaled.items() if v * factor}
            self._ref = self._now
        gain = math.exp((self._now - self._ref) / self.window_s)
        self._scaled[replica_id] = self._scaled.get(replica_id, 0.0) + weight * gain

    def drop(self, replica_id: str) -> None:
        self._scaled.pop(replica_id, None)

    def _decay(self) -> float:
        """Factor from scaled values to decayed values at the last event's time."""
        if self._ref is None:
            return 0.0
        return math.exp(-(self._now - self._ref) / self.window_s)

    def total(self, replica_ids: list[str], now: float | None = None) -> float:
        """Decayed work routed to ``replica_ids``, as of ``now`` (default: the last event)."""
        if now is not None:
            self._now = max(self._now, now)
        scaled = self._scaled
        return sum(scaled.get(rid, 0.0) for rid in replica_ids) * self._decay()

    def shares(self, replica_ids: list[str]) -> dict[str, float]:
        """Each replica's fraction of the decayed work routed to ``replica_ids`` (0 if none)."""
        get = self._scaled.get
        vals = [get(rid, 0.0) for rid in replica_ids]
        total = sum(vals)
        if total <= 0.0:
            return dict.fromkeys(replica_ids, 0.0)
        return {rid: v / total for rid, v in zip(replica_ids, vals, strict=True)}

    def relative_shares(self, replica_ids: list[str]) -> dict[str, float]:
        """``shares`` times the number of replicas: 1.0 is an equal share."""
        get, n = self._scaled.get, len(replica_ids)
        vals = [get(rid, 0.0) for rid in replica_ids]
        total = sum(vals)
        if total <= 0.0:
            return dict.fromkeys(replica_ids, 0.0)
        return {rid: v / total * n for rid, v in zip(replica_ids, vals, strict=True)}

    def over_share(self, replica_ids: list[str], slack: float) -> set[str]:
        """Replicas above ``(1 + slack)`` times an equal share among ``replica_ids``."""
        if len(replica_ids) < 2:
            return set()
        get = self._scaled.get
        vals = [get(rid, 0.0) for rid in replica_ids]
        total = sum(vals)
        if total <= 0.0:
            return set()
        bar = (1.0 + slack) / len(replica_ids) * total
        return {rid for rid, v in zip(replica_ids, vals, strict=True) if v > bar}


class PrefixHeat:
    """Decayed work per prefix key (a request's first block hash) over the same window, so
    a prefix's share of recent traffic compares with a replica's. Bounded: the
    ``max_keys`` most recently routed prefixes are kept (one float pair each); a prefix
    routed so rarely that it was dropped counts as cold, which is what it is."""

    def __init__(self, window_s: float = 30.0, max_keys: int = 4096) -> None:
        if window_s <= 0 or max_keys < 1:
            raise ValueError("window_s must be > 0 and max_keys >= 1")
        self.window_s = window_s
        self.max_keys = max_keys
        self._v: OrderedDict[int, tuple[float, float]] = OrderedDict()  # key -> (value, at)

    def add(self, key: int, weight: float, now: float) -> None:
        self._v[key] = (self.value(key, now) + weight, now)
        self._v.move_to_end(key)
        while len(self._v) > self.max_keys:
            self._v.popitem(last=False)

    def value(self, key: int, now: float) -> float:
        v, at = self._v.get(key, (0.0, now))
        return v * math.exp(-max(0.0, now - at) / self.window_s)

    def __len__(self) -> int:
        return len(self._v)
