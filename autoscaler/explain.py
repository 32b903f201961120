"""Why a scaling decision came out as it did: signals, targets and a reason key. Pure.

Every policy gets the generic signals below; a policy with an ``explain`` method
(``types.ExplainingPolicy``) adds its own signals, the targets it holds them to and the
reason of a move. Names are stable (dashboards and alerts key on them) and carry units:

    signal                          what                                        generic
    queue_delay_max_s               worst replica's estimated wait to 1st token  yes
    ongoing_requests_per_replica    (in flight + held at ingress) / replicas     yes
    pending_requests                requests held at the ingress                 yes
    kv_usage_ratio                  mean KV-cache usage over reporting replicas   yes
    ttft_p95_s                      worst observed TTFT P95 of a busy replica     yes
    prefill_backlog_s               queued prefill work per replica              ttft-queue
    prefill_arrival_ratio           sustained prefill arrivals per replica       ttft-queue
    burst_reserve_replicas          replicas the last hour's bursts call for      ttft-queue
    boot_s                          measured replica boot time (prior: 30 s)     ttft-queue
    wake_s                          measured wake of a sleeper (else boot_s)     ttft-queue
    warm_replicas                   replicas asleep in the warm pool             ttft-queue
    ttft_over_slo_ratio             share of first tokens over the SLO, 120 s    ttft-queue
    utilization_ratio               mean max(busy fraction, KV usage)            utilization

Reasons (``Explanation.reason``) of a move: ``bounds`` (outside min/max), ``pending_requests``
(requests held with no replica), then the policy's own (``queue_delay``, ``arrival_rate``,
``burst_reserve``, ``slo_headroom``, ``ongoing_requests``, ``utilization``); ``steady``
when the count does not move.
"""

from __future__ import annotations

from typing import Any

from autoscaler.common import ongoing_of
from autoscaler.types import Explanation, MetricsSnapshot, ScalingConfig, ScalingPolicy

STEADY = "steady"
GENERIC_SIGNALS = (
    "queue_delay_max_s",
    "ongoing_requests_per_replica",
    "pending_requests",
    "kv_usage_ratio",
    "ttft_p95_s",
)


def generic_signals(snapshot: MetricsSnapshot) -> dict[str, float]:
    reps = snapshot.replicas
    ongoing = sum(ongoing_of(m) for m in reps) + snapshot.pending_requests
    busy_p95 = (m.ttft_p95_s for m in reps if ongoing_of(m) > 0)
    return {
        "queue_delay_max_s": max((m.queue_delay_s for m in reps), default=0.0),
        "ongoing_requests_per_replica": ongoing / max(1, snapshot.current_replicas),
        "pending_requests": snapshot.pending_requests,
        "kv_usage_ratio": sum(m.kv_usage for m in reps) / len(reps) if reps else 0.0,
        "ttft_p95_s": max(busy_p95, default=0.0),
    }


def move_reason(snapshot: MetricsSnapshot, config: ScalingConfig, desired: int, own: str) -> str:
    """``own`` unless the move is the bounds' or the held requests' doing; ``steady`` if none."""
    current = snapshot.current_replicas
    if desired == current:
        return STEADY
    if current < config.min_replicas or current > config.max_replicas:
        return "bounds"
    if current == 0 and snapshot.pending_requests > 0:
        return "pending_requests"
    return own


def explain(
    policy: ScalingPolicy[Any],
    snapshot: MetricsSnapshot,
    config: ScalingConfig,
    state: Any,
    desired: int,
) -> Explanation:
    """The policy's own explanation over the generic signals; a policy without one gets the
    generic signals, no targets, and ``bounds`` / ``pending_requests`` / ``policy`` as reason."""
    signals = generic_signals(snapshot)
    own = getattr(policy, "explain", None)
    if own is None:
        return Explanation(signals, {}, move_reason(snapshot, config, desired, "policy"))
    e: Explanation = own(snapshot, config, state, desired)
    return Explanation(signals | dict(e.signals), dict(e.targets), e.reason)


def direction(previous: int, desired: int) -> str | None:
    """``up`` / ``down`` when the desired count moved, else None."""
    if desired > previous:
        return "up"
    return "down" if desired < previous else None
