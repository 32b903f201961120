"""Prefix block hashes with vLLM's chaining rule: only full blocks are hashed, and each
block's hash covers its parent's hash and its own tokens, so equal hashes mean equal
prefixes. ``block_hashes`` is shared by the ingress, the simulated engine and the index.

The prompt is packed to bytes once and each block hashes a slice (the simulator hashes
millions of blocks); ``hash_block`` is the one-block form of the same function.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from collections.abc import Sequence

ROOT_HASH = 0
_PACK_PARENT = struct.Struct("<q").pack
_NATIVE_LE = sys.byteorder == "little" and array("I").itemsize == 4


def _pack_tokens(tokens: Sequence[int]) -> bytes:
    if _NATIVE_LE:
        return array("I", tokens).tobytes()
    return struct.pack(f"<{len(tokens)}I", *tokens)


def _digest(parent: int, payload: bytes) -> int:
    d = hashlib.blake2b(_PACK_PARENT(parent) + payload, digest_size=8).digest()
    return int.from_bytes(d, "little", signed=True)


def hash_block(parent: int, tokens: Sequence[int]) -> int:
    return _digest(parent, _pack_tokens(tokens))


def block_hashes(
    token_ids: Sequence[int], block_size: int, parent: int = ROOT_HASH
) -> tuple[int, ...]:
    n = len(token_ids) // block_size
    if n == 0:
        return ()
    buf = _pack_tokens(token_ids[: n * block_size])
    step = 4 * block_size
    out = []
    for off in range(0, n * step, step):
        parent = _digest(parent, buf[off : off + step])
        out.append(parent)
    return tuple(out)
