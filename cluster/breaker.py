"""Per-replica circuit breaking at the ingress: a flapping replica stops getting traffic.

Each replica that failed a request (it died under it, its engine raised, or it answered a
5xx) is charged a failure; a success resets its count. ``threshold`` consecutive failures
open the breaker for ``open_s`` seconds: the replica is then in ``avoid()``, which the
ingress sends with each request and the router adapter filters out of the candidates
(unless no other replica is left, so a fleet of one still serves). After ``open_s`` the
breaker is half-open: the next request may go there; one more failure opens it again.
Memory is bounded: entries are forgotten when closed and idle, and at most ``max_replicas``
are kept (oldest first out).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _State:
    failures: int = 0
    open_until: float = 0.0
    last: float = 0.0


class CircuitBreaker:
    def __init__(
        self,
        threshold: int = 3,
        open_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        max_replicas: int = 4096,
    ) -> None:
        self.threshold = threshold
        self.open_s = open_s
        self.clock = clock
        self.max_replicas = max_replicas
        self._states: dict[str, _State] = {}

    def failure(self, replica_id: str) -> None:
        now = self.clock()
        st = self._states.pop(replica_id, None) or _State()
        st.failures += 1
        st.last = now
        if st.failures >= self.threshold:
            st.open_until = now + self.open_s
            st.failures = self.threshold - 1  # half-open after open_s: one more failure reopens
        self._states[replica_id] = st
        while len(self._states) > self.max_replicas:
            del self._states[next(iter(self._states))]

    def success(self, replica_id: str) -> None:
        st = self._states.get(replica_id)
        if st is not None and st.open_until <= self.clock():
            del self._states[replica_id]

    def avoid(self) -> frozenset[str]:
        now = self.clock()
        return frozenset(r for r, st in self._states.items() if st.open_until > now)
