"""Translate vLLM KV cache events into router index events (pure; no sockets).

Wire format (vllm/distributed/kv_events.py, ZmqEventPublisher): multipart
``(topic, seq as 8 bytes big-endian, payload)``; payload is msgspec-msgpack of
``EventBatch`` — an array ``[ts, [events...], dp_rank]`` (dp_rank omitted when None). Each
event is a tagged struct: a map with ``"type": "BlockStored" | "BlockRemoved" |
"AllBlocksCleared"`` (vLLM 0.32), or, in array-like encodings, an array whose first item
is the type name followed by the fields in declaration order. Block hashes are bytes
(default) or 64-bit ints (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``).

Translation: vLLM's hashes differ from ours, but ``BlockStored`` carries the tokens and the
parent's vLLM hash. We keep a bounded LRU map ``vllm_hash -> our hashes for that block``
(one vLLM block = ``vllm_block_size / block_size`` of ours), so a child's chain starts at
its parent's last hash and a removal drops exactly the blocks it stored. Events whose parent
is unknown (evicted from the map, or published before we subscribed) are counted and
skipped: their chain cannot be reconstructed. Only the primary tier (``medium`` None or
"GPU") is tracked; offloaded-tier events are ignored.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from contracts.hashing import ROOT_HASH, block_hashes
from router.types import KVBlocksRemoved, KVBlocksStored

STORED_FIELDS = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
)
REMOVED_FIELDS = ("block_hashes", "medium")
PRIMARY_MEDIA = (None, "GPU")
DEFAULT_MAP_ENTRIES = 65_536  # > vLLM blocks of any replica we run; size to capacity if larger


@dataclass(frozen=True, slots=True)
class EventBatchView:
    ts: float
    events: list[dict[str, Any]]
    dp_rank: int | None


def _normalize(ev: Any) -> dict[str, Any]:
    if isinstance(ev, dict):
        return ev
    if isinstance(ev, (list, tuple)) and ev and isinstance(ev[0], str):
        names = {"BlockStored": STORED_FIELDS, "BlockRemoved": REMOVED_FIELDS}.get(ev[0], ())
        return {"type": ev[0], **dict(zip(names, ev[1:], strict=False))}
    raise ValueError(f"unrecognised KV event encoding: {ev!r:.80}")


def decode_payload(payload: bytes) -> EventBatchView:
    raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    if not isinstance(raw, (list, tuple)) or len(raw) < 2:
        raise ValueError("KV event batch must be [ts, events, dp_rank?]")
    dp_rank = raw[2] if len(raw) > 2 else None
    return EventBatchView(float(raw[0]), [_normalize(e) for e in raw[1]], dp_rank)


class KVEventTranslator:
    def __init__(
        self, replica_id: str, block_size: int, max_entries: int = DEFAULT_MAP_ENTRIES
    ) -> None:
        self.replica_id = replica_id
        self.block_size = block_size
        self.max_entries = max_entries
        self._map: dict[Hashable, tuple[int, ...]] = {}
        self.skipped_unknown_parent = 0
        self.skipped_bad_block_size = 0
        self.last_seq: int | None = None
        self.seq_gaps = 0

    def __len__(self) -> int:
        return len(self._map)

    def translate_message(
        self, frames: Sequence[bytes], now: float
    ) -> list[KVBlocksStored | KVBlocksRemoved]:
        """A received multipart message ``(topic, seq, payload)``."""
        _topic, seq_bytes, payload = frames[-3], frames[-2], frames[-1]
        seq = int.from_bytes(seq_bytes, "big")
        if self.last_seq is not None and seq != self.last_seq + 1:
            self.seq_gaps += 1
        self.last_seq = seq
        return self.translate_batch(decode_payload(payload), now)

    def translate_batch(
        self, batch: EventBatchView, now: float
    ) -> list[KVBlocksStored | KVBlocksRemoved]:
        out: list[KVBlocksStored | KVBlocksRemoved] = []
        for ev in batch.events:
            if ev.get("medium") not in PRIMARY_MEDIA:
                continue
            kind = ev.get("type")
            hashes: tuple[int, ...] = ()
            if kind == "BlockStored":
                hashes = self._stored(ev)
                if hashes:
                    out.append(KVBlocksStored(self.replica_id, hashes, now))
                continue
            if kind == "BlockRemoved":
                hashes = self._removed(ev["block_hashes"])
            elif kind == "AllBlocksCleared":
                hashes = self._removed(list(self._map))
            if hashes:
                out.append(KVBlocksRemoved(self.replica_id, hashes, now))
        return out

    def _stored(self, ev: dict[str, Any]) -> tuple[int, ...]:
        vbs = int(ev["block_size"])
        if vbs % self.block_size != 0:
            self.skipped_bad_block_size += 1
            return ()
        parent_vh = ev.get("parent_block_hash")
        if parent_vh is None:
            parent = ROOT_HASH
        elif (known := self._map.get(_key(parent_vh))) is not None:
            parent = known[-1]
        else:
            self.skipped_unknown_parent += 1
            return ()
        tokens = ev["token_ids"]
        out: list[int] = []
        for i, vh in enumerate(ev["block_hashes"]):
            ours = block_hashes(tokens[i * vbs : (i + 1) * vbs], self.block_size, parent)
            if len(ours) * self.block_size != vbs:
                break  # tokens missing for this block: stop the chain here
            self._remember(_key(vh), ours)
            out.extend(ours)
            parent = ours[-1]
        return tuple(out)

    def _removed(self, vllm_hashes: Sequence[Any]) -> tuple[int, ...]:
        out: list[int] = []
        for vh in vllm_hashes:
            ours = self._map.pop(_key(vh), None)
            if ours:
                out.extend(ours)
        return tuple(out)

    def _remember(self, key: Hashable, ours: tuple[int, ...]) -> None:
        self._map.pop(key, None)
        self._map[key] = ours
        while len(self._map) > self.max_entries:
            del self._map[next(iter(self._map))]


def _key(vh: Any) -> Hashable:
    return bytes(vh) if isinstance(vh, (bytearray, memoryview)) else vh
