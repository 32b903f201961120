"""Paged KV cache and prefix cache of the simulated engine on hand-made scenarios."""

from __future__ import annotations

from contracts.hashing import block_hashes
from replicas.sim.kv_cache import REMOVED, STORED, BlockPool, KVCacheManager
from replicas.sim.request import SimRequest

BS = 4


def _req(rid: str, tokens: list[int], max_tokens: int = 4) -> SimRequest:
    return SimRequest(rid, len(tokens), block_hashes(tokens, BS), max_tokens)


def _admit(kv: KVCacheManager, req: SimRequest) -> int:
    hit = kv.computed_blocks(req)
    assert kv.allocate(req, req.prompt_len - hit * BS, hit)
    kv.count_lookup(req, hit)
    kv.commit(req, req.prompt_len - req.num_computed)
    req.num_computed = req.prompt_len
    return hit


def test_blocks_cover_tokens_with_one_partial_block() -> None:
    kv = KVCacheManager(BlockPool(10, BS))
    req = _req("a", list(range(10)))  # 2 full blocks + 2 tokens
    _admit(kv, req)
    assert len(req.blocks) == 3
    assert kv.pool.num_free == 7
    assert len(kv.pool.cached) == 2  # only full blocks are cached
    # decoding 2 more tokens fills block 3; the 3rd needs a 4th block
    assert kv.allocate(req, 2)
    assert len(req.blocks) == 3
    req.num_computed += 2
    assert kv.allocate(req, 1)
    assert len(req.blocks) == 4


def test_prefix_reuse_longest_chain_and_refcounts() -> None:
    kv = KVCacheManager(BlockPool(16, BS))
    a = _req("a", [*list(range(12)), 99])
    _admit(kv, a)
    b = _req("b", [*list(range(8)), 7, 7, 7, 7, 5])  # shares the first 2 blocks only
    assert _admit(kv, b) == 2
    assert b.blocks[:2] == a.blocks[:2]
    assert kv.pool.ref[a.blocks[0]] == 2
    assert b.cached_tokens == 8
    assert (kv.hit_tokens, kv.query_tokens) == (8, 26)


def test_full_hit_recomputes_last_token() -> None:
    kv = KVCacheManager(BlockPool(16, BS))
    tokens = list(range(8))
    _admit(kv, _req("a", tokens))
    b = _req("b", tokens)
    assert _admit(kv, b) == 1  # at most prompt-1 tokens come from the cache


def test_freed_blocks_stay_cached_until_lru_eviction() -> None:
    events: list[tuple[str, tuple[int, ...]]] = []
    pool = BlockPool(4, BS)
    kv = KVCacheManager(pool)
    a = _req("a", list(range(8)))
    _admit(kv, a)
    pool.drain_events(lambda k, h: events.append((k, h)))
    assert events == [(STORED, a.block_hashes)]
    kv.free(a)
    assert pool.num_free == 4
    assert len(pool.cached) == 2
    again = _req("a2", [*list(range(8)), 1])
    assert kv.computed_blocks(again) == 2  # still reusable after free
    # a different 3-block prompt evicts: the 2 never-used blocks go first, then LRU
    c = _req("c", [50 + i for i in range(9)])
    _admit(kv, c)
    events.clear()
    pool.drain_events(lambda k, h: events.append((k, h)))
    removed = [h for k, hs in events if k == REMOVED for h in hs]
    # a's tail block was freed first (reverse order), so it is evicted before its head
    assert removed == [a.block_hashes[1]]
    assert kv.computed_blocks(again) == 1


def test_allocation_failure_changes_nothing() -> None:
    kv = KVCacheManager(BlockPool(3, BS))
    a = _req("a", list(range(20)))
    assert not kv.allocate(a, 20)
    assert a.blocks == []
    assert kv.pool.num_free == 3


def test_duplicate_blocks_cached_once() -> None:
    pool = BlockPool(8, BS)
    kv = KVCacheManager(pool)
    a, b = _req("a", list(range(9))), _req("b", list(range(9)))
    for r in (a, b):  # both admitted before either block was cached
        assert kv.allocate(r, 9)
    kv.commit(a, 9)
    kv.commit(b, 9)
    assert len(pool.cached) == 2
    assert pool.stored_events == list(a.block_hashes)
    kv.free(b)
    assert pool.num_free == 8 - 3  # b's duplicates are plain free blocks


def test_block_hashes_chain_hash_block() -> None:
    import random

    from contracts.hashing import ROOT_HASH, hash_block

    rng = random.Random(3)
    for n, bs in ((0, 16), (15, 16), (16, 16), (1000, 16), (700, 128)):
        tokens = [rng.randrange(0, 2**32) for _ in range(n)]
        parent, chained = ROOT_HASH, []
        for i in range(n // bs):
            parent = hash_block(parent, tokens[i * bs : (i + 1) * bs])
            chained.append(parent)
        assert block_hashes(tokens, bs) == tuple(chained)
        assert block_hashes(tuple(tokens), bs, parent=42)[:1] == (
            (hash_block(42, tokens[:bs]),) if n >= bs else ()
        )
