"""The status actor's shared route log: routers on different ingress replicas append the
routes they learned and read each other's (``router/route_share.py`` makes and reads the
batches; this side keeps them opaque). Pure: no Ray; the status actor wraps it.

Structure (one log per channel, e.g. ``llmfleet/prefix``)::

    seq:     17      18      19      20          next_seq = 21
    origin:  A       B       A       B           epoch = "3f9c…" (new on every start)
    batch:   bytes   bytes   bytes   bytes       oldest dropped past max_batches / max_bytes

Contract
- ``append`` stores a batch under the next sequence number; the oldest batches go when the
  channel holds more than ``max_batches`` batches or ``max_bytes`` bytes.
- ``since(channel, epoch, seq, exclude)`` returns ``(epoch, next_seq, [(origin, batch)])``:
  the batches numbered ``seq`` or later not appended by ``exclude``, at most ``max_reply``
  of them (``next_seq`` is then the one after the last returned). A reader from another
  epoch (the actor restarted and lost the log) reads from the start. Batches already
  dropped are skipped without notice: sharing is best effort.
Knobs: ``max_batches`` 1024, ``max_bytes`` 8 MiB per channel, ``max_reply`` 64.
"""

from __future__ import annotations

import collections
import uuid
from dataclasses import dataclass, field

MAX_BATCHES = 1024
MAX_BYTES = 8 << 20
MAX_REPLY = 64


@dataclass(slots=True)
class _Channel:
    batches: collections.deque[tuple[str, bytes]] = field(default_factory=collections.deque)
    first_seq: int = 0
    nbytes: int = 0

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self.batches)


class RouteLog:
    def __init__(
        self,
        max_batches: int = MAX_BATCHES,
        max_bytes: int = MAX_BYTES,
        max_reply: int = MAX_REPLY,
        epoch: str | None = None,
    ) -> None:
        self.max_batches = max(1, max_batches)
        self.max_bytes = max(1, max_bytes)
        self.max_reply = max(1, max_reply)
        self.epoch = epoch or uuid.uuid4().hex[:12]
        self._channels: dict[str, _Channel] = {}

    def append(self, channel: str, origin: str, batch: bytes) -> int:
        """Store ``batch``; returns its sequence number."""
        ch = self._channels.setdefault(channel, _Channel())
        seq = ch.next_seq
        ch.batches.append((origin, batch))
        ch.nbytes += len(batch)
        while len(ch.batches) > self.max_batches or (
            ch.nbytes > self.max_bytes and len(ch.batches) > 1
        ):
            _, old = ch.batches.popleft()
            ch.nbytes -= len(old)
            ch.first_seq += 1
        return seq

    def since(
        self, channel: str, epoch: str, seq: int, exclude: str = ""
    ) -> tuple[str, int, list[tuple[str, bytes]]]:
        ch = self._channels.get(channel)
        if ch is None:
            return self.epoch, 0, []
        if epoch != self.epoch or seq > ch.next_seq:
            seq = 0  # a reader of a log this actor no longer holds
        start = max(seq, ch.first_seq) - ch.first_seq
        out: list[tuple[str, bytes]] = []
        nxt = ch.first_seq + start
        for i in range(start, len(ch.batches)):
            nxt = ch.first_seq + i + 1
            origin, batch = ch.batches[i]
            if origin != exclude:
                out.append((origin, batch))
                if len(out) >= self.max_reply:
                    break
        return self.epoch, nxt, out

    def next_seq(self, channel: str) -> int:
        ch = self._channels.get(channel)
        return 0 if ch is None else ch.next_seq

    def nbytes(self, channel: str) -> int:
        ch = self._channels.get(channel)
        return 0 if ch is None else ch.nbytes
