"""Consistent hashing with bounded loads on the prompt prefix (or session id).

Algorithm: each replica owns ``hash_virtual_nodes`` points on a 64-bit ring. The key is the
session id when present, else the chained hash of the first ``hash_prefix_blocks`` blocks
(so prompts sharing that prefix share a key; prompts shorter than one block hash their
tokens). Walk clockwise from the key and take the first replica whose load + 1 stays within
``ceil((1 + load_slack) * (total + 1) / n)`` (Mirrokni, Thorup, Zadimoghaddam 2018).
Reasons: ``affinity`` for the key's home replica, ``balance`` when it was over the bound.
Why: the classic stateless affinity baseline — no index, stable under replica churn.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence

from router.config import RouterConfig
from router.pipeline import available, load_cap
from router.scorers import queue_depth
from router.types import ReplicaView, RequestView, RouterEvent, RoutingDecision


def _h64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def request_key(request: RequestView, prefix_blocks: int) -> int:
    if request.session_id:
        return _h64(b"s:" + request.session_id.encode())
    if request.block_hashes:
        head = request.block_hashes[: max(1, prefix_blocks)][-1]
        return _h64(b"b:" + head.to_bytes(8, "little", signed=True))
    return _h64(b"t:" + repr(request.token_ids).encode())


class ConsistentHashPolicy:
    name = "consistent-hash"

    def __init__(self, config: RouterConfig | None = None) -> None:
        self.config = config or RouterConfig()
        self._ring_ids: tuple[str, ...] = ()
        self._points: list[int] = []
        self._owners: list[str] = []

    def _ring(self, ids: tuple[str, ...]) -> tuple[list[int], list[str]]:
        if ids != self._ring_ids:  # memo only; the ring is a pure function of ids
            pts = sorted(
                (_h64(f"{rid}#{v}".encode()), rid)
                for rid in ids
                for v in range(self.config.hash_virtual_nodes)
            )
            self._ring_ids, self._points, self._owners = (
                ids,
                [p for p, _ in pts],
                [o for _, o in pts],
            )
        return self._points, self._owners

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> RoutingDecision:
        healthy = available(replicas)
        by_id = {r.replica_id: r for r in healthy}
        points, owners = self._ring(tuple(sorted(by_id)))
        cap = load_cap(healthy, self.config.load_slack)
        start = bisect.bisect_left(points, request_key(request, self.config.hash_prefix_blocks))
        home: str | None = None
        for i in range(len(points)):
            rid = owners[(start + i) % len(points)]
            home = home or rid
            if queue_depth(by_id[rid]) + 1 <= cap:
                return RoutingDecision(rid, "affinity" if rid == home else "balance", {})
        assert home is not None
        return RoutingDecision(home, "affinity", {})

    def observe(self, _event: RouterEvent, /) -> None:
        return None
