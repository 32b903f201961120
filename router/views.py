"""Builders for the router's input views, shared by the ingress, the simulator and the
Serve adapter: parse once, convert once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contracts.hashing import block_hashes
from router.types import ReplicaView, RequestView


def make_request_view(
    request_id: str,
    token_ids: Sequence[int],
    *,
    block_size: int = 16,
    expected_output_tokens: int = 128,
    model: str = "",
    session_id: str | None = None,
) -> RequestView:
    tokens = tuple(token_ids)
    return RequestView(
        request_id=request_id,
        model=model,
        token_ids=tokens,
        block_hashes=block_hashes(tokens, block_size),
        expected_output_tokens=expected_output_tokens,
        session_id=session_id,
    )


def _num(stats: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    value = stats.get(key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def replica_view_from_stats(
    replica_id: str,
    stats: Mapping[str, Any] | None,
    *,
    ongoing: int = 0,
    max_ongoing: int = 1_000_000,
    draining: bool = False,
    default_block_size: int = 16,
) -> ReplicaView:
    """``stats`` is ``EngineStats.as_dict()`` as reported by the replica (may be empty or
    stale); missing keys take neutral defaults, so a replica that has not reported yet is
    treated as healthy and idle."""
    s = stats or {}
    return ReplicaView(
        replica_id=replica_id,
        healthy=bool(_num(s, "healthy", 1.0)),
        draining=draining or bool(_num(s, "draining", 0.0)),
        ongoing=max(0, int(ongoing)),
        max_ongoing=max(1, int(max_ongoing)),
        waiting=int(_num(s, "waiting")),
        running=int(_num(s, "running")),
        waiting_prefill_tokens=int(_num(s, "waiting_prefill_tokens")),
        kv_usage=_num(s, "kv_usage"),
        kv_capacity_tokens=int(_num(s, "kv_capacity_tokens")),
        block_size=int(_num(s, "block_size", default_block_size)) or default_block_size,
        prefill_tokens_per_s=_num(s, "prefill_tokens_per_s"),
    )
