"""Prefix block hashes with vLLM's chaining rule: only full blocks are hashed, and each
block's hash covers its parent's hash and its own tokens, so equal hashes mean equal
prefixes. ``block_hashes`` is shared by the ingress, the simulated engine and the index.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

ROOT_HASH = 0


def hash_block(parent: int, tokens: Sequence[int]) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(struct.pack("<q", parent))
    h.update(struct.pack(f"<{len(tokens)}I", *tokens))
    return int.from_bytes(h.digest(), "little", signed=True)


def block_hashes(
    token_ids: Sequence[int], block_size: int, parent: int = ROOT_HASH
) -> tuple[int, ...]:
    out: list[int] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start : start + block_size])
        out.append(parent)
    return tuple(out)
