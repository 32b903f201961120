"""A per-minute token bucket, the quotas' unit (``cluster/quotas.py``).

It refills continuously at capacity/60 per second up to its capacity, so a full minute's
allowance may arrive as one burst. ``spend`` takes (or, negative, gives back) an amount,
keeping the level within [-capacity, capacity]: below zero is what concurrent spending
on other ingress replicas overspent, owed before anything fits again.
"""

from __future__ import annotations

EPS = 1e-9


class TokenBucket:
    __slots__ = ("capacity", "level", "limit", "rate", "stamp")

    def __init__(self, capacity: float, now: float, limit: int = 0) -> None:
        self.limit = limit  # the key's configured limit (capacity is its scaled part)
        self.capacity = capacity
        self.rate = capacity / 60.0
        self.level = capacity
        self.stamp = now

    def resize(self, capacity: float) -> None:
        """A larger capacity keeps what was spent (the level rises by the difference); a
        smaller one cuts the level to it."""
        if capacity != self.capacity:
            grown = max(0.0, capacity - self.capacity)
            self.capacity, self.rate = capacity, capacity / 60.0
            self.level = min(self.level + grown, capacity)

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def spend(self, amount: float, now: float) -> None:
        """Refill to ``now``, then take ``amount`` (a refund when negative)."""
        self.refill(now)
        self.level = max(-self.capacity, min(self.capacity, self.level - amount))

    def wait_s(self, cost: float) -> float:
        return max(0.0, (cost - self.level) / self.rate)

    def reset_s(self) -> float:
        return (self.capacity - self.level) / self.rate

    def fits(self, cost: float) -> bool:
        return self.level + EPS >= cost

    def full(self) -> bool:
        return self.level + EPS >= self.capacity
