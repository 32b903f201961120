"""Values that cross the router boundary. Pure: no Ray, no event loop.

The ingress parses a request once into a ``RequestView``; the Ray adapter (or the
virtual-time simulator) turns each replica's reported stats into a ``ReplicaView``; a
``RoutingPolicy`` maps the two to a ``RoutingDecision`` without mutating itself, and learns
only through ``observe(event)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class RequestView:
    request_id: str
    model: str
    token_ids: tuple[int, ...]  # prompt after the chat template
    block_hashes: tuple[int, ...]  # chained hashes of the prompt's full blocks (contracts.hashing)
    expected_output_tokens: int
    session_id: str | None = None

    @property
    def prompt_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    replica_id: str
    healthy: bool = True
    draining: bool = False
    ongoing: int = 0  # requests in flight at this replica as seen by this router
    max_ongoing: int = 1_000_000
    waiting: int = 0
    running: int = 0
    waiting_prefill_tokens: int = 0
    kv_usage: float = 0.0
    kv_capacity_tokens: int = 0
    block_size: int = 16
    prefill_tokens_per_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RoutingDecision:
    replica_id: str
    reason: str  # "affinity" | "balance" | "fallback" | policy-specific
    scores: Mapping[str, float] = field(default_factory=dict)  # replica_id -> total score
    matched_blocks: int = 0  # prefix blocks the chosen replica is believed to hold


# Events the policy observes (decide, then observe).
@dataclass(frozen=True, slots=True)
class Routed:
    request: RequestView
    replica_id: str
    now: float


@dataclass(frozen=True, slots=True)
class Completed:
    request_id: str
    replica_id: str
    now: float
    ok: bool = True


@dataclass(frozen=True, slots=True)
class ReplicaGone:
    replica_id: str
    now: float


@dataclass(frozen=True, slots=True)
class KVBlocksStored:
    replica_id: str
    block_hashes: tuple[int, ...]  # our chained hashes (contracts.hashing), parent first
    now: float


@dataclass(frozen=True, slots=True)
class KVBlocksRemoved:
    replica_id: str
    block_hashes: tuple[int, ...]
    now: float


@dataclass(frozen=True, slots=True)
class PeerRouted:
    """Another router (another ingress replica) routed a request with these blocks to this
    replica (``router/route_share.py``): what its own ``Routed`` taught it."""

    replica_id: str
    block_hashes: tuple[int, ...]
    now: float


RouterEvent = Routed | Completed | ReplicaGone | KVBlocksStored | KVBlocksRemoved | PeerRouted


class NoReplicaAvailable(Exception):
    """Every replica was filtered out (unhealthy, draining or full)."""


@runtime_checkable
class RoutingPolicy(Protocol):
    name: str

    def choose(
        self, request: RequestView, replicas: Sequence[ReplicaView], /
    ) -> RoutingDecision: ...

    def observe(self, event: RouterEvent, /) -> None: ...
