"""``router.hashing.block_hashes`` with the same output, ~2x faster: the prompt is packed
to bytes once and each block hashes a slice (the simulator hashes millions of blocks)."""

from __future__ import annotations

import hashlib
import struct
import sys
from array import array
from collections.abc import Sequence

from router.hashing import ROOT_HASH

_PACK_PARENT = struct.Struct("<q").pack
_NATIVE_LE = sys.byteorder == "little" and array("I").itemsize == 4


def block_hashes(
    token_ids: Sequence[int], block_size: int, parent: int = ROOT_HASH
) -> tuple[int, ...]:
    n = len(token_ids) // block_size
    if n == 0:
        return ()
    full = token_ids[: n * block_size]
    if _NATIVE_LE:
        buf = array("I", full).tobytes()
    else:
        buf = struct.pack(f"<{len(full)}I", *full)
    step = 4 * block_size
    blake, from_bytes, pack = hashlib.blake2b, int.from_bytes, _PACK_PARENT
    out = []
    for off in range(0, n * step, step):
        parent = from_bytes(
            blake(pack(parent) + buf[off : off + step], digest_size=8).digest(),
            "little",
            signed=True,
        )
        out.append(parent)
    return tuple(out)
