"""Values that cross the autoscaler boundary. Pure: no Ray.

Each replica reports a ``contracts.stats.ReplicaStats`` (on the wire through
``record_autoscaling_stats()``, averaged by Serve over its look-back window, cumulative
counters taken at their latest value); the Ray adapter
(or the virtual-time simulator, from the record directly) turns them into a
``MetricsSnapshot`` of ``ReplicaMetrics``; a policy's ``decide(snapshot, config, state) -> (desired_replicas, new_state)`` is pure and
takes time only from ``snapshot.now``. A policy may also offer ``explain(snapshot, config,
state, desired) -> Explanation`` (``ExplainingPolicy``): what it measured, the values it holds
them to and why it moved, for the metrics the Serve adapter exports (``autoscaler.explain``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from contracts.stats import ReplicaStats, ttft_tail, ttft_tail_fields


@dataclass(frozen=True, slots=True)
class ReplicaMetrics:
    replica_id: str
    waiting: float = 0.0
    running: float = 0.0
    waiting_prefill_tokens: float = 0.0  # uncached prompt tokens still to prefill
    prefill_tokens_per_s: float = 0.0  # measured, smoothed
    queue_delay_s: float = 0.0  # estimated wait to first token of the newest waiting request
    kv_usage: float = 0.0
    ttft_p95_s: float = 0.0
    ongoing: float = 0.0  # requests in flight (Ray's ongoing-requests signal)
    busy_fraction: float = 0.0  # share of recent time the engine was stepping
    prefill_load_tokens_per_s: float = 0.0  # uncached tokens prefilled per second, recently
    prefix_queries: float = 0.0  # cumulative prompt tokens looked up in the prefix cache
    prefix_hits: float = 0.0  # cumulative prompt tokens served from the prefix cache
    arrived_prompt_tokens: float = 0.0  # cumulative prompt tokens of requests added
    arrived_requests: float = 0.0  # cumulative requests added
    # cumulative TTFT tail counters (``contracts.stats.TTFT_TAIL_EDGES_S``; ``ttft_tail``)
    first_tokens: float = 0.0
    ttft_over_250ms: float = 0.0
    ttft_over_500ms: float = 0.0
    ttft_over_1s: float = 0.0
    ttft_over_2s: float = 0.0
    ttft_over_4s: float = 0.0
    ttft_over_8s: float = 0.0

    @classmethod
    def from_stats(
        cls, replica_id: str, stats: ReplicaStats, ongoing: float | None = None
    ) -> ReplicaMetrics:
        """The fields the policies read; ``ongoing`` overrides the engine's own count (Serve's
        ``running_requests``, or the twin's router-side in-flight count)."""
        return cls(
            replica_id,
            waiting=stats.waiting,
            running=stats.running,
            waiting_prefill_tokens=stats.waiting_prefill_tokens,
            prefill_tokens_per_s=stats.prefill_tokens_per_s,
            queue_delay_s=stats.queue_delay_s,
            kv_usage=stats.kv_usage,
            ttft_p95_s=stats.ttft_p95_s,
            ongoing=stats.ongoing if ongoing is None else ongoing,
            busy_fraction=stats.busy_fraction,
            prefill_load_tokens_per_s=stats.prefill_load_tokens_per_s,
            prefix_queries=stats.prefix_queries,
            prefix_hits=stats.prefix_hits,
            arrived_prompt_tokens=stats.arrived_prompt_tokens,
            arrived_requests=stats.arrived_requests,
            **ttft_tail_fields(stats.first_tokens, ttft_tail(stats)),
        )


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    now: float  # seconds, monotonic or virtual
    current_replicas: int  # replicas running or starting
    replicas: tuple[ReplicaMetrics, ...]  # metrics from running replicas
    pending_requests: float = 0.0  # requests held at the ingress (e.g. scaled to zero)
    warm_replicas: int = 0  # asleep (sleep mode), serving seconds after an up-move wakes them


@dataclass(frozen=True, slots=True)
class ScalingConfig:
    """What every policy is given: the service's bounds and SLO, and the chosen policy's
    knobs as a plain mapping (config files, Serve's ``policy_kwargs``). Each policy parses
    ``params`` into its own frozen params class (``common.parse_params``), the one route
    by which a knob reaches it; an unknown key is an error naming the known ones."""

    min_replicas: int = 1
    max_replicas: int = 8
    ttft_slo_s: float = 2.0  # target P95 TTFT
    target_ongoing_requests: float = 8.0  # ongoing-requests only (Ray's own config names it)
    params: Mapping[str, Any] = field(default_factory=dict)  # the policy's knobs


S = TypeVar("S")
S_contra = TypeVar("S_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class Explanation:
    """One decision explained. Signal names are stable snake_case and carry their unit
    (``queue_delay_max_s``, ``ongoing_requests_per_replica``, ``kv_usage_ratio``); a target has
    the name of the signal it bounds. ``reason`` is a stable key of why the count moves
    (``queue_delay``, ``arrival_rate``, ``bounds``, ...), ``steady`` when it does not."""

    signals: Mapping[str, float]
    targets: Mapping[str, float]
    reason: str


class ScalingPolicy(Protocol[S]):
    """A pure scaling rule. ``S`` is the policy's own frozen state dataclass: the caller
    starts from ``initial_state()`` and passes each returned state to the next call (the
    Serve adapter converts it to and from Serve's state dict, nobody else sees a dict)."""

    name: str

    def initial_state(self) -> S: ...

    def decide(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: S
    ) -> tuple[int, S]: ...


class ExplainingPolicy(Protocol[S_contra]):
    """Optional: a policy that explains its decisions. ``state`` is the state ``decide``
    returned with ``desired``; pure, like ``decide``."""

    def explain(
        self, snapshot: MetricsSnapshot, config: ScalingConfig, state: S_contra, desired: int
    ) -> Explanation: ...
