"""The status actor's slot table: one counter per key, held by many origins, decided in one
place so a concurrency limit is exact across ingress replicas. Pure: no Ray; the status
actor (``status_registry.py``) wraps it, ``cluster/quota_sync.py`` asks it.

Why: ingress replicas that only tell each other what they hold (the quota log) can each
fill a key's ``max_streams`` before hearing of the other: 40 concurrent streams on a
4-stream key got 8 over 2 ingresses. Granting every slot here, one call at a time on the
actor's loop, makes the fleet's total a single counter.

Structure::

    origin A (seen 12.3)   key k1: held 2 (word v41)   key k2: held 0 (word v40)
    origin B (seen 12.1)   key k1: held 1 (word v17)
                           fleet's k1 = 2 + 1 over the origins heard within STALE_S

Words (each carries the origin's version, increasing in the order the origin made them):
- ``acquire(key, origin, held, limit, ver)``: the origin holds ``held`` slots of ``key``
  (its granted ones plus its own acquires still in flight) and asks for one more; granted
  when the fleet would stay within ``limit``. Returns (granted, the fleet's count after).
- ``report(origin, counts, ver)``: the origin's whole map (absent keys hold 0): releases
  arrive this way, and a report heals any drift.
A word older than the origin's last word on a key does not overwrite it (Ray does not
promise an async actor runs one caller's calls in order). An acquire that arrives after a
newer report was already counted by it (the origin counts an acquire in flight as held),
so it is judged on that count and, if refused, taken off it.
Origins silent for ``STALE_S`` stop counting (a killed ingress's streams died with it; a
live one with slots reports every second); silent for ``FORGET_S`` they are dropped.
Restart: the table starts empty; each origin's next report (≤ 1 s while it holds slots)
refills it, and until then a limit can be exceeded by what the unreported origins hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STALE_S = 5.0
FORGET_S = 120.0


@dataclass(slots=True)
class _Origin:
    seen: float
    held: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (held, ver)


class SlotTable:
    def __init__(self, stale_s: float = STALE_S, forget_s: float = FORGET_S) -> None:
        self.stale_s = stale_s
        self.forget_s = forget_s
        self._origins: dict[str, _Origin] = {}

    def acquire(
        self, key: str, origin: str, held: int, limit: int, ver: int, now: float
    ) -> tuple[bool, int]:
        self._sweep(now)
        o = self._origin(origin, now)
        others = self._others(key, origin, now)
        count, last = o.held.get(key, (0, -1))
        if ver > last:  # the newest word on this key: ``held`` excludes this request
            held = max(0, held)
            granted = others + held < limit
            o.held[key] = (held + granted, ver)
        else:  # a newer report already counted this request as held
            granted = others + count <= limit
            if not granted:
                o.held[key] = (max(0, count - 1), last)
        return granted, others + o.held[key][0]

    def report(self, origin: str, counts: dict[str, int], ver: int, now: float) -> None:
        self._sweep(now)
        o = self._origin(origin, now)
        for key in set(counts) | set(o.held):
            if ver > o.held.get(key, (0, -1))[1]:
                o.held[key] = (max(0, int(counts.get(key, 0))), ver)

    def count(self, key: str, now: float) -> int:
        """The fleet's held slots of ``key`` (origins heard within ``stale_s``)."""
        return self._others(key, "", now)

    def __len__(self) -> int:
        return len(self._origins)

    def _origin(self, origin: str, now: float) -> _Origin:
        o = self._origins.get(origin)
        if o is None:
            o = self._origins[origin] = _Origin(now)
        o.seen = now
        return o

    def _others(self, key: str, origin: str, now: float) -> int:
        return sum(
            o.held.get(key, (0, 0))[0]
            for name, o in self._origins.items()
            if name != origin and now - o.seen < self.stale_s
        )

    def _sweep(self, now: float) -> None:
        gone = [n for n, o in self._origins.items() if now - o.seen > self.forget_s]
        for name in gone:
            del self._origins[name]
