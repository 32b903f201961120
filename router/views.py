"""Builders for the router's input views, shared by the ingress, the simulator and the
Serve adapter: parse once, convert once."""

from __future__ import annotations

from collections.abc import Sequence

from contracts.hashing import block_hashes
from contracts.stats import ReplicaStats
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


def replica_view_from_stats(
    replica_id: str,
    stats: ReplicaStats,
    *,
    ongoing: int = 0,
    max_ongoing: int = 1_000_000,
    draining: bool = False,
    default_block_size: int = 16,
) -> ReplicaView:
    """The router's view of one replica's ``ReplicaStats`` (decode the wire dict with
    ``contracts.stats.from_wire(..., strict=False)`` first). Reads: healthy, draining,
    waiting, running, waiting_prefill_tokens, kv_usage, kv_capacity_tokens, block_size,
    prefill_tokens_per_s. A replica that has not reported (``UNREPORTED``) or reported
    something undecodable (``UNKNOWN``, counted by ``from_wire``) is healthy and idle."""
    return ReplicaView(
        replica_id=replica_id,
        healthy=stats.healthy,
        draining=draining or stats.draining,
        ongoing=max(0, int(ongoing)),
        max_ongoing=max(1, int(max_ongoing)),
        waiting=int(stats.waiting),
        running=int(stats.running),
        waiting_prefill_tokens=int(stats.waiting_prefill_tokens),
        kv_usage=stats.kv_usage,
        kv_capacity_tokens=stats.kv_capacity_tokens,
        block_size=(stats.block_size if stats.reported else 0) or default_block_size,
        prefill_tokens_per_s=stats.prefill_tokens_per_s,
    )
