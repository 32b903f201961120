"""The router's own estimate of uncached prefill work it has sent to each replica.

Replica stats arrive every ``stats_period_s``; between two reports a burst of requests
routed to the same replica is invisible, and on CPU (where prefills do not batch) they
queue behind each other. So the router adds each routed request's uncached tokens to a
per-replica backlog that drains at the replica's measured prefill rate, and the views use
``max(reported, own estimate)`` (``router.bookkeeping``).

    backlog(t) = max(0, backlog(t0) - rate * (t - t0)) + new uncached tokens

Time is the caller's ``now`` (monotonic seconds live, virtual seconds in the twin).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.stats import PRIOR_PREFILL_TOKENS_PER_S

DEFAULT_RATE = PRIOR_PREFILL_TOKENS_PER_S  # before a replica has reported a measured rate


@dataclass(slots=True)
class _Backlog:
    tokens: float
    at: float


class OutstandingPrefill:
    def __init__(self) -> None:
        self._b: dict[str, _Backlog] = {}

    def get(self, replica_id: str, rate: float, now: float) -> int:
        b = self._b.get(replica_id)
        if b is None:
            return 0
        b.tokens = max(0.0, b.tokens - (rate if rate > 0 else DEFAULT_RATE) * (now - b.at))
        b.at = now
        return int(b.tokens)

    def add(self, replica_id: str, tokens: int, rate: float, now: float) -> None:
        current = self.get(replica_id, rate, now)
        self._b[replica_id] = _Backlog(current + max(0, tokens), now)

    def forget(self, replica_id: str) -> None:
        self._b.pop(replica_id, None)
