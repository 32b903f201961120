"""The streams the other ingress replicas hold open, per key (shared-mode quotas,
``cluster/quotas.py``; the counts arrive through ``cluster/quota_sync.py``).

Each peer's latest map replaces its previous one (a map is the peer's whole state, so a
lost batch is healed by the next). A peer's streams count until it has been silent for
``PEER_STALE_S``: its peers cannot tell its death from a pause, and a living replica with
open streams re-sends its map every second. A map already that old when it arrives (a
replica that starts reads old batches) never counts.
"""

from __future__ import annotations

PEER_STALE_S = 5.0  # a peer's open streams stop counting after this long without a word
FORGET_S = 120.0  # a peer silent this long is dropped


class PeerStreams:
    def __init__(self) -> None:
        self._peers: dict[str, tuple[dict[str, int], float]] = {}  # origin -> (map, seen)

    def replace(self, origin: str, streams: dict[str, int], now: float, age_s: float) -> None:
        """``origin``'s open streams per key, as of ``age_s`` before ``now``."""
        if age_s < PEER_STALE_S:
            self._peers[origin] = (dict(streams), now - max(0.0, age_s))

    def count(self, key_id: str, now: float) -> int:
        """Open streams of ``key_id`` on the peers still heard from."""
        return sum(
            streams.get(key_id, 0)
            for streams, seen in self._peers.values()
            if now - seen < PEER_STALE_S
        )

    def forget_silent(self, now: float) -> None:
        for origin in [o for o, (_, seen) in self._peers.items() if now - seen > FORGET_S]:
            del self._peers[origin]
