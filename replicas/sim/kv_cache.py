"""Paged KV cache with automatic prefix caching, following vLLM V1's block pool.

    block ids: [0 1 2 3 4 5 ...]       ref[b]: requests using block b
    cached: hash -> block id           only FULL prompt blocks, hash chains the parent
    free:   head [b7 b2 b9 ... b4] tail   LRU: freed blocks join the tail (a request's
                                          last block first), allocation pops the head and
                                          evicts its hash ("removed" event); never-used
                                          blocks sit implicitly before the head (lazy)

A request owns ``ceil(tokens / block_size)`` blocks, so at most its last block is partly
filled. A new request reuses the longest chain of cached blocks (at most prompt - 1 tokens:
the last prompt token is always recomputed to produce logits). Cached blocks freed by their
request stay findable until popped for reuse. Two requests prefilling the same block at
once keep one cached copy; the duplicate is freed uncached. Blocks of generated tokens are
hashed and cached when the request carries its token ids (real-time engine); the cluster
simulator counts output tokens without ids, so there only prompt blocks are cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from contracts.hashing import ROOT_HASH, hash_block
from replicas.sim.request import SimRequest

KVEventCallback = Callable[[str, tuple[int, ...]], None]
STORED = "stored"
REMOVED = "removed"


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.ref = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict()  # freed blocks, LRU order
        self.next_fresh = 0  # blocks >= this id were never used (they sit at the queue head)
        self.stored_events: list[int] = []
        self.removed_events: list[int] = []

    @property
    def num_free(self) -> int:
        return self.num_blocks - self.next_fresh + len(self.free)

    def usage(self) -> float:
        return 1.0 - self.num_free / self.num_blocks

    def lookup(self, hashes: Sequence[int], limit: int) -> int:
        """Number of leading ``hashes`` (at most ``limit``) whose blocks are cached."""
        cached = self.cached
        n = 0
        for h in hashes:
            if n >= limit or h not in cached:
                break
            n += 1
        return n

    def touch(self, hashes: Sequence[int], n: int) -> list[int]:
        out: list[int] = []
        for h in hashes[:n]:
            b = self.cached[h]
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1
            out.append(b)
        return out

    def allocate(self, n: int) -> list[int]:
        if n > self.num_free:
            raise MemoryError(f"need {n} blocks, {self.num_free} free")
        fresh = min(n, self.num_blocks - self.next_fresh)
        out = list(range(self.next_fresh, self.next_fresh + fresh))
        self.next_fresh += fresh
        for b in out:
            self.ref[b] = 1
        for _ in range(n - fresh):
            b, _ = self.free.popitem(last=False)
            h = self.block_hash[b]
            if h is not None:
                self.block_hash[b] = None
                del self.cached[h]
                self.removed_events.append(h)
            self.ref[b] = 1
            out.append(b)
        return out

    def cache(self, block: int, h: int) -> bool:
        if not self.enable_caching or h in self.cached:
            return False
        self.block_hash[block] = h
        self.cached[h] = block
        self.stored_events.append(h)
        return True

    def release(self, blocks: list[int]) -> None:
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free[b] = None

    def drain_events(self, callback: KVEventCallback | None) -> None:
        if self.stored_events:
            if callback is not None:
                callback(STORED, tuple(self.stored_events))
            self.stored_events.clear()
        if self.removed_events:
            if callback is not None:
                callback(REMOVED, tuple(self.removed_events))
            self.removed_events.clear()


class KVCacheManager:
    """Per-request block bookkeeping on top of a ``BlockPool``."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.block_size = pool.block_size
        self.hit_tokens = 0
        self.query_tokens = 0

    def computed_blocks(self, req: SimRequest) -> int:
        """Leading prompt blocks already cached (the prefix hit of a request to admit)."""
        known = req.prompt_len if req.token_ids is None else len(req.token_ids)
        limit = (known - 1) // self.block_size if self.pool.enable_caching else 0
        return self.pool.lookup(req.block_hashes, limit)

    def count_lookup(self, req: SimRequest, hit_blocks: int) -> None:
        self.query_tokens += req.prompt_len
        self.hit_tokens += hit_blocks * self.block_size

    def allocate(self, req: SimRequest, num_new: int, num_hit_blocks: int = 0) -> bool:
        """Make room for ``num_new`` more tokens after ``req.num_computed`` (plus the prefix
        hit for a newly admitted request). False, and nothing changed, if blocks are short."""
        bs = self.block_size
        pool = self.pool
        hit_tokens = num_hit_blocks * bs
        need = -(-(req.num_computed + hit_tokens + num_new) // bs) - len(req.blocks)
        to_allocate = need - num_hit_blocks
        evictable_hits = 0
        if num_hit_blocks:
            ref = pool.ref
            cached = pool.cached
            for h in req.block_hashes[:num_hit_blocks]:
                if ref[cached[h]] == 0:
                    evictable_hits += 1
        if to_allocate + evictable_hits > pool.num_free:
            return False
        if num_hit_blocks:
            req.blocks.extend(pool.touch(req.block_hashes, num_hit_blocks))
            req.num_cached_blocks = num_hit_blocks
            req.num_computed += hit_tokens
            req.cached_tokens = hit_tokens
        if to_allocate > 0:
            req.blocks.extend(pool.allocate(to_allocate))
        return True

    def commit(self, req: SimRequest, num_new: int) -> None:
        """Register blocks that became full after computing ``num_new`` tokens."""
        if not self.pool.enable_caching:
            return
        ids = req.token_ids
        known = req.prompt_len if ids is None else len(ids)
        full = min(req.num_computed + num_new, known) // self.block_size
        hashes = req.block_hashes
        if ids is not None and full > len(hashes):
            assert isinstance(hashes, list), "token_ids requires a list of block hashes"
            bs = self.block_size
            for k in range(len(hashes), full):
                hashes.append(
                    hash_block(hashes[-1] if hashes else ROOT_HASH, ids[k * bs : (k + 1) * bs])
                )
        full = min(full, len(hashes))
        i = req.num_cached_blocks
        while i < full:
            self.pool.cache(req.blocks[i], hashes[i])
            i += 1
        req.num_cached_blocks = i

    def free(self, req: SimRequest) -> None:
        self.pool.release(req.blocks)
        req.blocks = []
        req.num_cached_blocks = 0
