"""Routers on different ingress replicas share the routes they learn, live.

Why: a policy that learns its prefix index from its own traffic (``prefix``,
``sglang-tree``) would, with one router per ingress replica, learn only the requests its
ingress received, and send a prefix whose first request went through the other ingress to
a cold replica. Each router therefore records the routes it made itself, sends them to a
shared log in the status actor, and applies the routes the other routers sent, as
``PeerRouted`` events: afterwards both indexes hold both halves of the traffic.

Flow (the Ray adapter ``router/serve_share.py`` moves the bytes)::

    router A                     status actor (replicas/route_log.py)       router B
    Routed ─► record() ─► take() ──► append(channel, A, batch) ──► log ──┐
                                                         since(seq, not B) ◄─┘
                                           accept(epoch, next_seq, batches) ─► PeerRouted

Knobs
    ``max_routes`` (512): routes buffered between two sends; the oldest go first.
    ``max_blocks`` (1024): leading blocks kept per route (matches start at the head).
Wire: a batch is JSON ``{"v": 1, "routes": [[replica_id, [hash, ...]], ...], "freed": n}``
(block hashes are ints; ``freed``, optional: slots the sender's requests freed, which wake
the other routers' queued requests, ``router/retry_pacer.py``); a batch of another version
or a bad one is skipped and counted in ``bad``.
Contract: ``accept`` never returns this router's own routes (the log filters them too), and
moves the cursor to ``next_seq`` whatever it skipped; a new epoch (the status actor
restarted) starts the cursor over. Routes to replicas this router no longer knows are the
adapter's to drop: an insert would bring a departed replica back into the index.
"""

from __future__ import annotations

import collections
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import NamedTuple

WIRE_VERSION = 1
MAX_ROUTES = 512
MAX_BLOCKS = 1024


class SharedRoute(NamedTuple):
    replica_id: str
    block_hashes: tuple[int, ...]


def encode(routes: Iterable[SharedRoute], freed: int = 0) -> bytes:
    body: dict[str, object] = {
        "v": WIRE_VERSION,
        "routes": [[r.replica_id, list(r.block_hashes)] for r in routes],
    }
    if freed:
        body["freed"] = freed
    return json.dumps(body, separators=(",", ":")).encode()


def read(batch: bytes) -> tuple[list[SharedRoute], int]:
    """(routes, slots freed); raises ``ValueError`` (or ``TypeError``/``KeyError``) on a
    batch it cannot read. A batch without ``freed`` (an older router) freed none."""
    body = json.loads(batch)
    if body.get("v") != WIRE_VERSION:
        raise ValueError(f"unsupported route batch version: {body.get('v')!r}")
    routes = [
        SharedRoute(str(rid), tuple(int(h) for h in hashes)) for rid, hashes in body["routes"]
    ]
    return routes, max(0, int(body.get("freed", 0)))


def decode(batch: bytes) -> list[SharedRoute]:
    return read(batch)[0]


class RouteShare:
    def __init__(
        self,
        origin: str | None = None,
        max_routes: int = MAX_ROUTES,
        max_blocks: int = MAX_BLOCKS,
    ) -> None:
        self.origin = origin or uuid.uuid4().hex[:12]
        self.max_blocks = max(1, max_blocks)
        self._buffer: collections.deque[SharedRoute] = collections.deque(maxlen=max(1, max_routes))
        self.epoch = ""
        self.seq = 0
        self.sent = 0  # routes handed to take()
        self.received = 0  # routes accepted from other routers
        self.bad = 0  # batches that could not be read
        self.dropped = 0  # routes pushed out of a full buffer
        self._freed = 0  # slots this router's requests freed, not yet sent
        self._peer_freed = 0  # slots the other routers' requests freed, not yet applied

    def record(self, replica_id: str, block_hashes: Sequence[int]) -> None:
        if not block_hashes:
            return
        if len(self._buffer) == self._buffer.maxlen:
            self.dropped += 1
        self._buffer.append(SharedRoute(replica_id, tuple(block_hashes[: self.max_blocks])))

    def record_freed(self) -> None:
        """A request of this router completed: a slot freed (the others' queued requests
        may look for it at once instead of at their next timeout)."""
        self._freed += 1

    def pending(self) -> int:
        return len(self._buffer) + self._freed

    def take(self) -> bytes | None:
        """The buffered routes and freed slots as one batch (emptying the buffer), or None."""
        if not self._buffer and not self._freed:
            return None
        routes = list(self._buffer)
        self._buffer.clear()
        self.sent += len(routes)
        freed, self._freed = self._freed, 0
        return encode(routes, freed)

    def take_peer_freed(self) -> int:
        """Slots the other routers reported freed since the last call."""
        n, self._peer_freed = self._peer_freed, 0
        return n

    def accept(
        self, epoch: str, next_seq: int, batches: Sequence[tuple[str, bytes]]
    ) -> list[SharedRoute]:
        """Read a reply of the log; returns the other routers' routes, oldest first."""
        self.epoch, self.seq = epoch, next_seq
        out: list[SharedRoute] = []
        for origin, batch in batches:
            if origin == self.origin:
                continue
            try:
                routes, freed = read(batch)
            except (ValueError, TypeError, KeyError, AttributeError):
                self.bad += 1
                continue
            out.extend(routes)
            self._peer_freed += freed
        self.received += len(out)
        return out
