"""PrefixIndex: leading-match semantics, per-replica LRU caps, removal, restore, memory."""

from __future__ import annotations

import json
import random

from contracts.hashing import block_hashes
from router.index import PrefixIndex
from router.prefix_policy import PrefixAwarePolicy
from router.types import ReplicaView, RequestView, Routed


def test_match_counts_leading_blocks_per_replica() -> None:
    idx = PrefixIndex()
    idx.insert("a", [1, 2, 3])
    idx.insert("b", [1, 2])
    idx.insert("c", [2, 3])  # holds later blocks but not the first: no leading match
    assert idx.match([1, 2, 3, 4], ["a", "b", "c", "d"]) == {"a": 3, "b": 2, "c": 0, "d": 0}
    assert idx.match([], ["a"]) == {"a": 0}


def test_lru_cap_evicts_least_recently_used() -> None:
    idx = PrefixIndex(default_capacity_blocks=100)
    idx.set_capacity("a", 3)
    idx.insert("a", [1, 2, 3])  # a chain: its tail (3) is the oldest
    idx.insert("a", [3])  # touch 3: now 2 is the oldest
    idx.insert("a", [4])
    assert not idx.holds("a", 2)
    assert all(idx.holds("a", h) for h in (1, 3, 4))
    assert idx.size("a") == 3
    idx.set_capacity("a", 1)  # shrinking evicts down to the new cap
    assert idx.size("a") == 1
    assert idx.holds("a", 4)
    assert idx.num_hashes() == 1


def test_fill_is_indexed_blocks_over_capacity() -> None:
    idx = PrefixIndex(default_capacity_blocks=8)
    idx.set_capacity("a", 4)
    idx.insert("a", [1, 2, 3])
    idx.insert("b", [1, 2])  # default capacity
    assert idx.fill(["a", "b", "c"]) == {"a": 0.75, "b": 0.25, "c": 0.0}
    assert idx.fill(["a"]) == {"a": idx.size("a") / idx.capacity("a")}


def test_remove_and_drop_replica_clear_masks_and_reuse_slots() -> None:
    idx = PrefixIndex()
    idx.insert("a", [1, 2])
    idx.insert("b", [1, 2])
    idx.remove("a", [2, 99])
    assert idx.match([1, 2], ["a", "b"]) == {"a": 1, "b": 2}
    idx.drop_replica("b")
    assert idx.match([1, 2], ["a", "b"]) == {"a": 1, "b": 0}
    idx.insert("c", [1, 2])  # takes b's freed slot; must not inherit b's blocks
    assert idx.match([1, 2], ["a", "c"]) == {"a": 1, "c": 2}
    assert idx.size() == 3
    assert idx.num_hashes() == 2


def test_export_restore_roundtrip_keeps_matches_and_lru_order() -> None:
    idx = PrefixIndex(default_capacity_blocks=50)
    idx.set_capacity("a", 3)
    idx.insert("a", [10, 11, 12])
    idx.insert("a", [10])
    idx.insert("b", [10, 20])
    restored = PrefixIndex.from_export(json.loads(json.dumps(idx.export())))
    q = [10, 11, 12]
    assert restored.match(q, ["a", "b"]) == idx.match(q, ["a", "b"]) == {"a": 3, "b": 1}
    restored.insert("a", [13])  # LRU order survived: the tail 12 is evicted, not 10 or 11
    assert not restored.holds("a", 12)
    assert restored.holds("a", 10)
    assert restored.holds("a", 11)


def test_eviction_takes_a_prefix_tail_first_so_its_head_still_matches() -> None:
    idx = PrefixIndex(default_capacity_blocks=100)
    idx.set_capacity("a", 6)
    idx.insert("a", [1, 2, 3, 4])  # an old prefix
    idx.insert("a", [7, 8, 9, 10])  # a newer one: 2 blocks of the old one must go
    assert idx.match([1, 2, 3, 4], ["a"]) == {"a": 2}  # its head survives (as in vLLM)
    assert idx.match([7, 8, 9, 10], ["a"]) == {"a": 4}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_memory_plateaus_under_200k_unique_prompts() -> None:
    """Stream 200k unique prompts (4 blocks each) through choose+observe on 8 replicas."""
    rng = random.Random(7)
    cap_blocks = 2_000
    policy = PrefixAwarePolicy(rng=random.Random(1))
    views = [
        ReplicaView(f"r{i}", kv_capacity_tokens=cap_blocks * 16, block_size=16) for i in range(8)
    ]
    sizes, rss = [], []
    for n in range(200_000):
        hashes = tuple(rng.getrandbits(63) for _ in range(4))
        req = RequestView(str(n), "m", (), hashes, 16)
        decision = policy.choose(req, views)
        policy.observe(Routed(req, decision.replica_id, float(n)))
        if n % 50_000 == 49_999:
            sizes.append(policy.index.size())
            rss.append(_rss_bytes())
    assert policy.index.size() <= 8 * cap_blocks
    assert sizes[0] == sizes[-1] == 8 * cap_blocks  # full and flat
    assert policy.index.num_hashes() <= 8 * cap_blocks
    assert rss[-1] - rss[0] < 8 * 2**20, rss  # no growth beyond allocator noise


def test_block_hashes_chain_so_shared_prefix_shares_hashes() -> None:
    a = block_hashes(list(range(48)), 16)
    b = block_hashes(list(range(32)) + [999] * 16, 16)
    assert a[:2] == b[:2]
    assert a[2] != b[2]
